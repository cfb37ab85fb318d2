"""What a container host is, from the facts roles/facts.py GpuHost reads, and what Proxmox must give CT129.

Pure functions (fixture-tested in tests/test_container_logic.py): the facts are text the host printed.
"""

from __future__ import annotations

import re

from .hostside import preflight_findings, preflight_probe

# The device groups of /proc/devices the server's nodes belong to: nvidia-frontend is 195 everywhere, the others
# are dynamic (alloc_chrdev_region at module load) and can change at a host reboot.
NVIDIA_GROUPS = ("nvidia-frontend", "nvidia-uvm", "nvidia-caps")


def parse_uid_map(text: str) -> dict:
    fields = text.split()
    return {"uid_map": " ".join(fields[:3]), "unprivileged": preflight_findings.unprivileged(fields)}


def parse_nodes(text: str) -> list[dict]:
    """`stat -c '%n|%F|%a|%U|%G|%t|%T'` lines for /dev/nvidia*: path, type, mode, owner, major:minor (hex)."""
    nodes = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 7:
            continue
        path, kind, mode, owner, group, major, minor = parts
        char = kind == "character special file"
        nodes.append({"path": path, "char": char, "mode": mode.zfill(4), "owner": owner, "group": group,
                      **({"major": int(major, 16), "minor": int(minor, 16)} if char else {})})
    return nodes


def parse_proc_devices(text: str) -> dict[str, int]:
    """Character device groups by name -> major (the "Character devices:" block of /proc/devices)."""
    majors, block = {}, None
    for line in text.splitlines():
        if line.strip().endswith("devices:"):
            block = line.strip()
            continue
        match = re.fullmatch(r"\s*(\d+)\s+(\S+)\s*", line)
        if match and block == "Character devices:":
            majors[match.group(2)] = int(match.group(1))
    return majors


def parse_limits(text: str) -> dict:
    """/proc/<pid>/limits -> {"nofile": (soft, hard), "memlock": (soft, hard)}."""
    return {key: (value["soft"], value["hard"]) for key, value in preflight_probe.parse_limits(text).items()}


def parse_nesting(text: str) -> bool | None:
    """The exit status of a transient unit with ProtectKernelTunables= (what the service does at each start)."""
    match = re.search(r"rc=(\d+)", text)
    if not match:
        return None
    return {"0": True, "226": False}.get(match.group(1))


def container_summary(facts: dict) -> list[str]:
    """Lines for facts.py and the doctor: privileged or not, nesting, nodes, shm, limits, compilers."""
    box = facts.get("lxc") or {}
    if not box:
        return []
    lines = [("unprivileged container, uid map " + box["uid_map"]) if box.get("unprivileged")
             else "root is the init namespace's root (bare metal, or a privileged container)"]
    lines.append("nesting (a unit's fresh /proc, as the service needs it): " + {
        True: "yes", False: "NO: a unit with ProtectKernelTunables/ProtectControlGroups dies with 226/NAMESPACE",
        None: "unknown"}[box.get("nesting")])
    for node in box.get("nodes") or []:
        if node.get("char"):
            lines.append(f"{node['path']}: {node['major']}:{node['minor']} mode {node['mode']} "
                         f"{node['owner']}:{node['group']}" + ("" if node["mode"].endswith("6") else
                                                               " (the service user needs others rw, or the group)"))
        else:
            lines.append(f"{node['path']}: NOT a character device (an empty placeholder?)")
    if box.get("shm_bytes") is not None:
        lines.append(f"/dev/shm: {box['shm_bytes'] >> 20} MiB")
    limits = box.get("service_limits") or {}
    if limits:
        lines.append("limits a unit gets when it asks for LimitNOFILE=1048576 LimitMEMLOCK=infinity: nofile "
                     f"{'/'.join(limits.get('nofile', ('?', '?')))}, memlock {'/'.join(limits.get('memlock', ('?', '?')))}")
    missing = [name for name in ("gcc", "g++") if not (box.get("compilers") or {}).get(name)]
    if not (box.get("compilers") or {}).get("python_h"):
        missing.append("Python.h (python3-dev)")
    lines.append("JIT toolchain: " + ("complete" if not missing else "missing " + ", ".join(missing)))
    return lines


def proxmox_config(facts: dict, container_id: int | str | None = None, gpus: int | None = None) -> str:
    """The lines /etc/pve/lxc/<CTID>.conf needs for sglang-deploy, with the majors this host has now, and why."""
    box = facts.get("lxc") or {}
    ctid = container_id or "<CTID>"
    majors = box.get("majors") or {}
    nodes = [n["path"] for n in box.get("nodes") or [] if re.fullmatch(r"/dev/nvidia[0-9]+", n["path"])]
    count = gpus or len(facts.get("gpus") or []) or len(nodes) or 2
    numbered = nodes or [f"/dev/nvidia{i}" for i in range(count)]
    wanted = numbered + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    video = box.get("video_gid") or 44
    lines = [f"# /etc/pve/lxc/{ctid}.conf -- what the container needs for sglang-deploy (then: pct reboot {ctid})",
             "# nesting: the unit's ProtectKernelTunables/ProtectControlGroups mount a fresh /proc and /sys, which",
             "# Proxmox's AppArmor profile denies without it (every start would die with 226/NAMESPACE)",
             "features: nesting=1",
             f"# the GPU nodes, mode 0666 (or gid={video}, the container's video group): without mode=/gid= Proxmox",
             "# creates them 0660 root:root and the service user cannot open them (PVE 8.1+; major:minor read at",
             "# every CT start, so nvidia-uvm's dynamic major cannot go stale)"]
    lines += [f"dev{i}: {path},mode=0666" for i, path in enumerate(wanted)]
    frontend = majors.get("nvidia-frontend", 195)
    uvm = majors.get("nvidia-uvm")
    lines += ["# or, before PVE 8.1: the cgroup lines with this host's majors now (nvidia-uvm's is dynamic: check",
              "# /proc/devices after every host reboot) and bind mounts of the host's nodes (make them 0666 there)",
              f"#lxc.cgroup2.devices.allow: c {frontend}:* rwm"]
    lines.append(f"#lxc.cgroup2.devices.allow: c {uvm}:* rwm" if uvm else
                 "#lxc.cgroup2.devices.allow: c <nvidia-uvm major from the Proxmox host's /proc/devices>:* rwm")
    lines += [f"#lxc.mount.entry: {path} {path.lstrip('/')} none bind,optional,create=file" for path in wanted]
    lines += ["# on the Proxmox host itself: nvidia and nvidia-uvm loaded at boot and /dev/nvidia-uvm created before",
              "# the CT starts (`nvidia-modprobe -u -c=0`), nvidia-persistenced running; for P2P between the GPUs,",
              "# IOMMU in passthrough mode (iommu=pt) or ACS checked"]
    if box.get("simulated"):
        lines.insert(0, "# SIMULATED host: the majors are its stand-in nodes' (1:3), not a real GPU's")
    return "\n".join(lines)
