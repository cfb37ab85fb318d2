#!/usr/bin/env python3
"""Collect what the perf doctor needs from the host, as JSON (standard library only).

    python3 -m hostside.doctor_collect --service S [--probe [--probe-force]]

The active release (meta, profile, last gate measurement), the running server's /server_info, the
server process's environment, the checkpoint's bytes by role, GPU clock-limit reasons, and, when
asked, the GPU probe run with the release's own virtualenv (it refuses while the GPUs are in use).
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys

from . import evidence, safetensors_headers
from .lib import gate
from .lib.client import get_json, read_api_key
from .contract.probes import DoctorCollection, GpuProbe, PreflightReport, SandboxView
from .contract.document import DocumentError, line
from .contract.paths import ServicePaths
from .contract.findings import ABResults, TuneResults
from .contract.gate import GateConfig, GateResult
from .contract.release import ProfileSnapshot, Resolution
from .lib.listener import foreign_listener, guard_unit
from .lib.service import service_status
from .store import Store, service_name


def clock_reasons():
    """Why each GPU's clocks are held back (bitmask); the field was renamed in recent drivers."""
    if not shutil.which("nvidia-smi"):
        return {}
    for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        result = subprocess.run(["nvidia-smi", f"--query-gpu=index,{field}", "--format=csv,noheader"],
                                capture_output=True, text=True)
        if result.returncode == 0:
            return {int(i): r.strip() for i, r in (line.split(",") for line in result.stdout.strip().splitlines())}
    return {}


def card_memory_mib():
    """Each GPU's memory (MiB) as nvidia-smi reports it: the card the static pool is a fraction of (SGLang's own
    memory_usage says what the server holds and what is still free, not the card's size)."""
    if not shutil.which("nvidia-smi"):
        return []
    result = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        return []
    return [int(float(line)) for line in result.stdout.split() if line.replace(".", "", 1).isdigit()]


# NCCL settings the probe repeats: from the release's root-owned environment file (never from the running
# process, whose environ block the service user can rewrite), without variables that name files or plugins.
def probe_nccl_env(env_text):
    nccl = {}
    for line in (env_text or "").splitlines():
        key, sep, value = line.partition("=")
        if not sep or not key.startswith("NCCL_") or key.endswith(("_FILE", "_PLUGIN")) or "PLUGIN" in key:
            continue
        try:
            nccl[key] = (shlex.split(value) or [""])[0]
        except ValueError:
            continue
    return nccl


def probe_command(python, user, home, nccl, force):
    """The GPU probe runs as the service user with a clean environment, isolated (-I), never as root."""
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_probe.py")
    return (["runuser", "-u", user, "--", "env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", f"HOME={home}",
             python, "-I", program, "--allreduce-env", json.dumps(nccl)] + ["--force"] * force)


def probe_answer(result, python):
    """The GPU probe's answer (probes.GpuProbe): its own, through the class (a field renamed on either
    side is named in its error), or why there is none (no python; no JSON: its stderr's end)."""
    if result is None:
        return GpuProbe(error=f"{python} not found")
    try:
        return GpuProbe.loads(result.stdout, GpuProbe.FILE)
    except DocumentError as error:
        if str(error).startswith(f"{GpuProbe.FILE}: not JSON"):
            return GpuProbe(error=(result.stderr or "no output")[-500:])
        return GpuProbe(error=str(error))


def sandbox_view(service, gpus):
    """The active release's preflight without its GPU steps (hostside/preflight/runner.py --active --no-gpu): devices,
    shm, toolchain, limits, and the sandbox the unit declares next to what this host enforces."""
    out = ServicePaths(service).preflight_report("-doctor")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-m", "hostside.preflight", "--service", service, "--active", "--no-gpu",
                    "--gpus", str(gpus), "--json", out, "--quiet"], cwd=here, capture_output=True, text=True, timeout=300)
    try:
        with open(out) as handle:
            document = PreflightReport.loads(handle.read(), out)
    except (OSError, DocumentError) as error:  # DocumentError: not JSON, or a field missing or misspelt (named)
        return SandboxView(error=f"the sandbox view could not be taken: {error}")
    return SandboxView(findings=document.findings, sandbox=document.sandbox, host=document.host)


def last_tune(store, active, errors, document=TuneResults):
    """The active release's last tune (tune-results.json), or (document=ABResults) its last A/B (ab-results.json):
    the whole document (the doctor's speculation-slower-than-none reads the `nospec` control against the original).
    None: none, or one that cannot be read (said in errors)."""
    try:
        tune = document.load(store.release_dir(active))
    except FileNotFoundError:
        return None
    except (OSError, DocumentError) as error:
        errors.append(str(error))
        return None
    return tune


