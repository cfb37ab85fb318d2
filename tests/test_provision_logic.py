"""Provisioning decisions from host facts: container-aware driver, CUDA toolkit, NCCL."""

import json
import subprocess
import sys

import pytest

from sglang_deploy.provision import cuda_toolkit_step, driver_step, nccl_step

H200 = {"gpus": [{"driver_version": "580.159.04"}], "kernel_driver": "580.159.04", "container": "none",
        "cuda_toolkit": "13.0", "system_nccl": "2.28.3-1+cuda13.0"}


def test_working_host_needs_nothing():
    assert driver_step(H200, 13, 580, "install").action == "ok"
    assert cuda_toolkit_step(H200, "13.0", "install").action == "ok"
    step = nccl_step(H200, "2.28.3", "2.28.9", "install")
    assert step.action == "ok" and "PyTorch in the venv loads its own NCCL 2.28.9" in step.message


def test_lxc_gets_user_space_of_exactly_the_host_module_never_a_kernel_module():
    lxc = {**H200, "container": "lxc", "gpus": [], "libcuda": ["580.65.06"], "kernel_driver": "580.95.05"}
    step = driver_step(lxc, 13, 580, "install")
    assert step.action == "install" and not step.reboot_needed
    assert step.packages == ["libcuda1", "libnvidia-ml1", "nvidia-smi"] and step.exact == "580.95.05-*"
    assert not any("dkms" in p or "cuda-drivers" in p or "kernel" in p for p in step.packages)
    assert step.hold == {"libcuda1": "580.95.05-*", "libnvidia-ml1": "580.95.05-*", "nvidia-smi": "580.95.05-*"}
    verify = driver_step(lxc, 13, 580, "verify")
    assert verify.action == "error" and "580.65.06" in verify.message and "580.95.05" in verify.message
    # The versions follow settings (a mirror with another Debian revision, other package names).
    custom = driver_step(lxc, 13, 580, "install", userspace_packages=["libcuda1"], package_version="{version}-0ubuntu1")
    assert custom.packages == ["libcuda1"] and custom.exact == "580.95.05-0ubuntu1"


def test_lxc_with_an_old_or_absent_host_module_is_an_error():
    old = {**H200, "container": "lxc", "gpus": [], "libcuda": [], "kernel_driver": "570.86.10"}
    step = driver_step(old, 13, 580, "install")
    assert step.action == "error" and "older than R580" in step.message and "Proxmox host" in step.message
    absent = driver_step({**old, "kernel_driver": None}, 13, 580, "install")
    assert absent.action == "error" and "install it on the Proxmox host" in absent.message


def test_a_working_lxc_keeps_its_hold():
    lxc = {**H200, "container": "lxc", "libcuda": ["580.159.04"]}
    step = driver_step(lxc, 13, 580, "install")
    assert step.action == "ok" and step.hold["libcuda1"] == "580.159.04-*"


def test_bare_metal_user_space_ahead_of_the_module_asks_for_a_reboot():
    upgraded = {**H200, "gpus": [], "libcuda": ["580.170.01"]}
    step = driver_step(upgraded, 13, 580, "install")
    assert step.action == "error" and "580.170.01" in step.message and "580.159.04" in step.message
    assert "reboot" in step.message


def test_bare_metal_without_driver_installs_and_says_reboot():
    bare = {**H200, "gpus": [], "kernel_driver": None}
    step = driver_step(bare, 13, 580, "install")
    assert step.action == "install" and step.packages == ["cuda-drivers-580"] and step.reboot_needed
    assert driver_step(bare, 13, 580, "verify").action == "error"


