"""The unit's sandbox: systemd directives that are safe for CUDA, NCCL and SGLang's JIT caches.

Each entry is (directive, value(s), why). A profile may relax named directives
(`service.relax: [ProtectHome]`); the unit then lists them in a comment. Not used at all, because they
break CUDA or its JIT (the template says so too): MemoryDenyWriteExecute, PrivateDevices, PrivateUsers,
PrivateNetwork, ProcSubset=pid. See ../shared/notes/security-review.md §1 for the measurements.
"""

from __future__ import annotations

HARDENING: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("NoNewPrivileges", ("yes",),
     "no privilege gain through setuid; this also defeats the setuid nvidia-modprobe, so nvidia-uvm and "
     "/dev/nvidia-uvm must exist before the start (provisioning loads nvidia-uvm at boot)"),
    ("ProtectSystem", ("strict",), "the whole file system is read-only except the paths below"),
    ("ReadWritePaths", ("-{state_dir}", "-{cache_dir}"),
     "state (HOME: ~/.triton, ~/.cache/flashinfer, ~/.nv) and caches (HF_HOME, SGLANG_CACHE_DIR, Triton and "
     "Inductor JIT caches)"),
    ("ProtectHome", ("yes",), "no access to /home, /root, /run/user"),
    ("PrivateTmp", ("yes",), "a private /tmp (nvcc temporaries); /dev/shm stays shared for NCCL"),
    ("PrivateMounts", ("yes",), "mounts of the service stay in its namespace"),
    ("ProtectKernelTunables", ("yes",), "CUDA and NCCL only read /proc/sys and /sys"),
    ("ProtectKernelModules", ("yes",), "no module loading from the service"),
    ("ProtectKernelLogs", ("yes",), "no kernel log access"),
    ("ProtectControlGroups", ("yes",), "cgroup tree read-only"),
    ("ProtectClock", ("yes",), "safe only together with the explicit DevicePolicy/DeviceAllow below"),
    ("ProtectHostname", ("yes",), "no hostname changes"),
    ("RestrictAddressFamilies", ("AF_UNIX AF_INET AF_INET6 AF_NETLINK",),
     "HTTP and NCCL bootstrap (INET), NCCL proxy and FD passing (UNIX), getifaddrs (NETLINK)"),
    ("RestrictNamespaces", ("yes",), "no new namespaces"),
    ("RestrictRealtime", ("yes",), "no realtime scheduling"),
    ("RestrictSUIDSGID", ("yes",), "no setuid/setgid files"),
    ("LockPersonality", ("yes",), "no execution domain changes"),
    ("SystemCallArchitectures", ("native",), "native system calls only"),
    ("SystemCallFilter", ("@system-service",),
     "includes @ipc, @memlock, @process (pidfd_getfd for NCCL cuMem) and @resources (mbind, set_mempolicy)"),
    ("SystemCallErrorNumber", ("EPERM",), "a filtered call fails with EPERM instead of killing the server"),
    ("CapabilityBoundingSet", ("",), "no capabilities at all"),
    ("AmbientCapabilities", ("",), "no capabilities at all"),
    ("DevicePolicy", ("closed",), "only the standard pseudo devices and the NVIDIA devices below"),
    ("DeviceAllow", ("char-nvidia* rw",),
     "every NVIDIA character device group of /proc/devices: nvidia-frontend (/dev/nvidiactl, /dev/nvidia[0-9]*), "
     "nvidia-uvm (/dev/nvidia-uvm*), nvidia-caps (/dev/nvidia-caps/*), nvidia-nvlink, nvidia-nvswitch; the "
     "groups are resolved when the unit starts, so nvidia-uvm must be loaded before"),
    ("RemoveIPC", ("yes",), "IPC objects of the service user go away when it stops"),
    ("MemoryMax", ("90%",),
     "a memory limit derived from the host (systemd: 90 % of the memory the host, or its container, has): whatever "
     "a client makes the server grow (stored responses, media, metric series) hits this cgroup, not sshd and "
     "journald (security review 4, B6)"),
    ("UMask", ("0077",), "files the server writes (caches, logs) are private to the service user"),
)
DIRECTIVES = tuple(name for name, _, _ in HARDENING)
# Relaxing one relaxes the others of its pair (a DeviceAllow without DevicePolicy opens nothing).
COUPLED = {"DevicePolicy": ("DeviceAllow",), "DeviceAllow": ("DevicePolicy",),
           "ProtectSystem": ("ReadWritePaths",), "SystemCallFilter": ("SystemCallErrorNumber",)}


def relaxed_set(relax) -> set[str]:
    names = set(relax)
    for name in list(names):
        names.update(COUPLED.get(name, ()))
    return names


def directives(state_dir: str, cache_dir: str, relax=(), comments: bool = True) -> tuple[list[str], list[str]]:
    """(lines of the [Service] section, names of the relaxed directives); comments: each directive's why."""
    relaxed = relaxed_set(relax)
    lines = []
    for name, values, why in HARDENING:
        if name in relaxed:
            continue
        if comments:
            lines.append(f"# {why}")
        lines.append(f"{name}=" + " ".join(v.format(state_dir=state_dir, cache_dir=cache_dir) for v in values))
    return lines, [name for name in DIRECTIVES if name in relaxed]
