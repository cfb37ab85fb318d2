#!/usr/bin/env python3
"""What the running server's journal and process say beyond /server_info (standard library only).

SGLang reports some runtime fallbacks only in its log: custom all-reduce dropped for lack of
GPU P2P keeps ``disable_custom_all_reduce`` false in /server_info, and a failed decode graph capture
kills the server. The patterns below are SGLang's own log texts (file and line in docs/conformance.md).
The process environment is read whole: variables the release did not declare but that cost throughput
are named with the file that set them.

Everything read here may carry the API key (SGLang logs ``server_args=`` with it, and /server_info
returns it with the launch command): ``redact`` runs before anything is stored or printed.
"""

import re
import subprocess

from .lib.service import env_file_values, read_environ

# custom_all_reduce_utils.py:505-508 (no P2P), :488-496 (more than two PCIe-only GPUs) and :466-470 (a world size
# it does not support), parallel_state.py:514-517 (setup failed).
CUSTOM_ALL_REDUCE_FALLBACK = re.compile(
    r"(CustomAllreduce|CustomAllReduceV2) is disabled (because|due to) [^\n]*|Setup Custom allreduce failed[^\n]*")
# The opt-in PCIe-IPC all-reduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1) falling back to NCCL: parallel_state.py:501,
# pcie_ipc_ar.py:227-230.
PCIE_IPC_FALLBACK = re.compile(r"Setup FlashInfer PCIe-IPC allreduce failed[^\n]*|SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is "
                               r"set but this FlashInfer build has no pcie_ipc_comm[^\n]*")
# speculative/eagle_worker_v2.py:328: an EAGLE3 draft does not read --speculative-token-map (its own head is small).
TOKEN_MAP_IGNORED = re.compile(r"[^\n]*Ignoring the specified token map\.?")
# decode_cuda_graph_runner.py:602-604; the scheduler dies (scheduler.py:6372), the launcher kills itself.
GRAPH_CAPTURE_FAILED = re.compile(r"Capture cuda graph failed[^\n]*")

# Variables that cost decode throughput when set on a serving process, with what they do and the
# public measurement behind the simulator's cost model (sim/hardware.py ENV_COSTS).
COSTLY_ENV = {
    "CUDA_LAUNCH_BLOCKING": (lambda v: v.strip() not in ("", "0"),
                             "every kernel launch waits for the GPU: no CPU/GPU overlap (a debugging switch)"),
    "NCCL_DEBUG": (lambda v: v.strip().upper() in ("INFO", "TRACE"),
                   "NCCL logs every communicator and, at TRACE, every call (a debugging switch)"),
    "NCCL_DEBUG_SUBSYS": (lambda v: bool(v.strip()), "NCCL debug subsystems (only with NCCL_DEBUG)"),
    "TORCH_NCCL_BLOCKING_WAIT": (lambda v: v.strip() not in ("", "0"),
                                 "every collective blocks the CPU until it completes"),
    "PYTORCH_NO_CUDA_MEMORY_CACHING": (lambda v: v.strip() not in ("", "0"),
                                       "every allocation goes to cudaMalloc (a debugging switch)"),
    "SGLANG_ENABLE_TORCH_COMPILE_DEBUG": (lambda v: v.strip() not in ("", "0", "false"), "compile debugging"),
}
REDACTED = "<redacted>"
SECRET_FIELDS = ("api_key", "admin_api_key", "launch_command")


