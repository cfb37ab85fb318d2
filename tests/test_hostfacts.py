"""Host fact parsers on outputs recorded on a real GPU machine (2x H200, NVLink) and on CT129-like text."""

from pathlib import Path

from sglang_deploy.hostfacts import (driver_verdict, parse_gpus, parse_kernel_driver, parse_libcuda, parse_nvcc,
                                     parse_topology, userspace_driver)

RECORDED = (Path(__file__).parent / "fixtures" / "h200x2-host-commands.txt").read_text()


def section(index: int) -> str:
    return RECORDED.split("===")[index]


def test_recorded_h200_host():
    gpus = parse_gpus(section(0))
    assert [g["name"] for g in gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert gpus[0]["driver_version"] == "580.159.04" and gpus[0]["memory.total"] == 143771
    assert gpus[0]["pcie.link.width.max"] == 16 and gpus[0]["power.limit"] == 700.0
    assert parse_kernel_driver(section(1)) == "580.159.04"
    topology = parse_topology(section(2), section(3))
    assert topology["interconnect"] == "nvlink" and topology["links"] == ["NV18"] and topology["p2p_read_ok"] is True
    assert parse_nvcc(section(4)) == "13.0"
    assert driver_verdict(gpus, "580.159.04", None, cuda_major=13)["ok"]


CT129_TOPO = """\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPHB\t0-31\t0
GPU1\tPHB\t X \t0-31\t0
"""
CT129_P2P_BROKEN = """ \tGPU0\tGPU1\t
 GPU0\tX\tCNS\t
 GPU1\tCNS\tX\t
"""


def test_pcie_pair_and_broken_p2p():
    topology = parse_topology(CT129_TOPO, CT129_P2P_BROKEN)
    assert topology["interconnect"] == "pcie" and topology["p2p_read_ok"] is False
    assert parse_topology("", "")["interconnect"] is None  # no nvidia-smi: unknown, not an error


def test_lxc_driver_mismatch_names_both_versions():
    gpus = [{"driver_version": "570.86.10"}]
    verdict = driver_verdict(gpus, "580.95.05", "lxc", cuda_major=13)
    assert not verdict["ok"] and "570.86.10" in verdict["problems"][0] and "580.95.05" in verdict["problems"][0]


def test_old_driver_is_refused_for_cuda_13():
    verdict = driver_verdict([{"driver_version": "570.86.10"}], "570.86.10", None, cuda_major=13)
    assert "older than R580, the minimum for CUDA 13" in verdict["problems"][0]


def test_no_driver_in_a_container_points_at_the_host():
    verdict = driver_verdict([], None, "lxc", cuda_major=13)
    assert "install it on the Proxmox host" in verdict["problems"][0]


def test_missing_fields_degrade():
    assert parse_gpus("0, NVIDIA RTX A6000, 49140, 580.95.05, 4, 4, 16, 16, [N/A], 2100, [N/A], 300.00")[0]["clocks.sm"] is None
    assert parse_kernel_driver("") is None and parse_nvcc("") is None


def test_libcuda_listing_gives_the_user_space_version_without_nvidia_smi():
    listing = ("/usr/lib/x86_64-linux-gnu/libcuda.so.1\n/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06\n"
               "/usr/lib/x86_64-linux-gnu/libcuda.so.580.105.08\n")
    assert parse_libcuda(listing) == ["580.65.06", "580.105.08"]  # numeric order, not text order
    assert userspace_driver([], parse_libcuda(listing)) == "580.105.08"
    assert userspace_driver([{"driver_version": "580.95.05"}], ["580.65.06"]) == "580.95.05"  # nvidia-smi wins
    verdict = driver_verdict([], "580.95.05", "lxc", cuda_major=13, libcuda=["580.65.06"])
    assert not verdict["ok"] and "580.65.06 does not match the kernel module 580.95.05" in verdict["problems"][0]
    no_libs = driver_verdict([], "580.95.05", "lxc", cuda_major=13, libcuda=[])
    assert "no user-space driver libraries" in no_libs["problems"][0]


def test_the_containers_cpus_size_the_jit_and_reach_the_env_file():
    """nproc in the CT (its cpuset) -> MAX_JOBS in the service's environment; with nesting the unit's fresh /proc shows
    the Proxmox host's CPUs, which FlashInfer's and torch's JIT would otherwise size themselves by."""
    from pathlib import Path

    from sglang_deploy.hostfacts import detected_hardware
    from sglang_deploy.profile import load_profile
    from sglang_deploy.render import render

    assert detected_hardware({"gpus": [], "cpus": 8})["cpus"] == 8 and "cpus" not in detected_hardware({"gpus": []})
    profile = load_profile(Path(__file__).parent.parent / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml")
    assert "MAX_JOBS=8\n" in render(profile, max_jobs=8).env
    assert "MAX_JOBS" not in render(profile).env  # the simulated host and older facts: unchanged
