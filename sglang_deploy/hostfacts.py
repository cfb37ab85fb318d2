"""Parsing what a GPU host reports (nvidia-smi, /proc, dpkg, the venv's torch) into plain dicts.

Pure functions over command output, so they are unit-tested with recorded outputs; roles/facts.py
wraps them as pyinfra facts. Every parser degrades to None/[] when the command was missing.
"""

from __future__ import annotations

import json
import re

GPU_QUERY = ("index,name,memory.total,driver_version,pcie.link.gen.current,pcie.link.gen.max,"
             "pcie.link.width.current,pcie.link.width.max,clocks.sm,clocks.max.sm,power.draw,power.limit")
# Minimum driver branch per CUDA major version (CUDA 13 needs R580).
MIN_DRIVER_FOR_CUDA = {12: 525, 13: 580}


def _number(text: str):
    text = text.strip()
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def uvm_warning(facts: dict) -> str | None:
    """The sandboxed unit (NoNewPrivileges) cannot run the setuid nvidia-modprobe that creates /dev/nvidia-uvm
    on first CUDA use: it must exist before the service starts."""
    if not facts.get("gpus") or facts.get("nvidia_uvm", True):
        return None
    if (facts.get("container") or "none") != "none":
        return ("/dev/nvidia-uvm is missing in this container: CUDA cannot start under the sandbox. Load nvidia-uvm "
                "on the Proxmox host (modules-load.d) and pass /dev/nvidia-uvm and /dev/nvidia-uvm-tools into the container")
    return ("/dev/nvidia-uvm is missing: provisioning loads nvidia-uvm at boot (/etc/modules-load.d/nvidia-uvm.conf); "
            "run `modprobe nvidia-uvm && nvidia-modprobe -u -c=0` or reboot")


def parse_gpus(output: str) -> list[dict]:
    """`nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits` -> one dict per GPU."""
    gpus = []
    for line in output.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != len(GPU_QUERY.split(",")) or not fields[0].isdigit():
            continue
        keys = GPU_QUERY.split(",")
        gpu = {key: (value if key in ("name", "driver_version") else _number(value)) for key, value in zip(keys, fields)}
        gpus.append(gpu)
    return gpus


def parse_kernel_driver(proc_version: str) -> str | None:
    """/proc/driver/nvidia/version -> the kernel module's version (on LXC: the Proxmox host's)."""
    match = re.search(r"Kernel Module(?: for [\w]+)?\s+([\d.]+)", proc_version or "")
    return match.group(1) if match else None


def driver_branch(version: str | None) -> int | None:
    return int(version.split(".")[0]) if version else None


def parse_topology(topo_matrix: str, p2p_read: str) -> dict:
    """`nvidia-smi topo -m` and `nvidia-smi topo -p2p r` -> interconnect and P2P status between GPUs."""
    links = set()
    for line in (topo_matrix or "").splitlines():
        if re.match(r"^GPU\d+\s", line):
            cells = line.split()[1:]
            links.update(cell for cell in cells if re.match(r"^(NV\d+|PIX|PXB|PHB|NODE|SYS)$", cell))
    interconnect = "nvlink" if any(link.startswith("NV") for link in links) else ("pcie" if links else None)
    statuses = set()
    for line in (p2p_read or "").splitlines():
        if re.match(r"^\s*GPU\d+\s", line):
            statuses.update(cell for cell in line.split()[1:] if cell in ("OK", "NS", "CNS", "TNS", "NA"))
    p2p = None if not statuses else statuses == {"OK"}
    return {"interconnect": interconnect, "links": sorted(links), "p2p_read_ok": p2p,
            "p2p_read_statuses": sorted(statuses)}


