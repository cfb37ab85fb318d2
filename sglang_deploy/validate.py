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
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from . import drafter, flag_table, gpu_facts, resolution, validator_env
from .rules import (CODE_FLAGS, CODE_LOADING_ENV, LOAD_FORMAT_DESTS, NCCL_DEBUG_KNOBS, OTHER_WEIGHTS_FORMATS, PIN_FAMILY,
                    RENAMED_FLAGS, TOOL_ENV, WAIVABLE, WEIGHTS_PATH_DESTS)
from .flags import server_args
from .profile import Profile, line_of

MEM_FRACTION_RANGE = (0.5, 0.95)
TOPOLOGIES = ("pcie", "nvlink")


@dataclass(frozen=True)
class Problem:
    rule: str
    field: tuple  # field path inside the profile, e.g. ("sglang", "flags", "--tp-size")
    message: str

    def format(self, profile: Profile) -> str:
        line = line_of(profile.source, self.field) if profile.source else 1
        where = ".".join(str(p) for p in self.field)
        return f"{profile.source}:{line}: {where}: {self.message} [{self.rule}]"


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


def _flag(name: str) -> tuple:
    return ("sglang", "flags", name)


def _env(name: str) -> tuple:
    return ("environment", name)


def parser_problems(profile: Profile, spec: tuple[dict, ...], probe: dict) -> list[Problem]:
    """Layer a: names, value kinds and the real parser's verdict."""
    problems: list[Problem] = []
    options = {opt: action for action in spec for opt in action["options"]}
    for name, value in profile.sglang.flags.items():
        if name in options:
            action = options[name]
            switch = action["kind"] in ("store_true", "store_false")
            if switch and not isinstance(value, bool):
                problems.append(Problem("flag-value-kind", _flag(name),
                                        f"{name} is a switch: write `{name}: true` (or false to omit it), not {value!r}"))
            elif not switch and isinstance(value, bool):
                accepted = f"one of {', '.join(action['choices'])}" if action["choices"] else "a value"
                problems.append(Problem("flag-value-kind", _flag(name),
                                        f"{name} takes {accepted}, not a bare true/false"))
            continue
        prefixed = sorted(opt for opt in options if opt.startswith(name))
        if name in RENAMED_FLAGS:
            message = f"{name} is not accepted by SGLang {profile.sglang.version}; use {RENAMED_FLAGS[name]}"
        elif len(prefixed) == 1:
            message = f"{name} is an abbreviation; write the full name {prefixed[0]}"
        elif prefixed:
            message = f"{name} is ambiguous in SGLang {profile.sglang.version}: it could be {', '.join(prefixed)}"
        else:
            close = difflib.get_close_matches(name, options, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            message = f"{name} is not a flag of SGLang {profile.sglang.version}{hint}"
        problems.append(Problem("full-flag-names" if len(prefixed) == 1 else "sglang-parser", _flag(name), message))
    if not problems and not probe["results"][0]["ok"]:
        problems.append(Problem("sglang-parser", ("sglang", "flags"),
                                f"SGLang {profile.sglang.version}'s parser rejects the command line: {probe['results'][0]['error']}"))
    return problems


# SGLang's fields the tool sets itself (the unit's argv, the secrets file); no spelling of them in sglang.flags.
DERIVED_DESTS = {
    "model_path": "model.path (or model.source)", "served_model_name": "model.served_name", "host": "service.host",
    "port": "service.port", "api_key": "the host's API key secret, through --config", "config": "the secrets file",
    "nnodes": "nodes", "node_rank": "the host's place in the inventory group `nodes`",
    "dist_init_addr": "multinode.dist_init_port and the rank 0 host's address",
    "speculative_draft_model_path": "speculative.draft.source (the verified draft snapshot)",
    "speculative_draft_model_revision": "speculative.draft.source (its manifest pins every file)",
}
NUMERIC_TYPES = ("int", "float")
# Secrets SGLang takes as flags: on the command line they are world-readable in /proc, and a profile is reviewed in
# the open. The API key goes through the secrets file (--config); these have no place in a profile at all.
SECRET_DESTS = {"admin_api_key": "an admin API key", "ssl_keyfile_password": "the TLS key file's password"}


def _is_number(value: str) -> bool:
    try:
        float(value)
        return value.strip() == value and value.isascii()
    except ValueError:
        return False


def flag_identity_problems(profile: Profile, spec: tuple[dict, ...]) -> list[Problem]:
    """Each flag by SGLang's own dest: no second spelling of one dest, no spelling of a dest the tool sets, no
    alias the rules would not read, and no value that is itself an option (argparse would take `--host` inside a
    list as the next flag)."""
    options = {opt: action for action in spec for opt in action["options"]}
    seen: dict[str, str] = {}
    problems = []
    for name, value in profile.sglang.flags.items():
        action = options.get(name)
        if action is None:
            continue  # parser_problems names it
        dest, canonical = action["dest"], action["options"][0]
        if dest in SECRET_DESTS:
            problems.append(Problem("no-secret-in-profile", _flag(name),
                                    f"{name} is {SECRET_DESTS[dest]}, a secret: a profile is reviewed in the open and "
                                    "SGLang's command line is world-readable in /proc; remove it (the tool passes "
                                    "only the API key, through the root-owned secrets file)"))
            continue
        if dest in DERIVED_DESTS:
            problems.append(Problem("tool-derived-flag", _flag(name),
                                    f"{name} is SGLang's {dest}, which the tool sets from {DERIVED_DESTS[dest]}; "
                                    "remove it from sglang.flags"))
            continue
        if dest in seen:
            problems.append(Problem("one-spelling-per-flag", _flag(name),
                                    f"{seen[dest]} and {name} both set SGLang's {dest} (the last one wins in SGLang, "
                                    f"the rules read {canonical}); keep one: {canonical}"))
            continue
        seen[dest] = name
        negation = name.startswith("--no-") and action["kind"] in ("store_true", "store_false")
        if name != canonical and not negation:
            problems.append(Problem("canonical-flag-name", _flag(name),
                                    f"{name} is another spelling of {canonical} (SGLang's {dest}); write {canonical}, "
                                    "the spelling the tool's rules read"))
        numeric = action.get("type") in NUMERIC_TYPES
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item.startswith("-") and not (numeric and _is_number(item)):
                problems.append(Problem("no-option-as-value", _flag(name),
                                        f"the value {item!r} of {name} starts with '-': SGLang's parser would read it "
                                        "as an option; accepted: a value that does not start with '-' (a negative "
                                        "number only for a numeric flag)"))
    return problems


def code_and_weights_problems(profile: Profile, spec: tuple[dict, ...]) -> list[Problem]:
    """Flags that run someone else's code or serve something other than the verified snapshot (by SGLang's dest, so
    every spelling counts); each waivable with a reason, which the unit and the release listing then show."""
    import os

    options = {opt: action for action in spec for opt in action["options"]}
    snapshot = profile.model.path if profile.model.source else None  # verified on the host before any switch
    how = "remove it, or waive the rule for a reviewed reason: `waivers: {%s: \"why\"}`"
    problems = []
    for name, value in profile.sglang.flags.items():
        dest = (options.get(name) or {}).get("dest")
        if value is False or value is None or dest is None:
            continue
        if dest in CODE_FLAGS and not (dest == "trust_remote_code" and snapshot):
            problems.append(Problem("flag-runs-code", _flag(name),
                                    f"{name} {CODE_FLAGS[dest]}; " + how % "flag-runs-code"))
        elif dest in LOAD_FORMAT_DESTS and value in OTHER_WEIGHTS_FORMATS:
            problems.append(Problem("flag-serves-other-weights", _flag(name),
                                    f"{name} {value} serves no verified weights (random ones, or another server's); "
                                    + how % "flag-serves-other-weights"))
        elif dest in WEIGHTS_PATH_DESTS:
            for item in value if isinstance(value, list) else [value]:
                text = str(item)
                if WEIGHTS_PATH_DESTS[dest] and "/" not in text:
                    continue  # a built-in template's name
                inside = snapshot and os.path.isabs(text) and ".." not in text.split("/") \
                    and os.path.commonpath([text, snapshot]) == snapshot
                if not inside:
                    where = f"the verified snapshot {snapshot}" if snapshot else "a verified snapshot (model.source)"
                    problems.append(Problem("flag-serves-other-weights", _flag(name),
                                            f"{name} {text} is outside {where}: the server would read what nobody "
                                            "verified (any local user writes /dev/shm, /tmp); accepted: a path inside "
                                            "it; " + how % "flag-serves-other-weights"))
                    break
    return problems


def derived_values_problems(profile: Profile, argv: list[str], port: int | None, node=None) -> list[Problem]:
    """Backstop: the rendered argv, parsed by the table of SGLang's own parser, gives the tool's own values for the
    fields the tool sets (whatever the profile's flags do to the parse)."""
    table = flag_table.load(profile.sglang.version)
    if table is None:
        return []
    try:
        import contextlib
        import io

        with contextlib.redirect_stderr(io.StringIO()):
            parsed = vars(flag_table.build_parser(table).parse_args(argv))
    except flag_table.ParseFailure:
        return []  # the parser's verdict is reported by parser_problems
    from .drafter import draft_path

    wanted = {"model_path": profile.model.path, "served_model_name": profile.model.served_name,
              "host": profile.service.host, "port": int(port or profile.service.port), "api_key": None, "config": None,
              "speculative_draft_model_path": draft_path(profile), "speculative_draft_model_revision": None}
    if node is not None:
        wanted.update(nnodes=node.nnodes, node_rank=node.rank, dist_init_addr=node.dist_init_addr)
    else:
        wanted.update(nnodes=1, node_rank=0, dist_init_addr=None)
    wrong = {dest: parsed.get(dest) for dest, value in wanted.items() if dest in parsed and parsed.get(dest) != value}
    if not wrong:
        return []
    return [Problem("tool-flags-intact", ("sglang", "flags"),
                    "the command line would not carry the tool's own values: SGLang's parser reads "
                    + ", ".join(f"{dest}={value!r} (the tool sets {wanted[dest]!r})" for dest, value in wrong.items())
                    + "; a value in sglang.flags is taken for an option")]


def speculative_problems(profile: Profile, algorithm_errors: dict) -> list[Problem]:
    flags = profile.sglang.flags
    problems = []
    algorithm = flags.get("--speculative-algorithm")
    if isinstance(algorithm, str) and algorithm_errors.get(algorithm):
        problems.append(Problem(
            "speculative-algorithm", _flag("--speculative-algorithm"),
            f"{algorithm!r} is not a speculative algorithm of SGLang {profile.sglang.version} "
            f"({algorithm_errors[algorithm]}); accepted: EAGLE, EAGLE3, NEXTN (MTP heads), STANDALONE, NGRAM, DFLASH"))
    steps, topk, drafts = (flags.get("--speculative-num-steps"), flags.get("--speculative-eagle-topk"),
                           flags.get("--speculative-num-draft-tokens"))
    if topk == 1 and isinstance(steps, int) and isinstance(drafts, int) and drafts != steps + 1:
        problems.append(Problem(
            "draft-tokens-chain", _flag("--speculative-num-draft-tokens"),
            f"with --speculative-eagle-topk 1 and --speculative-num-steps {steps}, "
            f"--speculative-num-draft-tokens must be {steps + 1} (SGLang forces it), not {drafts}"))
    if profile.model.hybrid and flags.get("--speculative-adaptive"):
        problems.append(Problem(
            "no-adaptive-speculation-on-hybrid", _flag("--speculative-adaptive"),
            "--speculative-adaptive breaks on hybrid Gated-DeltaNet models (model.hybrid: true); remove it"))
    return problems


# What SGLang 0.5.23 logs when it cannot read a DFLASH draft's block size and takes 16 (speculative_hook.py
# _handle_dflash): the release would verify blocks the drafter was not trained for.
DFLASH_BLOCK_FALLBACK = ("Failed to infer DFLASH block_size from draft model config",  # the config raised
                         "speculative_num_draft_tokens is not set; defaulting to")  # it has no block_size


def draft_problems(profile: Profile, answer: dict) -> list[Problem]:
    """The draft model (drafter.py) and what SGLang's resolution made of its config.json."""
    problems = [Problem("draft-model", found.field, found.message) for found in drafter.problems(profile)]
    fallback = [line for line in answer.get("log") or [] if any(words in line for words in DFLASH_BLOCK_FALLBACK)]
    if not problems and fallback and profile.speculative.draft is not None:
        line = fallback[0]
        problems.append(Problem("draft-model", ("speculative", "draft"),
                                f"SGLang {profile.sglang.version} cannot read the DFLASH block size from the draft's "
                                f"config.json and would verify 16 tokens: {line}"))
    return problems


# The flags that decide the decode CUDA graph backend and batch size, highest precedence first
# (cuda_graph_hook.handle_cuda_graph_config).
DECODE_BACKEND_FLAGS = ("--cuda-graph-config", "--cuda-graph-backend-decode", "--disable-decode-cuda-graph",
                        "--disable-cuda-graph")
DECODE_MAX_BS_FLAGS = ("--cuda-graph-config", "--cuda-graph-max-bs-decode")


def _first_present(flags: dict, names, default: str) -> str:
    return next((name for name in names if flags.get(name) not in (None, False)), default)


def resource_problems(profile: Profile, gpus: int | None, resolved: dict | None = None) -> list[Problem]:
    flags = profile.sglang.flags
    problems = []
    tp = flags.get("--tp-size", 1)
    nodes = profile.nodes
    if gpus is not None and tp != gpus * nodes:
        where = f"the host's {gpus} GPU(s)" if nodes == 1 else f"{nodes} nodes x {gpus} GPU(s) = {gpus * nodes}"
        problems.append(Problem("tp-matches-gpus", _flag("--tp-size"),
                                f"--tp-size {tp} does not match {where}; accepted: {gpus * nodes}"))
    if nodes > 1 and isinstance(tp, int) and tp % nodes:
        problems.append(Problem("multinode-tp-divisible", _flag("--tp-size"),
                                f"--tp-size {tp} does not split over nodes: {nodes} (SGLang puts tp_size / nnodes "
                                f"ranks on each node); accepted: a multiple of {nodes}"))
    fraction = flags.get("--mem-fraction-static")
    low, high = MEM_FRACTION_RANGE
    if isinstance(fraction, (int, float)) and not isinstance(fraction, bool) and not low <= fraction <= high:
        problems.append(Problem("mem-fraction-range", _flag("--mem-fraction-static"),
                                f"--mem-fraction-static {fraction} is outside the sane range {low}-{high}"))
    # Decode graphs as SGLang folds every graph flag, read from its own resolution.
    decode = ((resolved or {}).get("cuda_graph_config") or {}).get("decode") or {}
    graph_bs, running = decode.get("max_bs"), (resolved or {}).get("max_running_requests")
    if isinstance(graph_bs, int) and isinstance(running, int) and graph_bs < running:
        problems.append(Problem(
            "decode-graph-covers-batch", _flag(_first_present(flags, DECODE_MAX_BS_FLAGS, "--cuda-graph-max-bs-decode")),
            f"decode CUDA graphs are captured up to batch {graph_bs}, below max-running-requests {running} (as "
            f"SGLang resolves them): batches above {graph_bs} would decode without CUDA graphs; accepted: "
            f"--cuda-graph-max-bs-decode {running} or more"))
    if decode.get("backend") == "disabled":
        flag = _first_present(flags, DECODE_BACKEND_FLAGS, "--cuda-graph-backend-decode")
        problems.append(Problem("cuda-graphs-on", _flag(flag),
                                f"{flag} turns decode CUDA graphs off (SGLang resolves cuda_graph_config.decode."
                                "backend to 'disabled'; at least 25 % slower decode); accepted: remove it, or "
                                "--cuda-graph-backend-decode full or breakable"))
    return problems


def environment_problems(profile: Profile) -> list[Problem]:
    import re

    problems = []
    for key in profile.environment:
        if key in TOOL_ENV:
            problems.append(Problem("env-tool-owned", _env(key),
                                    f"{key} is set by the tool (offline start, the service's own JIT caches, the "
                                    "pinned toolkit); remove it from environment"))
        elif any(re.fullmatch(pattern, key) for pattern in CODE_LOADING_ENV):
            problems.append(Problem("env-loads-code", _env(key),
                                    f"{key} makes the server load code from a path; remove it, or waive the rule "
                                    "for a reviewed reason: `waivers: {env-loads-code: \"why\"}`"))
    return problems


def pin_problems(profile: Profile) -> list[Problem]:
    import re

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    problems = []
    for position, pin in enumerate(profile.sglang.pins):
        name = canonicalize_name(Requirement(pin).name)  # the schema made it an exact PEP 508 pin
        if not any(re.fullmatch(pattern, name) for pattern in PIN_FAMILY):
            problems.append(Problem("pin-outside-cuda-family", ("sglang", "pins", position),
                                    f"{name} is not of the CUDA/torch/kernel family (torch, triton, flashinfer*, "
                                    "sgl-kernel, nvidia-*, cuda-*, xgrammar, ...): a pin brings its code into the "
                                    "root-run install; remove it, or waive the rule for a reviewed reason: "
                                    "`waivers: {pin-outside-cuda-family: \"why\"}`"))
    return problems


def nccl_problems(profile: Profile, topology: str | None) -> list[Problem]:
    env = profile.env_values()
    problems = []
    proto = env.get("NCCL_PROTO", "")
    if topology == "pcie" and "ll128" in proto.lower() and not proto.startswith("^"):
        problems.append(Problem(
            "nccl-ll128-needs-nvlink", _env("NCCL_PROTO"),
            f"NCCL_PROTO={proto} forces LL128 on a PCIe-only host; NCCL enables LL128 only over NVLink and "
            "forcing it elsewhere can corrupt data. Remove NCCL_PROTO"))
    if topology == "pcie" and env.get("NCCL_P2P_LEVEL", "").upper() == "NVL":
        problems.append(Problem(
            "nccl-p2p-level-nvl-needs-nvlink", _env("NCCL_P2P_LEVEL"),
            "NCCL_P2P_LEVEL=NVL on a PCIe-only host disables P2P between the GPUs; remove it "
            "(NCCL picks PCIe P2P by itself)"))
    reported = {p.field for p in problems}
    for key in NCCL_DEBUG_KNOBS:
        if key in env and _env(key) not in reported and not profile.env_reason(key):
            problems.append(Problem(
                "nccl-debug-knob-needs-reason", _env(key),
                f"{key} is an NCCL debugging knob; NCCL's defaults are best unless a verified fault needs it. "
                f"Write it as `{key}: {{value: \"{env[key]}\", reason: \"...\"}}` or remove it"))
    return problems


LIGHT_SKIPPED = ("decode-graph-covers-batch, cuda-graphs-on, sglang-resolution: SGLang's whole resolution (about 90 "
                 "steps, e.g. --language-model-only's architecture check, the attention backend, the memory "
                 "settings) and the rules that read it need the validator environment: `sglang-deploy check "
                 "--full`; every deploy runs it")


def _refusal_field(profile: Profile, message: str) -> tuple:
    """The one profile flag a refusal names, as an option (--page-size) or as SGLang's field (page_size); else
    sglang.flags (none or several named)."""
    import re

    def named(form) -> list[str]:
        return [name for name in profile.sglang.flags if re.search(rf"(?<![\w-]){re.escape(form(name))}(?![\w-])", message)]

    for found in (named(lambda name: name), named(lambda name: name.lstrip("-").replace("-", "_"))):
        if len(found) == 1:
            return _flag(found[0])
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
                                                                          drafter.resolution_config(profile)))
            answer = {**resolution.document(profile.sglang.version, argv, probe),
                      "gpu": {"model": gpu.name, "count": count}, "model_config": profile.model.config}
    identity = flag_identity_problems(profile, tuple(probe["actions"]))
    problems = identity + parser_problems(profile, tuple(probe["actions"]), probe) + config_problems
    problems += code_and_weights_problems(profile, tuple(probe["actions"]))
    if not identity:
        problems += derived_values_problems(profile, argv, port, node)
    problems += speculative_problems(profile, probe["algorithms"])
    problems += draft_problems(profile, answer)
    if not problems and answer["error"]:  # a refusal the rules above did not explain
        problems.append(Problem("sglang-resolution", _refusal_field(profile, answer["error"]),
                                f"SGLang {profile.sglang.version} refuses the command line at "
                                f"{answer.get('step') or 'resolution'}: {answer['error']}"))
    problems += resource_problems(profile, gpus, answer["resolved"])
    problems += nccl_problems(profile, topology)
    problems += environment_problems(profile)
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
