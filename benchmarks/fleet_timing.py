"""Deploying to 8 simulated hosts in parallel against deploying to one (goal: at most 2x the time).

    python benchmarks/fleet_timing.py [--count 8] [--runs 3] [--ssh-port 2300] [--service-port 30300]
                                      [--machine ct129-bench]

Boots a fleet of simulated hosts (simhost up --count N, in a temporary state directory; taken down at the
end), then times `pyinfra inventory/sim_fleet.py deploy.py` (pyinfra's parallel SSH; skip_gate: the gate's
measurement is the server's time, not the tool's) with `--limit` the first host against the whole fleet:
- first deploy: a bare host gets the service user, the simulator, the host programs, secrets, the first
  release and its start (one host alone, then the other N-1 together: one sample each);
- configuration change: a new release on every targeted host (restart and readiness), alternating two
  profiles, `--runs` times each;
- no-op redeploy: nothing changed, `--runs` times each.
Prints medians (min, max) and the ratio fleet / one host.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PROVEN = REPO / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml"

from testbed.simfleet import Fleet  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ssh-port", type=int, default=2300)
    parser.add_argument("--service-port", type=int, default=30300)
    parser.add_argument("--machine", default="ct129-bench")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-timing-") as tmp:
        fleet = Fleet(state_dir=Path(tmp) / "fleet", count=args.count, ssh_port=args.ssh_port,
                      service_port=args.service_port, machine=args.machine)
        env = {**os.environ, "SGLANG_DEPLOY_SIMFLEET_DIR": str(fleet.state_dir), "PYTHONUNBUFFERED": "1"}
        variant = Path(tmp) / "variant.yaml"
        variant.write_text(PROVEN.read_text().replace("--max-running-requests: 16", "--max-running-requests: 12"))
        names = [fleet.name(i) for i in range(args.count)]

        def deploy(profile: Path, hosts: list[str]) -> float:
            command = [sys.executable, "-m", "pyinfra", "-y", "inventory/sim_fleet.py", "deploy.py",
                       "--data", f"profile={profile}", "--data", "skip_gate=true", "--data", "max_auto_rollbacks=100"]
            for host in hosts:
                command += ["--limit", host]
            started = time.perf_counter()
            result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
            elapsed = time.perf_counter() - started
            if result.returncode != 0:
                raise SystemExit(f"deploy to {hosts} failed:\n{(result.stdout + result.stderr)[-3000:]}")
            return elapsed

        try:
            boot_started = time.perf_counter()
            fleet.up(fresh=True)
            boot = time.perf_counter() - boot_started
            first_one = deploy(PROVEN, names[:1])
            first_rest = deploy(PROVEN, names[1:])
            change = {1: [], args.count: []}
            noop = {1: [], args.count: []}
            other = {PROVEN: variant, variant: PROVEN}
            on_first, on_rest = PROVEN, PROVEN
            for _ in range(args.runs):
                on_first = other[on_first]  # one host: a new release on host 0
                change[1].append(deploy(on_first, names[:1]))
                noop[1].append(deploy(on_first, names[:1]))
                if on_first != on_rest:  # untimed: host 0 back in step, so that all N hosts change next
                    deploy(on_rest, names[:1])
                on_first = on_rest = other[on_rest]
                change[args.count].append(deploy(on_rest, names))
                noop[args.count].append(deploy(on_rest, names))
        finally:
            fleet.down()
            fleet.remove()

    def stats(values):
        return f"median {statistics.median(values):6.2f} s (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"

    print(f"fleet of {args.count} simulated hosts booted in {boot:.1f} s (one shared overlay rootfs)")
    print(f"first deploy        1 host : {first_one:6.2f} s   {args.count - 1} hosts in parallel: {first_rest:6.2f} s   "
          f"ratio {first_rest / first_one:.2f}")
    for label, values in (("configuration change", change), ("no-op redeploy", noop)):
        one, many = values[1], values[args.count]
        print(f"{label:20} 1 host : {stats(one)}")
        print(f"{label:20} {args.count} hosts: {stats(many)}   ratio of medians "
              f"{statistics.median(many) / statistics.median(one):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
