"""Wall-clock of no-op redeploys, configuration changes and rollbacks against the simulated CT129
(scripts/simhost up first).

    python benchmarks/deploy_timing.py [--runs 5]

No-op redeploy: `pyinfra inventory/sim.py deploy.py` with nothing changed (validation, facts, no
restart). Configuration change: a deploy alternating between two profiles (skip_gate: the gate's own
time is not the tool's); the server's own start-to-ready time, as the switch measured it
(last_switch.json readiness.elapsed_s), is subtracted, leaving the tool's overhead. Rollback: the same
subtraction, alternating between two releases. Prints median, min and max.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from testbed.simhost import pyinfra_timed  # noqa: E402
PROVEN = REPO / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml"


def pyinfra(*args):
    return pyinfra_timed(*args)[0]


def on_host(command):
    return subprocess.run([sys.executable, "-c", "from testbed.simhost import SimHost; import sys; "
                           f"sys.stdout.write(SimHost().ssh({command!r}).stdout)"],
                          cwd=REPO, capture_output=True, text=True).stdout


def state():
    return json.loads(on_host("cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))


def server_ready_s():
    """The server's own restart-to-ready time in the last switch, as the host measured it."""
    return json.loads(on_host("cat /var/lib/sglang-deploy/sglang/last_switch.json"))["readiness"]["elapsed_s"]


def line(label, values):
    return (f"{label}: median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f}, "
            f"n={len(values)})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # a profile outside profiles/ is read only from a directory the controller names (profile/load.py)
        os.environ["SGLANG_DEPLOY_PROFILE_DIRS"] = os.pathsep.join(
            filter(None, (os.environ.get("SGLANG_DEPLOY_PROFILE_DIRS"), tmp)))
        variant = Path(tmp) / "variant.yaml"
        variant.write_text(PROVEN.read_text().replace("--max-running-requests: 16", "--max-running-requests: 12"))
        pyinfra("deploy.py", "--data", f"profile={variant}", "--data", "skip_gate=true")
        second = state()["state"]["active"]
        pyinfra("deploy.py", "--data", f"profile={PROVEN}", "--data", "skip_gate=true")
        first = state()["state"]["active"]
        noop = [pyinfra("deploy.py", "--data", f"profile={PROVEN}") for _ in range(args.runs)]
        changes = []
        for i in range(args.runs):
            profile = variant if i % 2 == 0 else PROVEN
            changes.append(pyinfra("deploy.py", "--data", f"profile={profile}", "--data", "skip_gate=true")
                           - server_ready_s())
        pyinfra("deploy.py", "--data", f"profile={PROVEN}", "--data", "skip_gate=true")
        rollbacks = []
        for i in range(args.runs):
            target = second if i % 2 == 0 else first
            rollbacks.append(pyinfra("rollback.py", "--data", f"release={target}") - server_ready_s())
        pyinfra("rollback.py", "--data", f"release={first}")
    print(line("no-op redeploy (nothing changed, no restart)", noop))
    print(line("configuration change, tool overhead (wall minus the server's own restart-to-ready)", changes))
    print(line("rollback, tool overhead (wall minus the server's own restart-to-ready)", rollbacks))


if __name__ == "__main__":
    main()
