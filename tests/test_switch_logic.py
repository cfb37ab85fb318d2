"""The switch's decisions without a host (hostside/switch.py): what the gate's baseline note says about weights,
and an automatic rollback to a release whose weights changed on disk."""

import json
import types

import pytest

from conftest import release_meta, snapshot_mark
from sglang_deploy.hostside.contract import paths as host_paths
from sglang_deploy.hostside.contract.release import SnapshotMark
from sglang_deploy.hostside.contract.store import StoreState
from sglang_deploy.hostside import store as store_module, switch

A = snapshot_mark(source="hf://org/m@" + "a" * 40, manifest_sha256="1" * 64)
B = snapshot_mark(source="hf://org/m@" + "b" * 40, manifest_sha256="2" * 64)


def test_the_baseline_note_names_a_weights_change():
    a, b = SnapshotMark.from_dict(A), SnapshotMark.from_dict(B)  # meta.json's weights, as the switch reads them
    assert switch.baseline_weights_note(a, a.but()) is None and switch.baseline_weights_note(None, None) is None
    assert switch.baseline_weights_note(b, a) == (f"the weights changed: {a.source} (manifest 111111111111) -> "
                                                  f"{b.source} (manifest 222222222222)")
    assert switch.baseline_weights_note(a, None).startswith("the weights changed: unmanaged weights -> hf://org/m@")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
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
    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    store = store_module.Store("sglang")
    for number, (release_id, verdict) in enumerate((("0001-aaaaaaaa", "good"), ("0002-bbbbbbbb", target_verdict),
                                                     ("0003-cccccccc", "good"))):
        (tmp_path / "sglang" / "releases" / release_id).mkdir(parents=True)
        store.write_meta(release_id, release_meta(id=release_id, verdict=verdict, history=[
            {"at": f"2026-12-01T0{number}:00:00+00:00", "event": "activated"}]))
    # The new release ran on this rank (marked good once its process ran); rank 0 then failed its gate.
    store.save_state(StoreState(active="0003-cccccccc", last_good="0003-cccccccc", auto_rollbacks_in_row=0))
    monkeypatch.setattr(switch, "activate", lambda *a, **k: {"ready": True, "stage": "generate", "elapsed_s": 1.0})
    moved = []  # following rank 0 back is a rollback: what the service user wrote is moved aside (test_forensics...)
    monkeypatch.setattr(switch.forensics, "before_start", lambda *a: moved.append(a[1:]) or None)
    args = types.SimpleNamespace(release="0002-bbbbbbbb", reason="rollback (rank 0 failed)", auto_rollback=False,
                                 max_auto_rollbacks=1000, force=True, probe_url="http://127.0.0.1:1", timeout=10,
                                 settle=0, gate=False, mark_good_on_ready=False, mark_previous_bad=True, stop_only=False,
                                 on_inconclusive="keep", owner="test")
    assert switch.switch_locked(store, args) == 0
    assert store.meta("0003-cccccccc").verdict == "bad"
    assert store.meta("0003-cccccccc").history[-1].event == "marked bad (rollback (rank 0 failed))"
    state = store.state()
    assert state.active == "0002-bbbbbbbb" and state.last_good == last_good
    assert moved == [("0003-cccccccc", "0002-bbbbbbbb", "rollback")]


def test_a_server_argv_that_is_not_utf8_is_read_not_raised():
    import json

    from sglang_deploy.hostside.lib.service import cmdline_matches, parse_cmdline

    argv = parse_cmdline(b"/usr/bin/python3\0-I\0sglang::\xff\xfescheduler\0")
    assert argv == ["/usr/bin/python3", "-I", "sglang::\\xff\\xfescheduler"]
    assert json.dumps(argv) and not cmdline_matches(argv, ["/opt/v/bin/sglang", "serve"])


# --- nothing the service user wrote outlives a rollback (security review 3, finding 6) ------------------------------