def redact(value, secrets):
    """A copy of a str / dict / list with every secret replaced, and the fields that carry secrets
    in /server_info (api_key, admin_api_key, launch_command) masked whatever they hold."""
    secrets = [s for s in secrets if s]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: (REDACTED if k in SECRET_FIELDS and v else redact(v, secrets)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    return value


def invocation_id(service):
    result = subprocess.run(["systemctl", "show", "-p", "InvocationID", "--value", f"{service}.service"],
                            capture_output=True, text=True)
    return result.stdout.strip()


def journal(*selectors, lines=None):
    """The journal's messages (journalctl -o cat) that match the selectors, as text; the last `lines` only when
    given. The one journal reader of the host programs (journal_since_start, journal_since, the preflight)."""
    command = ["journalctl", *selectors, "--no-pager", "-o", "cat"]
    if lines:
        command += ["-n", str(lines)]
    return subprocess.run(command, capture_output=True, text=True).stdout


def journal_since_start(service, lines=None):
    """The unit's journal for its current run only (its invocation), as text."""
    invocation = invocation_id(service)
    if not invocation:
        return ""
    return journal(f"_SYSTEMD_INVOCATION_ID={invocation}", lines=lines)


def journal_since(service, since):
    """The unit's journal since a local time (`YYYY-MM-DD HH:MM:SS`, journalctl --since), all its runs."""
    return journal("-u", f"{service}.service", "--since", since).rstrip()


def log_findings(journal):
    """SGLang's own log lines that change what the running server does."""
    fallback = CUSTOM_ALL_REDUCE_FALLBACK.search(journal or "")
    capture = GRAPH_CAPTURE_FAILED.search(journal or "")
    pcie_ipc = PCIE_IPC_FALLBACK.search(journal or "")
    ignored = TOKEN_MAP_IGNORED.search(journal or "")
    return {"custom_all_reduce_fallback": fallback.group(0) if fallback else None,
            "graph_capture_failed": capture.group(0) if capture else None,
            "pcie_ipc_fallback": pcie_ipc.group(0) if pcie_ipc else None,
            "token_map_ignored": ignored.group(0).strip() if ignored else None}


def allreduce_path(server_info: dict, environ: dict, log_findings: dict | None) -> dict:
    """Which all-reduce the server's decode uses, from what it reports (/server_info, the process environment,
    log_findings): SGLang's dispatch order is custom all-reduce, then the opt-in PCIe-IPC one (world size 2, 4 or
    8: pcie_ipc_ar.eligible_group), then NCCL (parallel_state.py); a fallback is only in its log."""
    log_findings = log_findings or {}
    tp = int(server_info.get("tp_size") or 1)
    if tp <= 1:
        return {"path": "none", "why": "one GPU per server: no all-reduce"}
    if int(server_info.get("nnodes") or 1) > 1:
        return {"path": "nccl", "why": "the group spans nodes (SGLang turns custom all-reduce off by design)"}
    pcie_ipc = str(environ.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")).strip().lower() in ("1", "true", "yes", "y")
    fallback = log_findings.get("custom_all_reduce_fallback")
    pcie_failed = log_findings.get("pcie_ipc_fallback")
    if not server_info.get("disable_custom_all_reduce") and not fallback:
        return {"path": "custom", "why": "custom all-reduce on, and no fallback in the server's journal"}
    why = ("--disable-custom-all-reduce" if server_info.get("disable_custom_all_reduce")
           else f"SGLang's log: {fallback!r}")
    if pcie_ipc and tp in (2, 4, 8) and not pcie_failed:
        return {"path": "pcie_ipc", "why": f"custom all-reduce off ({why}); SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1"}
    if pcie_ipc and pcie_failed:
        why += f"; the PCIe-IPC all-reduce failed too: {pcie_failed!r}"
    return {"path": "nccl", "why": why}


def environment_sources(service):
    """variable -> the file that set it for the unit: its drop-ins' Environment= lines and its
    EnvironmentFile= files (later sources win, as in systemd)."""
    show = subprocess.run(["systemctl", "show", "-p", "FragmentPath", "-p", "DropInPaths", "-p", "EnvironmentFiles",
                           f"{service}.service"], capture_output=True, text=True).stdout
    props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    sources = {}
    for path in [props.get("FragmentPath", "")] + props.get("DropInPaths", "").split():
        for name in _unit_environment(path):
            sources[name] = path
    for entry in re.findall(r"(\S+) \(ignore_errors=\w+\)", props.get("EnvironmentFiles", "")):
        for name in _env_file_names(entry.lstrip("-")):
            sources[name] = entry.lstrip("-")
    return sources


def _unit_environment(path):
    names = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("Environment="):
                    names += re.findall(r'(?:^|\s|")([A-Za-z_][A-Za-z0-9_]*)=', line[len("Environment="):])
    except OSError:
        pass
    return names


def _env_file_names(path):
    try:
        with open(path) as f:
            return list(env_file_values(f.read()))
    except OSError:
        return []


def costly_undeclared(environ, declared, sources):
    """[(variable, value, what it does, the file that set it)] for costly variables the release did not
    declare with that value."""
    found = []
    for name, (costly, what) in COSTLY_ENV.items():
        value = environ.get(name)
        if value is not None and costly(value) and declared.get(name) != value:
            found.append((name, value, what, sources.get(name, "the process environment (source unknown)")))
    return found


def process_environment(pid):
    """The process's environment; {} when it cannot be read."""
    return read_environ(pid) or {}


if __name__ == "__main__":  # python3 -m hostside.evidence SERVICE: what the journal says since the unit started
    import json
    import sys

    print(json.dumps(log_findings(journal_since_start(sys.argv[1])), indent=1))
