"""The rollout's batches and the fleet summary (sglang_deploy/fleet.py), without hosts."""

import pytest

from conftest import store_report

from sglang_deploy.fleet import FleetError, batch_size_of, host_change, host_summary, inventory_groups, \
    plan_batches, summary_lines

GROUPS = {"fleet": ["a", "b", "c", "d", "e"], "canary": ["a"]}
EVERYONE = ["a", "b", "c", "d", "e"]


def test_canary_first_then_the_rest_in_batches():
    assert plan_batches(GROUPS, EVERYONE, batch_size="2") == [["a"], ["b", "c"], ["d", "e"]]
    assert plan_batches(GROUPS, EVERYONE, batch_size="1") == [["a"], ["b"], ["c"], ["d"], ["e"]]
    assert plan_batches(GROUPS, EVERYONE, batch_size="50%") == [["a"], ["b", "c"], ["d", "e"]]
    assert plan_batches(GROUPS, EVERYONE, batch_size="100%") == [["a"], ["b", "c", "d", "e"]]
    # Without a fleet group every host of the inventory is the fleet.
    assert plan_batches({"canary": ["c"], "gpu": EVERYONE}, EVERYONE, batch_size="3") == [["c"], ["a", "b", "d"], ["e"]]


@pytest.mark.parametrize("groups, message", [
    ({"fleet": EVERYONE}, "no group 'canary'"),
    ({"fleet": EVERYONE, "canary": []}, "no group 'canary'"),
])
def test_a_rollout_needs_a_canary(groups, message):
    with pytest.raises(FleetError, match=message):
        plan_batches(groups, EVERYONE)


def test_a_named_fleet_group_must_exist():
    with pytest.raises(FleetError, match="no group 'gpus'; groups found: canary, fleet"):
        plan_batches(GROUPS, EVERYONE, fleet_group="gpus")


@pytest.mark.parametrize("value", ["0", "-1", "two", "0%", "150%", "%"])
def test_bad_batch_sizes_are_refused(value):
    with pytest.raises(FleetError, match="--batch-size"):
        batch_size_of(value, 4)


def test_inventory_groups_are_read_as_pyinfra_reads_them(tmp_path):
    inventory = tmp_path / "inv.py"
    inventory.write_text("hosts = [('h1', {'ssh_port': 1}), ('h2', {})]\ncanary = [hosts[0]]\n"
                         "extra = ['h3']\n_private = ['x']\nnumbers = [1, 2]\n")
    everyone, groups = inventory_groups(inventory)
    assert everyone == ["h1", "h2", "h3"]
    assert groups == {"hosts": ["h1", "h2"], "canary": ["h1"], "extra": ["h3"]}
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit('the fleet is not set up')\n")
    with pytest.raises(FleetError, match="broken.py: the fleet is not set up"):
        inventory_groups(broken)


def store(active, releases, pid=100, started="5"):
    return store_report(*releases, active=active, last_good=active,
                        running={"main_pid": pid, "started_monotonic_us": started})


def release(id_, verdict, created, gate=None, events=()):
    return {"id": id_, "verdict": verdict, "created": created, "gate": gate and {**gate, "at": created},
            "profile": "p", "history": [{"at": at, "event": event} for at, event in events]}


BASE = release("0001-aaaa", "good", "t1", events=[("t1", "activated (deploy)")])


def str_change(before, after):
    return str(host_change(before, after))


def test_host_change_tells_untouched_deployed_and_rolled_back():
    before = host_summary(store("0001-aaaa", [BASE]))
    assert str_change(before, host_summary(store("0001-aaaa", [BASE]))) == "untouched"
    # Same releases but restarted: not untouched.
    assert str_change(before, host_summary(store("0001-aaaa", [BASE], pid=200))) == "unchanged: 0001-aaaa stayed active"
    new = release("0002-bbbb", "good", "t2", gate={"verdict": "pass", "summary": "pass 55 tok/s"},
                  events=[("t2", "activated (deploy)")])
    assert str_change(before, host_summary(store("0002-bbbb", [BASE, new], pid=300))) == \
        "deployed: 0002-bbbb good (pass 55 tok/s)"
    bad = release("0002-bbbb", "bad", "t2", gate={"verdict": "fail", "summary": "fail"}, events=[("t3", "gate fail: x")])
    back = release("0001-aaaa", "good", "t1", events=[("t1", "activated (deploy)"), ("t4", "activated (automatic rollback)")])
    after = host_summary(store("0001-aaaa", [back, bad], pid=400))
    assert after["newest"]["id"] == "0002-bbbb"  # the rollback's activation does not make the baseline newest
    assert str_change(before, after) == "FAILED: release 0002-bbbb bad (fail); rolled back to 0001-aaaa"
    # The rollout passes a batch by the outcome, not by the words.
    outcomes = [host_change(before, a) for a in (host_summary(store("0001-aaaa", [BASE])), after,
                                                 host_summary(store("0002-bbbb", [BASE, new], pid=300)), None)]
    assert [(c.outcome, c.passed) for c in outcomes] == [("untouched", False), ("failed", False), ("deployed", True),
                                                         ("unknown", False)]
    lines = summary_lines({"h1": after, "h2": {"error": "unreachable"}})
    assert lines[1].split()[:4] == ["h1", "0001-aaaa", "good", "-"] and "0002-bbbb bad: fail" in lines[1]
    assert lines[2].startswith("h2") and "unreachable" in lines[2]
