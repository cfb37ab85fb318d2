"""The switch's decisions without a host (hostside/switch.py): what the gate's baseline note says about weights,
and an automatic rollback to a release whose weights changed on disk."""

import json
import types

import pytest

from conftest import release_meta
from sglang_deploy.hostside import store as store_module, switch
from sglang_deploy.hostside.documents import StoreState

A = {"source": "hf://org/m@" + "a" * 40, "manifest_sha256": "1" * 64}
B = {"source": "hf://org/m@" + "b" * 40, "manifest_sha256": "2" * 64}


def test_the_baseline_note_names_a_weights_change():
    assert switch.baseline_weights_note(A, dict(A)) is None and switch.baseline_weights_note(None, None) is None
    assert switch.baseline_weights_note(B, A) == (f"the weights changed: {A['source']} (manifest 111111111111) -> "
                                                  f"{B['source']} (manifest 222222222222)")
    assert switch.baseline_weights_note(A, None).startswith("the weights changed: unmanaged weights -> hf://org/m@")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "STORE_ROOT", str(tmp_path))
    store = store_module.Store("sglang")
    for release_id, weights in (("0001-aaaaaaaa", {**A, "manifest": str(tmp_path / "gone.json"), "path": "/x"}),
                                ("0002-bbbbbbbb", None)):
        (tmp_path / "sglang" / "releases" / release_id).mkdir(parents=True)
        store.write_meta(release_id, release_meta(id=release_id, verdict="good" if release_id.startswith("0001") else None,
                                                  weights=weights))
    return store


def test_no_automatic_rollback_onto_weights_that_are_not_the_verified_ones(store, monkeypatch):
    """The last good release's snapshot is gone (or changed): its server is not started on it; the switch says why."""
    started = []
    monkeypatch.setattr(switch, "activate", lambda *a, **k: started.append(a) or {"ready": True})
    state = StoreState(active="0001-aaaaaaaa", last_good="0001-aaaaaaaa", auto_rollbacks_in_row=0)
    args = types.SimpleNamespace(release="0002-bbbbbbbb", auto_rollback=True, probe_url="http://127.0.0.1:1",
                                 rollback_timeout=10, rollback_timeout_given=False, timeout=10, settle=0)
    code = switch.fail_and_roll_back(store, state, store.meta("0002-bbbbbbbb"), {"release": "0002-bbbbbbbb",
                                     "readiness": {"ready": False, "stage": "health", "elapsed_s": 1}}, args,
                                     "failed to start")
    document = json.loads(open(f"{store.root}/last_switch.json").read())
    assert (code, started) == (switch.EXIT_ROLLBACK_FAILED, [])
    assert document["rollback_readiness"]["stage"] == "weights"
    assert "not rolled back to 0001-aaaaaaaa: the manifest" in document["rollback_readiness"]["detail"]
    assert store.state().active is None and store.state().auto_rollbacks_in_row == 1


@pytest.mark.parametrize("target_verdict, last_good", [("good", "0002-bbbbbbbb"), (None, "0001-aaaaaaaa")])
def test_a_rank_following_rank_0_back_marks_the_release_bad_and_keeps_a_good_last_good(tmp_path, monkeypatch,
                                                                                         target_verdict, last_good):
    monkeypatch.setattr(store_module, "STORE_ROOT", str(tmp_path))
    monkeypatch.setattr(switch, "STORE_ROOT", str(tmp_path))
    store = store_module.Store("sglang")
    for number, (release_id, verdict) in enumerate((("0001-aaaaaaaa", "good"), ("0002-bbbbbbbb", target_verdict),
                                                     ("0003-cccccccc", "good"))):
        (tmp_path / "sglang" / "releases" / release_id).mkdir(parents=True)
        store.write_meta(release_id, release_meta(id=release_id, verdict=verdict, history=[
            {"at": f"2026-12-01T0{number}:00:00+00:00", "event": "activated"}]))
    # The new release ran on this rank (marked good once its process ran); rank 0 then failed its gate.
    store.save_state(StoreState(active="0003-cccccccc", last_good="0003-cccccccc", auto_rollbacks_in_row=0))
    monkeypatch.setattr(switch, "activate", lambda *a, **k: {"ready": True, "stage": "generate", "elapsed_s": 1.0})
    args = types.SimpleNamespace(release="0002-bbbbbbbb", reason="rollback (rank 0 failed)", auto_rollback=False,
                                 max_auto_rollbacks=1000, force=True, probe_url="http://127.0.0.1:1", timeout=10,
                                 settle=0, gate=False, mark_good_on_ready=False, mark_previous_bad=True, stop_only=False,
                                 on_inconclusive="keep", owner="test")
    assert switch.switch_locked(store, args) == 0
    assert store.meta("0003-cccccccc").verdict == "bad"
    assert store.meta("0003-cccccccc").history[-1]["event"] == "marked bad (rollback (rank 0 failed))"
    state = store.state()
    assert state.active == "0002-bbbbbbbb" and state.last_good == last_good


def test_a_server_argv_that_is_not_utf8_is_read_not_raised():
    import json

    from sglang_deploy.hostside.service import cmdline_matches, parse_cmdline

    argv = parse_cmdline(b"/usr/bin/python3\0-I\0sglang::\xff\xfescheduler\0")
    assert argv == ["/usr/bin/python3", "-I", "sglang::\\xff\\xfescheduler"]
    assert json.dumps(argv) and not cmdline_matches(argv, ["/opt/v/bin/sglang", "serve"])
