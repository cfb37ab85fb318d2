"""The preflight's GPU steps on a real GPU machine: torch on every GPU, P2P and the NCCL all-reduce, Triton.

    python benchmarks/preflight_gpu.py [--runs 3] [--user pfuser] [--beside 0.88] [--json OUT]

Runs hostside/preflight/probe.py directly (the machine needs no systemd; the sandbox step is the LXC test
host's) with the python it is started with, and prints: a cold run (empty Triton cache: the JIT compile), the
median of warm runs, a run beside a process that holds `--beside` of every GPU's memory (a running server's
share), a run as an unprivileged user, and a run in a private mount namespace where /dev/nvidia0 is a 0600
root node (what a passed-through node the service user cannot open looks like to the probe). Each with the
preflight's verdict. Nothing on the machine changes (the node is replaced only inside that namespace).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = Path(__file__).resolve().parent.parent / "sglang_deploy" / "hostside" / "preflight" / "probe.py"
sys.path.insert(0, str(PROBE.parent.parent.parent))
from hostside.preflight import findings as preflight_findings  # noqa: E402  (the host package, standard library only)

HOG = """
import sys, time, torch
held = []
for index in range(torch.cuda.device_count()):
    free, total = torch.cuda.mem_get_info(index)
    held.append(torch.empty(int(total * float(sys.argv[1])) - (total - free), dtype=torch.uint8, device=f"cuda:{index}"))
print("holding", flush=True)
time.sleep(600)
"""


def gpu_count() -> int:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return len([line for line in out.splitlines() if line.startswith("GPU ")])


def run_probe(gpus: int, env: dict, prefix: list[str] = ()) -> tuple[float, dict]:
    started = time.perf_counter()
    result = subprocess.run([*prefix, sys.executable, "-I", str(PROBE), "--gpus", str(gpus)],
                            capture_output=True, text=True, env=env, timeout=600)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"probe failed: {result.stderr[-2000:]}")
    return seconds, json.loads(result.stdout.strip().splitlines()[-1])


def verdict(facts: dict, gpus: int) -> str:
    findings = preflight_findings.diagnose(facts, gpus)
    failed = preflight_findings.failed(findings)
    return "pass" if not failed else "FAIL: " + " | ".join(f"{f['step']}: {f['detail']}" for f in failed)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--user", help="also run as this unprivileged user (created if missing)")
    parser.add_argument("--beside", type=float, default=0.88, help="memory fraction a running server holds")
    parser.add_argument("--json")
    args = parser.parse_args()
    gpus = gpu_count()
    rows, document = [], {"gpus": gpus, "runs": {}}
    cache = tempfile.mkdtemp(prefix="preflight-triton-")
    os.chmod(cache, 0o777)
    env = {**os.environ, "TRITON_CACHE_DIR": cache, "HOME": cache}

    seconds, facts = run_probe(gpus, env)
    rows.append(("cold (empty Triton cache)", seconds, facts, verdict(facts, gpus)))
    warm = [run_probe(gpus, env) for _ in range(args.runs)]
    median = statistics.median(s for s, _ in warm)
    rows.append((f"warm, median of {args.runs}", median, warm[-1][1], verdict(warm[-1][1], gpus)))

    hog = subprocess.Popen([sys.executable, "-c", HOG, str(args.beside)], stdout=subprocess.PIPE, text=True)
    try:
        hog.stdout.readline()
        seconds, facts = run_probe(gpus, env)
        rows.append((f"beside {args.beside:.0%} of each GPU held", seconds, facts, verdict(facts, gpus)))
    finally:
        hog.kill()
        hog.wait()

    if args.user:
        subprocess.run(["useradd", "--system", "--no-create-home", args.user], capture_output=True)
        as_user = ["runuser", "-u", args.user, "--", "env", f"HOME={cache}"]  # runuser resets HOME
        seconds, facts = run_probe(gpus, env, as_user)
        rows.append((f"as the unprivileged user {args.user}", seconds, facts, verdict(facts, gpus)))
        script = ("set -e; rm -f /run/preflight-nvidia0; mknod /run/preflight-nvidia0 c 195 0; chmod 600 /run/preflight-nvidia0; "
                  "mount --bind /run/preflight-nvidia0 /dev/nvidia0; exec runuser -u " + args.user + " -- env HOME="
                  + cache + " \"$@\"")
        seconds, facts = run_probe(gpus, env, ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"])
        rows.append(("as that user, /dev/nvidia0 0600 root (private mount ns)", seconds, facts, verdict(facts, gpus)))

    print(f"preflight GPU steps on {gpus} GPU(s), {sys.executable}")
    print(f"{'run':<58} {'wall s':>7} {'torch s':>8} {'triton s':>9}  all-reduce ms  free MiB  verdict")
    for name, seconds, facts, result in rows:
        torch_facts, triton = facts.get("torch") or {}, facts.get("triton") or {}
        print(f"{name:<58} {seconds:7.2f} {facts['timings'].get('torch', 0):8.2f} "
              f"{facts['timings'].get('triton', 0):9.2f}  {str(torch_facts.get('all_reduce_ms', '-')):>13}  "
              f"{str(torch_facts.get('free_mib', '-')):>8}  {result}")
        document["runs"][name] = {"wall_s": round(seconds, 2), "facts": facts, "verdict": result}
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
