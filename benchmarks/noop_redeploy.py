"""A no-op redeploy against pyinfra's own floor, side by side in one run on the simulated CT129 (issue 40: a no-op
redeploy should take at most 1.5x pyinfra's own connect plus one no-op command).

    python benchmarks/noop_redeploy.py [--runs 7] [--inventory inventory/sim.py] [--data key=value ...]

The simulated host must be up (scripts/simhost up; SGLANG_DEPLOY_SIMHOST_DIR names another one's state directory).
One deploy first, so that the next ones change nothing; then, interleaved so that the shared machine's drift hits
both alike, each run times:
  - `pyinfra -y INVENTORY deploy.py`: the no-op redeploy (the whole plan, SGLang's resolution from its cache, the
    facts, the decision "active and unchanged", no restart);
  - `pyinfra -y INVENTORY exec -- true`: pyinfra's own start, connect and one no-op command.
Prints each median (min, max), the ratio of the medians, and the 1.5x target.
"""

import argparse
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--inventory", default="inventory/sim.py")
    parser.add_argument("--data", action="append", default=[], metavar="KEY=VALUE", help="host data for every deploy")
    args = parser.parse_args()
    data = [word for item in args.data for word in ("--data", item)]
    pyinfra_timed("deploy.py", *data, "--data", "skip_gate=true", inventory=args.inventory)  # what the no-ops keep
    redeploys, floors = [], []
    for _ in range(args.runs):
        seconds, output = pyinfra_timed("deploy.py", *data, inventory=args.inventory)
        if UNCHANGED not in output:
            sys.exit(f"the redeploy was not a no-op:\n{output[-3000:]}")
        redeploys.append(seconds)
        floors.append(pyinfra_timed("exec", "--", "true", inventory=args.inventory)[0])
    ratio = statistics.median(redeploys) / statistics.median(floors)
    print(line("no-op redeploy (pyinfra deploy.py, nothing changed)", redeploys))
    print(line("pyinfra's floor (pyinfra exec -- true: start, connect, one no-op command)", floors))
    print(f"ratio of the medians: {ratio:.2f}x (target: at most {TARGET}x): {'MET' if ratio <= TARGET else 'NOT MET'}")


if __name__ == "__main__":
    main()
