"""The simulated host's command line (scripts/simhost, python -m testbed.simctl):

    python -m testbed.simctl up|down|status [--state-dir DIR] [--ssh-port N] [--fresh]
    python -m testbed.simctl up|down|status --count N [--state-dir DIR] [--ssh-port BASE]
                                   [--service-port BASE] [--machine PREFIX]     (a fleet: sim_fleet.py)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from testbed.simfleet import DEFAULT_FLEET_DIR, DEFAULT_FLEET_SERVICE_PORT, DEFAULT_FLEET_SSH_PORT, Fleet
from testbed.simhost import DEFAULT_SSH_PORT, DEFAULT_STATE_DIR, SimHost, SimHostError, run_action


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="simhost", description="Manage the simulated CT129 (or a fleet of them)")
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--state-dir", type=Path, default=None,
                        help=f"default {DEFAULT_STATE_DIR} ({DEFAULT_FLEET_DIR} for a fleet)")
    parser.add_argument("--ssh-port", type=int, default=None,
                        help=f"default {DEFAULT_SSH_PORT}; a fleet's base, default {DEFAULT_FLEET_SSH_PORT}")
    parser.add_argument("--fresh", action="store_true", help="discard the container's disk and start from the cached image")
    parser.add_argument("--count", type=int, default=None,
                        help="a fleet of N hosts (distinct SSH, service and node_exporter ports); see inventory/sim_fleet.py")
    parser.add_argument("--fleet", action="store_true", help="down/status: the fleet recorded in the state directory")
    parser.add_argument("--service-port", type=int, default=DEFAULT_FLEET_SERVICE_PORT,
                        help="a fleet's first GPU server port (host i: BASE + i)")
    parser.add_argument("--machine", default="ct129-fleet", help="a fleet's machine name prefix (host i: PREFIX-i)")
    args = parser.parse_args(argv)
    try:
        if args.count is not None or args.fleet:
            return fleet_main(args)
    except SimHostError as error:
        print(f"simhost: error: {error}", file=sys.stderr)
        return 1
    return run_action(SimHost(state_dir=(args.state_dir or DEFAULT_STATE_DIR).resolve(),
                              ssh_port=args.ssh_port or DEFAULT_SSH_PORT), args.action, args.fresh, "simhost")


def fleet_main(args: argparse.Namespace) -> int:
    state_dir = (args.state_dir or DEFAULT_FLEET_DIR).resolve()
    if args.action == "up":
        if args.count is None:
            raise SimHostError("up --fleet needs --count N")
        Fleet(state_dir=state_dir, count=args.count, ssh_port=args.ssh_port or DEFAULT_FLEET_SSH_PORT,
              service_port=args.service_port, machine=args.machine).up(fresh=args.fresh)
        return 0
    fleet = Fleet.load(state_dir)
    if args.action == "down":
        fleet.down()
        return 0
    info = fleet.info()
    print(json.dumps(info, indent=2))
    return 0 if all(h["running"] for h in info["hosts"]) else 3


if __name__ == "__main__":
    sys.exit(main())
