"""The package as a user installs it: a wheel built from this checkout, installed non-editable into a fresh
virtualenv, used from a directory that is not the checkout (no source tree to fall back on)."""

from __future__ import annotations

import os
import subprocess
import zipfile

import pytest

from conftest import INCIDENT, PROVEN
from testbed import wheel as testbed_wheel

# What the tool reads from its own package at run time (render, the simulator, the host package).
REQUIRED = ["sglang_deploy/templates/sglang.service.j2", "sglang_deploy/templates/sglang-watch.timer.j2",
            "sglang_deploy/templates/secrets.yaml.j2", "sglang_deploy/sim/data/2xa6000-pcie.json",
            "sglang_deploy/releases/0.5.23/options.json",
            "sglang_deploy/releases/0.5.23/classes.json", "sglang_deploy/releases/__init__.py", "sglang_deploy/hostside/store.py",
            "sglang_deploy/hostside/switch.py", "sglang_deploy/hostside/lib/service.py",
            "sglang_deploy/hostside/__init__.py", "sglang_deploy/validate/parser_probe.py",
            "sglang_deploy/hostside/weights/__init__.py", "sglang_deploy/hostside/weights/__main__.py",
            "sglang_deploy/hostside/preflight/__main__.py", "sglang_deploy/hostside/preflight/probe.py",
            "sglang_deploy/validate/__init__.py", "sglang_deploy/tune/controller.py", "sglang_deploy/profile/__init__.py",
            "sglang_deploy/doctor/diagnosis.py", "sglang_deploy/token_map/build.py"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheel")
    wheel = testbed_wheel.build(work)
    testbed_wheel.install(wheel, work / "venv")
    return work, wheel


def test_the_wheel_carries_the_templates_the_simulator_data_and_the_host_package(installed):
    _, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert [path for path in REQUIRED if path not in names] == []
    assert not [name for name in names if "__pycache__" in name or name.startswith(("tests/", "testbed/"))]


def test_check_works_from_the_installed_wheel(installed, tmp_path):
    """On a machine without the validator environment (an empty cache), `check` takes the light path (the
    option table in the wheel) and builds nothing; the verdicts are SGLang's parser's (test_flag_table)."""
    work, _ = installed
    cache = tmp_path / "empty-cache"
    env = {**os.environ, "SGLANG_DEPLOY_CACHE": str(cache)}
    command = [str(work / "venv/bin/sglang-deploy"), "check"]
    site = subprocess.run([str(work / "venv/bin/python"), "-c", "import sglang_deploy; print(sglang_deploy.__file__)"],
                          capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert str(work / "venv") in site  # the installed copy, not this checkout
    good = subprocess.run(command + [str(PROVEN), "--gpus", "2", "--topology", "pcie"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=600, env=env)
    assert good.returncode == 0 and "OK:" in good.stdout and "light" in good.stdout, good.stderr[-2000:]
    assert "skipped: decode-graph-covers-batch" in good.stdout and not (cache / "validators").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text(INCIDENT.read_text().replace("--tp-size: 2", "--tp-size: 3"))
    refused = subprocess.run(command + [str(bad), "--gpus", "2"], capture_output=True, text=True, cwd=tmp_path,
                             timeout=600, env=env)
    assert refused.returncode == 1 and "INVALID" in refused.stderr and "bad.yaml" in refused.stderr, refused.stderr