def test_toolkit_and_nccl_pins():
    old = {**H200, "cuda_toolkit": "12.4", "system_nccl": None}
    assert cuda_toolkit_step(old, "13.0", "install").packages == ["cuda-toolkit-13-0"]
    assert "12.4 found, 13.0 required" in cuda_toolkit_step(old, "13.0", "verify").message
    assert nccl_step(old, "2.28.3", None, "install").packages == ["libnccl2=2.28.3-1+cuda13.0"]
    assert nccl_step(old, "2.28.3-1+cuda12.9", None, "install").packages == ["libnccl2=2.28.3-1+cuda12.9"]
    assert nccl_step(old, "2.28.3", None, "install", cuda_version="13.1").packages == ["libnccl2=2.28.3-1+cuda13.1"]
    assert "pinned 2.28.3-1+cuda13.0" in nccl_step(old, "2.28.3", None, "verify").message
    # A cuda12.9 build of the same NCCL is not the pinned one.
    assert nccl_step({**H200, "system_nccl": "2.28.3-1+cuda12.9"}, "2.28.3", None, "install").action == "install"


def test_repository_path_and_driver_packages_follow_the_distribution():
    from sglang_deploy.provision import nvidia_repo_path, userspace_driver_defaults

    debian, ubuntu = {"ID": "debian", "VERSION_ID": "12"}, {"ID": "ubuntu", "VERSION_ID": "24.04"}
    assert nvidia_repo_path(debian, "x86_64") == {"distro": "debian12", "arch": "x86_64"}
    assert nvidia_repo_path(ubuntu, "aarch64") == {"distro": "ubuntu2404", "arch": "sbsa"}
    for bad, machine, expected in [({"ID": "fedora", "VERSION_ID": "41"}, "x86_64", "fedora 41: set cuda_repo_url"),
                                   (debian, "riscv64", "no NVIDIA CUDA repository for architecture riscv64")]:
        try:
            nvidia_repo_path(bad, machine)
        except ValueError as error:
            assert expected in str(error)
        else:
            raise AssertionError(f"{bad} {machine} accepted")
    packages, version = userspace_driver_defaults(ubuntu)
    lxc = {**H200, "container": "lxc", "gpus": [], "libcuda": [], "kernel_driver": "580.95.05"}
    step = driver_step(lxc, 13, 580, "install", userspace_packages=packages, package_version=version)
    # Ubuntu's own archive suffixes the branch (libnvidia-compute-580); NVIDIA's repository drops it from 590 on:
    # the first name the repository has at the module's version is installed, and both are held.
    assert step.packages == ["libnvidia-compute-580|libnvidia-compute", "nvidia-utils-580|nvidia-utils"]
    assert set(step.hold) == {"libnvidia-compute-580", "libnvidia-compute", "nvidia-utils-580", "nvidia-utils"}
    newer = driver_step({**lxc, "kernel_driver": "590.48.01"}, 13, 580, "install", userspace_packages=packages,
                        package_version=version)
    assert newer.packages == ["libnvidia-compute-590|libnvidia-compute", "nvidia-utils-590|nvidia-utils"]
    assert userspace_driver_defaults(debian)[0] == ("libcuda1", "libnvidia-ml1", "nvidia-smi")


# --- the Python env: binary wheels only, what was installed recorded (security review 2, finding 3) ---------------

@pytest.mark.parametrize("use_uv, binary_only", [(False, ["--only-binary", ":all:"]), (True, ["--no-build"])])
def test_the_venv_installs_binary_wheels_only_and_records_them(tmp_path, use_uv, binary_only):
    import shlex as _shlex

    from sglang_deploy.provision import PACKAGES_FILE, install_commands

    install, hooks, record = install_commands("/opt/v", ["sglang==0.5.23", "torch==2.9.1"], ["--no-index"], use_uv)
    argv = _shlex.split(install)
    assert argv[argv.index(binary_only[0]):][:len(binary_only)] == binary_only
    assert argv[-2:] == ["sglang==0.5.23", "torch==2.9.1"] and "--no-index" in argv
    assert "venv_hooks" in hooks and "--venv /opt/v" in hooks
    # The record step, run by the system python -I on the venv's files (this test's venv): every installed
    # distribution, with a sha256; the venv's own python is not started.
    script = _shlex.split(record)
    assert script[:3] == ["/usr/bin/python3", "-I", "-c"] and script[-2:] == ["/opt/v", f"/opt/v/{PACKAGES_FILE}"]
    subprocess.run([sys.executable, "-I", "-c", script[3], sys.prefix, str(tmp_path / "p.json")], check=True)
    found = json.loads((tmp_path / "p.json").read_text())
    assert any(name.startswith("pydantic==") for name in found)
    assert all(len(digest) == 64 for digest in found.values())


