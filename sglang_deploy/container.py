"""What a container host is, from the facts roles/facts.py GpuHost reads, and what Proxmox must give CT129.

Pure functions (fixture-tested in tests/test_container_logic.py): the facts are text the host printed.
"""

from __future__ import annotations

import re

from .hostside.preflight import findings as preflight_findings, probe as preflight_probe
from .units import UVM_UNIT  # noqa: F401 - the device-node unit's name

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



def proxmox_nodes(facts: dict, gpus: int | None = None) -> list[str]:
    """Every node the server needs: each GPU the profile needs (0..gpus-1) whether visible now or not, any other GPU
    node the container sees, the control node and uvm's two."""
    box = facts.get("lxc") or {}
    seen = {int(n["path"][len("/dev/nvidia"):]) for n in box.get("nodes") or []
            if re.fullmatch(r"/dev/nvidia[0-9]+", n["path"])}
    count = gpus or len(facts.get("gpus") or []) or len(seen) or 2
    numbered = [f"/dev/nvidia{i}" for i in sorted(seen | set(range(count)))]
    return numbered + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def proxmox_config(facts: dict, container_id: int | str | None = None, gpus: int | None = None) -> str:
    """Commands to paste into the Proxmox host's shell for CT <CTID>: no comment lines (pasted into
    /etc/pve/lxc/<CTID>.conf, a `#` line becomes the CT's Notes); proxmox_notes() says why and the alternatives.

    A host unit creates the nodes before the containers start (a devN whose host node is missing stops `pct start`),
    each node is passed with the container's video group (gid first; mode=0666 is the alternative in the notes),
    and nesting is added to the container's current features, keeping the others (keyctl=1, fuse=1, ...)."""
    box = facts.get("lxc") or {}
    ctid = container_id or "<CTID>"
    video = box.get("video_gid") or 44
    nodes = proxmox_nodes(facts, gpus)
    minors = [path[len("/dev/nvidia"):] for path in nodes if re.fullmatch(r"/dev/nvidia[0-9]+", path)]
    lines = [f"cat > /etc/systemd/system/{UVM_UNIT} <<'EOF'",
             "[Unit]",
             "Description=NVIDIA device nodes before the containers start (sglang-deploy)",
             "After=systemd-modules-load.service",
             "Before=pve-guests.service",
             "[Service]",
             "Type=oneshot",
             "RemainAfterExit=yes",
             *[f"ExecStart=/usr/bin/nvidia-modprobe{' -u' if i == 0 else ''} -c={minor}" for i, minor in enumerate(minors)],
             "[Install]",
             "WantedBy=multi-user.target",
             "EOF",
             "printf 'nvidia\\nnvidia-uvm\\n' > /etc/modules-load.d/nvidia-uvm.conf",
             f"systemctl daemon-reload && systemctl enable --now {UVM_UNIT}"]
    lines += [f"pct set {ctid} --dev{i} {path},gid={video}" for i, path in enumerate(nodes)]
    lines.append(f"pct set {ctid} --features \"$({{ pct config {ctid} | sed -n 's/^features: //p' | tr ',' '\\n' "
                 "| grep -v -e '^nesting=' -e '^$'; echo nesting=1; } | paste -sd, -)\"")
    lines.append(f"pct reboot {ctid}")
    return "\n".join(lines)


def proxmox_notes(facts: dict, container_id: int | str | None = None, gpus: int | None = None) -> str:
    """Why each command of proxmox_config() is there, and the alternatives (printed apart from the commands)."""
    box = facts.get("lxc") or {}
    ctid = container_id or "<CTID>"
    video = box.get("video_gid") or 44
    nodes = proxmox_nodes(facts, gpus)
    frontend = (box.get("majors") or {}).get("nvidia-frontend", 195)
    uvm = (box.get("majors") or {}).get("nvidia-uvm")
    lines = [
        f"On the Proxmox host, for CT {ctid} (PVE 8.1 or later), paste the commands; what they do:",
        f"- the unit {UVM_UNIT} loads nvidia and nvidia-uvm and creates /dev/nvidia-uvm and every GPU's node before "
        "the containers start: a devN whose host node is missing makes `pct start` fail (\"Device ... does not exist\"), "
        "and the sandboxed service cannot create /dev/nvidia-uvm itself",
        f"- devN with gid={video} (the container's video group, which the service has): Proxmox creates the node 0660, "
        "group video, with the major:minor read at every CT start (nvidia-uvm's major is dynamic); without gid= or "
        "mode= it is 0660 root:root and the service user cannot open it",
        f"- if gid= does not suit: mode=0666 instead, e.g. `pct set {ctid} --dev0 {nodes[0]},mode=0666`",
        f"- dev0..dev{len(nodes) - 1} replace what the CT has under those names: check `pct config {ctid}` first and "
        "remove old lxc.mount.entry / lxc.cgroup2.devices.allow lines for these nodes from "
        f"/etc/pve/lxc/{ctid}.conf",
        "- features: nesting=1 is added to the CT's current features (the others are kept): the unit's "
        "ProtectKernelTunables/ProtectControlGroups mount a fresh /proc and /sys, which Proxmox's AppArmor profile "
        "denies without it (226/NAMESPACE at every start)",
        "- for P2P between the GPUs: IOMMU in passthrough mode (iommu=pt on the kernel command line) or ACS checked",
        f"Before PVE 8.1 (no devN): in /etc/pve/lxc/{ctid}.conf `lxc.cgroup2.devices.allow: c {frontend}:* rwm`, "
        + (f"`lxc.cgroup2.devices.allow: c {uvm}:* rwm` (nvidia-uvm's major now: check /proc/devices after every host "
           "reboot)" if uvm else "the same for nvidia-uvm's major from the host's /proc/devices")
        + ", and per node `lxc.mount.entry: /dev/nvidiaX dev/nvidiaX none bind,optional,create=file` (make the nodes "
        "0666 on the host)",
    ]
    if box.get("simulated"):
        lines.insert(0, "SIMULATED host: the majors are its stand-in nodes' (1:3), not a real GPU's")
    return "\n".join(lines)
