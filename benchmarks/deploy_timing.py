"""Wall-clock of no-op redeploys and of rollbacks against the simulated CT129 (scripts/simhost up first).

    python benchmarks/deploy_timing.py [--runs 5]

No-op redeploy: `pyinfra inventory/sim.py deploy.py` with nothing changed (validation, facts, no
restart). Rollback: controller start -> `rollback.py` returns with the service healthy, alternating
between two releases; the simulator's own start phase (SGLANG_SIM_START_SECONDS, 3 s) is subtracted.
Prints medians.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROVEN = REPO / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml"
SIM_START_S = 3.0


def pyinfra(*args):
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pyinfra", "-y", "inventory/sim.py", *args], cwd=REPO,
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"pyinfra {' '.join(args)} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return time.perf_counter() - started


def state():
    out = subprocess.run([sys.executable, "-c", "from sglang_deploy.simhost import SimHost; import sys; "
                          "sys.stdout.write(SimHost().ssh('python3 /opt/sglang-deploy/bin/releases.py state --service sglang').stdout)"],
                         cwd=REPO, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        variant = Path(tmp) / "variant.yaml"
        variant.write_text(PROVEN.read_text().replace("--max-running-requests: 16", "--max-running-requests: 12"))
        pyinfra("deploy.py", "--data", f"profile={variant}", "--data", "skip_gate=true")
        second = state()["state"]["active"]
        pyinfra("deploy.py", "--data", f"profile={PROVEN}", "--data", "skip_gate=true")
        first = state()["state"]["active"]
        noop = [pyinfra("deploy.py", "--data", f"profile={PROVEN}") for _ in range(args.runs)]
        rollbacks = []
        for i in range(args.runs):
            target = second if i % 2 == 0 else first
            rollbacks.append(pyinfra("rollback.py", "--data", f"release={target}") - SIM_START_S)
        pyinfra("rollback.py", "--data", f"release={first}")
    print(f"no-op redeploy (nothing changed, no restart): median {statistics.median(noop):.2f} s "
          f"(min {min(noop):.2f}, max {max(noop):.2f}, n={len(noop)})")
    print(f"rollback, controller start -> service healthy, minus the simulator's {SIM_START_S:.0f} s start: "
          f"median {statistics.median(rollbacks):.2f} s (min {min(rollbacks):.2f}, max {max(rollbacks):.2f}, n={len(rollbacks)})")


if __name__ == "__main__":
    main()
