"""The simulated host's root file system: a minimal Debian bookworm with systemd and sshd, built once with mmdebstrap
(debootstrap where it is missing) and cached as a tarball (shared by every checkout on this machine), and unpacked once
as a fleet's shared lower layer."""

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
# 3: built by mmdebstrap (the same packages; no downloaded .debs kept in /var/cache/apt/archives).
ROOTFS_VERSION = 3
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


# The build's scratch directory: in memory (/dev/shm) where it has room, as dpkg's many small writes and the removal
# of the tree afterwards were most of the build's wall time on this machine's disk. Timed from empty caches with the
# machine loaded (load 5-8), 2026-12-06: debootstrap on disk 102 s, debootstrap in /dev/shm 80 s, mmdebstrap on disk
# 82-87 s, mmdebstrap in /dev/shm 41-46 s; the download itself took about 1 s of it.
SCRATCH_NEEDS = 2 << 30  # bytes free in /dev/shm (the tree is about 400 MB)
MERGED_USR_HOOK = Path("/usr/share/mmdebstrap/hooks/merged-usr")  # usr-is-merged, as debootstrap sets /usr up


def scratch_dir() -> Path:
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and shutil.disk_usage(shm).free >= SCRATCH_NEEDS:
            return shm
    except OSError:
        pass
    return ROOTFS_TARBALL.parent


def _debootstrap() -> None:
    partial = ROOTFS_TARBALL.with_suffix(".partial")
    if shutil.which("mmdebstrap"):
        print("[simhost] building Debian bookworm with mmdebstrap (under a minute, cached afterwards)",
              file=sys.stderr, flush=True)
        hook = [f"--hook-dir={MERGED_USR_HOOK}"] if MERGED_USR_HOOK.is_dir() else []
        # the package lists are kept, as debootstrap keeps them; every fresh copy makes its own machine id at boot
        command = ["mmdebstrap", "--quiet", "--variant=minbase", "--format=tar", *hook,
                   "--include=" + ",".join(ROOTFS_PACKAGES), "--skip=cleanup/apt/lists",
                   "--customize-hook=truncate -s 0 \"$1/etc/machine-id\"", "bookworm", str(partial), DEBIAN_MIRROR]
        result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                env={**os.environ, "TMPDIR": str(scratch_dir())})
        if result.returncode != 0:  # (its hooks' chatter is shown only here)
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"mmdebstrap failed (exit {result.returncode}; SGLANG_DEPLOY_DEBIAN_MIRROR="
                               f"{DEBIAN_MIRROR}): {' '.join(command)}\n{result.stderr[-3000:]}")
        partial.rename(ROOTFS_TARBALL)
        return
    build_dir = scratch_dir() / f"build-{ROOTFS_TARBALL.stem}-{os.getpid()}"
    shutil.rmtree(build_dir, ignore_errors=True)
    print(f"[simhost] debootstrapping Debian bookworm into {build_dir} (about a minute, cached afterwards)",
          file=sys.stderr, flush=True)
    try:
        subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=" + ",".join(ROOTFS_PACKAGES),
             "bookworm", str(build_dir), DEBIAN_MIRROR],
            check=True, stdout=subprocess.DEVNULL,
        )
        # Every fresh copy should generate its own machine id at boot.
        (build_dir / "etc/machine-id").write_text("")
        subprocess.run(["tar", "-C", str(build_dir), "-cf", str(partial), "."], check=True)
        partial.rename(ROOTFS_TARBALL)
    finally:
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
