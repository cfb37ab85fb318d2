"""The profile's environment against an allow-list of names, each with the values it accepts.

A name the tool understands (NCCL, CUDA, torch and SGLang knobs; the simulator's own switches) passes with an
accepted value; a path value only under the service's own directories or the weights root. Everything else is
refused: the variables the tool sets (env-tool-owned), those that fake a measurement (env-fakes-measurement), those
that load code or a config from a path (env-loads-code, waivable) and any other name (env-not-reviewed, waivable
with a reason: one SGLang release alone reads hundreds of variables, and the next adds more).
"""

from __future__ import annotations

import posixpath
import re

from ..hostside.contract.paths import MODELS_ROOT
from ..layout import ServicePaths
from .. import releases
from ..profile.problem import Problem, env_field, remove_or_waive
from ..rules import CODE_LOADING_ENV, TOOL_ENV

BOOL01 = ("0", "1")
SGLANG_BOOL = ("0", "1", "true", "false")  # environ.py EnvBool: lower-cased true/1/yes/y, false/0/no/n


def _int(low: int, high: int):
    return ("int", low, high)


NCCL_PROTOS = r"(?:LL|LL128|Simple)"
NCCL_ALGOS = r"(?:Ring|Tree|CollnetDirect|CollnetChain|NVLS|NVLSTree|PAT)"
# The names a profile may set and the values each accepts are the release's data (releases/<version>/environment.json,
# "allowed": name -> a list of strings, ["int", low, high], ["regex", pattern, words] or "path"): NCCL, CUDA and
# torch knobs at the versions that release runs on, and SGLang's own knobs the tool knows (srt/environ.py: all-reduce
# paths, JIT GEMMs, compile debugging).


def allowed_env(version: str) -> dict[str, object]:
    return releases.allowed_env(version)


# The simulator's switches (sglang_deploy/sim, testbed): SGLang reads none of them (tests/test_allow_lists.py);
# SGLANG_SIM_NOTE changes nothing (a test's way to make a distinct release).
SIMULATOR_ENV = ("SGLANG_SIM_ACCEPT_COLLAPSE", "SGLANG_SIM_ACCEPT_COLLAPSE_AFTER", "SGLANG_SIM_ALLREDUCE_FAULT",
                 "SGLANG_SIM_AUTH_BROKEN",
                 "SGLANG_SIM_CRASH_AT_START", "SGLANG_SIM_DIE_AFTER_REQUESTS", "SGLANG_SIM_EXIT0_AFTER_REQUESTS",
                 "SGLANG_SIM_FAULT_OUTPUT", "SGLANG_SIM_FAULT_OUTPUT_AT_ATTENTION", "SGLANG_SIM_FAULT_OUTPUT_AT_STEPS",
                 "SGLANG_SIM_FAULT_SPEC_GRAPH_DOWNGRADE", "SGLANG_SIM_FAULT_SLOW_RESOLVED",
                 "SGLANG_SIM_GENERATE_5XX",
                 "SGLANG_SIM_GRAPH_CAPTURE_FAIL", "SGLANG_SIM_HANG_AT_START", "SGLANG_SIM_P2P", "SGLANG_SIM_SEED",
                 "SGLANG_SIM_SLOWDOWN_PCT", "SGLANG_SIM_START_SECONDS", "SGLANG_SIM_STREAM_ABORT_AFTER",
                 "SGLANG_SIM_STREAM_ERROR_AFTER", "SGLANG_SIM_NOTE")
# SGLang's simulated acceptance (speculative/spec_utils.py, eagle_utils.py:807-840) forces the acceptance length the
# gate's floor reads: a measurement made up, never waivable.
FAKED_MEASUREMENT_ENV = (r"SGLANG_SIMULATE_\w*",)
# Beyond CODE_LOADING_ENV: a file of NCCL settings (the plugin variables included), Triton kernel overrides, model
# packages and apps imported by name, and caches or module directories of compiled code outside the service's own.
MORE_CODE_LOADING_ENV = (r"NCCL_CONF_FILE", r"TRITON_\w*OVERRIDE\w*", r"TRITON_HOME", r"SGLANG_\w*PACKAGE\w*",
                         r"SGLANG_\w*APP_PATH", r"\w*_CACHE_DIR", r"\w*_CACHE_PATH", r"HF_MODULES_CACHE",
                         r"CUDA_MPS_\w*", r"SGLANG_\w*_DIR")


