"""Provisioning against a bare Debian container (systemd-nspawn, real SSH) and a local signed apt
repository standing in for NVIDIA's (tests/aptrepo.py, served on 127.0.0.1).

The container plays a Proxmox LXC container: the NVIDIA kernel module belongs to its host, and what
the container sees in /proc/driver/nvidia/version is set per test (SimHost.set_kernel_module).
The tests run in order and share the container, as successive deploys to one host would.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from aptrepo import (DRIVER_PIN, DRIVER_SIBLINGS, HOLDS, AptRepo, driver_packages, installed_versions, nccl_package,
                     provisioning_packages)
from conftest import CONTROLLER, PROVEN, REPO, TEST_BARE_MACHINE, TEST_BARE_SSH_PORT, simhost_available

pytestmark = pytest.mark.simhost


class BareHost:
    def __init__(self, state_dir: Path, repo: AptRepo, url: str):
        from testbed.simhost import SimHost

        self.host = SimHost(state_dir=state_dir, ssh_port=TEST_BARE_SSH_PORT, machine=TEST_BARE_MACHINE,
                            simulated=False)
        state_dir.mkdir(parents=True, exist_ok=True)
        self.inventory = state_dir / "inventory.py"
        key = state_dir / "api_key"  # a deploy needs a key (or `auth: none` in the profile)
        key.write_text("sk-bare-host-key-0123456789\n")
        key.chmod(0o600)
        data = {
            **self.host.ssh_data(),
            "profile": str(PROVEN),
            "api_key_file": str(key),
            **repo.host_data(url),
        }
        self.inventory.write_text(f"bare = [('ct129-bare', {data!r})]\n")

    def provision(self, *data: str, python_env: bool = False) -> subprocess.CompletedProcess:
        args = [arg for item in data for arg in ("--data", item)]
        if not python_env:
            args += ["--data", "skip_python_env=true"]
        return subprocess.run([*CONTROLLER, "-m", "pyinfra", "-y", str(self.inventory), "provision.py", *args],
                              cwd=REPO, capture_output=True, text=True, timeout=300)

    def sh(self, command: str) -> str:
        result = self.host.ssh(command, check=False)
        assert result.returncode == 0, f"{command!r} failed on the bare host: {result.stderr}"
        return result.stdout

    def installed(self, *packages: str) -> dict[str, str]:
        return installed_versions(self.sh, *packages)

    def dpkg_log_lines(self) -> int:
        return int(self.sh("cat /var/log/dpkg.log 2>/dev/null | wc -l").strip())


def output(result) -> str:
    return result.stdout + result.stderr


def grand_total(result) -> list[str]:
    """pyinfra's results row: operations, changed, errors, unchanged."""
    return next(line for line in output(result).splitlines() if "Grand total" in line).split()[2:]


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    reason = simhost_available() or (None if all(map(shutil.which, ("gpg", "dpkg-deb", "nsenter"))) else "needs gpg, dpkg-deb, nsenter")
    if reason:
        if os.environ.get("SGLANG_DEPLOY_REQUIRE_SIMHOST") == "1":
            pytest.fail(f"the bare test host is required but unavailable: {reason}")
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("bare")
    repo = AptRepo(directory / "apt")
    # The driver's packages carry the real relations (tests/fixtures/apt/): libcuda1 (= V) needs nvidia-alternative (= V)
    # and the rest of its source at V, so installing anything but the repository's newest build needs the source pin.
    repo.publish(provisioning_packages())
    host = BareHost(directory / "host", repo, repo.serve())
    host.repo = repo
    host.host.up(fresh=True)
    try:
        # Only the loopback repository: no test reaches Debian's mirrors.
        host.sh("mv /etc/apt/sources.list /etc/apt/sources.list.disabled")
        yield host
    finally:
        host.host.down()
        repo.close()
        subprocess.run(["rm", "-rf", str(host.host.rootfs)], check=False)


