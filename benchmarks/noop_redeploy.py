"""A no-op redeploy against pyinfra's own floor, side by side in one run on the simulated CT129 (issue 40: a no-op
redeploy should take at most 1.5x pyinfra's own connect plus one no-op command).

    python benchmarks/noop_redeploy.py [--runs 7] [--inventory inventory/sim.py] [--data key=value ...]

The simulated host must be up (scripts/simhost up; SGLANG_DEPLOY_SIMHOST_DIR names another one's state directory).
One deploy first, so that the next ones change nothing; then, interleaved so that the shared machine's drift hits
both alike, each run times:
  - `pyinfra -y INVENTORY deploy.py`: the no-op redeploy (the whole plan, SGLang's resolution from its cache, the
    facts, the decision "active and unchanged", no restart);
  - `pyinfra -y INVENTORY exec -- true`: pyinfra's own start, connect and one no-op command.
Prints each median (min, max), the ratio of the medians, and the 1.5x target; then the same for the controller's
own CPU seconds (the pyinfra process's user + system time), which a loaded machine inflates less than the wall time
(the host's side of the round trip is not in it).
"""

import argparse
import resource
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from testbed.simhost import pyinfra_timed  # noqa: E402

TARGET = 1.5
UNCHANGED = "is active and unchanged: nothing to switch"


def line(label, values):
    return (f"{label}: median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f}, "
            f"n={len(values)})")


def timed(*args, inventory):
    """pyinfra_timed plus the CPU seconds (user + system) the pyinfra process used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds, output = pyinfra_timed(*args, inventory=inventory)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, output, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--inventory", default="inventory/sim.py")
    parser.add_argument("--data", action="append", default=[], metavar="KEY=VALUE", help="host data for every deploy")
    args = parser.parse_args()
    data = [word for item in args.data for word in ("--data", item)]
    pyinfra_timed("deploy.py", *data, "--data", "skip_gate=true", inventory=args.inventory)  # what the no-ops keep
    redeploys, floors, redeploy_cpu, floor_cpu = [], [], [], []
    for _ in range(args.runs):
        seconds, output, cpu = timed("deploy.py", *data, inventory=args.inventory)
        if UNCHANGED not in output:
            sys.exit(f"the redeploy was not a no-op:\n{output[-3000:]}")
        redeploys.append(seconds)
        redeploy_cpu.append(cpu)
        seconds, _, cpu = timed("exec", "--", "true", inventory=args.inventory)
        floors.append(seconds)
        floor_cpu.append(cpu)
    ratio = statistics.median(redeploys) / statistics.median(floors)
    print(line("no-op redeploy (pyinfra deploy.py, nothing changed)", redeploys))
    print(line("pyinfra's floor (pyinfra exec -- true: start, connect, one no-op command)", floors))
    print(f"ratio of the medians: {ratio:.2f}x (target: at most {TARGET}x): {'MET' if ratio <= TARGET else 'NOT MET'}")
    print(line("controller CPU, no-op redeploy", redeploy_cpu))
    print(line("controller CPU, pyinfra's floor", floor_cpu))
    print(f"controller CPU ratio of the medians: {statistics.median(redeploy_cpu) / statistics.median(floor_cpu):.2f}x")


if __name__ == "__main__":
    main()
