"""Host-side programs against corrupted store files, a closed stderr, and the listener check's parsing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import bench_measurement, release_meta
from sglang_deploy.hostside.contract import paths as host_paths
from sglang_deploy.hostside.contract.gate import GateResult
from sglang_deploy.hostside.lib import client, listener
from sglang_deploy.hostside import store as store_module, switch

PACKAGE_PARENT = Path(switch.__file__).resolve().parent.parent


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    store = store_module.Store("sglang")
    for release_id in ("0001-aaaaaaaa", "0002-bbbbbbbb"):
        os.makedirs(store.release_dir(release_id))
        Path(store.release_dir(release_id), "meta.json").write_text(release_meta(id=release_id).dump())
    return store


def test_a_corrupted_meta_json_is_set_aside_and_named(store):
    meta = Path(store.release_dir("0002-bbbbbbbb"), "meta.json")
    meta.write_text('{"id": "0002-bbbb')  # a write cut short
    ids = store.ids()
    aside = [p.name for p in meta.parent.iterdir()]
    assert (ids, meta.exists(), any(n.startswith("meta.json.corrupt-") for n in aside),
            f"{meta} is corrupted" in store.problems[0]) == (["0001-aaaaaaaa"], False, True, True), store.problems


def test_a_corrupted_state_json_does_not_wedge_the_store(store):
    Path(store.state_path).write_text("\x00\x00\x00")
    state = store.state()
    assert (state.active, os.path.exists(store.state_path), f"{store.state_path} is corrupted" in store.problems[0]
            ) == (None, False, True), store.problems


def test_atomic_write_leaves_the_mode_and_no_temporary_file(tmp_path):
    target = tmp_path / "state.json"
    store_module.atomic_write(str(target), "{}\n", 0o600)
    assert (target.read_text(), oct(target.stat().st_mode & 0o777), sorted(p.name for p in tmp_path.iterdir())) == (
        "{}\n", "0o600", ["state.json"])


SWITCH_LIKE = r"""
import subprocess, sys
sys.path.insert(0, {package_parent!r})
from hostside import switch
shield = switch.StderrShield({log!r}) if {shielded} else None
child = "import sys\nfor i in range(3000): print('bench progress', i, file=sys.stderr, flush=True)"
code = subprocess.run([sys.executable, "-c", child]).returncode
print("gate progress", file=sys.stderr, flush=True)
if shield:
    shield.close()
