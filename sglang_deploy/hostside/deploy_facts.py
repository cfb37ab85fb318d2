"""What a deploy reads on the host, in one process (roles/facts.py DeployState): the release store's state
(`store state`) and each weights snapshot's status (`weights status`: verified or not, nothing hashed), as sections
marked `@@store` and `@@<name>_status`. One python start and one set of imports instead of one per program.

    python3 -m hostside.deploy_facts --service S [--snapshot NAME MANIFEST DIR ...]

Reads only: no lock is taken and nothing is written (the fact runs under --dry too). Standard library only.
"""

import argparse
import os
import sys
from types import SimpleNamespace

from .contract.answers import SnapshotStatus
from .contract.document import line
from .store import cmd_state, service_name
from .weights.manifest import WeightsError, is_verified, load_manifest_file, snapshot_dir



def snapshot_status(manifest, directory):
    """`weights status`'s answer for one snapshot (answers.SnapshotStatus): a missing manifest or an
    unreadable one is not verified."""
    if not os.path.isfile(manifest):
        return SnapshotStatus(verified=False, path=directory)
    try:
        return SnapshotStatus(verified=is_verified(directory, load_manifest_file(manifest)), path=directory)
    except WeightsError as error:
        return SnapshotStatus(verified=False, path=directory, error=str(error))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m hostside.deploy_facts")
    parser.add_argument("--service", required=True, type=service_name)
    parser.add_argument("--snapshot", nargs=3, action="append", default=[], metavar=("NAME", "MANIFEST", "DIR"))
    args = parser.parse_args(argv)
    snapshots = []
    for name, manifest, directory in args.snapshot:
        if not name.isidentifier():
            parser.error(f"--snapshot: {name!r} is not a section name")
        try:
            snapshots.append((name, manifest, snapshot_dir(directory)))
        except argparse.ArgumentTypeError as error:
            parser.error(f"--snapshot {name}: {error}")
    print("@@store", flush=True)
    status = cmd_state(SimpleNamespace(service=args.service))
    sys.stdout.flush()
    for name, manifest, directory in snapshots:
        print(f"@@{name}_status\n{line(snapshot_status(manifest, directory))}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
