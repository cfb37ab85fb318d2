"""Roll a deploy out over a fleet: the canary first, then the rest in batches; stop at the first failed batch.

    python rollout.py inventory/sim_fleet.py [--batch-size 2|25%] [--canary-group canary] [--fleet-group fleet]
                      [--fail-percent 0] [--data key=value ...] [--log results/rollout.log]

The same as `sglang-deploy rollout ...` (sglang_deploy/rollout.py says what it does), for a checkout without the
command installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sglang_deploy.cli import main  # noqa: E402

if __name__ != "__main__":  # run by pyinfra as a deploy file by mistake
    raise SystemExit("rollout.py drives pyinfra itself: run `python rollout.py INVENTORY [options]`, "
                     "not `pyinfra INVENTORY rollout.py`")


if __name__ == "__main__":
    sys.exit(main(["rollout", *sys.argv[1:]]))
