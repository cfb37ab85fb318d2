"""A test host that plays CT129's container: an unprivileged LXC container configured the way Proxmox writes one.

The same debootstrapped rootfs as the nspawn host (testbed/simhost.py), booted by Debian's `lxc` with:
- an id map (`lxc.idmap = u/g 0 100000 65536`, Proxmox's): container root is uid 100000 here, with no capability
  in this machine's user namespace, so DevicePolicy= and raising LimitNOFILE/LimitMEMLOCK are silently inert;
- lxcfs over /proc/{meminfo,cpuinfo,...} (`lxc.hook.mount` of Debian's lxcfs package);
- `lxc.mount.auto = proc:mixed sys:mixed cgroup:mixed`, a network namespace of its own (a veth pair this module
  creates, 10.N.0.1 here and 10.N.0.2 in the container; SSH and the services listen there);
- the GPU stand-in device nodes bind-mounted at /dev/nvidia* owned by container root, mode 0660 unless told
  otherwise: what Proxmox's `devN:` passthrough creates without `mode=`/`gid=`;
- nesting on: the uncovered /proc and /sys mounts at /dev/.lxc/{proc,sys} (Debian's nesting.conf, what Proxmox's
  `features: nesting=1` adds besides AppArmor's `allow_nesting`);
- nesting off: Proxmox denies a fresh procfs/sysfs mount through AppArmor, which this kernel lacks (and it refuses
  the BPF LSM's tracing programs). The denial is reproduced with a seccomp rule in the container's LXC profile:
  EACCES, AppArmor's answer, for a mount(2) with exactly MS_NOSUID|MS_NODEV|MS_NOEXEC and no data: the flags and
  NULL data systemd's namespace code passes for the fresh /proc and /sys of a unit with ProtectKernelTunables= or
  ProtectControlGroups=. systemd then fails the unit exactly as on Proxmox ("Failed to set up mount namespacing:
  /run/systemd/unit-root/proc: Permission denied", status 226/NAMESPACE). The rule cannot see the file system
  type, so at boot it also refuses the container's own debugfs/mqueue mounts with the same flags (those units
  fail, the container is "degraded", as a real nesting-less CT often is); see docs/lxc-test-host.md.

    python -m testbed.lxchost up|down|status [--state-dir DIR] [--ssh-port N] [--no-nesting] [--device-mode 0660]
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sglang_deploy.validate import validator_env
from testbed.rootfs import build_rootfs_tarball
from testbed.simhost import (REPO_ROOT, SGLANG_INSTALL, SGLANG_VERSION, SimHost, SimHostError, check_prerequisites,
                             ensure_api_key, log, run_action)

ID_BASE, ID_COUNT = 100000, 65536  # Proxmox's id map for unprivileged containers
LXCFS_DIR = Path("/var/lib/lxcfs")
DEFAULT_STATE_DIR = Path(os.environ.get("SGLANG_DEPLOY_LXCHOST_DIR", REPO_ROOT / ".lxchost"))
DEFAULT_SSH_PORT = 2222
PREREQUISITES = {"lxc-start": "apt-get install lxc", "lxcfs": "apt-get install lxcfs",
                 "newuidmap": "apt-get install uidmap", "unshare": "apt-get install util-linux"}
# Debian's common.seccomp, plus the stand-in for Proxmox's AppArmor denial without nesting (see the docstring).
SECCOMP_NO_NESTING = """2
denylist
reject_force_umount
[all]
kexec_load errno 1
open_by_handle_at errno 1
init_module errno 1
finit_module errno 1
delete_module errno 1
mount errno 13 [3,14,SCMP_CMP_EQ] [4,0,SCMP_CMP_EQ]
"""


def mounted(path: Path) -> bool:
    """A mount point, bind mounts within one file system included (os.path.ismount misses those)."""
    target = str(path.resolve())
    with open("/proc/self/mountinfo") as handle:
        return any(line.split()[4] == target for line in handle)


def ensure_prerequisites() -> None:
    check_prerequisites(PREREQUISITES, "the LXC test host needs root")
    for path in ("/etc/subuid", "/etc/subgid"):  # root may map the container's range (Proxmox's /etc/subuid has it)
        text = Path(path).read_text() if Path(path).exists() else ""
        if f"root:{ID_BASE}:{ID_COUNT}" not in text.split():
            with open(path, "a") as handle:
                handle.write(f"root:{ID_BASE}:{ID_COUNT}\n")
    with open("/run/sglang-deploy-lxcfs.lock", "w") as lock:  # one lxcfs for all test workers
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_lxcfs()


def lxcfs_state(directory: Path = LXCFS_DIR) -> str:
    """"up", "absent" or "stale": a FUSE mount whose lxcfs died (ENOTCONN), which is what a killed CI job leaves."""
    try:
        return "up" if (directory / "proc" / "meminfo").exists() else "absent"
    except OSError as error:
        if error.errno == errno.ENOTCONN:
            return "stale"
        raise


def ensure_lxcfs(directory: Path = LXCFS_DIR) -> None:
    state = lxcfs_state(directory)
    if state == "up":
        return
    if state == "stale":
        log(f"lxcfs at {directory} lost its process; detaching the stale mount and starting it again")
        subprocess.run(["umount", "-l", str(directory)], check=True, capture_output=True)
    directory.mkdir(parents=True, exist_ok=True)
    pidfile = "/run/lxcfs.pid" if directory == LXCFS_DIR else f"{directory}.pid"  # lxcfs locks its pid file
    subprocess.Popen(["lxcfs", "--pidfile", pidfile, str(directory)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while lxcfs_state(directory) != "up":
        if time.monotonic() > deadline:
            raise SimHostError(f"lxcfs did not come up at {directory} (is /dev/fuse there?)")
        time.sleep(0.1)


@dataclass
class LxcHost(SimHost):
    machine: str = "ct129-lxc"
    nesting: bool = True
    device_mode: int = 0o660  # Proxmox's devN: default (no mode=)

    @property
    def network(self) -> int:
        return 200 + self.ssh_port % 50  # 10.<network>.0.0/24: one per host, derived from its (per-worker) port

    @property
    def address(self) -> str:  # type: ignore[override]
        return f"10.{self.network}.0.2"

    @property
    def gateway(self) -> str:
        """This machine's end of the container's veth: where the container reaches a service of this machine (its
        own loopback is not this machine's)."""
        return f"10.{self.network}.0.1"

    @property
    def veth(self) -> str:
        return f"vsgl{self.ssh_port}"

    @property
    def config(self) -> Path:
        return self.state_dir / "config"

    def _extract_rootfs(self) -> None:
        """Unpacked inside the id map, so container root owns its files as on Proxmox (uid 100000 here)."""
        os.chown(self.rootfs, ID_BASE, ID_BASE)
        with open(build_rootfs_tarball(), "rb") as tarball:
            result = subprocess.run(
                ["unshare", "--user", f"--map-users={ID_BASE},0,{ID_COUNT}", f"--map-groups={ID_BASE},0,{ID_COUNT}",
                 "--setuid=0", "--setgid=0", "tar", "--numeric-owner", "--exclude=./dev/*", "-C", str(self.rootfs),
                 "-xf", "-"], stdin=tarball, capture_output=True, text=True)
        if result.returncode != 0:
            raise SimHostError(f"unpacking the rootfs in the id map failed: {result.stderr[-500:]}")

    def _shift_new_files(self) -> None:
        """What this machine wrote into the rootfs (keys, config, the GPU stand-ins) belongs to container root."""
        subprocess.run(["find", str(self.rootfs), "-xdev", "(", "-uid", "0", "-o", "-gid", "0", ")",
                        "-exec", "chown", "-h", f"{ID_BASE}:{ID_BASE}", "{}", "+"], check=True)

    def write_config(self) -> None:
        lines = [
            "lxc.include = /usr/share/lxc/config/common.conf",
            "lxc.include = /usr/share/lxc/config/userns.conf",
            "lxc.arch = x86_64",
            f"lxc.idmap = u 0 {ID_BASE} {ID_COUNT}",
            f"lxc.idmap = g 0 {ID_BASE} {ID_COUNT}",
            f"lxc.rootfs.path = dir:{self.rootfs}",
            f"lxc.uts.name = {self.machine}",
            "lxc.net.0.type = veth",
            f"lxc.net.0.veth.pair = {self.veth}",
            f"lxc.net.0.ipv4.address = {self.address}/24",
            "lxc.net.0.flags = up",
            # systemd's own poweroff signal, as LXC's archlinux.common.conf sets for its systemd guests: with the
            # default SIGPWR, lxc-stop sometimes waited out its 30 s before killing the container
            "lxc.signal.halt = SIGRTMIN+4",
            "lxc.apparmor.profile = unconfined",  # this kernel has no AppArmor (see the docstring)
            f"lxc.log.file = {self.state_dir / 'lxc.log'}",
            "lxc.log.level = WARN",
            f"lxc.console.logfile = {self.console_log}",
        ]
        if self.nesting:
            lines += ["lxc.mount.entry = proc dev/.lxc/proc proc create=dir,optional 0 0",
                      "lxc.mount.entry = sys dev/.lxc/sys sysfs create=dir,optional 0 0"]
        else:
            seccomp = self.state_dir / "no-nesting.seccomp"
            seccomp.write_text(SECCOMP_NO_NESTING)
            lines.append(f"lxc.seccomp.profile = {seccomp}")
        if self.simulated:
            # LXC mounts the entries as container root, which cannot traverse this machine's /root (0700): the
            # install is bound into the state directory first.
            staged = self.state_dir / "sglang-install"
            staged.mkdir(exist_ok=True)
            if not mounted(staged):
                subprocess.run(["mount", "--bind", "-o", "ro", str(validator_env.env_dir(SGLANG_VERSION)), str(staged)],
                               check=True)
            lines.append(f"lxc.mount.entry = {staged} {SGLANG_INSTALL.lstrip('/')} none bind,ro,create=dir 0 0")
            # /dev/fuse (0666), the device outside DeviceAllow the preflight's sandbox report tries to open
            lines.append("lxc.mount.entry = /dev/fuse dev/fuse none bind,create=file,optional 0 0")
            for node in self.device_nodes(owner=ID_BASE):
                lines.append(f"lxc.mount.entry = {node} dev/{node.name} none bind,create=file 0 0")
        self.config.write_text("\n".join(lines) + "\n")

    def nsenter(self) -> list[str]:
        """As container root, in its user, mount and pid namespaces (lxc-info's pid is its systemd itself). This
        machine's root in its mount namespace alone gets "mount: ...: must be superuser to use mount" from the
        container's util-linux; container root may mount a tmpfs there, as root in a Proxmox CT may."""
        pid = self.pid()
        if not pid:
            raise SimHostError("the container's systemd is not running")
        return ["nsenter", "-t", str(pid), "-U", "-m", "-p"]

    def pid(self) -> int | None:
        result = subprocess.run(["lxc-info", "-n", self.machine, "-P", str(self.state_dir), "-p", "-H"],
                                capture_output=True, text=True)
        text = result.stdout.strip()
        return int(text) if result.returncode == 0 and text.isdigit() else None

    def bind_mounts(self) -> list[str]:
        return []  # in the LXC config instead

    def up(self, fresh: bool = False, timeout: float = 90) -> None:
        ensure_prerequisites()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o755)  # container root must traverse to its rootfs
        closed = [str(p) for p in self.state_dir.parents if not os.stat(p).st_mode & 0o001]
        if closed:
            raise SimHostError(f"{self.state_dir}: container root (uid {ID_BASE} here) cannot traverse {closed[0]} "
                               "to reach its rootfs; use a state directory under a world-traversable path")
        ensure_api_key(self.state_dir)
        if self.pid():
            log(f"already running (pid {self.pid()}, {self.address})")
            return
        self._prepare_rootfs(fresh)
        self._shift_new_files()
        self.write_config()
        # The container is not running (above), so a host-side veth of this host's name is a leftover of a run that
        # was killed before it stopped its container; lxc-start would fail on it with "File exists".
        if subprocess.run(["ip", "link", "show", self.veth], capture_output=True).returncode == 0:
            log(f"removing the stale {self.veth} a killed run left")
            subprocess.run(["ip", "link", "delete", self.veth], capture_output=True)
        result = subprocess.run(["lxc-start", "-n", self.machine, "-P", str(self.state_dir), "-f", str(self.config),
                                 "-d"], capture_output=True, text=True)
        if result.returncode != 0:
            raise SimHostError(f"lxc-start failed: {result.stderr.strip()[-800:]}; see {self.state_dir / 'lxc.log'}")
        subprocess.run(["ip", "addr", "replace", f"{self.gateway}/24", "dev", self.veth], check=True)
        subprocess.run(["ip", "link", "set", self.veth, "up"], check=True)
        details = f"LXC, unprivileged, nesting {'on' if self.nesting else 'off'}, devices {self.device_mode:04o}; "
        self.wait_booted(timeout, "the LXC container", details)

    def down(self, timeout: float = 30) -> None:
        if not self.pid():
            self.unmount()
            log(f"not running ({self.machine})")
            return
        subprocess.run(["lxc-stop", "-n", self.machine, "-P", str(self.state_dir), "-t", str(int(timeout))],
                       capture_output=True)
        if self.pid():
            subprocess.run(["lxc-stop", "-n", self.machine, "-P", str(self.state_dir), "-k"], capture_output=True)
        self.unmount()
        log(f"down ({self.machine})")

    def unmount(self) -> None:
        staged = self.state_dir / "sglang-install"
        while mounted(staged):
            if subprocess.run(["umount", str(staged)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "--lazy", str(staged)], check=False)

    def set_device_mode(self, mode: int) -> None:
        """Change the passed-through nodes' mode (what editing a devN: line and restarting the CT would do, minus
        the restart: the bind mounts show the host-side nodes)."""
        self.device_mode = mode
        self.device_nodes(owner=ID_BASE)

    def info(self) -> dict:
        return {**super().info(), "running": bool(self.pid()), "kind": "lxc", "nesting": self.nesting,
                "device_mode": f"{self.device_mode:04o}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lxchost", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--ssh-port", type=int, default=DEFAULT_SSH_PORT)
    parser.add_argument("--no-nesting", action="store_true", help="play a CT without features: nesting=1")
    parser.add_argument("--device-mode", default="0660", help="the GPU nodes' mode (Proxmox's default 0660)")
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args(argv)
    host = LxcHost(state_dir=args.state_dir.resolve(), ssh_port=args.ssh_port, nesting=not args.no_nesting,
                   device_mode=int(args.device_mode, 8))
    return run_action(host, args.action, args.fresh, "lxchost")


if __name__ == "__main__":
    sys.exit(main())
