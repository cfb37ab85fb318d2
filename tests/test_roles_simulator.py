"""roles/simulator.py without a host: the simulator's archive (what travels for each sim_server) and whether
install() sends it, by the digest the DeployState fact found."""

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fakehost import fixture_fact, run_role
from roles import simulator
from sglang_deploy.layout import venv_path
from sglang_deploy.profile import load_profile

PROFILE = load_profile(Path(__file__).resolve().parent.parent / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml")
VENV = venv_path(PROFILE).lstrip("/")


def members(ship) -> dict:
    with tarfile.open(fileobj=io.BytesIO(ship.data)) as archive:
        return {member.name: member for member in archive.getmembers() if member.isfile()}


def text(ship, name: str) -> str:
    with tarfile.open(fileobj=io.BytesIO(ship.data)) as archive:
        return archive.extractfile(name).read().decode()


def test_sglang_server_runs_sglangs_own_cli_with_the_scheduler_plugin():
    ship = simulator.simulator_shipment(PROFILE, "sglang")
    found = members(ship)
    shim = text(ship, f"{VENV}/bin/sglang")
    assert found[f"{VENV}/bin/sglang"].mode == 0o755
    assert shim.startswith(f"#!{simulator.SGLANG_PYTHON}\n") and "from sglang.cli.main import main" in shim
    assert "SIMULATED HOST" in shim and PROFILE.sglang.version in shim
    assert f"{VENV}/lib/sglang-sim/sglang_sim_scheduler-0.dist-info/entry_points.txt" in found
    assert f"{VENV}/lib/sglang-sim/sglang_deploy/validate/flag_table.py" in found
    # the release folders' data and their loader, not the tools that write them (sglang add)
    shipped = {name.split("/sglang_deploy/releases/")[1] for name in found if "/sglang_deploy/releases/" in name}
    assert {"__init__.py", f"{PROFILE.sglang.version}/options.json", f"{PROFILE.sglang.version}/classes.json"} <= shipped
    assert not [name for name in shipped if name.endswith(".py") and name != "__init__.py"]
    assert ship.manifest == f"/{VENV}/.manifest-simulator"


def test_model_server_is_the_model_only_simulator_without_the_plugin():
    ship = simulator.simulator_shipment(PROFILE, "model")
    shim = text(ship, f"{VENV}/bin/sglang")
    assert shim.startswith("#!/usr/bin/python3\n") and "from sglang_sim.server import main" in shim
    assert not [name for name in members(ship) if "dist-info" in name]
    assert ship.digest != simulator.simulator_shipment(PROFILE, "sglang").digest


def test_the_archive_is_the_same_each_time():
    assert simulator.simulator_shipment(PROFILE).digest == simulator.simulator_shipment(PROFILE).digest


def test_an_unknown_server_is_refused():
    with pytest.raises(ValueError, match="sim_server: 'real'; accepted: sglang, model"):
        simulator.simulator_shipment(PROFILE, "real")


def test_install_sends_the_archive_only_when_the_hosts_digest_differs():
    ship = simulator.simulator_shipment(PROFILE, "model")
    assert run_role(simulator.install, profile=PROFILE, installed_digest=ship.digest, sim_server="model") == []
    # the fixture host recorded another simulator's digest: send and unpack
    found = fixture_fact("DeployState", "simulated_with_draft_and_offered")["manifests"]
    (recorded,) = [digest for path, digest in found.items() if path.endswith("/.manifest-simulator")]
    ops = run_role(simulator.install, profile=PROFILE, installed_digest=recorded, sim_server="model")
    assert [op.commands[-2] for op in ops[:1]] == [f"upload {ship.upload_path}"]
    assert ops[1].commands == [f"mkdir -p / && tar -C / --no-same-owner -xf {ship.upload_path} && echo {ship.digest} > "
                               f"{ship.manifest} && rm -f {ship.upload_path}"]


def test_install_refuses_a_launcher_other_than_serve():
    other = PROFILE.model_copy(update={"sglang": PROFILE.sglang.model_copy(update={"launcher": "launch_server"})})
    with pytest.raises(ValueError, match="the simulator implements the 'serve' launcher only"):
        run_role(simulator.install, profile=other, installed_digest=None)


def test_the_shipped_package_files_import_on_their_own(tmp_path):
    """What the simulated host gets of sglang_deploy (the option table, the start data, a token map's size, the GPU
    facts; validate/ and token_map/ with their package files) imports with nothing else of the project beside it: a
    check or a token map rule pulled in by one of them (a package file that imports its siblings) fails here."""
    ship = simulator.simulator_shipment(PROFILE, "model")
    with tarfile.open(fileobj=io.BytesIO(ship.data)) as archive:
        archive.extractall(tmp_path, filter="data")
    lib = tmp_path / VENV / "lib" / "sglang-sim"
    code = ("import sys; import sglang_deploy.validate.flag_table, sglang_deploy.validate.start_feasibility, "
            "sglang_deploy.token_map.size, sglang_deploy.validate.gpu_facts, sglang_sim.hardware, sglang_sim.server; "
            "print(sorted(m for m in sys.modules if m.startswith('sglang_deploy')))")
    result = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(lib)!r}); {code}"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "sglang_deploy.validate.check" not in result.stdout and "sglang_deploy.token_map.size" in result.stdout
