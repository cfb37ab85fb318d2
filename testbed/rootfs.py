"""The simulated host's root file system: a minimal Debian bookworm with systemd and sshd, debootstrapped once and
cached as a tarball (shared by every checkout on this machine), and unpacked once as a fleet's shared lower layer."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sglang_deploy.validate.validator_env import CACHE_DIR

DEBIAN_MIRROR = os.environ.get("SGLANG_DEPLOY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
ROOTFS_PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv",
    "iproute2", "sudo", "ca-certificates", "curl", "procps",
    # Debian's node_exporter: the perf watch's textfile metrics are read back through it (simhost.py configures
    # its listen address per host, off node_exporter's default 9100).
    "prometheus-node-exporter",
]
# Bump when ROOTFS_PACKAGES or the rootfs recipe changes, so a stale cached tarball is not reused.
ROOTFS_VERSION = 2
# The package list's hash is part of the name too: the cache is shared, and two branches that bump the version
# to the same number with different packages must not reuse each other's tarball.
_PACKAGES_DIGEST = hashlib.sha256(",".join(ROOTFS_PACKAGES).encode()).hexdigest()[:8]
ROOTFS_TARBALL = CACHE_DIR / "simhost" / f"bookworm-rootfs-v{ROOTFS_VERSION}-{_PACKAGES_DIGEST}.tar"


def build_rootfs_tarball() -> Path:
    """Debootstrap a minimal bookworm with systemd and sshd once; later calls reuse the tarball.
    Several processes (parallel test workers) may ask at once: one builds, the others wait for it."""
    if ROOTFS_TARBALL.exists():
        return ROOTFS_TARBALL
    ROOTFS_TARBALL.parent.mkdir(parents=True, exist_ok=True)
    with open(ROOTFS_TARBALL.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ROOTFS_TARBALL.exists():
            _debootstrap()
    return ROOTFS_TARBALL


def _debootstrap() -> None:
    build_dir = ROOTFS_TARBALL.parent / f"build-{ROOTFS_TARBALL.stem}-{os.getpid()}"
    shutil.rmtree(build_dir, ignore_errors=True)
    print(f"[simhost] debootstrapping Debian bookworm into {build_dir} (about a minute, cached afterwards)",
          file=sys.stderr, flush=True)
    subprocess.run(
        ["debootstrap", "--variant=minbase", "--include=" + ",".join(ROOTFS_PACKAGES),
         "bookworm", str(build_dir), DEBIAN_MIRROR],
        check=True, stdout=subprocess.DEVNULL,
    )
    # Every fresh copy should generate its own machine id at boot.
    (build_dir / "etc/machine-id").write_text("")
    partial = ROOTFS_TARBALL.with_suffix(".partial")
    subprocess.run(["tar", "-C", str(build_dir), "-cf", str(partial), "."], check=True)
    partial.rename(ROOTFS_TARBALL)
    shutil.rmtree(build_dir, ignore_errors=True)


def shared_lower_rootfs() -> Path:
    """The cached rootfs tarball unpacked once, next to it: the read-only lower layer every fleet host shares."""
    tarball = build_rootfs_tarball()
    lower = tarball.with_suffix("")
    done = lower.with_name(lower.name + ".complete")
    if done.exists():
        return lower
    with open(tarball.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(lower, ignore_errors=True)
            lower.mkdir(parents=True)
            subprocess.run(["tar", "-C", str(lower), "-xf", str(tarball)], check=True)
            done.touch()
    return lower