@pytest.mark.parametrize("venv, missing", [(False, ["python3-venv"]), (True, []), (None, [])])
def test_python3_venv_is_installed_where_ensurepip_is_missing(venv, missing):
    """python3 -m venv fails without ensurepip (Debian's python3-venv); None: facts of an older version, not asked."""
    from sglang_deploy.provision import toolchain_step

    facts = {"lxc": {"compilers": {"gcc": "/usr/bin/gcc", "g++": "/usr/bin/g++", "python_h": True, "venv": venv}}}
    step = toolchain_step(facts, "install")
    assert step.packages == missing and step.action == ("install" if missing else "ok")
    if missing:
        assert "python3-venv" in toolchain_step(facts, "verify").message


def test_the_disk_check_refuses_before_an_install_naming_both_numbers(tmp_path):
    from sglang_deploy.provision import disk_check_command

    missing_dir = tmp_path / "not" / "yet"  # checked on its nearest existing parent
    ok = subprocess.run(["sh", "-c", disk_check_command("the toolkit", str(missing_dir), 1)], capture_output=True,
                        text=True)
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run(["sh", "-c", disk_check_command("the toolkit", str(missing_dir), 10**9)],
                             capture_output=True, text=True)
    assert refused.returncode == 1
    assert f"the toolkit needs about 1000000000 MiB free under {missing_dir}; the file system of {tmp_path} has" \
        in refused.stderr and "pct resize <CTID> rootfs" in refused.stderr


def test_with_proxy_sets_the_environment_the_clients_read():
    from sglang_deploy.provision import with_proxy

    assert with_proxy("echo hi", None) == "echo hi"
    wrapped = with_proxy("echo $https_proxy $HTTPS_PROXY $no_proxy", "http://10.0.0.1:3128")
    out = subprocess.run(["sh", "-c", wrapped], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["http://10.0.0.1:3128", "http://10.0.0.1:3128", "localhost,127.0.0.1,::1"]


@pytest.mark.parametrize("default, versioned, action, said", [
    ("13.0", {"13.0": "13.0"}, "ok", "present at /usr/local/cuda-13.0"),
    # /usr/local/cuda points at another toolkit: the unit's CUDA_HOME is the versioned directory, which is there
    ("12.4", {"12.4": "12.4", "13.0": "13.0"}, "ok", "present at /usr/local/cuda-13.0"),
    # a toolkit at /usr/local/cuda only (a .run install without the versioned directory): the unit would not find it
    ("13.0", {}, "install", "13.0 required at /usr/local/cuda-13.0 (the unit's CUDA_HOME; cuda-toolkit-13-0)"),
    # the directory without a working nvcc
    ("13.0", {"13.0": None}, "install", "there: /usr/local/cuda-13.0 (nvcc without a release)"),
    # an older fact without the versioned directories: nvcc's release decides, as before
    ("13.0", None, "ok", "present at /usr/local/cuda-13.0"),
])
def test_the_toolkit_is_looked_for_at_the_units_versioned_cuda_home(default, versioned, action, said):
    step = cuda_toolkit_step({**H200, "cuda_toolkit": default, "cuda_toolkits": versioned}, "13.0", "install")
    assert step.action == action and said in step.message
    assert step.packages == ([] if action == "ok" else ["cuda-toolkit-13-0"])
