"""The profile's environment against an allow-list of names, each with the values it accepts.

A name the tool understands (NCCL, CUDA, torch and SGLang knobs; the simulator's own switches) passes with an
accepted value; a path value only under the service's own directories or the weights root. Everything else is
refused: the variables the tool sets (env-tool-owned), those that fake a measurement (env-fakes-measurement), those
that load code or a config from a path (env-loads-code, waivable) and any other name (env-not-reviewed, waivable
with a reason: SGLang 0.5.23 alone reads hundreds of variables, and the next release adds more).
"""

from __future__ import annotations

import posixpath
import re

from .hostside.weights.manifest import MODELS_ROOT
from .layout import ServiceLayout
from .rules import CODE_LOADING_ENV, TOOL_ENV

BOOL01 = ("0", "1")
SGLANG_BOOL = ("0", "1", "true", "false")  # environ.py EnvBool: lower-cased true/1/yes/y, false/0/no/n


def _int(low: int, high: int):
    return ("int", low, high)


NCCL_PROTOS = r"(?:LL|LL128|Simple)"
NCCL_ALGOS = r"(?:Ring|Tree|CollnetDirect|CollnetChain|NVLS|NVLSTree|PAT)"
# name -> accepted values: a tuple of strings, ("int", low, high), ("regex", pattern, words), or "path".
ALLOWED_ENV: dict[str, object] = {
    "NCCL_CUMEM_ENABLE": BOOL01, "NCCL_P2P_DISABLE": BOOL01, "NCCL_SHM_DISABLE": BOOL01, "NCCL_IB_DISABLE": BOOL01,
    "NCCL_NVLS_ENABLE": BOOL01, "NCCL_IGNORE_CPU_AFFINITY": BOOL01,
    "NCCL_P2P_LEVEL": ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "0", "1", "2", "3", "4", "5"),
    "NCCL_PROTO": ("regex", rf"\^?{NCCL_PROTOS}(?:,{NCCL_PROTOS})*", "LL, LL128, Simple, comma-separated, ^ to exclude"),
    "NCCL_ALGO": ("regex", rf"\^?{NCCL_ALGOS}(?:,{NCCL_ALGOS})*", "Ring, Tree, NVLS, ..., comma-separated, ^ to exclude"),
    "NCCL_NTHREADS": _int(64, 512), "NCCL_MIN_NCHANNELS": _int(1, 64), "NCCL_MAX_NCHANNELS": _int(1, 64),
    "NCCL_NCHANNELS_PER_NET_PEER": _int(1, 64), "NCCL_MIN_CTAS": _int(1, 64), "NCCL_MAX_CTAS": _int(1, 64),
    "NCCL_BUFFSIZE": _int(1 << 16, 1 << 30), "NCCL_LL_BUFFSIZE": _int(1 << 12, 1 << 30),
    "NCCL_LL128_BUFFSIZE": _int(1 << 12, 1 << 30),
    "NCCL_DEBUG": ("VERSION", "WARN", "INFO", "TRACE"),
    "NCCL_DEBUG_SUBSYS": ("regex", r"\^?[A-Z]+(?:,[A-Z]+)*", "subsystem names such as INIT,COLL or ALL"),
    "CUDA_DEVICE_ORDER": ("PCI_BUS_ID", "FASTEST_FIRST"),
    "CUDA_VISIBLE_DEVICES": ("regex", r"[0-9]{1,2}(?:,[0-9]{1,2}){0,15}", "GPU indexes such as 0,1"),
    "CUDA_LAUNCH_BLOCKING": BOOL01, "CUDA_MODULE_LOADING": ("LAZY", "EAGER"),
    "CUDA_DEVICE_MAX_CONNECTIONS": _int(1, 32), "CUDA_CACHE_DISABLE": BOOL01,
    "CUDA_CACHE_MAXSIZE": _int(0, 1 << 32), "CUDA_CACHE_PATH": "path",
    "PYTORCH_CUDA_ALLOC_CONF": ("regex", r"[a-z_]{1,40}:[A-Za-z0-9_.]{1,20}(?:,[a-z_]{1,40}:[A-Za-z0-9_.]{1,20}){0,9}",
                                "key:value pairs such as expandable_segments:True"),
    "PYTORCH_NO_CUDA_MEMORY_CACHING": BOOL01, "TORCH_NCCL_BLOCKING_WAIT": BOOL01,
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": ("0", "1", "2", "3"), "TORCH_NCCL_AVOID_RECORD_STREAMS": BOOL01,
    "TORCH_CUDA_ARCH_LIST": ("regex", r"[0-9]{1,2}\.[0-9](?:\+PTX)?(?:[ ;][0-9]{1,2}\.[0-9](?:\+PTX)?){0,9}",
                             "compute capabilities such as 8.6 or 8.6;9.0"),
    "OMP_NUM_THREADS": _int(1, 1024),
    # SGLang 0.5.23's own knobs the tool knows (srt/environ.py): all-reduce paths, JIT GEMMs, compile debugging.
    "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": SGLANG_BOOL, "SGLANG_PCIE_IPC_MAX_NUMEL": _int(0, 1 << 40),
    "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": SGLANG_BOOL, "SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB": _int(1, 1 << 20),
    "SGLANG_ENABLE_JIT_DEEPGEMM": SGLANG_BOOL, "SGLANG_ENABLE_TORCH_COMPILE_DEBUG": SGLANG_BOOL,
}
# The simulator's switches (sglang_deploy/sim, testbed): SGLang 0.5.23 reads none of them (tests/test_allow_lists.py);
# SGLANG_SIM_NOTE changes nothing (a test's way to make a distinct release).
SIMULATOR_ENV = ("SGLANG_SIM_ACCEPT_COLLAPSE", "SGLANG_SIM_ACCEPT_COLLAPSE_AFTER", "SGLANG_SIM_ALLREDUCE_FAULT",
                 "SGLANG_SIM_AUTH_BROKEN",
                 "SGLANG_SIM_CRASH_AT_START", "SGLANG_SIM_DIE_AFTER_REQUESTS", "SGLANG_SIM_EXIT0_AFTER_REQUESTS",
                 "SGLANG_SIM_FAULT_OUTPUT", "SGLANG_SIM_FAULT_OUTPUT_AT_ATTENTION", "SGLANG_SIM_FAULT_OUTPUT_AT_STEPS",
                 "SGLANG_SIM_FAULT_SPEC_GRAPH_DOWNGRADE",
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
    layout = ServiceLayout(service)
    roots = (layout.state_dir, layout.cache_dir, MODELS_ROOT)
    if not value.startswith("/") or posixpath.normpath(value) != value or "/.." in value:
        return "is not a normalized absolute path"
    if not any(value == root or value.startswith(root + "/") for root in roots):
        return f"is outside the service's own directories and the weights root ({', '.join(roots)})"
    return None


def value_problem(name: str, value: str, service: str) -> str | None:
    """None when the allow-listed `name` accepts `value`, else what it accepts."""
    accepted = ALLOWED_ENV[name]
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


def classify(name: str) -> str:
    """tool-owned, faked, code, allowed, simulator or unreviewed."""
    if name in TOOL_ENV:
        return "tool-owned"
    if any(re.fullmatch(p, name) for p in FAKED_MEASUREMENT_ENV):
        return "faked"
    if name in ALLOWED_ENV:
        return "allowed"
    if name in SIMULATOR_ENV:
        return "simulator"
    if any(re.fullmatch(p, name) for p in CODE_LOADING_ENV + MORE_CODE_LOADING_ENV):
        return "code"
    return "unreviewed"