sys.exit(code)
"""


@pytest.mark.parametrize("shielded, expected_code", [(True, 0), (False, 1)])
def test_a_dropped_controller_connection_does_not_fail_the_programs(tmp_path, shielded, expected_code):
    """The controller's SSH connection is the program's stderr: closed here before anything is written.
    Unshielded, the bench dies of BrokenPipeError (what rolled good releases back); shielded, it runs to the
    end and its progress is in the switch log."""
    log = tmp_path / "switch.log"
    program = SWITCH_LIKE.format(package_parent=str(PACKAGE_PARENT), log=str(log), shielded=shielded)
    process = subprocess.Popen([sys.executable, "-c", program], stderr=subprocess.PIPE)
    process.stderr.close()  # the connection drops
    code = process.wait(timeout=60)
    logged = log.read_text() if log.exists() else ""
    assert (code, "bench progress 2999" in logged) == (expected_code, shielded)


def test_listening_sockets_are_read_from_proc_net_tables(tmp_path):
    table = tmp_path / "tcp"
    table.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:76F0 00000000:0000 0A 00000000:00000000 00:00000000 00000000  65534        0 4242 1\n"
        "   1: 0100007F:76F0 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  65534        0 4343 1\n"
        "   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000      0        0 4444 1\n")
    assert listener.listening_inodes(30448, tables=(str(table),)) == {"4242": 65534}


@pytest.mark.parametrize("url, ok", [("http://127.0.0.1:30000", True), ("http://[::1]:30000", True),
                                     ("http://10.0.0.5:30000", False), ("http://evil.example:30000", False),
                                     ("http://127.0.0.1:30000\n", False)])
def test_the_host_sends_the_key_only_to_loopback(url, ok):
    import argparse

    try:
        client.loopback_url(url)
        accepted = True
    except argparse.ArgumentTypeError:
        accepted = False
    assert accepted == ok


def test_the_gpu_probe_runs_as_the_service_user_with_the_releases_nccl_settings():
    from sglang_deploy.hostside import doctor_collect

    env = 'HOME=/var/lib/sglang\nNCCL_PROTO=Simple\nNCCL_DEBUG_FILE=/etc/passwd\nNCCL_NET_PLUGIN=/tmp/x.so\nNCCL_X="a b"\n'
    nccl = doctor_collect.probe_nccl_env(env)
    command = doctor_collect.probe_command("/venv/bin/python", "sglang", "/var/lib/sglang", nccl, False)
    assert (command[:7], nccl) == (["runuser", "-u", "sglang", "--", "env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin"],
                                   {"NCCL_PROTO": "Simple", "NCCL_X": "a b"})


def test_ct129_checks_host_keys_strictly_and_can_use_a_sudo_user(monkeypatch):
    import runpy

    inventory = PACKAGE_PARENT.parent / "inventory" / "ct129.py"
    monkeypatch.setenv("SGLANG_DEPLOY_CT129_USER", "deploy")
    data = runpy.run_path(str(inventory))["ct129"][0][1]
    assert (data["ssh_strict_host_key_checking"], Path(data["ssh_known_hosts_file"]).exists(), data["ssh_user"],
            data["_sudo"], data["ssh_forward_agent"]) == ("yes", True, "deploy", True, False)


@pytest.mark.parametrize("facts, expected", [
    ({"gpus": [{}], "container": "lxc", "nvidia_uvm": False}, "missing in this container"),
    ({"gpus": [{}], "container": "none", "nvidia_uvm": False}, "provisioning loads nvidia-uvm at boot"),
    ({"gpus": [{}], "container": "lxc", "nvidia_uvm": True}, None),
    ({"gpus": [], "container": "none", "nvidia_uvm": False}, None),
])
def test_a_missing_nvidia_uvm_is_reported(facts, expected):
    from sglang_deploy.hostfacts import uvm_warning

    warning = uvm_warning(facts)
    assert (expected in warning) if expected else warning is None


def test_a_fact_runs_the_host_modules_it_sends_inline(tmp_path):
    """A fact sends a host module with the host modules it imports (roles/facts.py inline_host: the host may have
    nothing installed yet); its answer is the installed package's, `python3 -m hostside.<module>` from HOST_LIB."""
    from roles.facts import host_modules, inline_host

    contract = sorted(f"contract/{path.stem}" for path in (Path(__file__).resolve().parents[1] / "sglang_deploy/hostside/contract").glob("*.py"))
    assert {"contract/answers", "contract/document", "contract/release", "contract/session", "contract/store",
            "contract/gate", "contract/findings", "contract/files", "contract/switch", "contract/history",
            "contract/paths", "contract/__init__"} <= set(contract)  # the contract ships whole, whatever one reads
    assert host_modules("store") == sorted(contract + ["lib/__init__", "lib/service", "store"])
    assert {"weights/__init__", "weights/__main__", "weights/fetch", "weights/manifest", "weights/prune"} <= \
        set(host_modules("weights"))  # a sub-package: run as its __main__, with the modules it imports
    carried = subprocess.run(["sh", "-c", inline_host("weights", "--help")], cwd=tmp_path, capture_output=True, text=True)
    assert carried.returncode == 0 and "verify" in carried.stdout, carried.stderr
    (tmp_path / "sglang" / "releases" / "0001-0123abcd").mkdir(parents=True)
    (tmp_path / "sglang" / "releases" / "0001-0123abcd" / "meta.json").write_text(release_meta().dump())
    (tmp_path / "sglang" / "releases" / "0001-0123abcd" / "gate-result.json").write_text(GateResult(  # its measurement:
        verdict="pass", reasons=[], inconclusive=[], rows=[], config_problems=[],  # a module imported when read
        measurement=bench_measurement([50.0, 52.0, 51.0])).dump())
    env = dict(os.environ, SGLANG_DEPLOY_STORE=str(tmp_path))
    inline = subprocess.run(["sh", "-c", inline_host("store", "history", "--service", "sglang")], cwd=tmp_path,
                            env=env, capture_output=True, text=True)
    installed = subprocess.run(["python3", "-m", "hostside.store", "history", "--service", "sglang"],
                               cwd=PACKAGE_PARENT, env=env, capture_output=True, text=True)
    assert inline.returncode == installed.returncode == 0, inline.stderr + installed.stderr
    assert json.loads(inline.stdout) == json.loads(installed.stdout)
    from sglang_deploy.hostside.contract.history import StoreHistory

    assert StoreHistory.loads(inline.stdout).releases[0].id == "0001-0123abcd"
    assert StoreHistory.loads(inline.stdout).releases[0].gate.decode_tok_s == 51.0


