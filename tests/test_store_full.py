"""The store's file system full, and a file system remounted read-only mid-switch (issue 50, item 4): small tmpfs
mounts under the test's directory (root only), the switch's host program with systemd and readiness replaced. The
running release keeps serving (nothing restarted), or the boot recovery brings the last good one back; each stop
names the file, the cause and what serves."""

import argparse
import errno
import os
import subprocess

import pytest

from conftest import release_meta
from sglang_deploy.hostside.contract import paths as host_paths
from sglang_deploy.hostside.contract.store import StoreState, Switching
from sglang_deploy.hostside import store as store_module, switch
from sglang_deploy.hostside.recover import recover
from sglang_deploy.hostside.store import Store, atomic_write, content_hash

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")


def mount(path, size="64k", options=""):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}{options}", "tmpfs", str(path)], check=True)
    return path


def remount(path, mode):
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


@pytest.fixture
def mounts(tmp_path):
    made = []
    yield lambda name, **kw: made.append(mount(tmp_path / name, **kw)) or made[-1]
    for path in reversed(made):
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path, leave_pages=0):
    """Fill the file system at path until `leave_pages` pages stay free."""
    stats = os.statvfs(path)
    with open(path / "filler", "wb") as f:
        f.write(b"x" * max(0, (stats.f_bavail - leave_pages) * stats.f_frsize))


@pytest.fixture
def host(tmp_path, mounts, monkeypatch):
    """A store on a small file system (`store`), /etc's unit and environment on another (`etc`), two releases: the
    running one (good) and a new one; systemctl and readiness recorded, not run."""
    store_fs, etc_fs = mounts("store", size="256k"), mounts("etc", size="64k")
    monkeypatch.setattr(host_paths, "STORE_ROOT", str(store_fs))
    original = Store.__init__

    def paths(self, service):
        original(self, service)
        self.unit_path, self.env_path = str(etc_fs / "sglang.service"), str(etc_fs / "env" / "sglang.env")
        self.secrets_path = str(etc_fs / "secrets.yaml")

    monkeypatch.setattr(Store, "__init__", paths)
    store = Store("sglang")
    for release_id, verdict in (("0001-aaaaaaaa", "good"), ("0002-bbbbbbbb", None)):
        unit, env = f"[Service]\nExecStart=/v/{release_id}/bin/sglang\n", f"RELEASE={release_id}\n"
        os.makedirs(store.release_dir(release_id))
        for name, text in (("sglang.service", unit), ("sglang.env", env)):
            with open(os.path.join(store.release_dir(release_id), name), "w") as f:
                f.write(text)
        store.write_meta(release_id, release_meta(id=release_id, content_hash=content_hash(unit, env), verdict=verdict,
                                                  venv="/"))
    from sglang_deploy.hostside.recover import install_files
    install_files(store, "0001-aaaaaaaa")
    store.save_state(StoreState(active="0001-aaaaaaaa", last_good="0001-aaaaaaaa"))
    calls = []
    monkeypatch.setattr(switch, "systemctl", lambda *a: calls.append(a) or subprocess.CompletedProcess(a, 0, "", ""))
    monkeypatch.setattr(switch, "wait_ready", lambda *a, **k: {"ready": True, "stage": "ready", "elapsed_s": 1.0,
                                                               "journal": "", "detail": None})
    monkeypatch.setattr(switch, "RESTARTED", [])
    return store, store_fs, etc_fs, calls


def run_switch(release_id="0002-bbbbbbbb"):
    args = argparse.Namespace(service="sglang", release=release_id, probe_url="http://127.0.0.1:30000", timeout=30,
                              rollback_timeout=30, rollback_timeout_given=False, settle=0, reason="deploy",
                              owner="test", auto_rollback=True, mark_good_on_ready=True, max_auto_rollbacks=3,
                              force=False, gate=False, on_inconclusive="rollback", stop_only=False,
                              mark_previous_bad=False)
    return switch.switch(args)


def installed(store):
    with open(store.unit_path) as f:
        return f.read().split("/v/")[1].split("/")[0]


def test_a_full_store_keeps_the_old_state_whole(host):
    store, store_fs, _, _ = host
    before = open(store.state_path).read()
    fill(store_fs)
    with pytest.raises(OSError) as raised:
        store.save_state(StoreState(active="0002-bbbbbbbb"))
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == store.state_path
    assert open(store.state_path).read() == before
    assert not [name for name in os.listdir(store.root) if ".tmp-" in name]  # no half-written file left


