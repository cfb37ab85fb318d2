"""roles/release.py without a host: the preflight's GPU count, the switch's command line, and the
commands of the host-programs, stage, switch and prune operations for a fake host's facts."""

import json
import shlex

import pytest
from pyinfra.facts.files import FileContents

from conftest import gate_document, release_meta
from fakehost import run_role
from sglang_deploy.switch_options import SwitchOptions
from roles import release
from sglang_deploy.hostside.contract.files import ReleaseFiles
from sglang_deploy.hostside.contract.release import Resolution
from sglang_deploy.layout import host_package
from sglang_deploy.release_plan import controller_identity
from sglang_deploy.roofline import release_inputs


@pytest.mark.parametrize("resolved, nnodes, gpus", [
    ({"tp_size": 2}, 1, 2),
    ({"tp_size": 2, "pp_size": 2}, 1, 4),
    ({"tp_size": 4}, 2, 2),  # a 2-node server: each node runs its share
    ({"tp_size": 1}, 2, 1),  # never 0
    ({"tp_size": None, "pp_size": None}, 1, 1),
    ({}, 1, 1),
    (None, 1, 1),
    ({"tp_size": "2"}, 0, 2),  # nnodes 0 is taken as 1
])
def test_preflight_gpus(resolved, nnodes, gpus):
    assert release.preflight_gpus(resolved, nnodes) == gpus


DEPLOY = SwitchOptions(service="sglang", release_id="r2", probe_url="http://127.0.0.1:30000", timeout=600,
                       reason="deploy")


def switch_argv(**options):
    command = release.switch_command(DEPLOY.but(**options))
    prefix = "cd /opt/sglang-deploy/lib && "
    assert command.startswith(prefix)
    return shlex.split(command[len(prefix):])


def test_switch_command_defaults():
    argv = switch_argv()
    assert argv == ["python3", "-m", "hostside.switch", "--service", "sglang", "--release", "r2",
                    "--probe-url", "http://127.0.0.1:30000", "--timeout", "600", "--reason", "deploy",
                    "--owner", f"{controller_identity()} (deploy)", "--max-auto-rollbacks", "3", "--auto-rollback"]


def test_switch_command_options():
    argv = switch_argv(gate=True, on_inconclusive="keep", force=True, mark_good=True, auto_rollback=False,
                       mark_previous_bad=True, stop_only=True)
    assert "--auto-rollback" not in argv
    assert argv[argv.index("--max-auto-rollbacks") + 2:] == [
        "--mark-good-on-ready", "--force", "--gate", "--on-inconclusive", "keep", "--mark-previous-bad", "--stop-only"]


# --- operations: facts in, commands out --------------------------------------------------------------------

def test_host_programs_are_sent_only_when_the_hosts_manifest_differs():
    ship = host_package()
    assert run_role(release.install_programs, installed_digest=ship.digest) == []
    # without the DeployState's answer the role reads the manifest itself
    assert run_role(release.install_programs, facts={FileContents: [ship.digest]}) == []
    ops = run_role(release.install_programs, installed_digest="0" * 64)
    archive, unpack = ops
    assert archive.commands[-2:] == [f"upload {ship.upload_path}", f"chmod 600 {ship.upload_path}"]
    # the old package goes whole (a module removed here must not linger there), the manifest records the digest
    assert unpack.commands[0] == "rm -rf /opt/sglang-deploy/lib/hostside"
    assert f"echo {ship.digest} > /opt/sglang-deploy/lib/.manifest" in unpack.commands[1]


RESOLUTION = {"sglang_version": "0.5.23", "argv": ["sglang", "serve", "--tp-size", "2"], "resolved": {"tp_size": 2}}


def test_stage_writes_meta_json_last_and_the_environment_0600(tmp_path):
    """One upload, one command: the archive holds every file with its mode; meta.json is unpacked after the rest and
    after the venv's packages.json; the archive goes with the same command. Unpacked here by the same commands."""
    import io
    import subprocess
    import tarfile

    release_files = ReleaseFiles(unit="[Unit]\n", env="A=1\n", profile="{}", gate_config=gate_document(),
                                 resolution=Resolution.from_dict(RESOLUTION), meta=release_meta(venv="/opt/v"),
                                 roofline=release_inputs({"tp_size": 2}, "/m", "x"))
    ops = run_role(release.stage, service="sglang", release_id="r2", release_files=release_files)
    directory, upload = "/var/lib/sglang-deploy/sglang/releases/r2", "/var/lib/sglang-deploy/.upload-release-sglang-r2.tar"
    assert [name.split(" | ")[1] for name in ops.names] == [
        "Release files r2 (sglang.service, sglang.env, profile.json, gate-config.json, resolved.json, roofline.json, "
        "meta.json)", "Release directory r2: unpacked, meta.json last"]
    assert ops[0].commands[-2:] == [f"upload {upload}", f"chmod 600 {upload}"]
    (command,) = ops[1].commands
    steps = command.split(" && ")
    assert steps[0] == f"install -d -m 755 {directory}" and steps[-1] == f"rm -f {upload}"
    assert [step.split(" -xf ")[1] for step in steps if " -xf " in step] == [
        f"{upload} --exclude meta.json", f"{upload} meta.json"]
    assert steps.index(next(s for s in steps if "packages.json" in s)) == 2  # between the two
    # the archive, unpacked by the same tar: every file, its content and its mode
    data = release.shipment.archive([(name, content.encode(), mode) for name, content, mode in release_files.members()])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert {member.name: member.mode for member in tar.getmembers()} == {
            name: mode for name, _, mode in release_files.members()}
    (tmp_path / "a.tar").write_bytes(data)
    out = tmp_path / "r2"
    out.mkdir()
    subprocess.run(["tar", "-C", str(out), "--no-same-owner", "-xf", str(tmp_path / "a.tar"), "--exclude", "meta.json"],
                   check=True)
    assert not (out / "meta.json").exists() and (out / "sglang.env").read_text() == "A=1\n"
    assert oct((out / "sglang.env").stat().st_mode & 0o777) == "0o600"
    subprocess.run(["tar", "-C", str(out), "--no-same-owner", "-xf", str(tmp_path / "a.tar"), "meta.json"], check=True)
    assert (out / "meta.json").read_text() == release_files.meta.dump()