def parse_libcuda(listing: str) -> list[str]:
    """`ls` of libcuda.so.* -> the user-space driver versions installed (libcuda.so.580.95.05 -> 580.95.05).

    Known even where nvidia-smi cannot run (no GPU visible, or "Driver/library version mismatch")."""
    versions = {match.group(1) for match in re.finditer(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)\s*$", listing or "", re.M)}
    return sorted(versions, key=lambda v: [int(part) for part in v.split(".")])


def userspace_driver(gpus: list[dict], libcuda: list[str]) -> str | None:
    """The user-space driver version: nvidia-smi's when it runs, else the newest libcuda.so.VERSION."""
    if gpus and gpus[0].get("driver_version"):
        return gpus[0]["driver_version"]
    return libcuda[-1] if libcuda else None


def nccl_differs(system_nccl: str | None, torch_nccl: str | None) -> bool:
    """Does the system libnccl2 (2.28.3-1+cuda13.0) differ from the NCCL torch loads (2.28.9)?"""
    return bool(system_nccl and torch_nccl and not system_nccl.startswith(torch_nccl + "-"))


def parse_nvcc(output: str) -> str | None:
    match = re.search(r"release (\d+\.\d+)", output or "")
    return match.group(1) if match else None


def parse_versioned_nvcc(output: str) -> dict[str, str | None]:
    """Lines `/usr/local/cuda-13.0/bin/nvcc release 13.0` -> {"13.0": "13.0"}: each versioned toolkit directory (the
    unit's CUDA_HOME is /usr/local/cuda-<cuda_version>) and the release its nvcc reports (None: it reports none)."""
    found = {}
    for line in (output or "").splitlines():
        match = re.match(r"/usr/local/cuda-(\d+\.\d+)/bin/nvcc(?:\s+release (\d+\.\d+))?\s*$", line.strip())
        if match:
            found[match.group(1)] = match.group(2)
    return found


def parse_venv_torch(output: str) -> dict | None:
    try:
        return json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def driver_verdict(gpus: list[dict], kernel_driver: str | None, container: str | None, cuda_major: int,
                   libcuda: list[str] | None = None) -> dict:
    """Is the NVIDIA driver adequate for this CUDA major version, and what would have to change?"""
    minimum = MIN_DRIVER_FOR_CUDA.get(cuda_major)
    userspace = userspace_driver(gpus, libcuda or [])
    in_container = bool(container and container != "none")
    problems = []
    if kernel_driver is None and not gpus:
        problems.append("no NVIDIA driver: /proc/driver/nvidia/version is missing and nvidia-smi found no GPU"
                        + (" (in a container the kernel module belongs to the host: install it on the Proxmox host)"
                           if in_container else ""))
    if kernel_driver and not userspace:
        problems.append(f"no user-space driver libraries (libcuda) for the kernel module {kernel_driver}")
    if kernel_driver and userspace and kernel_driver != userspace:
        problems.append(f"user-space driver {userspace} does not match the kernel module {kernel_driver}"
                        + (" (loaded by the container's host)" if in_container else "")
                        + f"; user-space libraries must be exactly {kernel_driver}")
    version = kernel_driver or userspace
    if version and minimum and driver_branch(version) < minimum:
        problems.append(f"driver {version} is older than R{minimum}, the minimum for CUDA {cuda_major}")
    return {"ok": not problems, "problems": problems, "kernel_driver": kernel_driver, "userspace_driver": userspace,
            "container": container if in_container else None, "minimum_branch": minimum}


def detected_hardware(facts: dict) -> dict:
    """What the host itself says about GPU count and interconnect (None where it cannot tell: no GPU visible yet)."""
    gpus = len(facts.get("gpus") or []) or None
    topology = (facts.get("topology") or {}).get("interconnect")
    found = {"gpus": gpus, "gpu_topology": topology if gpus and gpus > 1 else None,
             "gpu_names": [gpu.get("name") for gpu in facts.get("gpus") or []]}
    if facts.get("cpus"):  # the CT's own CPUs: with nesting, the unit's fresh /proc shows the Proxmox host's
        found["cpus"] = facts["cpus"]
    return found
