"""Two layers of flag validation: SGLang's own parser, then the rules the parser cannot know.

Every problem names the profile file and line, the flag or variable, and what would be accepted.
Nothing here touches a host: ``sglang-deploy check`` and the deploy both call ``check_profile``
before any operation runs.

Two paths to SGLang's verdict. Full: SGLang's own parser and its whole resolution (every step of
``run_resolution_pipeline``, with the checkpoint's config.json and the target's GPU facts) run in the cached
validator environment (validator_env.py, parser_probe.py; several GB, built once). Light: the parser rebuilt from the
option table exported by that parser and kept in the repository (flag_table.py; standard library only),
for a `check` on a machine without the environment; the rules that read SGLang's resolution are then
reported as skipped. A deploy always takes the full path (the release ships SGLang's resolution).

This module runs them (``check_profile``); the parser's layer is flag_checks.py, the rules the parser cannot
know rule_checks.py, and each problem a problem.Problem.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import drafter, flag_table, gpu_facts, resolution, validator_env
from ..token_map import file as token_map, part as token_map_part
from ..flags import server_args
from ..profile import Profile
from ..rules import WAIVABLE
from .flag_checks import (code_and_weights_problems, derived_values_problems, flag_identity_problems, parser_problems,
                          unit_line_problems)
from .problem import Problem, flag_field
from .rule_checks import (draft_problems, environment_problems, model_config_pinned_problems, nccl_problems,
                             pin_problems, resolved_class_problems, resource_problems, sandbox_problems,
                             speculative_problems)

TOPOLOGIES = ("pcie", "nvlink")


@dataclass
class Report:
    profile: Profile
    problems: list[Problem]
    skipped: list[str]
    resolution: dict | None = None  # what SGLang resolves for the command line (resolution.py)
    path: str = "full"  # full: SGLang's own code ran; light: its exported option table (flag_table.py)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        return [p.format(self.profile) for p in self.problems]


LIGHT_SKIPPED = ("decode-graph-covers-batch, cuda-graphs-on, sglang-resolution, and the reviewed classes of the "
                 "resolved fields (flag-exposes-service, flag-runs-code for a value set through the environment): "
                 "SGLang's whole resolution (about 90 steps and the start checks, e.g. --language-model-only's "
                 "architecture check, check_server_args, the attention backend, the memory settings) and the rules "
                 "that read it need the validator environment: `sglang-deploy check --full`; every deploy runs it")


# SGLang fields the tool sets from a profile field (flags.server_args): a refusal that names one names that field.
# (Only fields whose name is not also a plain word of a message: "port" or "host" would name the wrong field.)
TOOL_SET_FIELDS = {"served_model_name": ("model", "served_name")}


def _refusal_field(profile: Profile, message: str) -> tuple:
    """The one profile flag a refusal names, as an option (--page-size) or as SGLang's field (page_size), the
    profile field behind a flag the tool sets (served_model_name: model.served_name), or the one variable of the
    profile's environment it names; else sglang.flags (none or several named)."""
    import re

    def mentions(text: str) -> bool:
        return re.search(rf"(?<![\w-]){re.escape(text)}(?![\w-])", message) is not None

    def named(form) -> list[str]:
        return [name for name in profile.sglang.flags if mentions(form(name))]

    for found in (named(lambda name: name), named(lambda name: name.lstrip("-").replace("-", "_"))):
        if len(found) == 1:
            return flag_field(found[0])
    tool_set = [field for dest, field in TOOL_SET_FIELDS.items() if mentions(dest)]
    if len(tool_set) == 1:
        return tool_set[0]
    variables = [name for name in profile.environment if mentions(name)]  # a refusal the environment caused
    if len(variables) == 1:
        return ("environment", variables[0])
    return ("sglang", "flags")


def model_config_problems(profile: Profile) -> tuple[list[Problem], dict | None]:
    """The checkpoint's config.json, which SGLang's resolution reads (ModelConfig), and its agreement with
    model.architecture."""
    if profile.model.config is None:
        return [Problem("model-config", ("model",),
                        "model.config is required for SGLang's resolution, which reads the checkpoint's config.json "
                        "(ModelConfig: architecture, layers, quantization); write `config: <path of the "
                        "checkpoint's config.json>` (`sglang-deploy manifest` writes it beside the manifest)")], None
    try:
        config = resolution.load_model_config(profile.model.config)
    except resolution.ModelConfigError as error:
        return [Problem("model-config", ("model", "config"), str(error))], None
    declared, found = profile.model.architecture, (config["architectures"] or [None])[0]
    if declared is not None and declared != found:
        return [Problem("model-config", ("model", "architecture"),
                        f"model.architecture is {declared} but {profile.model.config} says {found}; "
                        "accepted: the config's architectures[0], or leave model.architecture out")], config
    return [], config