def path_problem(value: str, service: str) -> str | None:
    roots = (*ServicePaths(service).own_dirs, MODELS_ROOT)
    if not value.startswith("/") or posixpath.normpath(value) != value or "/.." in value:
        return "is not a normalized absolute path"
    if not any(value == root or value.startswith(root + "/") for root in roots):
        return f"is outside the service's own directories and the weights root ({', '.join(roots)})"
    return None


def value_problem(name: str, value: str, service: str, version: str) -> str | None:
    """None when the allow-listed `name` accepts `value` (SGLang <version>'s list), else what it accepts."""
    accepted = allowed_env(version)[name]
    if accepted == "path":
        problem = path_problem(value, service)
        return problem and f"{value!r} {problem}: any local user writes /dev/shm and /tmp, and a cache there is code " \
                           "the server loads"
    if accepted[0] == "int":
        _, low, high = accepted
        if re.fullmatch(r"[0-9]{1,12}", value) and low <= int(value) <= high:
            return None
        return f"{value!r} is not accepted; accepted: an integer from {low} to {high}"
    if accepted[0] == "regex":
        _, pattern, words = accepted
        return None if re.fullmatch(pattern, value, re.IGNORECASE if name.startswith("NCCL_") else 0) else \
            f"{value!r} is not accepted; accepted: {words}"
    return None if value in accepted else f"{value!r} is not accepted; accepted: {', '.join(accepted)}"


def classify(name: str, version: str) -> str:
    """tool-owned, faked, code, allowed, simulator or unreviewed (SGLang <version>'s allow-list)."""
    if name in TOOL_ENV:
        return "tool-owned"
    if any(re.fullmatch(p, name) for p in FAKED_MEASUREMENT_ENV):
        return "faked"
    if name in allowed_env(version):
        return "allowed"
    if name in SIMULATOR_ENV:
        return "simulator"
    if any(re.fullmatch(p, name) for p in CODE_LOADING_ENV + MORE_CODE_LOADING_ENV):
        return "code"
    return "unreviewed"


def not_read(name: str, version: str) -> bool:
    """An SGLANG_* name that SGLang <version> never reads: its own registry (srt/environ.py) does not declare it and no
    module of its package names it (when recorded)."""
    registry = releases.env_registry(version)
    return (bool(registry) and name.startswith("SGLANG_") and name not in registry
            and name not in releases.env_mentioned(version))


def problems(profile, env: dict[str, str]) -> list[Problem]:
    """The profile's environment (`env`: its env_values) against this allow-list of names and values."""

    out = []
    for key in profile.environment:
        kind = classify(key, profile.sglang.version)
        if kind == "tool-owned":
            out.append(Problem("env-tool-owned", env_field(key),
                               f"{key} is set by the tool (offline start, the service's own JIT caches, the "
                               "pinned toolkit); remove it from environment"))
        elif kind == "faked":
            out.append(Problem("env-fakes-measurement", env_field(key),
                               f"{key} makes SGLang simulate speculative acceptance: the gate's floors would "
                               "read a made-up acceptance length and production would serve unverified draft "
                               "tokens; remove it"))
        elif kind == "code":
            out.append(Problem("env-loads-code", env_field(key),
                               f"{key} makes the server load code or a config from a path or by name; "
                               + remove_or_waive("env-loads-code")))
        elif kind == "allowed":
            found = value_problem(key, env[key], profile.service.name, profile.sglang.version)
            if found:
                out.append(Problem("env-value", env_field(key), f"{key}: {found}"))
        elif kind == "unreviewed" and not_read(key, profile.sglang.version):
            out.append(Problem("env-not-reviewed", env_field(key),
                               f"{key} is not read by SGLang {profile.sglang.version}: its env registry "
                               "(sglang/srt/environ.py) does not declare it and no module of its package names "
                               "it, so setting it changes nothing (a name from another release or fork?); "
                               + remove_or_waive("env-not-reviewed")))
        elif kind == "unreviewed":
            out.append(Problem("env-not-reviewed", env_field(key),
                               f"{key} is not a variable the tool has reviewed (SGLang, NCCL, CUDA and torch read "
                               "hundreds; some open listeners, load code or change what is served); "
                               "accepted without a waiver: the names of releases/"
                               f"{profile.sglang.version}/environment.json (docs/refusals.md); "
                               + remove_or_waive("env-not-reviewed")))
    return out
