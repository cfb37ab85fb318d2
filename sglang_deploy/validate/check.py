"""Two layers of flag validation: SGLang's own parser, then the rules the parser cannot know.

Every problem names the profile file and line, the flag or variable, and what would be accepted.
Nothing here touches a host: ``sglang-deploy check`` and the deploy both call ``check_profile``
before any operation runs.

Two paths to SGLang's verdict. Full: SGLang's own parser and its whole resolution (every step of
``run_resolution_pipeline``, with the checkpoint's config.json and the target's GPU facts) run in the cached
validator environment (validate/validator_env.py, validate/parser_probe.py; several GB, built once). Light: the parser rebuilt from the
option table exported by that parser and kept in the repository (validate/flag_table.py; standard library only),
for a `check` on a machine without the environment; the rules that read SGLang's resolution are then
reported as skipped. A deploy always takes the full path (the release ships SGLang's resolution).

This module runs them (``check_profile``); the parser's layer is parser_checks.py, the rules the parser cannot
know rule_checks.py, and each problem a profile.problem.Problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import drafter
from ..flags import server_args
from ..profile import Profile
from ..profile.problem import Problem, flag_field
from ..rules import WAIVABLE
from ..token_map import file as token_map, part as token_map_part
from . import flag_table, gpu_facts, resolution, start_feasibility, validator_env
from .parser_checks import (as_written, code_and_weights_problems, derived_values_problems, flag_identity_problems,
                          parser_problems, spelled_in_full, unit_line_problems)
from .rule_checks import (draft_problems, environment_problems, model_config_pinned_problems, nccl_problems,
                             pin_problems, resolved_class_problems, resource_problems, sandbox_problems,
                             speculative_problems)

TOPOLOGIES = ("pcie", "nvlink")
# Rules whose message is SGLang's own verdict on the command line (its parser; its algorithm registry).
SGLANG_VERDICT_RULES = ("sglang-parser", "speculative-algorithm")
# Rules that only leave speed on the table (SGLang's own defaults can trip them): a warning with its cost and fix.
WARNING_RULES = ("decode-graph-covers-batch",)


def with_waiver_hint(problem: Problem) -> Problem:
    """A waivable rule's message says so and how (the remove_or_waive wording, or this line where the fix is not a
    removal)."""
    if problem.rule not in WAIVABLE or "waivers:" in problem.message:
        return problem
    return Problem(problem.rule, problem.field, f"{problem.message}; waivable: `waivers: {{{problem.rule}: \"why\"}}` "
                                                "with a reason a reviewer reads")


@dataclass
class Report:
    profile: Profile
    problems: list[Problem]
    skipped: list[str]
    resolution: dict | None = None  # what SGLang resolves for the command line (validate/resolution.py)
    path: str = "full"  # full: SGLang's own code ran; light: its exported option table (validate/flag_table.py)
    warnings: list[Problem] = field(default_factory=list)  # speed left on the table: reported, never refused

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        return [p.format(self.profile) for p in self.problems]

    def warning_lines(self) -> list[str]:
        return [f"warning: {p.format(self.profile)}" for p in self.warnings]


LIGHT_SKIPPED = ("decode-graph-covers-batch, cuda-graphs-on, sglang-resolution, sglang-start (what can start on the "
                 "card, judged on the resolved backends), and the reviewed classes of the "
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


def start_problems(profile: Profile, gpu, config: dict | None, resolved: dict | None) -> tuple[list, list]:
    """What SGLang's start does with the resolved configuration on the target's card (validate/start_feasibility.py, data
    derived from the release's code and kernel wheels): a combination that cannot start is SGLang's refusal (not
    waivable: it names SGLang's file:line); one SGLang silently replaces, and one the release's code does not show
    to start there, are warnings naming what will run."""
    data = start_feasibility.load(profile.sglang.version) if resolved and gpu is not None else None
    if data is None:
        return [], []
    verdict = start_feasibility.judge(data, tuple(gpu.capability), config, resolved)
    card = f"{gpu.name} (sm_{gpu.capability[0]}{gpu.capability[1]})"
    fields = [name for name in ("--attention-backend", "--speculative-draft-attention-backend", "--kv-cache-dtype")
              if name in profile.sglang.flags]
    where = flag_field(fields[0]) if fields else ("sglang", "flags")
    runs = ", ".join(f"{role} {value}" for role, value in verdict.runs.items() if value)
    problems = [Problem("sglang-start", where, f"SGLang {profile.sglang.version} cannot start this on {card} "
                                               f"({runs}): {reason} [{source}]")
                for reason, source in verdict.fails]
    notes = [Problem("sglang-swap", where, f"{message} [{source}]; what runs: {runs}")
             for message, source in start_feasibility.swaps(data, profile.sglang.flags, resolved)]
    notes += [Problem("start-not-shown", where, f"{backend}: {why} (validate/start_feasibility.py)")
              for backend, why in verdict.unshown if not verdict.fails]
    return problems, notes


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
    """The probe's answer (validate/parser_probe.py's shape) from the exported table instead of SGLang's code."""
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
            f"sglang.version {profile.sglang.version}: no exported option table (releases/{profile.sglang.version}/"
            f"options.json): use `sglang-deploy check --full`, or add the release with `sglang-deploy sglang add "
            f"{profile.sglang.version}`")
    config_problems: list[Problem] = []
    config = None
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
    parser_layer = identity + parser_problems(profile, tuple(probe["actions"]), probe)
    problems = parser_layer + config_problems
    # The rules below read the flags as SGLang's parser does (an abbreviation under its full name), so that a flag
    # written short gets one message (full-flag-names), not a second one about a value the rule did not see.
    read, written = spelled_in_full(profile, tuple(probe["actions"]))
    rules: list[Problem] = code_and_weights_problems(read, tuple(probe["actions"]))
    rules += unit_line_problems(profile, argv)
    rules += token_map.problems(profile) + token_map_part.problems(profile)
    if not identity:
        rules += derived_values_problems(profile, argv, port, node)
    rules += speculative_problems(read, probe["algorithms"])
    rules += draft_problems(read, answer)
    # SGLang's own verdict first, whatever the tool's rules found and whatever they waive: a waiver covers only the
    # tool's rules (rules.WAIVABLE), never SGLang's refusal. A refusal at the parse is parser_problems' line; one the
    # rules that quote SGLang's own verdict already name (SGLANG_VERDICT_RULES, not waivable) is not said twice.
    sglang_refusal = []
    said = any(p.rule in SGLANG_VERDICT_RULES for p in problems + rules)
    if answer["error"] and not said and not (answer.get("step") == "parse" and parser_layer):
        sglang_refusal.append(Problem("sglang-resolution", _refusal_field(profile, answer["error"]),
                                      f"SGLang {profile.sglang.version} refuses the command line at "
                                      f"{answer.get('step') or 'resolution'}: {answer['error']}"))
    start, start_notes = start_problems(profile, gpu, config, answer.get("resolved"))
    sglang_refusal += start
    rules += model_config_pinned_problems(profile)
    # A command line SGLang's parser refuses has no values to hold against the host: a misspelled --tp-size gets its
    # parser message, not a second one about the TP 1 the rule would read in its place.
    unparsed = any(p.rule == "sglang-parser" for p in parser_layer)
    rules += resource_problems(read, None if unparsed else gpus, answer["resolved"])
    rules += resolved_class_problems(read, answer["resolved"])  # set through the environment or a config
    rules += nccl_problems(profile, topology)
    rules += environment_problems(profile)
    rules += sandbox_problems(profile)
    rules += pin_problems(profile)
    problems += [as_written(p, written) for p in rules]
    problems = sglang_refusal + [p for p in problems if not (p.rule in WAIVABLE and p.rule in profile.waivers)]
    problems = [with_waiver_hint(p) for p in problems]
    warnings = [p for p in problems if p.rule in WARNING_RULES] + start_notes
    problems = [p for p in problems if p.rule not in WARNING_RULES]
    for rule in profile.waivers:
        if rule not in WAIVABLE:
            problems.append(Problem(rule, ("waivers", rule),
                                    f"rule {rule} cannot be waived; waivable rules: {', '.join(sorted(WAIVABLE))}"))
    skipped = []
    if gpus is None:
        skipped.append("tp-matches-gpus (GPU count unknown: pass --gpus N or check against a host)")
    elif unparsed:
        skipped.append("tp-matches-gpus (SGLang's parser refuses the command line: fix the flags first)")
    if topology is None:
        skipped.append("nccl-ll128-needs-nvlink, nccl-p2p-level-nvl-needs-nvlink (topology unknown: pass --topology)")
    if table is not None:
        skipped.append(LIGHT_SKIPPED)
    return Report(profile, problems, skipped, None if table is not None else answer, path, warnings)
