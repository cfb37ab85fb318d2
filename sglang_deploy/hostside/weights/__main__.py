#!/usr/bin/env python3
"""Model weights on the host: a snapshot directory per pinned revision, checked against a frozen manifest.

    /srv/models/<org>--<name>/<revision>/           the snapshot the unit serves (root-owned, read-only to the
                                                     service user); exactly the manifest's files
    /srv/models/<org>--<name>/.staging-<revision>/  a download or push in progress (resumable)
    /srv/models/.sglang-deploy/manifests/<hash>.json the manifests the controller uploaded (no network needed)
    /srv/models/.sglang-deploy/verified/<key>.json  per snapshot: size, mtime and sha256 of every file as last
                                                     hashed; a file whose size and mtime are unchanged is not
                                                     hashed again
    /srv/models/token-maps/<sha256>.pt              a token map the deploy shipped (token_map/part.py), named by its
                                                     digest; the switch re-hashes it (manifest.map_problem)

Commands (JSON on stdout, progress on stderr):
  status   --manifest M --dir D                     verified or not, without hashing anything
  verify   --manifest M --dir D                     every file (hashing only what changed); exit 1 names files
  fetch    --manifest M --dir D --repo R --revision REV --python PY [--endpoint URL]
                                                    free disk first, then huggingface_hub's own client
                                                    (hf_hub_download, resumable) into the staging directory,
                                                    verify, then rename into place
  promote  --manifest M --dir D                     the staging directory (filled by the controller's push) is
                                                    verified and renamed into place
  prune                                             drop snapshots (made by this tool) and token maps that no
                                                    retained release of any service points at, verified (or
                                                    shipped) over PRUNE_GRACE_S ago; skipped while a fetch,
                                                    promote or verify runs

fetch, promote and verify hold /srv/models/.sglang-deploy/lock shared, prune holds it exclusive without waiting:
a prune never removes a snapshot being fetched, and the grace period covers a deploy between its fetch and the
release that records the snapshot.

This module is the command line; the work is in manifest.py (the manifest, verification), fetch.py
(fetch, promote) and prune.py (which snapshots are used, the lock, prune). Standard library only: runs with
the host's python3.
"""

import argparse
import os
import sys
import time

from .fetch import fetch, promote
from .manifest import (REPO_PART, REVISION, WeightsError, is_verified, load_manifest_file, log, snapshot_dir,
                       verify)
from .prune import models_lock, prune
from ..contract.answers import SnapshotStatus, WeightsFailure, WeightsPlaced, WeightsPruned, WeightsVerified
from ..contract.document import line

EXIT_MISMATCH = 1
EXIT_NO_SPACE = 5


def main(argv=None):
    parser = argparse.ArgumentParser(prog="weights.py")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("status", "verify", "fetch", "promote"):
        command = sub.add_parser(name)
        command.add_argument("--manifest", required=True)
        command.add_argument("--dir", required=True, type=snapshot_dir)
        if name == "verify":
            command.add_argument("--rehash", action="store_true")
        if name == "fetch":
            command.add_argument("--repo", required=True)
            command.add_argument("--revision", required=True)
            command.add_argument("--python", required=True)
            command.add_argument("--endpoint")
            command.add_argument("--token-file")
    sub.add_parser("prune")
    args = parser.parse_args(argv)
    try:
        if args.command == "prune":
            print(line(WeightsPruned.from_dict(prune(), "the weights' prune")))  # strict: a renamed key fails here
            return 0
        if args.command == "status":  # reads only (a fact runs it, --dry included): no lock, nothing written
            return run_locked(args)
        with models_lock():
            return run_locked(args)
    except WeightsError as error:
        log(f"ERROR {error}")
        print(line(WeightsFailure(ok=False, error=str(error))))
        return EXIT_NO_SPACE if "not enough disk" in str(error) else EXIT_MISMATCH


def run_locked(args):
    """status, verify, fetch, promote: under the weights' lock, shared (prune waits for none of them to run)."""
    manifest = load_manifest_file(args.manifest)
    if args.command == "status":
        print(line(SnapshotStatus(verified=is_verified(args.dir, manifest), path=args.dir)))
        return 0
    if args.command == "verify":
        started = time.monotonic()
        problems, stats = verify(args.dir, manifest, rehash=args.rehash)
        print(line(WeightsVerified(ok=not problems, problems=problems, seconds=round(time.monotonic() - started, 3),
                                   **stats)))
        for problem in problems:
            log(f"MISMATCH {problem}")
        return EXIT_MISMATCH if problems else 0
    if args.command == "fetch":
        repo_parts = args.repo.split("/")
        if len(repo_parts) != 2 or not all(REPO_PART.fullmatch(p) for p in repo_parts) \
                or not REVISION.fullmatch(args.revision):
            raise WeightsError(f"--repo {args.repo!r} / --revision {args.revision!r}: expected ORG/NAME and a "
                               "40-hex commit")
        result = fetch(args.dir, manifest, args.repo, args.revision, args.python, args.endpoint, args.token_file)
    else:
        result = promote(args.dir, manifest)
    placed = WeightsPlaced.from_dict(result, "the weights' fetch|promote")  # strict: a renamed key fails here
    log(f"{args.dir}: verified" + (" and in place" if placed.changed else ", unchanged"))
    print(line(placed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