def test_a_full_store_stops_the_switch_before_anything_changes(host, capsys):
    store, store_fs, _, calls = host
    fill(store_fs)
    assert run_switch() == switch.EXIT_WRITE_FAILED
    message = capsys.readouterr().err
    assert "SWITCH TO 0002-bbbbbbbb STOPPED" in message and "No space left on device" in message
    assert "the release that was running keeps serving" in message
    assert installed(store) == "0001-aaaaaaaa" and not calls
    assert store.state().active == "0001-aaaaaaaa" and store.state().switching is None


def test_a_full_store_at_the_state_write_leaves_the_running_release(host, capsys):
    """Room for the lock's file, none for the state's: the switch stops at its first state write."""
    store, store_fs, _, calls = host
    fill(store_fs, leave_pages=1)
    assert run_switch() == switch.EXIT_WRITE_FAILED
    message = capsys.readouterr().err
    assert f"writing {store.state_path} failed: No space left on device" in message
    assert installed(store) == "0001-aaaaaaaa" and not calls and store.state().switching is None


def test_etc_read_only_at_the_unit_write_restarts_nothing_and_the_boot_puts_it_back(host, capsys):
    store, _, etc_fs, calls = host
    remount(etc_fs, "ro")
    assert run_switch() == switch.EXIT_WRITE_FAILED
    message = capsys.readouterr().err
    assert "Read-only file system" in message and "keeps serving" in message and not calls
    assert store.state().switching.to == "0002-bbbbbbbb"  # the switch is recorded as interrupted
    remount(etc_fs, "rw")  # the next boot
    record = recover(store, lambda: None, move_aside=False)
    assert record.action == "rolled back" and installed(store) == "0001-aaaaaaaa"
    assert store.state().switching is None and store.meta("0002-bbbbbbbb").verdict == "interrupted"


def test_store_read_only_after_the_restart_is_recovered_at_boot(host, capsys, monkeypatch):
    """The new release restarted, then the store's file system goes read-only (as errors=remount-ro does it, under
    the switch's open lock file, which a remount by hand refuses: the writes fail as the kernel fails them): its
    commit cannot be written. The message says the new release runs uncommitted; the boot recovery (the store
    writable again) goes back to the last good release."""
    store, store_fs, _, calls = host
    writable = [True]

    def write(path, content, mode, real=store_module.atomic_write):
        if not writable[0] and path.startswith(str(store_fs)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real(path, content, mode)

    def restart_then_read_only(*args):
        calls.append(args)
        writable[0] = writable[0] and args[0] != "restart"
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(store_module, "atomic_write", write)
    monkeypatch.setattr(switch, "atomic_write", write)
    monkeypatch.setattr(switch, "systemctl", restart_then_read_only)
    assert run_switch() == switch.EXIT_WRITE_FAILED
    message = capsys.readouterr().err
    assert "Read-only file system" in message and "restarted on release 0002-bbbbbbbb, which is not committed" in message
    assert installed(store) == "0002-bbbbbbbb" and store.state().switching.to == "0002-bbbbbbbb"
    writable[0] = True  # the next boot
    record = recover(store, lambda: None, move_aside=False)
    assert record.action == "rolled back" and record.restored == "0001-aaaaaaaa"
    assert installed(store) == "0001-aaaaaaaa" and store.state().active == "0001-aaaaaaaa"


def test_the_boot_recovery_on_a_read_only_store_says_so_and_lets_the_server_start(host, capsys, monkeypatch):
    store, store_fs, etc_fs, _ = host
    from sglang_deploy.hostside import recover as recover_module
    store.save_state(store.state().but(switching=Switching(
        to="0002-bbbbbbbb", previous="0001-aaaaaaaa", since="2026-12-06T03:00:00+00:00")))
    atomic_write(store.unit_path, open(os.path.join(store.release_dir("0002-bbbbbbbb"), "sglang.service")).read(), 0o644)
    remount(store_fs, "ro")
    monkeypatch.setattr(recover_module, "systemctl", lambda *a: subprocess.CompletedProcess(a, 0, "", ""))
    assert recover_module.main(["--service", "sglang"]) == 0
    message = capsys.readouterr().err
    assert "boot recovery of sglang FAILED" in message and "Read-only file system" in message
