"""SGLang's router (the `sglang-router` package, pinned) in front of the fleet's workers: settings and the unit.

The router is data parallelism across hosts: every worker runs the same profile; the router spreads requests
over them (policy cache_aware by default), health-checks them (`/health`) and drops a failing one. Settings
come from the router host's data (all optional: router_port, router_bind, router_policy, router_workers,
router_health_interval_s, router_health_failures; a worker taken out needs 2 successes to come back).

Each worker's URL is http://<worker_address>:<port>, from the worker host's data (`worker_address`, else its
`ssh_hostname`; `port`, else the profile's service.port). The workers' API key reaches the router through
systemd's LoadCredential (never its command line); clients send the same key, which the router forwards.
The router's keys, their types and defaults are settings.RouterSettings (docs/settings.md).
"""

from __future__ import annotations

import fcntl
import re
import shlex
import subprocess
import sys
from pathlib import Path

from .hostside.contract.gate import GateSettings
from .hostside.lib.gate import below_floor
from .multinode import NodeError, node_address
from .render import parse_unit, unquote_exec
from .results import cache_dir
from .settings import HostSettings, RouterSettings
from .hostside.contract.paths import CONFIG_ROOT, ROUTER_LIB, UNIT_DIR, VENV_ROOT
from .units import ROUTER_SERVICE  # noqa: F401 - the router's unit name

ROUTER_VERSION = "0.3.2"  # sglang-router on PyPI; checked to install and run here (Python 3.11, manylinux2014)
ROUTER_VENV = f"{VENV_ROOT}/sglang-router-{ROUTER_VERSION}"
ROUTER_CONFIG_DIR = f"{CONFIG_ROOT}/sglang-router"
ROUTER_KEY_PATH = f"{ROUTER_CONFIG_DIR}/workers-api-key"
ROUTER_UNIT_PATH = f"{UNIT_DIR}/{ROUTER_SERVICE}.service"


class RouterError(ValueError):
    pass


def worker_url(name: str, settings: HostSettings, default_port: int) -> str:
    """http://<worker_address or ssh_hostname or name>:<port> of one worker host (settings: its HostSettings; the
    address as a multi-node server's rank 0 is reached, multinode.node_address)."""
    try:
        address = node_address(name, settings)
    except NodeError as error:
        raise RouterError(str(error)) from None
    return f"http://{address}:{settings.port or default_port}"


def command_line(router: RouterSettings, workers: list[str]) -> list[str]:
    """sglang_router.launch_router's arguments (through the launcher that adds the key from the credential)."""
    if not workers:
        raise RouterError(f"router_workers: the group {router.workers_group!r} has no hosts: the router needs workers")
    return [f"{ROUTER_VENV}/bin/python", f"{ROUTER_LIB}/router_launch.py",
            "--host", router.bind, "--port", str(router.port), "--policy", router.policy,
            "--health-check-endpoint", "/health",
            "--health-check-interval-secs", str(router.health_interval_s),
            "--health-failure-threshold", str(router.health_failures), "--health-success-threshold", "2",
            "--worker-startup-timeout-secs", "1800", "--worker-startup-check-interval", "5",
            "--log-level", "info", "--worker-urls", *workers]


# The router is a CPU-only network proxy: a stricter sandbox than the GPU server's (sglang_deploy/hardening.py),
# each directive with its reason in the unit.
ROUTER_HARDENING = (
    ("DynamicUser", "yes", "a transient unprivileged user; the router keeps no state"),
    ("LoadCredential", f"workers-api-key:{ROUTER_KEY_PATH}",
     "the workers' API key, readable only by this service, never on its command line"),
    ("NoNewPrivileges", "yes", "no privilege gain through setuid"),
    ("ProtectSystem", "strict", "the whole file system is read-only"),
    ("ProtectHome", "yes", "no access to /home, /root, /run/user"),
    ("PrivateTmp", "yes", "a private /tmp"),
    ("PrivateDevices", "yes", "no device nodes: no GPU is needed"),
    ("PrivateUsers", "yes", "no other users visible"),
    ("ProtectKernelTunables", "yes", "read-only /proc/sys and /sys"),
    ("ProtectKernelModules", "yes", "no module loading"),
    ("ProtectKernelLogs", "yes", "no kernel log access"),
    ("ProtectControlGroups", "yes", "cgroup tree read-only"),
    ("ProtectClock", "yes", "no clock changes"),
    ("ProtectHostname", "yes", "no hostname changes"),
    ("ProtectProc", "invisible", "other processes are invisible"),
    ("ProcSubset", "pid", "only the process part of /proc"),
    ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6 AF_NETLINK", "HTTP to clients and workers"),
    ("RestrictNamespaces", "yes", "no new namespaces"),
    ("RestrictRealtime", "yes", "no realtime scheduling"),
    ("RestrictSUIDSGID", "yes", "no setuid/setgid files"),
    ("LockPersonality", "yes", "no execution domain changes"),
    ("MemoryDenyWriteExecute", "yes", "no writable and executable memory: the router is compiled Rust"),
    ("SystemCallArchitectures", "native", "native system calls only"),
    ("SystemCallFilter", "@system-service", "the system calls of an ordinary service"),
    ("SystemCallFilter", "~@privileged @resources", "nothing privileged, no resource-limit changes"),
    ("SystemCallErrorNumber", "EPERM", "a filtered call fails with EPERM instead of killing the router"),
    ("CapabilityBoundingSet", "", "no capabilities at all"),
    ("AmbientCapabilities", "", "no capabilities at all"),
    ("DevicePolicy", "closed", "no devices"),
    ("UMask", "0077", "private files"),
)


