"""roles/provision.py without a host: install vs verify mode from the GpuHost fact's fixtures
(tests/fixtures/facts/GpuHost) on a fake host: what is installed, what is refused (nothing is changed then).

The settings are the tool's defaults (sglang_deploy/settings.py) with what each test sets as the fake host's data."""

from pathlib import Path

import pytest
from pyinfra.api.exceptions import DeployError

from fakehost import FactsBy, fixture_fact, run_role
from roles import provision
from roles.facts import GpuHost, VenvState, VenvTorch
from sglang_deploy.layout import venv_path
from sglang_deploy.profile import load_profile

REPO = Path(__file__).resolve().parent.parent
PROFILE = load_profile(REPO / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml")
VENV = venv_path(PROFILE)


def stack(case: str, mode: str, **data):
    return run_role(provision.nvidia_stack, mode=mode, python=f"{VENV}/bin/python",
                    data={"nccl_version": "2.28.9", **data},
                    facts={GpuHost: fixture_fact("GpuHost", case), VenvTorch: {"nccl": "2.28.9"}})


def installed(ops) -> str:
    return ops.named("Install ").name.split("| Install ", 1)[1].removesuffix(" (simulated first)")


def test_lxc_driver_mismatch_install_brings_user_space_to_the_host_module_checked_before_and_after():
    ops = stack("lxc_driver_mismatch", "install")
    assert installed(ops) == ("libcuda1=580.95.05-*, libnvidia-ml1=580.95.05-*, nvidia-smi=580.95.05-*, "
                              "cuda-toolkit-13-0, libnccl2=2.28.9-1+cuda13.0, gcc, g++, python3-dev, python3-venv")
    names = [name.split(" | ")[1] for name in ops.names]
    # The disk check comes first: a CT too small for the toolkit is refused before the repository is configured.
    assert names.index("Check disk space for cuda-toolkit-13-0") < names.index("NVIDIA CUDA repository key")
    assert "-ge 7500 ]" in ops.named("Check disk space for cuda-toolkit-13-0").commands[0]
    assert names.index("apt update (NVIDIA repository)") < names.index(f"Install {installed(ops)} (simulated first)") \
        < names.index("Check user space is now 580.95.05")
    script = ops.named("Install ").commands[0]
    # The driver's source pinned and the whole install simulated before anything is installed (tests/test_driver_apt.py
    # runs this script against apt), then installed without recommends (no dkms in a container).
    assert script.index("pick '580.95.05-*' libcuda1") < script.index("Package: src:%s") \
        < script.index("apt-get install -s") < script.index('cp "$stage/preferences.d/sglang-deploy-driver"') \
        < script.index("apt-get install -y")
    assert "--no-install-recommends --allow-downgrades" in script
    assert "install='cuda-toolkit-13-0 libnccl2=2.28.9-1+cuda13.0 gcc g++ python3-dev python3-venv'" in script
    assert "Load nvidia-uvm at boot" not in " ".join(names)  # a container: the host loads modules


def test_lxc_driver_mismatch_verify_names_both_versions_and_changes_nothing():
    with pytest.raises(DeployError) as refused:
        stack("lxc_driver_mismatch", "verify")
    message = str(refused.value)
    assert "nothing was changed" in message
    assert "user-space driver 570.86.10 does not match the kernel module 580.95.05" in message


def test_bare_metal_a6000_installs_only_the_toolkit_the_profile_needs_from_nvidias_signed_repository():
    ops = stack("rtx_a6000x2_bare_metal", "install")  # nvcc 13.1 there, 13.0 wanted
    assert installed(ops) == "cuda-toolkit-13-0"
    assert ops.named("NVIDIA CUDA repository key").commands[-1] == "chmod 644 /usr/share/keyrings/nvidia-cuda.asc"
    assert "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub" in \
        ops.named("NVIDIA CUDA repository key").commands[0]
    assert ops.named("Load nvidia-uvm at boot").commands[-2:] == [
        "upload /etc/modules-load.d/nvidia-uvm.conf", "chmod 644 /etc/modules-load.d/nvidia-uvm.conf"]
    assert not [name for name in ops.names if "Load nvidia-uvm and create" in name]  # /dev/nvidia-uvm is there


def test_verify_mode_refuses_what_install_mode_would_install():
    with pytest.raises(DeployError, match="verify mode: CUDA toolkit 13.1 found, 13.0 required"):
        stack("rtx_a6000x2_bare_metal", "verify")
    with pytest.raises(DeployError, match="libnccl2 2.28.3-1[+]cuda13.0, pinned 2.28.9-1[+]cuda13.0"):
        stack("h200x2_nvlink_recorded", "verify")


def test_a_host_with_everything_in_place_changes_nothing_in_either_mode():
    assert stack("h200x2_nvlink_recorded", "verify", nccl_version=None).commands == []
    install = stack("h200x2_nvlink_recorded", "install", nccl_version=None)
    assert not [name for name in install.names if "apt update" in name or "Install " in name]


def test_no_driver_in_a_container_is_refused_in_install_mode_too():
    with pytest.raises(DeployError, match="install it on the Proxmox host"):
        stack("no_gpu_docker_dev_box", "install")


# --- the Python environment -----------------------------------------------------------------------------

def python_env(mode: str, sglang: str | None, problems=(), profile=PROFILE, unreadable=None, **facts):
    state = {"sglang": sglang, "problems": list(problems), **({"unreadable": unreadable} if unreadable else {})}
    return run_role(provision.python_env, profile=profile, mode=mode, data={},
                    facts={VenvState: state,
                           GpuHost: fixture_fact("GpuHost", "rtx_a6000x2_bare_metal"), **facts})


def test_the_pinned_sglang_in_place_is_nothing_to_do_in_either_mode():
    assert python_env("verify", PROFILE.sglang.version) == python_env("install", PROFILE.sglang.version) == []


def test_verify_mode_refuses_another_sglang():
    with pytest.raises(DeployError, match=f"has SGLang 0.5.22, the profile pins {PROFILE.sglang.version}"):
        python_env("verify", "0.5.22")
    with pytest.raises(DeployError, match="has SGLang nothing"):
        python_env("verify", None)


def test_a_venv_in_place_with_a_startup_hook_is_refused_before_any_change_unless_waived(tmp_path):
    """A venv installed before the hooks check (or changed since): refused from its VenvState, nothing queued."""
    from sglang_deploy.profile import load_profile

    hook = f"{VENV}/lib/python3.11/site-packages/evil.pth: a .pth file from nvidia-nccl-cu13-hotfix 2.28.9 runs code"
    with pytest.raises(DeployError, match="startup hooks refused; nothing was changed:\n  .*evil.pth"):
        python_env("install", PROFILE.sglang.version, problems=[hook])
    waived = tmp_path / "waived.yaml"
    waived.write_text((REPO / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml").read_text()
                      + '\nwaivers:\n  venv-startup-hook: "reviewed: the site plugin, issue 38"\n')
    assert python_env("install", PROFILE.sglang.version, problems=[hook], profile=load_profile(waived)) == []


def test_a_venv_that_could_not_be_read_is_not_reinstalled():
    with pytest.raises(DeployError, match=f"{VENV} could not be read \\(Traceback\\); nothing was changed"):
        python_env("install", None, unreadable="Traceback")


def test_install_recreates_the_venv_refuses_hooks_and_checks_torch_as_the_service_user():
    ops = python_env("install", None)
    assert ops.names[0].endswith(f"Check disk space for {VENV}")  # before anything is created or uploaded
    assert "-ge 10000 ]" in ops.named("Check disk space").commands[0]
    commands = ops.named("Install").commands
    assert commands[0] == f"rm -rf {VENV} && python3 -m venv {VENV}"  # pip never runs on an earlier install's files
    assert commands[1] == (f"{VENV}/bin/pip install -q --disable-pip-version-check --only-binary :all: "
                           f"sglang=={PROFILE.sglang.version}")
    assert commands[2].startswith("/usr/bin/python3 -I -c ") and f"--venv {VENV} >/dev/null || {{ rm -rf {VENV};" \
        in commands[2] and "--waived >" not in commands[2]
    assert commands[3].startswith("/usr/bin/python3 -I -c ")  # the record: read from outside the venv
    assert commands[4].startswith(f"runuser -u sglang -- env -i PATH=/usr/bin:/bin HOME=/nonexistent {VENV}/bin/python "
                                  "-I -c ")
    assert "n == 2" in commands[-1] and "torch.cuda.is_available()" in commands[-1]
    assert commands[-1].startswith("runuser -u sglang -- ")


def test_install_with_uv_into_a_fresh_venv():
    ops = python_env("install", "0.5.22", Which=lambda command: "/usr/local/bin/uv" if command == "uv" else None)
    commands = ops.named("Install").commands
    assert commands[0] == f"rm -rf {VENV} && UV_PYTHON_DOWNLOADS=never uv venv --python python3 {VENV}"
    assert commands[1] == (f"uv pip install -q --no-build --python {VENV}/bin/python sglang=={PROFILE.sglang.version}")


def test_install_from_a_controller_wheelhouse_is_offline(tmp_path):
    (tmp_path / "sglang-0.5.23-py3-none-any.whl").write_text("")
    ops = run_role(provision.python_env, profile=PROFILE, mode="install", data={"wheelhouse": str(tmp_path)},
                   facts={VenvState: {"sglang": None, "problems": []},
                          GpuHost: fixture_fact("GpuHost", "no_gpu_docker_dev_box")})
    remote = f"/opt/sglang-deploy/wheelhouse/sglang-{PROFILE.sglang.version}"
    assert f"upload {remote}/sglang-0.5.23-py3-none-any.whl" in ops.named("Upload the wheelhouse").commands
    install = ops.named("Install").commands
    assert f"--no-index --find-links {remote}" in install[1]
    assert not [command for command in install if "torch.cuda" in command]  # no GPU there: no torch check


def test_a_proxy_reaches_apt_the_key_download_and_pip():
    ops = stack("lxc_driver_mismatch", "install", proxy="http://10.0.0.1:3128")
    assert ops.named("apt update (NVIDIA repository)").commands == [
        "apt-get update -q -o Acquire::http::Proxy=http://10.0.0.1:3128 -o Acquire::https::Proxy=http://10.0.0.1:3128"]
    script = ops.named("Install ").commands[0]
    assert script.count("-o Acquire::https::Proxy=http://10.0.0.1:3128") == 2  # the simulation and the install
    pip = run_role(provision.python_env, profile=PROFILE, mode="install", data={"proxy": "http://10.0.0.1:3128"},
                   facts={VenvState: {"sglang": None, "problems": []},
                          GpuHost: fixture_fact("GpuHost", "rtx_a6000x2_bare_metal")})
    install = pip.named("Install").commands[1]
    assert install.startswith("env http_proxy=http://10.0.0.1:3128 https_proxy=http://10.0.0.1:3128 ")
    assert "no_proxy=localhost,127.0.0.1,::1" in install and "--only-binary :all:" in install
    without = stack("lxc_driver_mismatch", "install")
    assert "Proxy" not in without.named("Install ").commands[0]


def test_nvidias_repository_is_configured_only_for_nvidias_packages():
    """A host missing only python3-venv gets it from its own sources: no NVIDIA key, source or preferences (a
    container that reaches a distribution mirror but not NVIDIA). Where NVIDIA's packages are installed, the
    repository's preferences pin its origin low and raise only NVIDIA's names; the earlier file is removed."""
    facts = fixture_fact("GpuHost", "h200x2_nvlink_recorded")
    facts["lxc"]["compilers"]["venv"] = False
    ops = run_role(provision.nvidia_stack, mode="install", python=f"{VENV}/bin/python", data={"nccl_version": None},
                   facts={GpuHost: facts, VenvTorch: {"nccl": "2.28.9"}})
    assert installed(ops) == "python3-venv"
    names = [name.split(" | ")[1] for name in ops.names]
    assert "apt update" in names and not [name for name in names if "NVIDIA" in name], names
    ops = stack("lxc_driver_mismatch", "install")
    preferences = ops.named("NVIDIA's repository for NVIDIA's packages only")
    assert "upload /etc/apt/preferences.d/sglang-deploy-nvidia-repository" in preferences.commands
    assert ops.named("Remove the earlier preference")  # /etc/apt/preferences.d/nvidia-cuda: absent on this host
