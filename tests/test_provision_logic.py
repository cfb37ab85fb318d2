"""Provisioning decisions from host facts: container-aware driver, CUDA toolkit, NCCL."""

from sglang_deploy.provision import cuda_toolkit_step, driver_step, nccl_step

H200 = {"gpus": [{"driver_version": "580.159.04"}], "kernel_driver": "580.159.04", "container": "none",
        "cuda_toolkit": "13.0", "system_nccl": "2.28.3-1+cuda13.0"}


def test_working_host_needs_nothing():
    assert driver_step(H200, 13, 580, "install").action == "ok"
    assert cuda_toolkit_step(H200, "13.0", "install").action == "ok"
    step = nccl_step(H200, "2.28.3", "2.28.9", "install")
    assert step.action == "ok" and "PyTorch in the venv loads its own NCCL 2.28.9" in step.message


def test_lxc_never_installs_a_driver():
    lxc = {**H200, "container": "lxc", "gpus": [{"driver_version": "570.86.10"}], "kernel_driver": "580.95.05"}
    step = driver_step(lxc, 13, 580, "install")
    assert step.action == "error" and "570.86.10" in step.message and "580.95.05" in step.message
    assert not step.packages


def test_bare_metal_without_driver_installs_and_says_reboot():
    bare = {**H200, "gpus": [], "kernel_driver": None}
    step = driver_step(bare, 13, 580, "install")
    assert step.action == "install" and step.packages == ["cuda-drivers-580"] and step.reboot_needed
    assert driver_step(bare, 13, 580, "verify").action == "error"


def test_toolkit_and_nccl_pins():
    old = {**H200, "cuda_toolkit": "12.4", "system_nccl": None}
    assert cuda_toolkit_step(old, "13.0", "install").packages == ["cuda-toolkit-13-0"]
    assert "12.4 found, 13.0 required" in cuda_toolkit_step(old, "13.0", "verify").message
    assert nccl_step(old, "2.28.3", None, "install").packages == ["libnccl2=2.28.3*"]
