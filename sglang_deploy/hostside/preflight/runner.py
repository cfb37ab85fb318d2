"""Preflight: can this release's server start on this host? Asked before anything running is touched.

The runner (root, outside any sandbox) starts a probe as a transient unit with the release's own unit
properties (User, Group, SupplementaryGroups, the environment file, every sandbox directive, the limits), in the
release's own python, and reads back what the probe found as the service would find it:

  sandbox      the unit's namespace can be set up at all (exit 226/NAMESPACE: an LXC container without nesting)
  devices      every /dev/nvidia* node the server opens exists, is a character device and opens read-write
  shm          /dev/shm is large enough for NCCL between the TP ranks
  toolchain    gcc, g++ and the base interpreter's Python.h for Triton's and FlashInfer's first JIT compile
  caches       the JIT and graph caches are writable and persist (the service's state and cache directories)
  resolution   SGLang's own whole resolution of the release's command line, with the host's GPUs
  driver       cuInit's answer as the service, the kernel module's version and the loaded libcuda's (a mismatch: 803)
  port         nobody but the running release listens on the release's port
  torch        torch sees the profile's GPU count and can place a tensor on each GPU, and the memory others use
               leaves what mem_fraction_static asks for
  p2p          peer access between the TP GPUs, a copy between them compared, a small NCCL all-reduce in one
               process, and with 2+ GPUs one over one process per GPU (as SGLang's ranks) within --step-timeout
  triton       a Triton kernel compiles into the service's cache directory and runs
  limits       LimitNOFILE/LimitMEMLOCK as the service gets them (clamped in an unprivileged container: info)

Every failure names its cause and the fix. The probe uses a few MiB of GPU memory per GPU: it fits beside a
running server. Nothing is written to the release store. On a simulated host (no GPU) the GPU steps that need a
GPU say so and are skipped; the rest runs for real.

    python3 -m hostside.preflight --service S --unit FILE --env FILE --python PY --gpus N [--resolve] [--simulated]
        [--json OUT] [--container-id ID]
    PY -I hostside/preflight/probe.py --gpus N [--argv-json FILE] [--simulated]     (inside the transient unit)

This module is the runner (root, outside the sandbox): the transient unit, its properties, the report.
probe.py gathers the facts inside the unit (read as probes.PreflightFacts), findings.py judges them.
"""

import argparse
import grp
import json
import os
import shlex
import subprocess
import sys
import time

from ..evidence import journal
from .findings import (NAMESPACE_EXIT, NESTING_DIRECTIVES, diagnose, failed, finding, listening,
                                 namespace_failure, report, sandbox_enforcement, timed_out, unprivileged)
from .probe import read_text
from ..contract.probes import PreflightFacts, PreflightOutside, PreflightReport
from ..contract.document import DocumentError
from ..contract.paths import SIMULATED_MARKER, ServicePaths


# The unit's [Service] settings the probe runs under: who, where, what environment, the sandbox and the limits.
# Not taken: how it starts, stops and restarts (ExecStart, Type, Restart*, Timeout*, KillMode).
UNIT_PROPERTIES_SKIPPED = ("ExecStart", "ExecStartPre", "ExecStartPost", "ExecStop", "ExecReload", "Type", "Restart",
                           "RestartSec", "TimeoutStartSec", "TimeoutStopSec", "KillMode", "Description")


# --- the runner: root, outside the sandbox -------------------------------------------------------------

def unit_properties(unit_text, env_path):
    """systemd-run -p arguments from the unit's [Service] section; EnvironmentFile= points at the release's env."""
    properties, section, pending = [], None, ""
    for raw in unit_text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section != "[Service]" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if key in UNIT_PROPERTIES_SKIPPED:
            continue
        if key == "EnvironmentFile":
            value = env_path
        properties.append(f"{key}={value}")
    return properties


def relaxed_directives(unit_text):
    present = {line.split("=", 1)[0] for line in unit_text.splitlines() if "=" in line and not line.startswith("#")}
    return [name for name in NESTING_DIRECTIVES if name not in present]


