"""The fleet summary of one pyinfra run (releases.py). pyinfra runs a deploy file once per host: each host adds its
row here, and the host that completes the run's set gets every row, in inventory order.

The rows are kept per run, by the State pyinfra runs the file under (pyinfra.context, which pyinfra itself sets for
a run), in this module, not in attributes of pyinfra's state.
"""

from __future__ import annotations

import weakref

from pyinfra.context import ctx_state

_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # State -> {host name: row}


def add(name: str, row: dict) -> dict[str, dict] | None:
    """Record one host's row; every targeted host's row, in inventory order, once the last one is in (else None)."""
    run = ctx_state.get()
    rows = _RUNS.setdefault(run, {})
    rows[name] = row
    active = {h.name for h in run.inventory.get_active_hosts()}
    hosts = [h.name for h in run.inventory if h.name in active]  # in inventory order
    return {host: rows[host] for host in hosts} if set(hosts) <= set(rows) else None
