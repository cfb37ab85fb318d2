"""Asking SGLang which values of a lever flag it accepts for a profile on a host's GPUs: its parser's choices, and
its whole resolution (validate/resolution.py) of the profile's own command line with the flag set, under the GPU facts the
tune's plan ran under. Answers are cached by content (validator_env.probe_cached), so a second tune asks nothing."""

from __future__ import annotations

from ..drafter import resolution_config
from ..plan import gpu_model_for_host, host_settings
from ..validate import start_feasibility
from ..validate.flag_table import load as load_table
from ..validate.resolution import load_model_config, resolve_argv
from ..validate.validator_env import ValidatorEnvError, export_table
from .axes import LEVERS


def asker(plan, data, detected=None):
    """(ask, choices): ask(extra_argv) -> (SGLang's refusal or None, the resolved fields); choices(flag) -> the
    parser's choices for the flag (the draft backend takes the target's, which SGLang checks the same way)."""
    profile = plan.profile
    version = profile.sglang.version
    argv = list((plan.resolution or {}).get("argv") or [])
    if not argv or not profile.model.config:
        raise ValueError("the plan has no resolution of its command line (model.config is needed)")
    config = load_model_config(profile.model.config)
    gpu, _ = gpu_model_for_host(host_settings(data), detected)
    count = ((plan.resolution or {}).get("gpu") or {}).get("count") or 1
    draft_config = resolution_config(profile)

    def ask(extra):
        try:
            document = resolve_argv(version, argv + list(extra), config, gpu, count, draft_config,
                                    profile.env_values())
        except ValidatorEnvError as error:  # the probe died on this command line: not an answer of acceptance
            return f"the resolution did not answer ({str(error).strip().splitlines()[0]})", {}
        return document.get("error"), document.get("resolved") or {}

    def choices(flag):
        dest = LEVERS[flag].choices_of
        table = load_table(version) or export_table(version)  # the committed option table, else SGLang's own
        action = next((a for a in table["actions"] if a.get("dest") == dest), None)
        return list((action or {}).get("choices") or [])

    return ask, choices


def starter(plan, data, detected=None):
    """start(resolved) -> start_feasibility.Verdict for a resolved configuration on the host's card (the release's
    start-feasibility data: SGLang's start-time asserts, draft maps and the kernels its wheels ship); None when the
    release has no such data (every resolution-accepted value stays a candidate, as before)."""

    data_file = start_feasibility.load(plan.profile.sglang.version)
    if data_file is None:
        return None
    gpu, _ = gpu_model_for_host(host_settings(data), detected)
    config = load_model_config(plan.profile.model.config) if plan.profile.model.config else None

    def start(resolved):
        verdict = start_feasibility.judge(data_file, tuple(gpu.capability), config, resolved)
        verdict.card = f"sm_{gpu.capability[0]}{gpu.capability[1]}"
        return verdict

    return start