def test_first_run_installs_second_changes_nothing(bare):
    bare.host.set_kernel_module("580.95.05")
    first = bare.provision("nccl_version=2.28.3")
    assert first.returncode == 0, output(first)[-3000:]
    assert bare.installed("libcuda1", "libnvidia-ml1", "nvidia-smi", "cuda-toolkit-13-0", "libnccl2") == {
        "libcuda1": "580.95.05-1", "libnvidia-ml1": "580.95.05-1", "nvidia-smi": "580.95.05-1",
        "cuda-toolkit-13-0": "13.0.88-1", "libnccl2": "2.28.3-1+cuda13.0"}
    siblings = ("nvidia-alternative", "libnvidia-ptxjitcompiler1", "libnvidia-pkcs11-openssl3", "nvidia-legacy-check")
    assert bare.installed(*siblings) == {name: "580.95.05-1" for name in siblings}
    # Never a kernel module in a container; the repository the role configured is the signed one.
    assert "dkms" not in bare.sh("dpkg -l") and "cuda-drivers" not in bare.sh("dpkg -l")
    assert "release 13.0" in bare.sh("/usr/local/cuda/bin/nvcc --version")
    sources = bare.sh("cat /etc/apt/sources.list.d/nvidia-cuda.sources")
    assert "Signed-By: /usr/share/keyrings/nvidia-cuda.asc" in sources and "/debian12/x86_64/" in sources
    # apt keeps user space at the host module's version and NCCL at its pin, even through `apt upgrade`.
    holds = bare.sh(f"cat {HOLDS}")
    assert "Package: libcuda1\nPin: version 580.95.05-*\nPin-Priority: 1001" in holds
    assert bare.sh(f"cat {DRIVER_PIN}") == "Package: src:nvidia-graphics-drivers\nPin: version 580.95.05-*\nPin-Priority: 1001\n\n"
    assert "Package: libnccl2\nPin: version 2.28.3-1+cuda13.0" in holds

    dpkg_before = bare.dpkg_log_lines()
    second = bare.provision("nccl_version=2.28.3")
    assert second.returncode == 0, output(second)[-3000:]
    operations, changed, errors, unchanged = grand_total(second)
    assert (changed, errors, unchanged) == ("-", "-", operations), output(second)[-3000:]
    assert bare.dpkg_log_lines() == dpkg_before  # nothing reinstalled
    assert "driver: ok: NVIDIA driver 580.95.05" in output(second)


def test_nccl_pin_bump_upgrades(bare):
    bare.repo.publish([nccl_package("2.28.9", "13.0")])  # a new NCCL appears upstream
    result = bare.provision("nccl_version=2.28.9")
    assert result.returncode == 0, output(result)[-3000:]
    assert "libnccl2 2.28.3-1+cuda13.0 -> 2.28.9-1+cuda13.0" in output(result)
    assert bare.installed("libnccl2") == {"libnccl2": "2.28.9-1+cuda13.0"}
    assert " upgrade libnccl2:" in bare.sh("grep ' upgrade ' /var/log/dpkg.log")
    assert "Pin: version 2.28.9-1+cuda13.0" in bare.sh(f"cat {HOLDS}")


def test_user_space_follows_the_host_kernel_module(bare):
    """The Proxmox host's module changes: the container's libraries, and every package of their source, must match it
    exactly, whatever the packaging revision, up or down, newest in the repository or not."""
    siblings = DRIVER_SIBLINGS
    bare.repo.publish(driver_packages("580.82.07", revision="2"))
    bare.host.set_kernel_module("580.82.07")  # older than the repository's newest (580.95.05)
    result = bare.provision("nccl_version=2.28.9")
    assert result.returncode == 0, output(result)[-3000:]
    assert bare.installed(*siblings) == {name: "580.82.07-2" for name in siblings}
    # A host driver upgrade to a build newer than any the container has seen: the next provisioning follows it.
    bare.repo.publish(driver_packages("580.105.08", template="new"))
    bare.host.set_kernel_module("580.105.08")
    result = bare.provision("nccl_version=2.28.9")
    assert result.returncode == 0, output(result)[-3000:]
    assert "user-space driver 580.82.07 -> 580.105.08" in output(result)
    assert bare.installed(*siblings) == {name: "580.105.08-1" for name in siblings}
    assert "Pin: version 580.105.08-*" in bare.sh(f"cat {DRIVER_PIN}")
    bare.host.set_kernel_module("580.65.06")
    result = bare.provision("nccl_version=2.28.9")
    assert result.returncode == 0, output(result)[-3000:]
    assert "user-space driver 580.105.08 -> 580.65.06" in output(result)
    assert bare.installed(*siblings) == {name: "580.65.06-1" for name in siblings}
    assert bare.sh("ls /usr/lib/*/libcuda.so.5*").strip().endswith("libcuda.so.580.65.06")


