"""Validation layer b: the tool's rules that SGLang's parser cannot know: speculation, the draft model, GPUs and
CUDA graphs (read from SGLang's resolution), the environment, pins and NCCL."""

from __future__ import annotations

import hashlib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .. import drafter
from ..flags import MEDIA_DOMAINS_FLAG
from ..layout import ServicePaths
from ..profile import Profile
from ..profile.problem import Problem, env_field, flag_field, remove_or_waive
from ..rules import NCCL_DEBUG_KNOBS, PIN_FAMILY
from ..weights import WeightsSourceError, profile_weights
from . import env_rules, flag_classes
from .resolution import config_path

MEM_FRACTION_RANGE = (0.5, 0.95)


def speculative_problems(profile: Profile, algorithm_errors: dict) -> list[Problem]:
    flags = profile.sglang.flags
    problems = []
    algorithm = flags.get("--speculative-algorithm")
    if isinstance(algorithm, str) and algorithm_errors.get(algorithm):
        problems.append(Problem(
            "speculative-algorithm", flag_field("--speculative-algorithm"),
            f"{algorithm!r} is not a speculative algorithm of SGLang {profile.sglang.version} "
            f"({algorithm_errors[algorithm]}); accepted: EAGLE, EAGLE3, NEXTN (MTP heads), STANDALONE, NGRAM, DFLASH"))
    steps, topk, drafts = (flags.get("--speculative-num-steps"), flags.get("--speculative-eagle-topk"),
                           flags.get("--speculative-num-draft-tokens"))
    if topk == 1 and isinstance(steps, int) and isinstance(drafts, int) and drafts != steps + 1:
        problems.append(Problem(
            "draft-tokens-chain", flag_field("--speculative-num-draft-tokens"),
            f"with --speculative-eagle-topk 1 and --speculative-num-steps {steps}, "
            f"--speculative-num-draft-tokens must be {steps + 1} (SGLang forces it), not {drafts}"))
    if algorithm or profile.speculative.draft is not None:
        for floor, what in (("min_accept_length", "acceptance length"), ("min_decode_tok_s", "decode tokens/s")):
            if getattr(profile.gate, floor) is None:
                problems.append(Problem(
                    "gate-floors-required", ("gate", floor),
                    f"gate.{floor} is required while speculation is on (--speculative-algorithm {algorithm}): "
                    f"without it a release whose {what} collapsed passes the gate whenever no baseline exists; "
                    f"accepted: a floor, e.g. the proven profile's {PROVEN_FLOORS[floor]}"))
    if profile.model.hybrid and flags.get("--speculative-adaptive"):
        problems.append(Problem(
            "no-adaptive-speculation-on-hybrid", flag_field("--speculative-adaptive"),
            "--speculative-adaptive breaks on hybrid Gated-DeltaNet models (model.hybrid: true); remove it"))
    return problems


PROVEN_FLOORS = {"min_accept_length": 2.8, "min_decode_tok_s": 45}


# What SGLang logs when it cannot read a DFLASH draft's block size and takes 16 (speculative_hook.py
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