def _journal_reason(unit, wait_s=0.0):
    """systemd's own line for a unit that could not start. wait_s: how long to wait for it, since journald may
    not have written PID 1's line yet when systemd-run returns (seen as a flaky '(see the journal)')."""
    deadline = time.monotonic() + wait_s
    while True:
        for line in journal("-u", unit, lines=20).splitlines():
            if "Failed to set up" in line or "Failed at step" in line:
                return line.split(": ", 1)[-1] if line.startswith("run-") or ".service: " in line else line
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def nesting_check():
    """Can a unit get a fresh /proc here (what ProtectKernelTunables= needs)? None where systemd-run is missing."""
    try:
        result = subprocess.run(["systemd-run", "--quiet", "--wait", "--collect", "-p", "ProtectKernelTunables=yes",
                                 "-p", "ProtectControlGroups=yes", "/bin/true"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.returncode == 0 if result.returncode in (0, NAMESPACE_EXIT) else None


def host_facts():
    return {"uid_map": read_text("/proc/self/uid_map").split(),
            "unprivileged": unprivileged(read_text("/proc/self/uid_map").split()), "nesting": nesting_check()}


def active_unit(service):
    """The installed unit of the service and the environment file it names (the active release's)."""
    path = ServicePaths(service).unit_path
    with open(path) as handle:
        text = handle.read()
    env = next((line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("EnvironmentFile=")),
               ServicePaths(service).env_path)
    return path, env.lstrip("-")


def unit_interpreter(unit_text):
    """The python of the unit's server: the shebang of the program ExecStart runs (<venv>/bin/sglang)."""
    for raw in unit_text.replace("\\\n", " ").splitlines():
        if raw.startswith("ExecStart="):
            words = shlex.split(raw.split("=", 1)[1])
            program = next((w for w in words if w.endswith("/bin/sglang")), None)
            if program:
                try:
                    with open(program) as handle:
                        first = handle.readline()
                    if first.startswith("#!"):
                        return first[2:].strip().split()[0]
                except OSError:
                    pass
                return os.path.join(os.path.dirname(program), "python")
    return "/usr/bin/python3"


def argv_port(argv):
    """The port the release's server listens on (SGLang's --port, default 30000)."""
    argv = list(argv or [])
    for index, arg in enumerate(argv):
        if arg == "--port" and index + 1 < len(argv):
            return int(argv[index + 1])
        if arg.startswith("--port="):
            return int(arg.split("=", 1)[1])
    return 30000


def outside_facts(args):
    """What the runner (root, outside the sandbox) adds: is the service running now (its own server then holds the
    port and GPU memory), who listens on the release's port, and the GPU processes nvidia-smi can see."""
    found = {"serving": None, "port": None, "listening": False, "listener": None, "gpu_processes": None}
    if args.service:
        try:
            found["serving"] = subprocess.run(["systemctl", "is-active", "--quiet", f"{args.service}.service"],
                                              timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            pass
    port = None
    if args.argv_json:
        try:
            with open(args.argv_json) as handle:
                port = found["port"] = argv_port(json.load(handle))
        except (OSError, ValueError):
            pass
    if port:
        found["listening"] = held = listening(read_text("/proc/net/tcp") + read_text("/proc/net/tcp6"), port)
        if held:
            try:
                found["listener"] = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True,
                                                   text=True, timeout=30).stdout.strip()[:400] or None
            except (OSError, subprocess.TimeoutExpired):
                pass
    if not args.simulated:
        try:
            result = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                                     "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=60)
            if result.returncode == 0:
                found["gpu_processes"] = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return PreflightOutside.from_dict(found, "the runner's outside facts")


def run(args):
    started = time.perf_counter()
    if args.active:
        args.unit, args.env = active_unit(args.service)
        args.simulated = args.simulated or os.path.exists(SIMULATED_MARKER)
    with open(args.unit) as handle:
        unit_text = handle.read()
    args.python = args.python or unit_interpreter(unit_text)
    properties = unit_properties(unit_text, args.env)
    unit = f"sglang-deploy-preflight-{os.getpid()}"
    probe_argv = [args.python, "-I", os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py"),
                  "--gpus", str(args.gpus), "--step-timeout", str(args.step_timeout)]
    probe_argv += ["--no-gpu"] * args.no_gpu + ["--fresh"] * args.fresh
    if args.argv_json:
        probe_argv += ["--argv-json", args.argv_json]
    if args.simulated:
        probe_argv.append("--simulated")
    command = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", f"--unit={unit}",
               "-p", "StandardInput=null"]
    for prop in properties:
        command += ["-p", prop]
    try:
        result = subprocess.run(command + ["--"] + probe_argv, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired as expired:
        # systemd-run --pipe was killed, its transient unit was not: stop it, and say which step hung.
        subprocess.run(["systemctl", "stop", f"{unit}.service"], capture_output=True, timeout=120, check=False)
        findings = [timed_out(unit, args.timeout, expired.stderr)]
        document = PreflightReport.from_dict({"findings": findings, "seconds": round(time.perf_counter() - started, 2),
                                              "facts": None, "ok": False, "host": host_facts(), "sandbox": []})
        if args.json:
            with open(args.json, "w") as handle:
                handle.write(document.dump())
        print(report(findings, time.perf_counter() - started), file=sys.stderr, flush=True)
        return 1
    video = None
    try:
        video = grp.getgrnam("video").gr_gid
    except KeyError:
        pass
    expected = None
    if args.expected:
        with open(args.expected) as handle:
            expected = json.load(handle)
    if result.returncode == NAMESPACE_EXIT:
        findings = [namespace_failure(_journal_reason(f"{unit}.service", wait_s=5), relaxed_directives(unit_text),
                                      args.container_id)]
        facts = None
    elif result.returncode != 0 or not result.stdout.strip():
        tail = (result.stderr or "").strip().splitlines()[-6:]
        findings = [finding("sandbox", "fail", f"the probe exited {result.returncode} under the release's unit "
                            f"properties: {' | '.join(tail) or _journal_reason(unit + '.service') or 'no output'}",
                            f"journalctl -u {unit}.service")]
        facts = None
    else:
        try:
            facts = PreflightFacts.loads(result.stdout.strip().splitlines()[-1], PreflightFacts.FILE)
        except DocumentError as error:  # the probe and this runner disagree on a field: named, never read as None
            findings = [finding("probe", "fail", f"the probe's answer cannot be read: {error}",
                                "the probe and the runner are one release's hostside/: deploy it again")]
            facts = None
    if facts is not None:
        if facts.torch and facts.torch.all_reduce_2p and facts.torch.all_reduce_2p.timed_out:
            # the probe killed its ranks and exited (systemd-run --wait saw the unit end); stopped again all the same
            subprocess.run(["systemctl", "stop", f"{unit}.service"], capture_output=True, timeout=120, check=False)
        facts = facts.but(outside=outside_facts(args))
        findings = diagnose(facts, args.gpus, args.simulated, video, args.container_id, expected)
    seconds = time.perf_counter() - started
    host = host_facts()
    document = PreflightReport.from_dict({"findings": findings, "seconds": round(seconds, 2),
                                          "facts": facts.to_dict() if facts else None,
                                          "ok": not failed(findings), "host": host,
                                          "sandbox": sandbox_enforcement(facts, unit_text) if facts else []})
    if args.json:  # through the class: a finding or field misspelt here fails at the write, naming it
        with open(args.json, "w") as handle:
            handle.write(document.dump())
    if not (args.quiet and not failed(findings)):
        print(report(findings, seconds), file=sys.stderr if failed(findings) else sys.stdout, flush=True)
    return 1 if failed(findings) else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="hostside.preflight")
    parser.add_argument("--service")
    parser.add_argument("--unit")
    parser.add_argument("--env")
    parser.add_argument("--python")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--argv-json", help="the release's server argv (JSON list): SGLang resolves it on the host")
    parser.add_argument("--expected", help="the release's resolved fields (JSON) to compare the host's with")
    parser.add_argument("--simulated", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--container-id", default="<CTID>")
    parser.add_argument("--active", action="store_true", help="the installed unit (the active release), not --unit")
    parser.add_argument("--no-gpu", action="store_true", help="skip torch and Triton (the doctor's view)")
    parser.add_argument("--fresh", action="store_true", help="no cached acceptance of the resolution (a rollback)")
    parser.add_argument("--quiet", action="store_true", help="no report on stdout (with --json)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--step-timeout", type=float, default=120,
                        help="the two-process all-reduce's limit once its ranks are up (a hang is a failure)")
    args = parser.parse_args(argv)
    if not (args.active and args.service) and not (args.unit and args.env):
        parser.error("--unit and --env, or --active with --service, are needed")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