def test_mismatch_in_verify_mode_names_both_versions_and_changes_nothing(bare):
    bare.host.set_kernel_module("580.95.05")
    before = bare.sh(f"dpkg-query -W; cat {HOLDS}")
    result = bare.provision("nccl_version=2.28.9", "provision_mode=verify")
    assert result.returncode != 0
    assert ("user-space driver 580.65.06 does not match the kernel module 580.95.05" in output(result)
            and "nothing was changed" in output(result)), output(result)[-3000:]
    assert bare.sh(f"dpkg-query -W; cat {HOLDS}") == before


def test_host_module_missing_from_the_repository_fails_naming_both(bare):
    bare.host.set_kernel_module("580.126.01")
    before = bare.sh("dpkg-query -W")
    result = bare.provision("nccl_version=2.28.9")
    assert result.returncode != 0
    assert ("libcuda1 580.126.01-* is not in the repository" in output(result)
            and "the kernel module is 580.126.01, user space here is 580.65.06" in output(result)
            and "--no-kernel-module" in output(result)), output(result)[-3000:]
    assert bare.sh("dpkg-query -W") == before
    assert "Pin: version 580.65.06-*" in bare.sh(f"cat {DRIVER_PIN}")  # the pin is untouched too


def test_old_or_missing_host_driver_is_refused_before_any_change(bare):
    before = bare.sh(f"dpkg-query -W; cat {HOLDS}; cat /etc/apt/sources.list.d/nvidia-cuda.sources")
    bare.host.set_kernel_module("570.86.10")
    old = bare.provision("nccl_version=2.28.9")
    assert old.returncode != 0
    assert ("driver 570.86.10 is older than R580, the minimum for CUDA 13" in output(old)
            and "upgrade the driver on the Proxmox host" in output(old)), output(old)[-3000:]
    bare.host.set_kernel_module(None)
    missing = bare.provision("nccl_version=2.28.9")
    assert missing.returncode != 0 and "install it on the Proxmox host" in output(missing), output(missing)[-3000:]
    assert bare.sh(f"dpkg-query -W; cat {HOLDS}; cat /etc/apt/sources.list.d/nvidia-cuda.sources") == before


def build_wheel(directory: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel (stands in for the real sglang wheel and its dependency tree)."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'__version__ = "{version}"\n',
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: sglang-deploy-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data.encode()).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()) + f"{dist_info}/RECORD,,\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in {**files, f"{dist_info}/RECORD": record}.items():
            archive.writestr(path, data)
    return wheel


def test_python_env_from_a_wheelhouse_offline_and_idempotent(bare, tmp_path):
    from sglang_deploy.layout import venv_path
    from sglang_deploy.profile import load_profile

    bare.host.set_kernel_module("580.65.06")
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    build_wheel(wheelhouse, "sglang", "0.5.23")
    venv = venv_path(load_profile(PROVEN))
    assert venv.startswith("/opt/sglang-deploy/venvs/sglang-0.5.23-")
    first = bare.provision("nccl_version=2.28.9", f"wheelhouse={wheelhouse}", python_env=True)
    assert first.returncode == 0, output(first)[-3000:]
    assert bare.sh(f"{venv}/bin/python -c 'import sglang; print(sglang.__version__)'").strip() == "0.5.23"
    # Installed from the uploaded wheelhouse (pip ran with --no-index), not from an index.
    assert "Generator: sglang-deploy-tests" in bare.sh(f"cat {venv}/lib/python3*/site-packages/sglang-0.5.23.dist-info/WHEEL")
    assert bare.sh("ls /opt/sglang-deploy/wheelhouse/sglang-0.5.23/").split() == ["sglang-0.5.23-py3-none-any.whl"]

    second = bare.provision("nccl_version=2.28.9", f"wheelhouse={wheelhouse}", python_env=True)
    assert second.returncode == 0, output(second)[-3000:]
    operations, changed, errors, unchanged = grand_total(second)
    assert (changed, errors, unchanged) == ("-", "-", operations), output(second)[-3000:]
    assert f"python env: {venv} has SGLang 0.5.23" in output(second)