@pytest.fixture
def service_dirs(tmp_path, monkeypatch):
    """/var/lib/sglang and /var/cache/sglang of a tmp root as a compromised service user ("nobody") leaves them,
    a JIT cache the profile put elsewhere, and directories that are not the service user's."""
    import os
    import pwd

    nobody = pwd.getpwnam("nobody")
    root = tmp_path / "root"
    planted = {"var/lib/sglang/.nccl.conf": "NCCL_NET_PLUGIN=/var/lib/sglang/evil.so\n",
               "var/lib/sglang/.cache/flashinfer/evil.so": "ELF",
               "var/cache/sglang/triton/abc/add_one.so": "ELF",
               "var/cache/sglang/sglang-deploy-preflight/k.json": '{"error": null}',
               "srv/nv-cache/ComputeCache/index": "x",  # CUDA_CACHE_PATH outside the two directories
               "srv/models/config.json": "{}"}  # root's: never moved
    for name, text in planted.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for path in [p for p in root.rglob("*") if "models" not in str(p)]:
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    (root / "var/cache/sglang-link").symlink_to(root / "srv/models")
    os.lchown(root / "var/cache/sglang-link", nobody.pw_uid, nobody.pw_gid)
    monkeypatch.setattr(switch.forensics, "ROOTS", (str(root / "var/lib"), str(root / "var/cache")))
    env = (f"HOME={root}/var/lib/sglang\nTRITON_CACHE_DIR={root}/var/cache/sglang/triton\n"
           f"CUDA_CACHE_PATH=\"{root}/srv/nv-cache\"\nHF_HOME={root}/srv/models\nXDG_CACHE_HOME={root}/var/cache/sglang-link\n")
    return root, env


def test_move_aside_takes_what_the_service_user_wrote_into_the_store(tmp_path, service_dirs):
    import os
    import stat

    from sglang_deploy.hostside.lib.forensics import move_aside

    root, env = service_dirs
    moved = move_aside("sglang", "nobody", env, str(tmp_path / "store"), "auto-rollback", release="0002-bbbbbbbb",
                       stamp="20261202T000000Z")
    assert moved["dir"] == str(tmp_path / "store" / "forensics" / "20261202T000000Z-auto-rollback")
    assert sorted(moved["moved"].values()) == [str(root / "srv/nv-cache"), str(root / "var/cache/sglang"),
                                               str(root / "var/lib/sglang")]
    assert not (root / "var/lib/sglang").exists() and not (root / "var/cache/sglang").exists()
    assert (root / "srv/models/config.json").exists() and (root / "var/cache/sglang-link").is_symlink()
    kept = tmp_path / "store" / "forensics" / "20261202T000000Z-auto-rollback"
    assert stat.S_IMODE(os.stat(kept.parent).st_mode) == stat.S_IMODE(os.stat(kept).st_mode) == 0o700
    assert (kept / str(root / "var/lib/sglang").strip("/").replace("/", "__") / ".nccl.conf").exists()
    assert json.loads((kept / "moved.json").read_text())["release"] == "0002-bbbbbbbb"
    again = move_aside("sglang", "nobody", env, str(tmp_path / "store"), "auto-rollback", stamp="20261202T000000Z")
    assert again == {"dir": None, "moved": {}}  # nothing left: no empty forensics directory


@pytest.mark.parametrize("user", ["root", "no-such-user-38"])
def test_move_aside_never_takes_roots_or_an_unknown_users_directories(tmp_path, service_dirs, user):
    from sglang_deploy.hostside.lib.forensics import move_aside

    root, env = service_dirs
    assert move_aside("sglang", user, env, str(tmp_path / "store"), "rollback") == {"dir": None, "moved": {}}
    assert (root / "var/lib/sglang/.nccl.conf").exists() and not (tmp_path / "store").exists()


