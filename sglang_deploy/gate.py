"""Controller side of the gate: what the running server must show, and where results are kept.

The measurement and the verdict run on the host (hostside/lib/gate.py, inside the switch); this module
derives the expectations from the plan and stores the result locally.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from .hostside.contract.release import GateConfig, GateSettings
from .hostside.lib.gate import decode_backend
from .layout import venv_path
from .resolution import COMPARED_FIELDS

if TYPE_CHECKING:  # the verbs that only keep results (history.py, doctor.py) do not load the profile schema
    from .plan import Plan

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


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


def save_result(host_name: str, document: dict, kind: str = "switch", results_dir: Path = RESULTS_DIR) -> Path:
    """Keep a document locally: results/<host>/<release>-<kind>-<UTC time>.json (kind: switch, doctor)."""
    from .hostside.store import RELEASE_ID

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    release = str(document.get("release"))  # from the host: a release id, or the file is named "unknown"
    release = release if RELEASE_ID.match(release) else "unknown"
    path = results_dir / host_name / f"{release}-{kind}-{stamp}.json"
    if results_dir.resolve() not in path.resolve().parents:
        raise ValueError(f"{path} is not under {results_dir}: host name {host_name!r} is not a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path
