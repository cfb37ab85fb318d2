"""A fleet of hosts: the rollout's batches from inventory groups, and the fleet summary (release and gate per host).

Pure logic; rollout.py drives pyinfra with it and releases.py prints the summary.
"""

from __future__ import annotations

import math
import runpy
from dataclasses import dataclass
from pathlib import Path


class FleetError(ValueError):
    pass


def inventory_groups(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """The hosts and groups of a pyinfra inventory file, read as pyinfra does: every module-level list or
    tuple is a group of hosts, each a name or a (name, data) pair. Returns (all host names in order, groups)."""
    try:
        module = runpy.run_path(str(path))
    except SystemExit as error:  # an inventory that explains why it cannot load (sim_fleet.py without a fleet)
        raise FleetError(f"{path}: {error}") from None
    except (OSError, SyntaxError) as error:
        raise FleetError(f"{path}: cannot load the inventory: {error}") from None
    groups: dict[str, list[str]] = {}
    for name, value in module.items():
        if name.startswith("_") or not isinstance(value, (list, tuple)):
            continue
        hosts = [entry[0] if isinstance(entry, tuple) else entry for entry in value]
        if hosts and all(isinstance(h, str) for h in hosts):
            groups[name] = hosts
    everyone: list[str] = []
    for hosts in groups.values():
        everyone += [h for h in hosts if h not in everyone]
    return everyone, groups


def batch_size_of(value: str, remaining: int) -> int:
    """--batch-size: a count (2) or a share of the hosts after the canary (25%), at least 1."""
    text = str(value).strip()
    try:
        if text.endswith("%"):
            percent = float(text[:-1])
            if not 0 < percent <= 100:
                raise ValueError
            return max(1, math.ceil(remaining * percent / 100))
        size = int(text)
        if size < 1:
            raise ValueError
        return size
    except ValueError:
        raise FleetError(f"--batch-size: {value!r}: a host count >= 1 (2) or a share of the fleet (25%)") from None


def plan_batches(groups: dict[str, list[str]], everyone: list[str], canary_group: str = "canary",
                 fleet_group: str = "fleet", batch_size: str = "1") -> list[list[str]]:
    """The canary group's hosts as the first batch, then the fleet group's other hosts (inventory order) in
    batches of batch_size. Without a fleet group, every host of the inventory is the fleet."""
    if canary_group not in groups or not groups[canary_group]:
        raise FleetError(f"the inventory has no group {canary_group!r} (or it is empty): the rollout deploys and "
                         f"gates it first; groups found: {', '.join(sorted(groups)) or 'none'}")
    if fleet_group not in groups and fleet_group != "fleet":
        raise FleetError(f"the inventory has no group {fleet_group!r}; groups found: {', '.join(sorted(groups))}")
    canary = groups[canary_group]
    rest = [h for h in groups.get(fleet_group, everyone) if h not in canary]
    size = batch_size_of(batch_size, len(rest))
    return [list(canary)] + [rest[i:i + size] for i in range(0, len(rest), size)]


def last_deployed(meta) -> str:
    """When a release (ReleaseMeta) was last deployed (created, or a redeploy of its configuration reused it); a
    rollback that brought it back does not count, so the release a failed deploy tried stays the newest."""
    events = [e.at for e in meta.history if "rollback" not in e.event]
    return max(events + [meta.created])


def host_summary(store) -> dict:
    """One host's row from its release store (`hostside.store state`): the active release with its verdict and
    gate, the newest retained release when it is not the active one (a failed deploy rolled back), and the
    running process (pid, start time) that tells an untouched host from a restarted one."""
    releases = store.releases  # store: the ReleaseStore fact (hostside/contract/answers.StoreReport)
    active = store.release(store.state.active)
    newest = max(releases, key=lambda r: (last_deployed(r), r.id)) if releases else None

    def describe(meta):
        if not meta:
            return None
        return {"id": meta.id, "verdict": meta.verdict or "unverified", "verdict_by": meta.verdict_by,
                "gate": meta.gate and (meta.gate.summary or meta.gate.verdict), "profile": meta.profile}
    return {"active": describe(active), "newest": describe(newest) if newest is not active else None,
            "last_good": store.state.last_good, "consistent": store.consistent,
            "main_pid": store.running.main_pid, "started_us": store.running.started_monotonic_us,
            "releases": [r.id for r in releases], "lock": store.lock is not None}


def summary_lines(rows: dict[str, dict]) -> list[str]:
    """The fleet summary as a table: host, active release, its verdict and gate, the newest release if not active."""
    lines = [f"{'host':22} {'active':15} {'verdict':12} {'gate':30} newest (not active)"]
    for name, row in rows.items():
        if row.get("error"):
            lines.append(f"{name:22} {'?':15} {'?':12} {'?':30} {row['error']}")
            continue
        active = row.get("active") or {}
        newest = row.get("newest")
        gate = active.get("gate") or ("not gated (skip_gate)" if active.get("verdict_by") == "skip_gate" else "-")
        lines.append(f"{name:22} {active.get('id') or 'none':15} {active.get('verdict', '-'):12} {gate[:30]:30} "
                     + (f"{newest['id']} {newest['verdict']}: {newest.get('gate') or '-'}" if newest else "-")
                     + ("" if row.get("consistent") else "  (NOT consistent with its active release)"))
    return lines


@dataclass(frozen=True)
class HostChange:
    """What a rollout did to one host. outcome: untouched, unchanged (the release was already active), deployed,
    failed (rolled back, or nothing active), unknown (its store could not be read) or inactive."""
    outcome: str
    text: str

    @property
    def passed(self) -> bool:
        return self.outcome in ("deployed", "unchanged")

    def __str__(self) -> str:
        return self.text


def host_change(before: dict | None, after: dict | None) -> HostChange:
    """From the host's summary rows (releases.py's JSON) before and after a batch."""
    if after is None or after.get("error"):
        return HostChange("unknown", "unknown (its store could not be read)")
    if before is not None and not before.get("error"):
        same_releases = before.get("releases") == after.get("releases")
        same_process = (before.get("main_pid"), before.get("started_us")) == (after.get("main_pid"), after.get("started_us"))
        if same_releases and same_process:
            return HostChange("untouched", "untouched")
        before_active = (before.get("active") or {}).get("id")
    else:
        before_active = None
    active = after.get("active") or {}
    newest = after.get("newest")
    if newest and newest["verdict"] in ("bad", "inconclusive") and newest["id"] not in (before or {}).get("releases", []):
        return HostChange("failed", f"FAILED: release {newest['id']} {newest['verdict']} ({newest.get('gate') or 'not ready'}); "
                          + (f"rolled back to {active.get('id')}" if active.get("id") else "no release active"))
    if active.get("id") and active.get("id") == before_active:
        return HostChange("unchanged", f"unchanged: {active['id']} stayed active")
    if active.get("id"):
        return HostChange("deployed", f"deployed: {active['id']} {active.get('verdict')} "
                          f"({active.get('gate') or active.get('verdict_by')})")
    return HostChange("inactive", "no release active")