def test_across_file_systems_nothing_is_copied_it_moves_within_its_own(tmp_path):
    """Security review 4, R1: the service's directory on another file system than the store (here /dev/shm's tmpfs,
    the store on the disk) with a FIFO and a sparse file of 2 GiB the service user left: moved by a rename into a
    root-only holder beside it, never copied (a copy raised on the FIFO after the stop, and wrote the sparse file
    out in full)."""
    import os
    import pwd
    import shutil
    import stat
    import tempfile

    from sglang_deploy.hostside.lib.forensics import move_aside, movable_problem

    nobody = pwd.getpwnam("nobody")
    other = tempfile.mkdtemp(dir="/dev/shm")  # root's 0700: the parent a holder needs
    os.chmod(other, 0o755)
    try:
        cache = os.path.join(other, "sglang")
        os.makedirs(cache)
        os.mkfifo(os.path.join(cache, "trap"))
        with open(os.path.join(cache, "big"), "wb") as handle:
            handle.truncate(2 << 30)
        for path in (cache, os.path.join(cache, "trap"), os.path.join(cache, "big")):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        store = tmp_path / "store"
        store.mkdir()
        assert os.stat(other).st_dev != os.stat(store).st_dev
        assert movable_problem([cache], str(store / "forensics")) is None
        moved = move_aside("sglang", "nobody", f"SGLANG_CACHE_DIR={cache}\n", str(store), "auto-rollback",
                           stamp="20261206T000000Z", roots=())
        (where,) = moved["moved"]
        assert moved["moved"][where] == cache and not os.path.exists(cache)
        assert os.path.dirname(where) == os.path.join(other, ".sglang.forensics")
        holder = os.lstat(os.path.dirname(where))
        assert holder.st_uid == 0 and stat.S_IMODE(holder.st_mode) == 0o700
        assert stat.S_ISFIFO(os.lstat(os.path.join(where, "trap")).st_mode)  # moved, not opened
        assert os.stat(os.path.join(where, "big")).st_blocks == 0  # still sparse: nothing written out
        assert json.loads((store / "forensics" / "20261206T000000Z-auto-rollback" / "moved.json").read_text())[
            "moved"] == {where: cache}
    finally:
        shutil.rmtree(other, ignore_errors=True)


def test_a_mount_point_is_refused_before_the_stop(tmp_path):
    from sglang_deploy.hostside.lib.forensics import movable_problem

    assert "is a mount point" in movable_problem(["/dev/shm"], str(tmp_path / "forensics"))


def test_old_forensics_directories_are_pruned(tmp_path):
    import os

    from sglang_deploy.hostside.lib.forensics import KEEP, prune

    for day in range(1, 7):
        (tmp_path / f"2026120{day}T000000Z-rollback" / "var__cache__sglang").mkdir(parents=True)
    (tmp_path / "2026120" "9T000000Z-rollback").symlink_to("/etc")  # a link is removed, never followed
    removed = prune(str(tmp_path))
    assert len(removed) == 7 - KEEP and os.path.exists("/etc/passwd")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20261205T000000Z-rollback", "20261206T000000Z-rollback",
                                                          "20261209T000000Z-rollback"][-KEEP:]


def unit_and_env(store, release_id, root):
    release = store.release_dir(release_id)
    with open(f"{release}/sglang.service", "w") as handle:
        handle.write("[Service]\nUser=nobody\n")
    with open(f"{release}/sglang.env", "w") as handle:
        handle.write(f"HOME={root}/var/lib/sglang\n")


def test_the_automatic_rollback_moves_aside_before_the_good_release_starts(store, service_dirs, monkeypatch):
    """After a failed gate: the service stops, the directories move, then the last good release starts, with the
    cold-start timeout; the switch's output names the forensics directory."""
    root, _ = service_dirs
    for release_id in ("0001-aaaaaaaa", "0002-bbbbbbbb"):
        unit_and_env(store, release_id, root)
    store.write_meta("0001-aaaaaaaa", release_meta(id="0001-aaaaaaaa", verdict="good"))
    calls = []
    monkeypatch.setattr(switch.forensics, "systemctl", lambda *a: calls.append(("systemctl",) + a))
    monkeypatch.setattr(switch, "activate", lambda *a: calls.append(("activate", a[1], a[3],
                                                                     (root / "var/lib/sglang").exists()))
                        or {"ready": True, "stage": "generate", "elapsed_s": 1.0})
    state = StoreState(active="0002-bbbbbbbb", last_good="0001-aaaaaaaa", auto_rollbacks_in_row=0)
    args = types.SimpleNamespace(release="0002-bbbbbbbb", auto_rollback=True, probe_url="http://127.0.0.1:1",
                                 rollback_timeout=10, rollback_timeout_given=False, timeout=10, settle=0)
    code = switch.fail_and_roll_back(store, state, store.meta("0002-bbbbbbbb"), {
        "release": "0002-bbbbbbbb", "readiness": {"ready": True, "stage": "generate", "elapsed_s": 1},
        "gate": switch.GateResult(verdict="fail", reasons=["x"], inconclusive=[], rows=[], config_problems=[])},
        args, "gate fail: x")
    assert code == switch.EXIT_FAILED_ROLLED_BACK
    assert calls == [("systemctl", "stop", "sglang.service"),
                     ("activate", "0001-aaaaaaaa", switch.forensics.COLD_START_TIMEOUT_S, False)]
    document = json.loads(open(f"{store.root}/last_switch.json").read())
    assert document["forensics"].startswith(f"{store.root}/forensics/") and document["forensics"].endswith(
        "-auto-rollback")
    outcome = switch.SwitchOutcome.load(store.root)
    assert f"moved aside for forensics: {document['forensics']}" in switch.describe(outcome)