def test_python_env_prefers_uv_when_the_host_has_it(bare, tmp_path):
    from shutil import copy2

    from sglang_deploy.layout import venv_path
    from sglang_deploy.profile import load_profile

    uv = Path(sys.executable).parent / "uv"  # from the test extra; the same binary a host would have
    if not uv.exists():
        pytest.skip("uv is not installed in this venv (pip install -e '.[test]')")
    bare.host.set_kernel_module("580.65.06")
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    build_wheel(wheelhouse, "sglang", "0.5.23")
    venv = venv_path(load_profile(PROVEN))
    bare.sh(f"rm -rf {venv}")
    copy2(uv, bare.host.rootfs / "usr/local/bin/uv")
    try:
        first = bare.provision("nccl_version=2.28.9", f"wheelhouse={wheelhouse}", python_env=True)
        assert first.returncode == 0, output(first)[-3000:]
        assert "uv = " in bare.sh(f"cat {venv}/pyvenv.cfg")  # the venv was made by uv, offline
        assert bare.sh(f"{venv}/bin/python -c 'import sglang; print(sglang.__version__)'").strip() == "0.5.23"
        second = bare.provision("nccl_version=2.28.9", f"wheelhouse={wheelhouse}", python_env=True)
        operations, changed, errors, unchanged = grand_total(second)
        assert (changed, errors, unchanged) == ("-", "-", operations), output(second)[-3000:]
    finally:
        bare.sh("rm -f /usr/local/bin/uv")


def test_deploy_dry_run_on_a_real_host_provisions_first_and_changes_nothing(bare):
    """deploy.py on a host without the simulator marker: hardware from its facts, provisioning first."""
    bare.host.set_kernel_module("580.65.06")
    before = bare.sh(f"dpkg-query -W; ls /etc/systemd/system; cat {HOLDS}")
    result = subprocess.run([*CONTROLLER, "-m", "pyinfra", str(bare.inventory), "deploy.py", "--dry",
                             "--data", "nccl_version=2.28.9"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    text = output(result)
    assert result.returncode == 0, text[-3000:]
    assert "SIMULATED HOST" not in text
    assert "driver: ok: NVIDIA driver 580.65.06" in text and "nccl: ok: system libnccl2 2.28.9-1+cuda13.0" in text, text[-4000:]
    # No GPU is visible here, so the GPU-count rule cannot use host facts and says it was skipped.
    assert "rule skipped: tp-matches-gpus" in text
    assert "python env: /opt/sglang-deploy/venvs/sglang-0.5.23-" in text and "Switch sglang to release" in text
    assert bare.sh(f"dpkg-query -W; ls /etc/systemd/system; cat {HOLDS}") == before


def test_facts_are_saved_for_the_profile_check(bare):
    import json

    bare.host.set_kernel_module("580.65.06")
    result = subprocess.run([*CONTROLLER, "-m", "pyinfra", "-y", str(bare.inventory), "facts.py"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, output(result)[-3000:]
    saved = REPO / "results" / "ct129-bare" / "facts.json"
    try:
        facts = json.loads(saved.read_text())
        assert facts["kernel_driver"] == "580.65.06" and facts["libcuda"] == ["580.65.06"]
        assert facts["container"] == "systemd-nspawn" and facts["cuda_toolkit"] == "13.0"
        assert facts["system_nccl"] == "2.28.9-1+cuda13.0" and facts["driver"]["ok"]
        check = subprocess.run([*CONTROLLER, "-m", "sglang_deploy.cli", "check", str(PROVEN), "--facts", str(saved)],
                               cwd=REPO, capture_output=True, text=True, timeout=300)
        # No GPU is visible in the container, so the GPU-count rule is skipped rather than guessed.
        assert check.returncode == 0 and "skipped: tp-matches-gpus" in check.stdout, check.stdout + check.stderr
    finally:
        saved.unlink(missing_ok=True)