def test_stage_without_venv_or_roofline():
    ops = run_role(release.stage, service="sglang", release_id="r2", release_files=ReleaseFiles(
        unit="", env="", profile="{}", gate_config=gate_document(), resolution=Resolution.from_dict(RESOLUTION),
        meta=release_meta(venv="")))
    assert "roofline.json" not in ops.names[0] and "packages.json" not in ops[1].commands[0]


def test_switch_then_report():
    ops = run_role(release.switch, options=DEPLOY.but(gate=True))
    assert ops.names == ["Release: switch | Switch sglang to release r2 (deploy): restart, readiness, gate, automatic "
                         "rollback on failure", "Release: switch | Report"]
    assert ops[0].commands == [release.switch_command(DEPLOY.but(gate=True))]
    assert ops[1].commands == ["call _report"]


def test_prune():
    assert run_role(release.prune, service="sglang", keep=5).commands == [
        "cd /opt/sglang-deploy/lib && python3 -m hostside.store prune --service sglang --keep 5 --prune-venvs",
        "cd /opt/sglang-deploy/lib && python3 -m hostside.weights prune"]


def test_preflight_inputs_travel_base64_and_are_removed_by_the_same_command():
    unit, env = "[Service]\nExecStart=/opt/v/bin/sglang serve --tp-size 2\n", "NCCL_CUMEM_ENABLE=0\n"
    ops = run_role(release.preflight, service="sglang", release_id="r2", unit=unit, env=env,
                   interpreter="/opt/v/bin/python", gpus=2, variant_args=[],
                   exec_start=["/opt/v/bin/sglang", "serve", "--tp-size", "2"], resolved={"tp_size": 2})
    (command,) = ops[0].commands
    directory = "/run/sglang-deploy/preflight/sglang-r2"
    assert command.startswith(f"install -d -m 755 {directory} && (umask 077; echo ")
    assert f"chmod 600 {directory}/sglang.env" in command and "NCCL_CUMEM_ENABLE" not in command
    assert command.endswith(f"; rc=$?; rm -rf {directory}; exit $rc; }}")
    assert ops.names[1] == "Release: preflight | Preflight report"
    assert json.dumps(["--tp-size", "2"]) == json.dumps(release.preflight_inputs(
        ["/opt/v/bin/sglang", "serve", "--tp-size", "2"], None)[0])


def test_a_tunes_temporary_release_is_the_deploys_set_of_files_written_by_the_host(tmp_path, monkeypatch):
    """ReleaseFiles is the one spelling of a release's files: the deploy's stage writes its members, the tune's queue
    item carries them by name and the host's runner writes those with the same modes, meta.json last; a file
    missing from a queue item, or one no release has, is named and nothing is written."""
    from types import SimpleNamespace

    from sglang_deploy.hostside.lib import tune_runner
    from sglang_deploy.hostside.contract import paths as host_paths
    from sglang_deploy.hostside.contract.document import DocumentError

    files = ReleaseFiles(unit="[Unit]\n", env="A=1\n", profile="{}", gate_config=gate_document(),
                         resolution=Resolution.from_dict(RESOLUTION), meta=release_meta())
    assert [name for name, _, _ in files.members()] == ["sglang.service", "sglang.env", "profile.json",
                                                        "gate-config.json", "resolved.json", "meta.json"]
    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    session = SimpleNamespace(store=tune_runner.Store("sglang"), created=[])
    item = SimpleNamespace(seq=3, release_id="0004-0123abcd", files=files.by_name())
    assert tune_runner.Session.stage(session, item) == "0004-0123abcd"
    directory = tmp_path / "sglang" / "releases" / "0004-0123abcd"
    assert {path.name: (path.read_text(), path.stat().st_mode & 0o777) for path in directory.iterdir()} == {
        name: (content, mode) for name, content, mode in files.members()}
    for broken, message in (({k: v for k, v in files.by_name().items() if k != "sglang.env"}, "sglang.env is missing"),
                            ({**files.by_name(), "notes.txt": ""}, "notes.txt is not a release's file")):
        with pytest.raises(DocumentError, match=f"queue item 3's files: {message}"):
            tune_runner.Session.stage(session, SimpleNamespace(seq=3, release_id="0005-0123abcd", files=broken))
    assert not (tmp_path / "sglang" / "releases" / "0005-0123abcd" / "meta.json").exists()
