"""Provisioning decisions (pure): what the driver, CUDA, NCCL and Python-env roles must do on a host.

Each function takes host facts and the settings from group data, and returns a Step: nothing to do,
an install to perform (with the packages), or an error that names what was found and what is needed.
In verify mode an install becomes an error, so `provision_mode=verify` changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .hostfacts import driver_branch, driver_verdict


@dataclass
class Step:
    role: str
    action: str  # "ok", "install", "error"
    message: str
    packages: list[str] = field(default_factory=list)
    reboot_needed: bool = False


def driver_step(facts: dict, cuda_major: int, driver_branch_pin: int, mode: str) -> Step:
    verdict = driver_verdict(facts["gpus"], facts["kernel_driver"], facts["container"], cuda_major)
    if verdict["ok"]:
        return Step("driver", "ok", f"NVIDIA driver {verdict['kernel_driver'] or verdict['userspace_driver']} "
                                    f"(>= R{verdict['minimum_branch']}) works: nothing to install")
    if verdict["container"]:
        # The kernel module belongs to the Proxmox host: never install one here.
        return Step("driver", "error", f"in a {verdict['container']} container: " + "; ".join(verdict["problems"]))
    if facts["kernel_driver"] and driver_branch(facts["kernel_driver"]) >= verdict["minimum_branch"]:
        return Step("driver", "error", "; ".join(verdict["problems"]))
    if mode == "verify":
        return Step("driver", "error", "verify mode: " + "; ".join(verdict["problems"]))
    return Step("driver", "install", f"install the R{driver_branch_pin} driver from NVIDIA's CUDA repository",
                [f"cuda-drivers-{driver_branch_pin}"], reboot_needed=True)


def cuda_toolkit_step(facts: dict, cuda_version: str, mode: str) -> Step:
    package = f"cuda-toolkit-{cuda_version.replace('.', '-')}"
    if facts["cuda_toolkit"] == cuda_version:
        return Step("cuda-toolkit", "ok", f"CUDA toolkit {cuda_version} (nvcc) present")
    found = facts["cuda_toolkit"] or "none"
    if mode == "verify":
        return Step("cuda-toolkit", "error", f"verify mode: CUDA toolkit {found} found, {cuda_version} required ({package})")
    return Step("cuda-toolkit", "install", f"CUDA toolkit {found} -> {cuda_version}", [package])


def nccl_step(facts: dict, nccl_pin: str | None, torch_nccl: str | None, mode: str) -> Step:
    system = facts["system_nccl"]
    note = ""
    if torch_nccl and system and not system.startswith(torch_nccl):
        note = f"; note: PyTorch in the venv loads its own NCCL {torch_nccl}, not the system's {system}"
    if not nccl_pin or (system and system.startswith(nccl_pin)):
        return Step("nccl", "ok", f"system libnccl2 {system or 'not installed (PyTorch brings its own)'}{note}")
    if mode == "verify":
        return Step("nccl", "error", f"verify mode: libnccl2 {system or 'missing'}, pinned {nccl_pin}{note}")
    return Step("nccl", "install", f"libnccl2 {system or 'missing'} -> {nccl_pin}{note}", [f"libnccl2={nccl_pin}*"])