def model_config_pinned_problems(profile: Profile) -> list[Problem]:
    """model.config of managed weights is the config.json their manifest pins (as the draft's must be): the
    resolution reads the model the host serves."""
    if not profile.model.source or not profile.model.config:
        return []
    try:
        weights = profile_weights(profile)
        digest = hashlib.sha256(config_path(profile.model.config).read_bytes()).hexdigest()
    except (WeightsSourceError, OSError):
        return []  # the source's and the config's own problems are reported where they are read
    listed = {entry["path"]: entry for entry in weights.manifest["files"]}.get("config.json")
    if listed is None:
        return [Problem("model-config-pinned", ("model", "manifest"),
                        f"{weights.manifest_file} lists no config.json: not a model directory")]
    if listed["sha256"] != digest:
        return [Problem("model-config-pinned", ("model", "config"),
                        f"{profile.model.config} is not the config.json the manifest pins (sha256 {digest[:12]} vs "
                        f"{listed['sha256'][:12]}): SGLang's resolution would read another model than the host "
                        f"serves; accepted: the manifest's own copy (`sglang-deploy manifest` writes it beside "
                        f"{weights.manifest_file.name})")]
    return []


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
        problems.append(Problem("tp-matches-gpus", flag_field("--tp-size"),
                                f"--tp-size {tp} does not match {where}; accepted: {gpus * nodes}"))
    if nodes > 1 and isinstance(tp, int) and tp % nodes:
        problems.append(Problem("multinode-tp-divisible", flag_field("--tp-size"),
                                f"--tp-size {tp} does not split over nodes: {nodes} (SGLang puts tp_size / nnodes "
                                f"ranks on each node); accepted: a multiple of {nodes}"))
    fraction = flags.get("--mem-fraction-static")
    low, high = MEM_FRACTION_RANGE
    if isinstance(fraction, (int, float)) and not isinstance(fraction, bool) and not low <= fraction <= high:
        problems.append(Problem("mem-fraction-range", flag_field("--mem-fraction-static"),
                                f"--mem-fraction-static {fraction} is outside the sane range {low}-{high}"))
    # Decode graphs as SGLang folds every graph flag, read from its own resolution.
    decode = ((resolved or {}).get("cuda_graph_config") or {}).get("decode") or {}
    graph_bs, running = decode.get("max_bs"), (resolved or {}).get("max_running_requests")
    if isinstance(graph_bs, int) and isinstance(running, int) and graph_bs < running:
        # A warning (check.WARNING_RULES), not a refusal: SGLang's own defaults trip it (graphs to 32 and 48 running
        # requests under speculation on one A6000), and it only leaves speed on the table.
        present = [name for name in DECODE_MAX_BS_FLAGS + ("--max-running-requests",) if name in flags]
        problems.append(Problem(
            "decode-graph-covers-batch", flag_field(present[0]) if present else ("sglang", "flags"),
            f"decode CUDA graphs are captured up to batch {graph_bs}, below max-running-requests {running} (as "
            f"SGLang resolves them{'' if present else ' from its own defaults'}): a decode step with more than "
            f"{graph_bs} running requests runs without CUDA graphs (eager, slower per step: the cost cuda-graphs-on "
            f"refuses for every batch); single-stream and batches up to {graph_bs} are unaffected; fix: "
            f"--cuda-graph-max-bs-decode {running} (more graph memory and capture time) or "
            f"--max-running-requests {graph_bs}"))
    if decode.get("backend") == "disabled":
        flag = _first_present(flags, DECODE_BACKEND_FLAGS, "--cuda-graph-backend-decode")
        problems.append(Problem("cuda-graphs-on", flag_field(flag),
                                f"{flag} turns decode CUDA graphs off (SGLang resolves cuda_graph_config.decode."
                                "backend to 'disabled'; at least 25 % slower decode); accepted: remove it, or "
                                "--cuda-graph-backend-decode full or breakable"))
    return problems


def resolved_class_problems(profile: Profile, resolved: dict | None, table: dict | None) -> list[Problem]:
    """SGLang's resolved configuration (full path only) against the reviewed dest classes: an exposure or code
    field set by the environment or a config file is refused like the flag would be (validate/flag_classes.py).
    `table`: the exported option table of the profile's version (flag_table.load), for the dests and defaults."""

    if not resolved or table is None:
        return []
    options = {opt: action["dest"] for action in table["actions"] for opt in action["options"]}
    defaults = {action["dest"]: action["default"] for action in table["actions"]}
    flag_dests = {options[name] for name in profile.sglang.flags if name in options}

    if MEDIA_DOMAINS_FLAG in options:  # the tool's own `invalid` when the profile names no domain (flags.server_args)
        flag_dests.add(options[MEDIA_DOMAINS_FLAG])

    def field(dest: str) -> tuple:  # the variable that names the field (SGLANG_GRPC_PORT: grpc_port), else the section
        named = [key for key in profile.environment if dest.upper() in key]
        return env_field(named[0]) if named else ("environment",) if profile.environment else ("sglang", "flags")

    return [Problem(rule, field(dest), f"{message}; " + remove_or_waive(rule))
            for rule, dest, message in flag_classes.resolved_problems(profile.sglang.version, resolved, flag_dests,
                                                                       defaults)]


# Directives of the sandbox that keep the server from gaining privileges or writing the system; relaxing one needs a
# reason (review 2, finding 15). The others (kernel tunables, cgroups, system call filter, ...) are what a container
# without nesting may need, and stay relaxable as the preflight suggests.
PRIVILEGE_DIRECTIVES = ("NoNewPrivileges", "ProtectSystem", "ReadWritePaths", "CapabilityBoundingSet",
                        "AmbientCapabilities", "RestrictSUIDSGID", "DevicePolicy", "DeviceAllow")
# node_exporter's textfile directories: root's, never the service's own (review 2, finding 7) nor systemd's.
TEXTFILE_ROOTS = ("/var/lib/prometheus", "/var/lib/node_exporter", "/var/lib/node-exporter")


