"""The boot recovery (hostside/recover.py) on a store in a temporary directory: an interrupted switch is rolled back
to the last good release, unless its release was committed (good) before the cut; the installed files are put back;
each decision is recorded. On a booted host: tests/test_powercut_sim.py."""

import os

import pytest

from conftest import release_meta
from sglang_deploy.hostside.contract import paths as host_paths
from sglang_deploy.hostside.contract.store import StoreState, Switching
from sglang_deploy.hostside import store as store_module
from sglang_deploy.hostside.recover import plan, recover
from sglang_deploy.hostside.store import Lock, Store, content_hash, holder


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path / "store"))
    s = Store("sglang")
    s.unit_path = str(tmp_path / "etc" / "systemd" / "sglang.service")
    s.env_path = str(tmp_path / "etc" / "sglang-deploy" / "sglang.env")
    os.makedirs(os.path.dirname(s.unit_path))
    return s


def release(store, release_id, verdict=None, venv="/"):
    """A staged release whose unit's ExecStart names it; its meta.json written last, as staging does."""
    unit, env = f"[Service]\nExecStart=/v/{release_id}/bin/sglang serve\n", f"RELEASE={release_id}\n"
    directory = store.release_dir(release_id)
    os.makedirs(directory)
    for name, text in (("sglang.service", unit), ("sglang.env", env)):
        with open(os.path.join(directory, name), "w") as f:
            f.write(text)
    store.write_meta(release_id, release_meta(id=release_id, content_hash=content_hash(unit, env), verdict=verdict,
                                              venv=venv))


def installed(store):
    with open(store.unit_path) as f:
        return f.read().split("/v/")[1].split("/")[0]


def install(store, release_id):
    from sglang_deploy.hostside.recover import install_files
    install_files(store, release_id)


def reloads():
    calls = []
    return calls, lambda: calls.append("daemon-reload")


def test_cut_after_the_new_unit_was_written_rolls_back_to_the_last_good_release(store):
    release(store, "0001-aaaaaaaa", "good")
    release(store, "0002-bbbbbbbb")
    install(store, "0002-bbbbbbbb")  # the cut came after the switch installed the pending release's unit
    store.save_state(StoreState(active="0001-aaaaaaaa", last_good="0001-aaaaaaaa", switching=Switching(
        to="0002-bbbbbbbb", previous="0001-aaaaaaaa", since="2026-12-06T03:00:00+00:00", reason="deploy")))
    calls, reload = reloads()
    record = recover(store, reload, move_aside=False)
    assert record.action == "rolled back" and record.restored == "0001-aaaaaaaa"
    assert record.interrupted == "0002-bbbbbbbb" and "before 0002-bbbbbbbb passed its gate" in record.reason
    assert installed(store) == "0001-aaaaaaaa" and calls == ["daemon-reload"]
    assert oct(os.stat(store.env_path).st_mode & 0o777) == "0o600"
    state = store.state()
    assert state.switching is None and state.active == state.last_good == "0001-aaaaaaaa"
    assert state.recovered.action == "rolled back"
    pending = store.meta("0002-bbbbbbbb")
    assert pending.verdict == "interrupted" and pending.history[-1].event.startswith("interrupted (boot recovery")
    assert store.meta("0001-aaaaaaaa").history[-1].event == "activated (boot recovery: rolled back)"
    assert recover(store, reload) is None and calls == ["daemon-reload"]  # the next boot: nothing to do


def test_a_release_that_passed_its_gate_before_the_cut_stays(store):
    """The switch marks the release good, then clears `switching`: a cut in between commits it at boot."""
    release(store, "0001-aaaaaaaa", "good")
    release(store, "0002-bbbbbbbb", "good")
    install(store, "0002-bbbbbbbb")
    store.save_state(StoreState(active="0001-aaaaaaaa", last_good="0001-aaaaaaaa", switching=Switching(
        to="0002-bbbbbbbb", previous="0001-aaaaaaaa", since="2026-12-06T03:00:00+00:00", reason="deploy")))
    calls, reload = reloads()
    record = recover(store, reload)
    assert record.action == "committed" and record.restored == "0002-bbbbbbbb" and calls == []
    assert installed(store) == "0002-bbbbbbbb" and store.state().active == store.state().last_good == "0002-bbbbbbbb"


def test_cut_during_the_automatic_rollback_keeps_the_failed_verdict(store):
    release(store, "0001-aaaaaaaa", "good")
    release(store, "0002-bbbbbbbb", "bad")  # the gate failed; its rollback's restart was cut
    install(store, "0001-aaaaaaaa")
    store.save_state(StoreState(active="0001-aaaaaaaa", last_good="0001-aaaaaaaa", switching=Switching(
        to="0002-bbbbbbbb", previous="0001-aaaaaaaa", since="2026-12-06T03:00:00+00:00", reason="deploy")))
    calls, reload = reloads()
    record = recover(store, reload, move_aside=False)
    assert record.action == "rolled back" and calls == []  # the good release's unit was already in place
    assert store.meta("0002-bbbbbbbb").verdict == "bad" and store.state().switching is None


