"""`sglang-deploy rollout` (and `python rollout.py`): roll a deploy out over a fleet, the canary first, then the rest
in batches; stop at the first failed batch.

Each batch is one `pyinfra INVENTORY deploy.py --limit HOST ...` run: pyinfra deploys the batch's hosts in
parallel, and on each host the switch restarts, checks readiness and runs the gate against that host's own
baseline (its last release that passed a gate), rolling that host back by itself when the gate fails. A batch
passes when every host in it ends on the new release (or already ran it); otherwise (more than
--fail-percent of the batch failed) the rollout stops there and the later batches' hosts are not touched: no
connection that changes anything, no restart. The fleet's release stores are read before and after (pyinfra
releases.py, read-only) to say what happened to each host (fleet.host_change), ending with the fleet summary.
Exit 0 when every batch passed, 1 when the rollout stopped, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from . import results
from .fleet import FleetError, HostChange, host_change, inventory_groups, plan_batches, summary_lines
from .settings_types import TRUE

REPO = Path(__file__).resolve().parent.parent


class Log:
    def __init__(self, path: Path | None):
        self.file = open(path, "a") if path else None
        self.start = time.monotonic()

    def __call__(self, message: str = "") -> None:
        line = f"[rollout +{time.monotonic() - self.start:6.1f}s] {message}" if message else ""
        print(line, flush=True)
        if self.file:
            self.file.write(line + "\n")
            self.file.flush()


def pyinfra(inventory: Path, verb: str, hosts: list[str], data: list[str], log_path: Path) -> int:
    command = [sys.executable, "-m", "pyinfra", "-y", str(inventory), verb]
    for host in hosts:
        command += ["--limit", host]
    for item in data:
        command += ["--data", item]
    with open(log_path, "w") as out:
        return subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode


def read_summary(inventory: Path, hosts: list[str], data: list[str], work: Path, tag: str) -> dict[str, dict]:
    """The hosts' release stores through pyinfra releases.py (reads only). The summary goes where releases.py may
    write one, under the repository's results/ (host data fleet_summary: nowhere else)."""
    path = results.RESULTS_DIR / "rollouts" / work.name / f"summary-{tag}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    code = pyinfra(inventory, "releases.py", hosts, data + [f"fleet_summary={path}"], work / f"releases-{tag}.log")
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        rows = {}
    return {h: rows.get(h) or {"error": f"could not read its release store (pyinfra exit {code}, "
                                        f"see {work / f'releases-{tag}.log'})"} for h in hosts}


# Lines of a failed batch's pyinfra log worth showing (display only: the outcome comes from the JSON).
NOTEWORTHY = ("FAILED", "automatic rollback", "gate fail", "gate inconclusive", "effective config", "Error",
              "is active (", "is not declared", "below", "regress")


def run_batch(inventory: Path, batch: list[str], data: list[str], work: Path, index: int, before: dict,
              log: Log) -> tuple[list[str], int, Path]:
    """Deploy one batch; (the hosts that did not end on the new release or an unchanged one, pyinfra's exit code,
    the batch's log)."""
    batch_log = work / f"deploy-{index}.log"
    code = pyinfra(inventory, "deploy.py", batch, data, batch_log)
    after = read_summary(inventory, batch, data, work, f"after-{index}")
    failed = []
    for host in batch:
        change = host_change(before.get(host), after.get(host))
        if change.outcome == "untouched" and code == 0:  # deployed, and nothing to change: its release stays
            change = HostChange("unchanged", f"unchanged: {(after[host].get('active') or {}).get('id')} stayed "
                                             "active (nothing to deploy)")
        failed += [] if change.passed else [host]
        log(f"  {host}: {change}")
    if code != 0 and not failed:  # pyinfra failed before any switch (validation, connection, lock)
        failed = list(batch)
    if failed:
        for line in batch_log.read_text(errors="replace").splitlines():
            if any(word in line for word in NOTEWORTHY):
                log(f"    | {line.strip()[:200]}")
    return failed, code, batch_log


