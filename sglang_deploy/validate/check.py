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

This module runs them (``check_profile``, one pipeline of stages that each return their problems: SGLang's answer,
resolution.py; the parser's layer, parser_checks.py; the rules the parser cannot know, rule_checks.py; the start,
start_feasibility.py) and orders what they found; each problem is a profile.problem.Problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..flags import server_args
from ..profile import Profile
from ..profile.problem import Problem, flag_field
from ..rules import WAIVABLE
from ..token_map import file as token_map, part as token_map_part
from . import flag_table, gpu_facts, parser_checks, resolution, rule_checks, start_feasibility, validator_env
from .parser_checks import as_written

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
    table, no resolution; auto: choose_path. `port` is the one the unit will use; `node`: a multi-node rank.

    A pipeline: the inputs are read once (the command line, the release's option table, the environment) and
    passed to the stages, each of which returns its problems: SGLang's answer (resolution.answer, or the light
    probe), the parser's layer (parser_checks.findings), the parts' files (token_map), the rules
    (rule_checks.findings) and the start (start_feasibility.problems). This function orders what they found."""
    if topology is not None and topology not in TOPOLOGIES:
        raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}, not {topology!r}")
    algorithm = profile.sglang.flags.get("--speculative-algorithm")
    algorithms = [algorithm] if isinstance(algorithm, str) else []
    argv = server_args(profile, port, node)
    path = choose_path(profile.sglang.version, path)
    light = path == "light"
    table = flag_table.load(profile.sglang.version)
    if light and table is None:
        raise validator_env.ValidatorEnvError(
            f"sglang.version {profile.sglang.version}: no exported option table (releases/{profile.sglang.version}/"
            f"options.json): use `sglang-deploy check --full`, or add the release with `sglang-deploy sglang add "
            f"{profile.sglang.version}`")
    env = profile.env_values()
    config_problems: list[Problem] = []
    config = None
    if light:
        probe = light_probe(table, argv, algorithms)
        answer = {"resolved": None, "error": None}
    else:
        gpu = gpu or gpu_facts.model(gpu_facts.DEFAULT_MODEL)
        tp = profile.sglang.flags.get("--tp-size", 1)
        count = gpus or max(1, (tp if isinstance(tp, int) else 1) // profile.nodes)
        sglang = resolution.answer(profile, argv, algorithms, gpu, count, env)
        probe, answer, config, config_problems = sglang.parser, sglang.document, sglang.config, sglang.problems
    parsed = parser_checks.findings(profile, argv, probe, table, port, node)
    problems = parsed.layer + config_problems
    # A command line SGLang's parser refuses has no values to hold against the host: a misspelled --tp-size gets its
    # parser message, not a second one about the TP 1 the rule would read in its place.
    unparsed = any(p.rule == "sglang-parser" for p in parsed.layer)
    rules = (parsed.rules + token_map.problems(profile) + token_map_part.problems(profile) + parsed.derived
             + rule_checks.findings(profile, parsed.read, probe["algorithms"], answer, None if unparsed else gpus,
                                    topology, env, table))
    # SGLang's own verdict first, whatever the tool's rules found and whatever they waive: a waiver covers only the
    # tool's rules (rules.WAIVABLE), never SGLang's refusal. A refusal at the parse is parser_problems' line; one the
    # rules that quote SGLang's own verdict already name (SGLANG_VERDICT_RULES, not waivable) is not said twice.
    sglang_refusal = []
    said = any(p.rule in SGLANG_VERDICT_RULES for p in problems + rules)
    if answer["error"] and not said and not (answer.get("step") == "parse" and parsed.layer):
        sglang_refusal.append(Problem("sglang-resolution", _refusal_field(profile, answer["error"]),
                                      f"SGLang {profile.sglang.version} refuses the command line at "
                                      f"{answer.get('step') or 'resolution'}: {answer['error']}"))
    start, start_notes = start_feasibility.problems(profile, gpu, config, answer.get("resolved"))
    sglang_refusal += start
    problems += [as_written(p, parsed.written) for p in rules]
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
    if light:
        skipped.append(LIGHT_SKIPPED)
    return Report(profile, problems, skipped, None if light else answer, path, warnings)
