"""Roll a deploy out over a fleet: the canary first, then the rest in batches; stop at the first failed batch.

    python rollout.py inventory/sim_fleet.py [--batch-size 2|25%] [--canary-group canary] [--fleet-group fleet]
                      [--fail-percent 0] [--data key=value ...] [--log results/rollout.log]

Each batch is one `pyinfra INVENTORY deploy.py --limit HOST ...` run: pyinfra deploys the batch's hosts in
parallel, and on each host the switch restarts, checks readiness and runs the gate against that host's own
baseline (its last release that passed a gate), rolling that host back by itself when the gate fails. A batch
passes when every host in it ends on the new release (or already ran it); otherwise (more than
--fail-percent of the batch failed) the rollout stops there and the later batches' hosts are not touched: no
connection that changes anything, no restart. The fleet's release stores are read before and after (pyinfra
releases.py, read-only) to say what happened to each host, ending with the fleet summary. Exit 0 when every
batch passed, 1 when the rollout stopped, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sglang_deploy.fleet import FleetError, inventory_groups, plan_batches  # noqa: E402
from sglang_deploy.rollout import Log, roll_out  # noqa: E402

if __name__ != "__main__":  # run by pyinfra as a deploy file by mistake
    raise SystemExit("rollout.py drives pyinfra itself: run `python rollout.py INVENTORY [options]`, "
                     "not `pyinfra INVENTORY rollout.py`")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rollout.py", description=__doc__.splitlines()[0])
    parser.add_argument("inventory", type=Path)
    parser.add_argument("--batch-size", default="1", help="hosts per batch after the canary: a count or a share (25%%)")
    parser.add_argument("--canary-group", default="canary")
    parser.add_argument("--fleet-group", default="fleet")
    parser.add_argument("--fail-percent", type=float, default=0.0,
                        help="share of a batch's hosts that may fail without stopping the rollout (default 0)")
    parser.add_argument("--data", action="append", default=[], metavar="KEY=VALUE", help="passed to pyinfra")
    parser.add_argument("--log", type=Path, default=None, help="also append the rollout log to this file")
    args = parser.parse_args(argv)
    for item in args.data:
        if "=" not in item:
            parser.error(f"--data {item!r}: expected key=value")
    inventory = args.inventory.resolve()
    try:
        everyone, groups = inventory_groups(inventory)
        batches = plan_batches(groups, everyone, args.canary_group, args.fleet_group, args.batch_size)
    except FleetError as error:
        print(f"rollout.py: error: {error}", file=sys.stderr)
        return 2
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    work = Path(tempfile.mkdtemp(prefix=f"rollout-{stamp}-", dir=os.environ.get("TMPDIR")))
    return roll_out(inventory, str(args.inventory), batches, args.data, args.fail_percent, work, Log(args.log))


if __name__ == "__main__":
    sys.exit(main())