def test_a_manual_rollback_moves_aside_what_the_left_release_wrote(store, service_dirs, monkeypatch):
    root, _ = service_dirs
    for release_id in ("0001-aaaaaaaa", "0002-bbbbbbbb"):
        unit_and_env(store, release_id, root)
    store.save_state(StoreState(active="0002-bbbbbbbb", last_good="0001-aaaaaaaa", auto_rollbacks_in_row=0))
    monkeypatch.setattr(switch.forensics, "systemctl", lambda *a: None)
    monkeypatch.setattr(switch.weights_manifest, "release_problem", lambda meta: None)
    monkeypatch.setattr(switch, "activate", lambda *a: {"ready": True, "stage": "generate", "elapsed_s": 1.0})
    args = types.SimpleNamespace(release="0001-aaaaaaaa", reason="rollback", auto_rollback=True,
                                 max_auto_rollbacks=3, force=True, probe_url="http://127.0.0.1:1", timeout=10,
                                 settle=0, gate=False, mark_good_on_ready=False, mark_previous_bad=False,
                                 stop_only=False, on_inconclusive="keep", owner="test")
    assert switch.switch_locked(store, args) == 0
    document = json.loads(open(f"{store.root}/last_switch.json").read())
    assert document["forensics"].endswith("-rollback") and not (root / "var/lib/sglang").exists()
    moved = json.loads(open(f"{document['forensics']}/moved.json").read())
    assert moved["release"] == "0002-bbbbbbbb" and moved["user"] == "nobody"


@pytest.mark.parametrize("failure", ["move", "refused"])
def test_a_forensics_failure_still_starts_the_good_release(store, service_dirs, monkeypatch, failure):
    """Security review 4, R1: whatever the forensics meet (a move that raises after the stop, or a directory that
    can only be copied, refused before the stop), the automatic rollback still starts the last good release."""
    root, _ = service_dirs
    for release_id in ("0001-aaaaaaaa", "0002-bbbbbbbb"):
        unit_and_env(store, release_id, root)
    store.write_meta("0001-aaaaaaaa", release_meta(id="0001-aaaaaaaa", verdict="good"))
    calls = []
    monkeypatch.setattr(switch.forensics, "systemctl", lambda *a: calls.append(("systemctl",) + a))
    if failure == "move":
        def broken(*a, **k):
            raise shutil_error()
        monkeypatch.setattr(switch.forensics, "move_aside", broken)
    else:
        monkeypatch.setattr(switch.forensics, "movable_problem", lambda *a: "/var/cache/sglang is a mount point")
    monkeypatch.setattr(switch, "activate", lambda *a: calls.append(("activate", a[1]))
                        or {"ready": True, "stage": "generate", "elapsed_s": 1.0})
    state = StoreState(active="0002-bbbbbbbb", last_good="0001-aaaaaaaa", auto_rollbacks_in_row=0)
    args = types.SimpleNamespace(release="0002-bbbbbbbb", auto_rollback=True, probe_url="http://127.0.0.1:1",
                                 rollback_timeout=10, rollback_timeout_given=False, timeout=10, settle=0)
    code = switch.fail_and_roll_back(store, state, store.meta("0002-bbbbbbbb"), {
        "release": "0002-bbbbbbbb", "readiness": {"ready": True, "stage": "generate", "elapsed_s": 1},
        "gate": switch.GateResult(verdict="fail", reasons=["x"], inconclusive=[], rows=[], config_problems=[])},
        args, "gate fail: x")
    assert code == switch.EXIT_FAILED_ROLLED_BACK
    assert calls[-1] == ("activate", "0001-aaaaaaaa")
    assert (("systemctl", "stop", "sglang.service") in calls) == (failure == "move")  # refused: before the stop
    assert store.state().switching is None and store.state().active == "0001-aaaaaaaa"


def shutil_error():
    import shutil

    return shutil.Error("[('/var/cache/sglang/trap', '...', '`/var/cache/sglang/trap` is a named pipe')]")
