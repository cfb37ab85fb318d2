"""roles/fleet_summary.py: releases.py's fleet summary gathers one row per host of a pyinfra run, and the host that
completes the run's set gets every row in inventory order, without pyinfra's state attributes."""

from pyinfra.api import Config, Inventory, State
from pyinfra.context import ctx_state

from roles import fleet_summary


def read_in(names, order, connected=None):
    """A run over an inventory of `names` whose `connected` hosts (default all) pyinfra reached, read in `order`."""
    inventory = Inventory((names, {}))
    state = State(inventory, Config())
    for name in connected or names:
        state.activate_host(inventory.get_host(name))
    with ctx_state.use(state):
        return [fleet_summary.add(name, {"host": name}) for name in order]


def test_the_host_that_completes_the_run_gets_every_row_in_inventory_order():
    first, second, last = read_in(["a", "b", "c"], ["c", "a", "b"])
    assert (first, second) == (None, None)
    assert last == {"a": {"host": "a"}, "b": {"host": "b"}, "c": {"host": "c"}} and list(last) == ["a", "b", "c"]
    assert read_in(["a"], ["a"]) == [{"a": {"host": "a"}}]  # another run starts with no rows of the last one
    # A host pyinfra could not connect to runs no deploy file: the summary is of the hosts it reached.
    assert read_in(["a", "b", "c"], ["c", "a"], connected=["a", "c"])[1] == {"a": {"host": "a"}, "c": {"host": "c"}}