def roll_out(inventory: Path, label: str, batches: list[list[str]], data: list[str], fail_percent: float,
             work: Path, log: Log) -> int:
    """The canary, then each batch; stop at the first batch (or a canary) that fails. 0: every batch passed;
    1: the rollout stopped."""
    hosts = [h for batch in batches for h in batch]
    log(f"rollout over {len(hosts)} hosts of {label}: "
        + " | ".join(f"{'canary' if i == 0 else f'batch {i}'}: {', '.join(b)}" for i, b in enumerate(batches)))
    log(f"pyinfra logs in {work}")
    if any(item.split("=", 1)[0] == "skip_gate" and item.split("=", 1)[1].strip().lower() in TRUE for item in data):
        log("WARNING: skip_gate: hosts are marked good when ready, WITHOUT the gate; the canary proves only readiness")
    before = read_summary(inventory, hosts, data, work, "before")
    stopped_at = None
    for index, batch in enumerate(batches):
        name = "canary" if index == 0 else f"batch {index}/{len(batches) - 1}"
        log(f"{name}: deploying {', '.join(batch)}")
        started = time.monotonic()
        failed, code, batch_log = run_batch(inventory, batch, data, work, index, before, log)
        log(f"{name}: {'PASSED' if not failed else 'FAILED'} in {time.monotonic() - started:.1f} s "
            f"(pyinfra exit {code}; {len(failed)}/{len(batch)} failed: {', '.join(failed) or 'none'}; full log {batch_log})")
        if failed and (index == 0 or 100.0 * len(failed) / len(batch) > fail_percent):
            stopped_at = index
            break
    remaining = [h for batch in batches[(stopped_at + 1 if stopped_at is not None else len(batches)):] for h in batch]
    final = read_summary(inventory, hosts, data, work, "final")
    if stopped_at is not None:
        log(f"rollout STOPPED at {'the canary' if stopped_at == 0 else f'batch {stopped_at}'}; "
            f"{len(remaining)} host(s) not deployed" + (":" if remaining else ""))
        for host in remaining:
            log(f"  {host}: {host_change(before.get(host), final.get(host))}")
    else:
        log("rollout COMPLETE: every batch passed")
    log("fleet summary:")
    for line in summary_lines(final):
        log(f"  {line}")
    return 1 if remaining or stopped_at is not None else 0


def add_parser(sub) -> None:
    """The `rollout` subcommand of sglang-deploy (cli.py)."""
    what = "deploy over a fleet: the canary group first, then the rest in batches; stop at the first failed batch"
    parser = sub.add_parser("rollout", help=what, description=what[0].upper() + what[1:] + ".", allow_abbrev=False)
    parser.add_argument("inventory", type=Path, help="a pyinfra inventory with the canary and fleet groups")
    parser.add_argument("--batch-size", default="1", help="hosts per batch after the canary: a count or a share (25%%)")
    parser.add_argument("--canary-group", default="canary")
    parser.add_argument("--fleet-group", default="fleet")
    parser.add_argument("--fail-percent", type=float, default=0.0,
                        help="share of a batch's hosts that may fail without stopping the rollout (default 0)")
    parser.add_argument("--data", action="append", default=[], metavar="KEY=VALUE", help="passed to pyinfra")
    parser.add_argument("--log", type=Path, default=None, help="also append the rollout log to this file")
    parser.set_defaults(func=cmd_rollout)


def cmd_rollout(args: argparse.Namespace) -> int:
    for item in args.data:
        if "=" not in item:
            print(f"sglang-deploy rollout: error: --data {item!r}: expected key=value", file=sys.stderr)
            return 2
    if not (REPO / "deploy.py").is_file():
        print(f"sglang-deploy rollout: error: {REPO} holds no deploy.py: run it from a checkout of sglang-deploy",
              file=sys.stderr)
        return 2
    inventory = args.inventory.resolve()
    try:
        everyone, groups = inventory_groups(inventory)
        batches = plan_batches(groups, everyone, args.canary_group, args.fleet_group, args.batch_size)
    except FleetError as error:
        print(f"sglang-deploy rollout: error: {error}", file=sys.stderr)
        return 2
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    work = Path(tempfile.mkdtemp(prefix=f"rollout-{stamp}-", dir=os.environ.get("TMPDIR")))
    return roll_out(inventory, str(args.inventory), batches, args.data, args.fail_percent, work, Log(args.log))
