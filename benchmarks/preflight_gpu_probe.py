"""The preflight's host-side GPU probe on a real NVIDIA machine, once, with its findings.

    python3 benchmarks/preflight_gpu_probe.py [--gpus N] [--step-timeout 120] [--no-hang-check] [--json OUT]

Needs only python3 with torch (no network, no SGLang, no systemd): it runs hostside/preflight/probe.py by path with
this python, as the preflight does inside the release's unit (which adds the unit's sandbox and user), and judges
its facts with hostside/preflight/findings.py. It prints what the probe found and each finding:
  driver   cuInit's CUresult, the kernel module's version (/proc/driver/nvidia/version) and the loaded libcuda's
  memory   each GPU's free and total memory, and the compute processes nvidia-smi lists (what a busy GPU looks like
           against mem_fraction_static 0.88, the proven profile's)
  p2p      (2+ GPUs) peer access, the 16 MiB copy from each GPU to each other compared, each GPU's IOMMU group
           type, the one-process NCCL all-reduce, and the two-process all-reduce (one process per GPU, known input,
           4 KiB and 4 MiB) under the step timeout
  hang     (2+ GPUs, unless --no-hang-check) the two-process step with its last rank held back after start (a shell
           wrapper sleeps instead of running it): the step must time out, kill the waiting NCCL rank and leave no
           process behind
Nothing on the machine changes. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the rest are kept or set).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOSTSIDE = Path(__file__).resolve().parent.parent / "sglang_deploy" / "hostside"
PROBE = HOSTSIDE / "preflight" / "probe.py"
sys.path.insert(0, str(HOSTSIDE.parent))
from hostside.preflight import allreduce as preflight_allreduce  # noqa: E402  (standard library only)
from hostside.preflight import findings as preflight_findings  # noqa: E402

# The lent machines' rule: no NVLink multicast, in every process this starts (the ranks inherit the environment).
for name, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(name, value)

MEM_FRACTION = 0.88
HOLD_LAST_RANK = """#!/bin/sh
# rank {last} writes its ready file as a rank does after importing torch, then never starts: the others wait in NCCL's
# rendezvous as they would behind a peer whose writes never arrive
case " $* " in *" --rank {last} "*)
  dir=$(echo " $* " | sed 's/.* --dir \\([^ ]*\\) .*/\\1/'); touch "$dir/ready.{last}"; exec sleep 100000;;
esac
exec {python} "$@"
"""


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    except OSError:
        return 0
    return len([line for line in out.splitlines() if line.startswith("GPU ")])


def gpu_processes() -> list[str] | None:
    try:
        result = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                                 "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [line.strip() for line in result.stdout.splitlines() if line.strip()] if result.returncode == 0 else None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def hang_check(gpus: int, step_timeout: float) -> dict:
    """The real NCCL ranks with the last one held back: a timeout, the waiting ranks killed, none left."""
    spawned, real = [], preflight_allreduce.subprocess.Popen

    def popen(*args, **kwargs):
        process = real(*args, **kwargs)
        spawned.append(process.pid)
        return process

    with tempfile.TemporaryDirectory() as directory:
        wrapper = Path(directory) / "hold-last-rank.sh"
        wrapper.write_text(HOLD_LAST_RANK.format(last=gpus - 1, python=sys.executable))
        wrapper.chmod(0o755)
        preflight_allreduce.subprocess.Popen = popen
        try:
            found = preflight_allreduce.run(gpus, step_timeout=step_timeout, python=str(wrapper))
        finally:
            preflight_allreduce.subprocess.Popen = real
    time.sleep(1)
    found["left_behind"] = [pid for pid in spawned if alive(pid)]
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, help="GPUs to probe (default: every GPU nvidia-smi lists)")
    parser.add_argument("--step-timeout", type=float, default=120.0, help="the two-process all-reduce's limit")
    parser.add_argument("--no-hang-check", action="store_true")
    parser.add_argument("--json", help="write the facts, findings and timings here")
    args = parser.parse_args()
    gpus = args.gpus or gpu_count()
    print(f"preflight GPU probe: {gpus} GPU(s), {sys.executable}, NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}")
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-I", str(PROBE), "--gpus", str(gpus), "--step-timeout",
                             str(args.step_timeout)], capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - started
    if result.returncode != 0 or not result.stdout.strip():
        print(f"the probe exited {result.returncode} after {seconds:.1f} s:\n{result.stderr[-4000:]}")
        return 1
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    facts["outside"] = {"serving": False, "port": None, "listening": False, "listener": None,
                        "gpu_processes": gpu_processes()}
    torch = facts.get("torch") or {}
    print(f"probe: {seconds:.1f} s (steps: {' '.join(line[5:] for line in result.stderr.splitlines() if line.startswith('step '))}); "
          f"timings {facts.get('timings')}")
    print(f"driver: {json.dumps(facts.get('driver'))}")
    print(f"memory: free MiB {torch.get('free_mib')} of {torch.get('total_mib')}; nvidia-smi compute processes "
          f"{facts['outside']['gpu_processes']}")
    print(f"p2p: access {torch.get('p2p')}; copy compared {torch.get('p2p_copy')}; IOMMU {torch.get('iommu')}; "
          f"one-process NCCL {torch.get('all_reduce_ms')} ms ok={torch.get('all_reduce_ok')}")
    print(f"two-process all-reduce: {json.dumps(torch.get('all_reduce_2p'))}")
    findings = preflight_findings.diagnose(facts, gpus, expected={"mem_fraction_static": MEM_FRACTION})
    print(preflight_findings.report(findings, seconds))
    document = {"gpus": gpus, "seconds": round(seconds, 2), "facts": facts, "findings": findings,
                "stderr_tail": result.stderr[-2000:]}
    if gpus > 1 and not args.no_hang_check:
        hang_timeout = min(args.step_timeout, 30.0)
        found = hang_check(gpus, hang_timeout)
        verdict = preflight_findings.all_reduce_finding(found)
        # every rank waiting (the real ones in NCCL's rendezvous), none errored, none left once killed
        ok = found["waiting"] == list(range(gpus)) and not found["errors"] and not found["left_behind"] \
            and verdict["status"] == "fail"
        print(f"hang check ({hang_timeout:.0f} s): {'as expected' if ok else 'NOT as expected'}: "
              f"{json.dumps({k: found.get(k) for k in ('timed_out', 'waiting', 'killed', 'unkillable', 'left_behind', 'errors', 'seconds')})}")
        print(f"  finding: {verdict['status']}: {verdict['detail']}")
        document["hang_check"] = {"found": found, "finding": verdict, "as_expected": ok}
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