def test_a_fact_runs_the_installed_package_only_when_it_is_this_checkouts(tmp_path):
    """inline_host runs the installed host package (compiled once, no source compiled per run) when HOST_LIB/.manifest
    holds this checkout's digest, and carries the program otherwise. Here HOST_LIB is a directory of the test's own,
    holding the package unpacked from the same archive the deploy ships, with one planted line that tells which copy
    answered."""
    import io
    import tarfile

    from roles.facts import inline_host
    from sglang_deploy.layout import HOST_LIB, host_package

    package = host_package()
    lib = tmp_path / "lib"
    with tarfile.open(fileobj=io.BytesIO(package.data)) as archive:
        archive.extractall(lib, filter="data")
    store_py = lib / "hostside" / "store.py"
    store_py.write_text(store_py.read_text().replace('if __name__ == "__main__":',
                                                     'print("installed copy")\nif __name__ == "__main__":'))
    (tmp_path / "sglang").mkdir()
    command = inline_host("store", "state", "--service", "sglang").replace(HOST_LIB, str(lib))
    env = dict(os.environ, SGLANG_DEPLOY_STORE=str(tmp_path))

    def answer(manifest: str) -> str:
        (lib / ".manifest").write_text(manifest)
        result = subprocess.run(["sh", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert answer(package.digest + "\n").startswith("installed copy")
    for other in ("0" * 64 + "\n", ""):  # another version installed, or a manifest without a digest
        carried = answer(other)
        assert "installed copy" not in carried and json.loads(carried)["service"] == "sglang"


def test_the_host_programs_are_the_modules_with_a_main_block_and_no_other_runs():
    """hostside.PROGRAMS names every module of the host package that has a `__main__` block (a sub-package's
    __main__.py: the package), and nothing else; the library (lib/, contract/) has none. layout.host_program_argv
    runs a program only: a library module is refused on the controller, before any host sees the command."""
    import re

    from sglang_deploy.hostside import PROGRAMS
    from sglang_deploy.layout import HOSTSIDE, host_program_argv

    mains = set()
    for path in HOSTSIDE.rglob("*.py"):
        if path.name == "__main__.py" or re.search(r'^if __name__ == "__main__":', path.read_text(), re.M):
            parts = path.relative_to(HOSTSIDE).with_suffix("").parts
            mains.add(".".join(parts[:-1] if parts[-1] == "__main__" else parts))
    assert mains == set(PROGRAMS)
    assert not [name for name in PROGRAMS if name.split(".")[0] in ("lib", "contract")]
    assert host_program_argv("watch", "--service", "s")[1:3] == ["-m", "hostside.watch"]
    with pytest.raises(ValueError, match="hostside.lib.gate is not a host program"):
        host_program_argv("lib.gate")