def light_probe(table: dict, argv: list[str], algorithms: list[str]) -> dict:
    """The probe's answer (parser_probe.py's shape) from the exported table instead of SGLang's code."""
    error = flag_table.parse_error(table, argv)
    return {"sglang_version": table["sglang_version"], "actions": table["actions"],
            "results": [{"ok": error is None, "error": error}],
            "algorithms": {name: flag_table.algorithm_error(table, name) for name in algorithms}}


def choose_path(version: str, path: str) -> str:
    """auto: full where the validator environment is already built, else light where a table exists."""
    if path == "auto":
        path = "full" if validator_env.env_built(version) or flag_table.load(version) is None else "light"
    return path


def check_profile(profile: Profile, gpus: int | None = None, topology: str | None = None,
                  port: int | None = None, path: str = "full", node=None,
                  gpu: gpu_facts.GpuModel | None = None) -> Report:
    """Run both layers. path full: the parser and SGLang's whole resolution run in the cached validator env of the
    profile's SGLang version (answers cached by content) under `gpu`'s facts (default: the reference target's
    A6000) and `gpus` of them per node (default: the profile's TP share of a node); light: the exported option
    table, no resolution; auto: choose_path. `port` is the one the unit will use; `node`: a multi-node rank."""
    if topology is not None and topology not in TOPOLOGIES:
        raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}, not {topology!r}")
    algorithm = profile.sglang.flags.get("--speculative-algorithm")
    algorithms = [algorithm] if isinstance(algorithm, str) else []
    argv = server_args(profile, port, node)
    path = choose_path(profile.sglang.version, path)
    table = flag_table.load(profile.sglang.version) if path == "light" else None
    if path == "light" and table is None:
        raise validator_env.ValidatorEnvError(
            f"no exported option table for SGLang {profile.sglang.version} in {flag_table.TABLE_DIR}: "
            f"use `sglang-deploy check --full`, or export one (python -m sglang_deploy.flag_table export "
            f"{profile.sglang.version})")
    config_problems: list[Problem] = []
    if table is not None:
        probe = light_probe(table, argv, algorithms)
        answer = {"resolved": None, "error": None}
    else:
        config_problems, config = model_config_problems(profile)
        gpu = gpu or gpu_facts.model(gpu_facts.DEFAULT_MODEL)
        tp = profile.sglang.flags.get("--tp-size", 1)
        count = gpus or max(1, (tp if isinstance(tp, int) else 1) // profile.nodes)
        if config is None:
            probe = validator_env.probe_cached(profile.sglang.version, [argv], algorithms)
            answer = {"resolved": None, "error": None}
        else:
            probe = validator_env.probe_cached(profile.sglang.version, [argv], algorithms,
                                               resolve=resolution.request(argv, config, gpu, count,
                                                                          drafter.resolution_config(profile),
                                                                          profile.env_values()))
            answer = {**resolution.document(profile.sglang.version, argv, probe),
                      "gpu": {"model": gpu.name, "count": count}, "model_config": profile.model.config}
    identity = flag_identity_problems(profile, tuple(probe["actions"]))
    problems = identity + parser_problems(profile, tuple(probe["actions"]), probe) + config_problems
    problems += code_and_weights_problems(profile, tuple(probe["actions"]))
    problems += unit_line_problems(profile, argv)
    problems += token_map.problems(profile) + token_map_part.problems(profile)
    if not identity:
        problems += derived_values_problems(profile, argv, port, node)
    problems += speculative_problems(profile, probe["algorithms"])
    problems += draft_problems(profile, answer)
    if not problems and answer["error"]:  # a refusal the rules above did not explain
        problems.append(Problem("sglang-resolution", _refusal_field(profile, answer["error"]),
                                f"SGLang {profile.sglang.version} refuses the command line at "
                                f"{answer.get('step') or 'resolution'}: {answer['error']}"))
    problems += model_config_pinned_problems(profile)
    problems += resource_problems(profile, gpus, answer["resolved"])
    problems += resolved_class_problems(profile, answer["resolved"])  # set through the environment or a config
    problems += nccl_problems(profile, topology)
    problems += environment_problems(profile)
    problems += sandbox_problems(profile)
    problems += pin_problems(profile)
    problems = [p for p in problems if not (p.rule in WAIVABLE and p.rule in profile.waivers)]
    for rule in profile.waivers:
        if rule not in WAIVABLE:
            problems.append(Problem(rule, ("waivers", rule),
                                    f"rule {rule} cannot be waived; waivable rules: {', '.join(sorted(WAIVABLE))}"))
    skipped = []
    if gpus is None:
        skipped.append("tp-matches-gpus (GPU count unknown: pass --gpus N or check against a host)")
    if topology is None:
        skipped.append("nccl-ll128-needs-nvlink, nccl-p2p-level-nvl-needs-nvlink (topology unknown: pass --topology)")
    if table is not None:
        skipped.append(LIGHT_SKIPPED)
    return Report(profile, problems, skipped, None if table is not None else answer, path)