def release_part(document, store, active, errors):
    """A document of the active release (Resolution, ProfileSnapshot), or None: not there, or unreadable (said)."""
    try:
        return document.load(store.release_dir(active)) if active else None
    except FileNotFoundError:
        return None
    except (OSError, DocumentError) as error:
        errors.append(str(error))
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--service", required=True, type=service_name)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--probe-force", action="store_true")
    args = parser.parse_args()
    store = Store(args.service)
    guard_unit(args.service)  # every keyed request: only to the unit's own processes
    active = store.state().active
    report = {"active": active, "errors": []}
    meta = store.meta(active) if active else None
    report["meta"] = meta
    report["gate"] = None
    if active:
        try:
            measured = GateResult.load(store.release_dir(active)).measurement
            report["gate"] = measured
        except FileNotFoundError:  # no gate ran for it
            pass
        except (OSError, DocumentError) as error:  # reported; the doctor measures on its own below
            report["errors"].append(str(error))
    probe_url = meta.probe_url if meta else "http://127.0.0.1:30000"
    stranger = foreign_listener(args.service, probe_url) if meta else None
    if stranger:
        report["errors"].append(stranger)
    if report["gate"] is None and meta and not stranger:
        # No gate ran for this release (skip_gate): take a short measurement of our own for tau and MBU.
        report["gate"] = gate.measure_builtin(probe_url, store.secrets_path, samples=3, warmup=1, max_new_tokens=192,
                                              concurrency=1)
        report["gate_source"] = "doctor (3 x 192 tokens; the release has no gate result)"
    status = service_status(args.service)
    api_key = read_api_key(store.secrets_path)
    report["environ"] = evidence.process_environment(status["main_pid"]) if status["main_pid"] else {}
    report["log_findings"] = evidence.log_findings(evidence.journal_since_start(args.service))
    expect = None
    if active:
        try:
            expect = GateConfig.load(store.release_dir(active)).expect
        except FileNotFoundError:
            pass
        except (OSError, DocumentError) as error:  # reported, the doctor works with what it has
            report["errors"].append(str(error))
    declared = expect.environment if expect else {}
    report["costly_env"] = evidence.costly_undeclared(report["environ"], declared,
                                                      evidence.environment_sources(args.service))
    try:
        if stranger:
            raise OSError("not asked: " + stranger)
        report["server_info"] = get_json(probe_url + "/server_info", api_key)
    except Exception as error:  # noqa: BLE001 - reported, the doctor works with what it has
        report["server_info"] = {}
        report["errors"].append(f"/server_info: {error}")
    # The release's verified weights snapshot (hostside/weights/), else the release's own model.path (root's
    # gate-config.json): never a path the server reports, which root would then read.
    model_path = (meta and meta.weights and meta.weights.path) or (expect and expect.model_path)
    report["checkpoint_path"] = model_path
    try:
        report["checkpoint"] = safetensors_headers.summarize(model_path) if model_path else None
    except (OSError, ValueError, KeyError, TypeError) as error:
        report["checkpoint"] = None
        report["errors"].append(f"checkpoint {model_path}: {error}")
    # A separate draft model (DFLASH): its bytes are read every cycle too; its verified snapshot, as for the weights.
    draft_path = meta and meta.draft and meta.draft.path
    try:
        report["draft_checkpoint"] = safetensors_headers.summarize(draft_path) if draft_path else None
    except (OSError, ValueError, KeyError, TypeError) as error:  # a malformed header, as for the checkpoint
        report["draft_checkpoint"] = None
        report["errors"].append(f"draft model {draft_path}: {error}")
    report["offered_drafts"] = [{"source": entry.source, "bytes": entry.bytes}
                                for entry in (meta.offered_drafts if meta else [])]
    report["last_tune"] = last_tune(store, active, report["errors"]) if active else None
    report["last_ab"] = last_tune(store, active, report["errors"], ABResults) if active else None
    report["clock_reasons"] = clock_reasons()
    report["card_memory_mib"] = card_memory_mib()
    resolution = release_part(Resolution, store, active, report["errors"])
    report["sandbox"] = sandbox_view(args.service, resolution.parallel_gpus() if resolution else 1)
    if args.probe:
        python = os.path.join(meta.venv if meta else "", "bin", "python")
        profile = release_part(ProfileSnapshot, store, active, report["errors"])
        user = profile.service.user if profile else "sglang"
        nccl = probe_nccl_env(store.read(os.path.join(store.release_dir(active), "sglang.env")))
        command = probe_command(python, user, ServicePaths(args.service).state_dir, nccl, args.probe_force)
        result = subprocess.run(command, capture_output=True, text=True) if os.path.exists(python) else None
        report["probe"] = probe_answer(result, python)
    # The documents as read (typed) until here; a field misspelt in report fails at DoctorCollection(**report).
    # /server_info carries the key and launch command: the whole answer redacted, and read again through the class.
    collected = DoctorCollection(**report)
    print(line(DoctorCollection.from_dict(evidence.redact(collected.to_dict(), [api_key]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