def _escape(argument: str) -> str:
    """One ExecStart argument: quoted for systemd (its own rules are shell-like), % and $ doubled."""
    return shlex.quote(argument).replace("%", "%%").replace("$", "$$")


def _flag_lines(argv: list[str]) -> list[list[str]]:
    """One line per flag with its values (the program and its script first)."""
    lines: list[list[str]] = [[]]
    for argument in argv:
        if argument.startswith("--"):
            lines.append([])
        lines[-1].append(argument)
    return lines


def render_unit(router: RouterSettings, workers: list[str]) -> str:
    argv = command_line(router, workers)
    lines = [
        "# Managed by sglang-deploy: SGLang's router (sglang-router " + ROUTER_VERSION + ") over "
        + f"{len(workers)} worker(s) of the inventory group {router.workers_group}",
        "[Unit]",
        f"Description=SGLang router (sglang-router {ROUTER_VERSION}, {len(workers)} workers)",
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " \\\n    ".join(" ".join(_escape(a) for a in group) for group in _flag_lines(argv)),
        "Restart=on-failure",
        "RestartSec=5",
        "Environment=PYTHONUNBUFFERED=1",
    ]
    for name, value, why in ROUTER_HARDENING:
        lines += [f"# {why}", f"{name}={value}"]
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    unit = "\n".join(lines)
    # Parsed back as systemd reads it: the template's sections, one ExecStart handing argv over unchanged.
    entries = parse_unit(unit)
    sections = [section for section, key, _ in entries if not key]
    exec_starts = [value for _, key, value in entries if key == "ExecStart"]
    if sections != ["Unit", "Service", "Install"] or len(exec_starts) != 1 or unquote_exec(exec_starts[0]) != argv:
        raise RouterError("the router unit does not parse back to its command line")
    return unit


def wheelhouse(python_version: str, machine: str, cache_root=None):
    """sglang-router and its dependencies as wheels for the host's Python (X.Y) and architecture (uname -m),
    downloaded once on the controller with pip (PyPI or the controller's configured index) and cached, so the
    router host needs no index (GPU hosts are often firewalled)."""
    if not re.fullmatch(r"3\.[0-9]{1,2}", python_version) or machine not in ("x86_64", "aarch64"):
        raise RouterError(f"the router host reports Python {python_version!r} on {machine!r}: "
                          "need Python 3.x on x86_64 or aarch64")
    root = Path(cache_root or cache_dir())
    target = root / "wheels" / f"sglang-router-{ROUTER_VERSION}-py{python_version}-{machine}"
    done = target / ".complete"
    if done.exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            platforms = [f"manylinux2014_{machine}", f"manylinux_2_17_{machine}"]
            command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                       "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
                       *[a for p in platforms for a in ("--platform", p)], "-d", str(target),
                       f"sglang-router=={ROUTER_VERSION}"]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise RouterError(f"pip download sglang-router=={ROUTER_VERSION} for Python {python_version} "
                                  f"{machine} failed:\n{result.stderr[-2000:]}")
            done.touch()
    return target


def gate_verdict(measurement, floors: GateSettings, workers: int) -> dict:
    """The fleet's gate measured through the router: the workers' own floors on single-stream decode and
    acceptance (the router adds a hop, not speed; the gate's one floor rule, hostside/lib/gate.below_floor), request
    errors fail it; the aggregate over the workers is reported. /server_info is not proxied by the router: its
    error does not count. measurement: the bench's (hostside/contract/gate.Measurement)."""
    errors = [e for e in measurement.errors if not e.startswith("/server_info")]
    decode, tau = measurement.decode_median, measurement.tau_median
    reasons = [f"{len(errors)} request error(s): {errors[0]}"] if errors else []
    if decode is None:
        reasons.append("no single-stream sample completed through the router")
    elif below_floor(decode, floors.min_decode_tok_s):
        reasons.append(f"decode {decode:.1f} tok/s through the router is below the floor {floors.min_decode_tok_s:g}")
    if below_floor(tau, floors.min_accept_length):
        reasons.append(f"acceptance length {tau:.2f} through the router is below {floors.min_accept_length:g}")
    aggregate = measurement.aggregate_median
    return {"verdict": "fail" if reasons else "pass", "reasons": reasons, "workers": workers,
            "decode_tok_s": decode, "accept_length": tau, "aggregate_tok_s": aggregate,
            "aggregate_per_worker_tok_s": round(aggregate / workers, 1) if aggregate and workers else None}
