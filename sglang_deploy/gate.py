"""Controller side of the gate: what the running server must show, and the floors as the host reads them.

The measurement and the verdict run on the host (hostside/lib/gate.py, inside the switch); this module
derives the expectations from the plan; the result is kept locally by results.save_result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .hostside.contract.gate import GateConfig, GateSettings
from .hostside.lib.gate import decode_backend
from .layout import venv_path
from .validate.resolution import COMPARED_FIELDS

if TYPE_CHECKING:  # router.py, which reads the floors only (gate_settings), does not load the profile schema
    from .plan import Plan


def expectations(plan: Plan) -> dict:
    """What the running server and process must show: SGLang's own resolution of the release's command
    line (the same document the simulator serves), and the declared environment."""
    resolved = plan.resolution["resolved"]
    return {
        "decode_graphs": decode_backend(resolved) != "disabled",
        # Across nodes SGLang turns its custom all-reduce off by design (custom_all_reduce_utils.py: "... is
        # disabled because this process group spans across nodes."): not a fallback to report.
        "custom_all_reduce": int(resolved.get("tp_size") or 1) > 1 and not resolved.get("disable_custom_all_reduce")
        and plan.profile.nodes == 1,
        "resolved": {key: resolved.get(key) for key in COMPARED_FIELDS},
        "environment": dict(plan.rendered.environment),
        "venv": venv_path(plan.profile),
        "model_path": plan.profile.model.path,
        "served_name": plan.profile.model.served_name,  # the output check asks /v1/chat/completions by name
    }


def gate_settings(section) -> GateSettings:
    """The profile's gate section (profile.sections.GateSection) as the host reads it."""
    return GateSettings.from_dict(section.model_dump(mode="json"), "the profile's gate section")


def gate_config(plan: Plan) -> GateConfig:
    """releases/<id>/gate-config.json: the profile's gate section and the expectations, read by the document's own
    strict reader (a field the host does not know fails here, before anything is staged)."""
    return GateConfig.from_dict({"settings": plan.profile.gate.model_dump(mode="json"), "expect": expectations(plan)})