def test_cut_after_staging_before_the_unit_changed(store):
    release(store, "0001-aaaaaaaa", "good")
    release(store, "0002-bbbbbbbb")
    install(store, "0001-aaaaaaaa")
    store.save_state(StoreState(active="0001-aaaaaaaa", last_good="0001-aaaaaaaa", switching=Switching(
        to="0002-bbbbbbbb", previous="0001-aaaaaaaa", since="2026-12-06T03:00:00+00:00")))
    calls, reload = reloads()
    assert recover(store, reload, move_aside=False).restored == "0001-aaaaaaaa" and calls == []
    assert installed(store) == "0001-aaaaaaaa"


def test_installed_files_that_are_not_the_active_releases_are_put_back(store):
    release(store, "0001-aaaaaaaa", "good")
    release(store, "0002-bbbbbbbb", "bad")
    install(store, "0002-bbbbbbbb")
    store.save_state(StoreState(active="0001-aaaaaaaa", last_good="0001-aaaaaaaa"))
    calls, reload = reloads()
    record = recover(store, reload)
    assert record.action == "reinstalled" and installed(store) == "0001-aaaaaaaa" and calls == ["daemon-reload"]


def test_a_first_deploy_cut_has_nothing_to_go_back_to_and_says_so(store):
    release(store, "0001-aaaaaaaa")
    install(store, "0001-aaaaaaaa")
    store.save_state(StoreState(switching=Switching(to="0001-aaaaaaaa", previous=None, since="2026-12-06T03:00:00+00:00")))
    record = recover(store, reloads()[1])
    assert record.action == "nothing to restore" and "no good release is retained" in record.reason
    assert store.meta("0001-aaaaaaaa").verdict == "interrupted" and store.state().switching is None


def test_a_missing_virtualenv_is_named(store, tmp_path):
    release(store, "0001-aaaaaaaa", "good", venv=str(tmp_path / "gone"))
    release(store, "0002-bbbbbbbb")
    install(store, "0002-bbbbbbbb")
    store.save_state(StoreState(active="0001-aaaaaaaa", last_good="0001-aaaaaaaa", switching=Switching(
        to="0002-bbbbbbbb", previous="0001-aaaaaaaa", since="2026-12-06T03:00:00+00:00")))
    record = recover(store, reloads()[1], move_aside=False)
    assert "virtualenv" in record.reason and "is missing" in record.reason


def test_consistent_store_plans_nothing(store):
    release(store, "0001-aaaaaaaa", "good")
    install(store, "0001-aaaaaaaa")
    store.save_state(StoreState(active="0001-aaaaaaaa", last_good="0001-aaaaaaaa"))
    assert plan(store, store.state())[0] is None


def test_a_lock_file_of_an_earlier_boot_names_no_holder(store, monkeypatch):
    with Lock(store, "deploy"):
        info = holder(os.path.join(store.root, "lock.json"))
        assert info.owner == "deploy" and info.boot_id == store_module.boot_id()
        monkeypatch.setattr(store_module, "boot_id", lambda: "another-boot")
        assert holder(os.path.join(store.root, "lock.json")).owner == "unknown"


def test_the_recovery_is_listed_and_its_unit_runs_before_the_server(store):
    from conftest import PROVEN, store_report
    from sglang_deploy.profile import load_profile
    from sglang_deploy.release_plan import listing
    from sglang_deploy.render import parse_unit, render_recover

    release(store, "0001-aaaaaaaa", "good")
    release(store, "0002-bbbbbbbb")
    install(store, "0002-bbbbbbbb")
    store.save_state(StoreState(active="0001-aaaaaaaa", last_good="0001-aaaaaaaa", switching=Switching(
        to="0002-bbbbbbbb", previous="0001-aaaaaaaa", since="2026-12-06T03:00:00+00:00", reason="deploy")))
    recover(store, reloads()[1], move_aside=False)
    report = store_report(*(store.meta(i) for i in store.ids()), active="0001-aaaaaaaa", last_good="0001-aaaaaaaa")
    report = report.but(state=store.state())
    lines = listing(report)
    assert any(line.startswith("boot recovery ") and "rolled back" in line and "0002-bbbbbbbb" in line
               for line in lines)
    assert any("0002-bbbbbbbb" in line and "interrupted" in line for line in lines)
    unit = {(section, key): value for section, key, value in parse_unit(render_recover(load_profile(PROVEN)).service)}
    assert unit[("Unit", "Before")] == "sglang.service" and unit[("Service", "Type")] == "oneshot"
    assert unit[("Install", "WantedBy")] == "sglang.service multi-user.target"
    # the service's unit, not the profile's: another profile of the service renders the same bytes
    other = load_profile(PROVEN.parent / "qwen3.6-27b-mtp1-2xa6000.yaml")
    assert other.service.name == "sglang" and render_recover(other).service == render_recover(load_profile(PROVEN)).service


def test_the_perf_watch_shows_the_last_recovery():
    from sglang_deploy.hostside.contract.store import Recovery
    from sglang_deploy.hostside.watch import textfile

    record = Recovery(at="2026-12-06T03:00:00+00:00", boot_id="b", reason="r", interrupted="0002-bbbbbbbb",
                      restored="0001-aaaaaaaa", action="rolled back")
    text = textfile("sglang", "0001-aaaaaaaa", [], "pass", 1.0, recovered=record)
    assert ('sglang_deploy_watch_boot_recovery_timestamp_seconds{service="sglang",release="0001-aaaaaaaa",'
            'action="rolled back",interrupted="0002-bbbbbbbb"} 1796526000.0') in text
    assert "boot_recovery" not in textfile("sglang", "0001-aaaaaaaa", [], "pass", 1.0)