def sandbox_problems(profile: Profile) -> list[Problem]:
    problems = []
    for index, name in enumerate(profile.service.relax):
        if name in PRIVILEGE_DIRECTIVES:
            problems.append(Problem("relax-privileges", ("service", "relax", index),
                                    f"relaxing {name} lets the server gain privileges or write the system; "
                                    f"relaxable without a reason: the directives other than "
                                    f"{', '.join(PRIVILEGE_DIRECTIVES)}; " + remove_or_waive("relax-privileges")))
    textfile = profile.watch.textfile_dir
    own = [d for d in ServicePaths(profile.service.name).own_dirs if textfile == d or textfile.startswith(d + "/")]
    if own or not any(textfile == root or textfile.startswith(root + "/") for root in TEXTFILE_ROOTS):
        problems.append(Problem("watch-textfile-dir", ("watch", "textfile_dir"),
                                f"{textfile} is " + (f"the service's own directory {own[0]} (the service user could "
                                                     "plant links the root watch follows)" if own else
                                                     "not a node_exporter textfile directory")
                                + f"; accepted: a directory under {', '.join(TEXTFILE_ROOTS)} that is not the "
                                  "service's own"))
    return problems


def pin_problems(profile: Profile) -> list[Problem]:
    problems = []
    for position, pin in enumerate(profile.sglang.pins):
        name = canonicalize_name(Requirement(pin).name)  # the schema made it an exact PEP 508 pin
        if name not in PIN_FAMILY:
            problems.append(Problem("pin-outside-cuda-family", ("sglang", "pins", position),
                                    f"{name} is not a package of the CUDA/torch/kernel family as published (exact "
                                    "names: torch, triton, flashinfer-python, sgl-kernel, nvidia-nccl-cu13, "
                                    "cuda-python, ...; rules.PIN_FAMILY): a pin brings its code into the root-run "
                                    "install; " + remove_or_waive("pin-outside-cuda-family")))
    return problems


def nccl_problems(profile: Profile, topology: str | None, env: dict[str, str]) -> list[Problem]:
    """NCCL's variables of `env` (the profile's env_values) against the host's topology."""
    problems = []
    proto = env.get("NCCL_PROTO", "")
    if topology == "pcie" and "ll128" in proto.lower() and not proto.startswith("^"):
        problems.append(Problem(
            "nccl-ll128-needs-nvlink", env_field("NCCL_PROTO"),
            f"NCCL_PROTO={proto} forces LL128 on a PCIe-only host; NCCL enables LL128 only over NVLink and "
            "forcing it elsewhere can corrupt data. Remove NCCL_PROTO"))
    if topology == "pcie" and env.get("NCCL_P2P_LEVEL", "").upper() == "NVL":
        problems.append(Problem(
            "nccl-p2p-level-nvl-needs-nvlink", env_field("NCCL_P2P_LEVEL"),
            "NCCL_P2P_LEVEL=NVL on a PCIe-only host disables P2P between the GPUs; remove it "
            "(NCCL picks PCIe P2P by itself)"))
    reported = {p.field for p in problems}
    # NCCL's log at INFO or TRACE (and any subsystem selection) writes lines per collective while decoding: journald's
    # per-unit rate limit then drops the server's own lines, the ones readiness and the doctor read (review 4)
    verbose = [key for key in ("NCCL_DEBUG_SUBSYS",) if key in env]
    if env.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE"):
        verbose.append("NCCL_DEBUG")
    for key in (*NCCL_DEBUG_KNOBS, *verbose):
        if key in env and env_field(key) not in reported and not profile.env_reason(key):
            problems.append(Problem(
                "nccl-debug-knob-needs-reason", env_field(key),
                f"{key} is an NCCL debugging knob; NCCL's defaults are best unless a verified fault needs it. "
                f"Write it as `{key}: {{value: \"{env[key]}\", reason: \"...\"}}` or remove it"))
    return problems


def findings(profile: Profile, read: Profile, algorithm_errors: dict, answer: dict, gpus: int | None,
             topology: str | None, env: dict[str, str], table: dict | None) -> list[Problem]:
    """check_profile's stage of the rules, in their order: `read` is the profile as SGLang's parser reads it
    (parser_checks.ParserFindings.read), `algorithm_errors` the probe's verdict on the speculative algorithm,
    `answer` SGLang's resolution document, `gpus` the host's count (None: unknown or the flags did not parse),
    `env` the profile's env_values, `table` the exported option table."""
    return (speculative_problems(read, algorithm_errors) + draft_problems(read, answer)
            + model_config_pinned_problems(profile) + resource_problems(read, gpus, answer["resolved"])
            + resolved_class_problems(read, answer["resolved"], table)  # set through the environment or a config
            + nccl_problems(profile, topology, env) + env_rules.problems(profile, env) + sandbox_problems(profile)
            + pin_problems(profile))
