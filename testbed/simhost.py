"""The simulated CT129: a Debian bookworm container with its own systemd, reachable over SSH on loopback.

The container is booted with systemd-nspawn from a debootstrapped rootfs (cached as a tarball) and
shares this machine's network namespace, so its sshd and the services it runs listen on 127.0.0.1.
Only the GPU server is simulated (``sglang_deploy.sim``); systemd, SSH and HTTP are real.

    python -m testbed.simctl up|down|status [--state-dir DIR] [--ssh-port N] [--fresh]
    python -m testbed.simctl up|down|status --count N [--state-dir DIR] [--ssh-port BASE]
                                   [--service-port BASE] [--machine PREFIX]     (a fleet: sim_fleet.py)
"""

from __future__ import annotations

import json
import secrets
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sglang_deploy import releases
from sglang_deploy.validate import gpu_facts, validator_env
from testbed import sglang_env
from testbed.rootfs import build_rootfs_tarball

REPO_ROOT = Path(__file__).resolve().parent.parent
PREREQUISITES = {
    "debootstrap": "apt-get install debootstrap",
    "systemd-nspawn": "apt-get install systemd-container",
    "ssh": "apt-get install openssh-client",
    "ssh-keygen": "apt-get install openssh-client",
    "tar": "apt-get install tar",
}
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
NODE_EXPORTER_PORT_OFFSET = 7000
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"  # Debian's default, and the watch's
DEFAULT_STATE_DIR = Path(os.environ.get("SGLANG_DEPLOY_SIMHOST_DIR", REPO_ROOT / ".simhost"))
DEFAULT_SSH_PORT = int(os.environ.get("SGLANG_DEPLOY_SIMHOST_PORT", "2222"))


SGLANG_VERSION = releases.newest_reviewed()  # the simulated host's SGLang install (the profiles' pin)
SGLANG_INSTALL = f"/opt/sglang-sim/sglang-{SGLANG_VERSION}"  # where it is mounted in the container
SGLANG_PYTHON = "/opt/sglang-sim/python"  # the container's python3 in a virtualenv that adds the install


class SimHostError(RuntimeError):
    pass


def ensure_sglang_install() -> Path:
    """SGLang's front end for the simulated host, built once (testbed/sglang_env.py); returns the GPU stand-in's
    directory (the stub libcuda.so.1)."""
    sglang_env.ensure(SGLANG_VERSION)
    return validator_env.standin_dir(SGLANG_VERSION)


def log(message: str) -> None:
    print(f"[simhost] {message}", file=sys.stderr, flush=True)


def check_prerequisites(tools: dict = PREREQUISITES,
                        no_root: str = "the simulated host needs root (debootstrap and systemd-nspawn); run as root"
                        ) -> None:
    """Root, and each of `tools` (tool -> how to install it) on PATH."""
    if os.geteuid() != 0:
        raise SimHostError(no_root)
    missing = [f"{tool} ({hint})" for tool, hint in tools.items() if not shutil.which(tool)]
    if missing:
        raise SimHostError("missing prerequisites: " + ", ".join(missing))


def ensure_api_key(state_dir: Path) -> Path:
    """The test host's API key (mode 0600), made once per state directory."""
    api_key = state_dir / "api_key"
    if not api_key.exists():
        api_key.touch(mode=0o600)
        api_key.write_text("sk-sim-" + secrets.token_urlsafe(24) + "\n")
    return api_key


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@dataclass
class SimHost:
    state_dir: Path = DEFAULT_STATE_DIR
    ssh_port: int = DEFAULT_SSH_PORT
    machine: str = "ct129-sim"
    # False: a bare Debian container without the simulator marker, the stand-in for a fresh LXC container
    # that provisioning tests install onto.
    simulated: bool = True
    # A fleet's hosts share one extracted rootfs (read-only lower layer of an overlayfs; each host writes only
    # its own upper layer) instead of unpacking the tarball once per host.
    overlay_lower: Path | None = None
    # The mode of the GPU stand-in device nodes (/dev/nvidia*): NVIDIA's own 0666 by default.
    device_mode: int = 0o666
    # The model-only simulator's modelled start (weight loading, graph capture: SGLANG_SIM_START_SECONDS, 3 s by
    # default) on this host, for every unit its systemd starts (DefaultEnvironment); a release's environment file
    # that sets the variable wins. None: the simulator's default.
    start_seconds: float | None = None
    address = "127.0.0.1"  # where its sshd and services listen (this machine's network namespace)

    @property
    def rootfs(self) -> Path:
        return self.state_dir / "rootfs"

    @property
    def node_exporter_port(self) -> int:
        """node_exporter's port on loopback: the containers share this machine's network namespace, so it is
        derived from the (per-host, per-worker) SSH port instead of node_exporter's default 9100."""
        return self.ssh_port + NODE_EXPORTER_PORT_OFFSET

    @property
    def key(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def pidfile(self) -> Path:
        return self.state_dir / "nspawn.pid"

    @property
    def console_log(self) -> Path:
        return self.state_dir / "console.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text())
        except (FileNotFoundError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return None
        return pid if b"systemd-nspawn" in cmdline and str(self.rootfs).encode() in cmdline else None

    def ssh_command(self, *remote: str) -> list[str]:
        """The harness's own checks over real SSH (the tool itself connects with pyinfra's paramiko). One master
        connection per host is shared by the calls of the next 15 s (OpenSSH's ControlMaster): a test suite makes
        hundreds of these calls, and each new connection's key exchange cost about 0.1 CPU-s on each side."""
        return [
            "ssh", "-i", str(self.key), "-p", str(self.ssh_port),
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
            "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "ConnectTimeout=3",
            "-o", "ControlMaster=auto", "-o", "ControlPersist=15",
            "-o", f"ControlPath=/tmp/sglang-deploy-ssh-%C",  # %C: a hash of host, port and user (a short socket path)
            f"root@{self.address}", *remote,
        ]

    def ssh(self, *remote: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(self.ssh_command(*remote), capture_output=True, text=True,
                              check=check, timeout=timeout)

    def _mount_overlay(self, fresh: bool) -> None:
        upper, work = self.state_dir / "upper", self.state_dir / "work"
        if os.path.ismount(self.rootfs):
            subprocess.run(["umount", str(self.rootfs)], check=True)
        if fresh:
            shutil.rmtree(upper, ignore_errors=True)
            self.known_hosts.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        for directory in (upper, work, self.rootfs):
            directory.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={self.overlay_lower},upperdir={upper},workdir={work}", str(self.rootfs)],
                       check=True)
        # The shared rootfs carries debootstrap's /var/lib/dbus/machine-id, which systemd adopts when
        # /etc/machine-id is empty: without an id of its own, every host of the fleet would have the same one.
        machine_id = self.rootfs / "etc/machine-id"
        if not machine_id.read_text().strip():
            identity = secrets.token_hex(16) + "\n"
            for path in (machine_id, self.rootfs / "var/lib/dbus/machine-id"):
                path.unlink(missing_ok=True)
                path.write_text(identity)
                path.chmod(0o444)

    def _prepare_rootfs(self, fresh: bool) -> None:
        if self.overlay_lower is not None:
            self._mount_overlay(fresh)
        elif fresh or not self.rootfs.exists():
            shutil.rmtree(self.rootfs, ignore_errors=True)
            self.known_hosts.unlink(missing_ok=True)
            self.rootfs.mkdir(parents=True)
            self._extract_rootfs()
        if not self.key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sglang-deploy-simhost",
                            "-f", str(self.key)], check=True)
        ssh_dir = self.rootfs / "root/.ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        (ssh_dir / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        (ssh_dir / "authorized_keys").chmod(0o600)
        (self.rootfs / "etc/hostname").write_text(self.machine + "\n")
        (self.rootfs / "etc/ssh/sshd_config.d/simhost.conf").write_text(
            f"Port {self.ssh_port}\nListenAddress {self.address}\nPasswordAuthentication no\n"
        )
        (self.rootfs / "etc/default/prometheus-node-exporter").write_text(
            f'ARGS="--web.listen-address={self.address}:{self.node_exporter_port} '
            f'--collector.textfile.directory={TEXTFILE_DIR}"\n')
        manager = self.rootfs / "etc/systemd/system.conf.d/simhost.conf"
        if self.start_seconds is None:
            manager.unlink(missing_ok=True)
        else:
            manager.parent.mkdir(parents=True, exist_ok=True)
            manager.write_text(f"[Manager]\nDefaultEnvironment=SGLANG_SIM_START_SECONDS={self.start_seconds:g}\n")
        # A marker the deploy reads to say loudly that this host is simulated.
        if self.simulated:
            (self.rootfs / "etc/sglang-deploy-simulated").write_text(
                "This host is the simulated CT129 (systemd-nspawn container): its GPU server is SGLang's own front end "
                "with a modelled Scheduler, or the model-only simulator (sglang_deploy.sim).\n"
            )
            self._install_gpus()

    def _extract_rootfs(self) -> None:
        subprocess.run(["tar", "-C", str(self.rootfs), "-xf", str(build_rootfs_tarball())], check=True)

    DEVICE_NODES = ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1")

    def device_nodes(self, owner: int = 0) -> list[Path]:
        """Stand-ins for the GPU device nodes the server opens, made on this machine and bound into the container
        at /dev/<name>: character devices with /dev/null's numbers (1:3: they open, and nothing can be done
        through them), mode device_mode. The preflight opens them as the service user."""
        directory = self.state_dir / "devices"
        directory.mkdir(parents=True, exist_ok=True)
        nodes = []
        for name in self.DEVICE_NODES:
            node = directory / name
            if not node.exists():
                os.mknod(node, 0o600 | __import__("stat").S_IFCHR, os.makedev(1, 3))
            os.chown(node, owner, owner)
            os.chmod(node, self.device_mode)
            nodes.append(node)
        return nodes

    def _install_gpus(self) -> None:
        """The simulated host's "GPUs": their facts (2x RTX A6000), and the driver pieces SGLang meets where a real
        host has them: nvidia-smi in /usr/bin and libcuda.so.1 in the library path (stand-ins from
        sglang_deploy/gpu_standin; no GPU work can run through them). The SGLang install's torch.cuda stand-in
        reads the same facts (testbed/sglang_env.py)."""
        standin = ensure_sglang_install()
        facts = self.rootfs / sglang_env.HOST_GPU_FACTS.lstrip("/")
        facts.parent.mkdir(parents=True, exist_ok=True)
        facts.write_text(gpu_facts.facts_json(gpu_facts.model("a6000"), 2) + "\n")
        smi = self.rootfs / "usr/bin/nvidia-smi"
        shutil.copy(REPO_ROOT / "sglang_deploy/gpu_standin/nvidia-smi", smi)
        smi.chmod(0o755)
        libdir = self.rootfs / "usr/lib/x86_64-linux-gnu"
        shutil.copy(standin / "lib" / "libcuda.so.1", libdir / "libcuda.so.1")
        subprocess.run(["ldconfig", "-r", str(self.rootfs)], check=False, capture_output=True)
        # The host's own python3 runs SGLang, from a virtualenv whose .pth adds the mounted install.
        venv = self.rootfs / SGLANG_PYTHON.lstrip("/")
        if not (venv / "bin" / "python").exists():
            subprocess.run(["chroot", str(self.rootfs), "python3", "-m", "venv", "--without-pip", SGLANG_PYTHON],
                           check=True, capture_output=True)
        site = next((venv / "lib").glob("python3*/site-packages"))
        (site / "sglang-install.pth").write_text(sglang_env.interpreter_pth(SGLANG_INSTALL, SGLANG_VERSION))

    def bind_mounts(self) -> list[str]:
        """The simulated host's SGLang install, read-only: the validator env with its front-end layer, run by the
        host's own python3 from SGLANG_PYTHON (the `sglang` shim of roles/simulator.py)."""
        if not self.simulated:
            return []
        return [f"--bind-ro={validator_env.env_dir(SGLANG_VERSION)}:{SGLANG_INSTALL}"] + [
            f"--bind={node}:/dev/{node.name}" for node in self.device_nodes()]

    def up(self, fresh: bool = False, timeout: float = 90) -> None:
        check_prerequisites()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ensure_api_key(self.state_dir)  # the demo's API key, to show it never leaks
        if self.pid():
            log(f"already running (pid {self.pid()}, ssh port {self.ssh_port})")
            return
        if port_in_use(self.ssh_port):
            raise SimHostError(f"127.0.0.1:{self.ssh_port} is already in use: another simulated host, or one left "
                               "running by an interrupted test run? Stop it, or choose another SSH port")
        if self.simulated:  # on empty caches: SGLang's install is built while the rootfs is (testbed/prepare.py)
            with ThreadPoolExecutor(max_workers=1) as pool:
                install = pool.submit(ensure_sglang_install)
                self._prepare_rootfs(fresh)  # its _install_gpus waits for the install (the build's lock)
                install.result()
        else:
            self._prepare_rootfs(fresh)
        command = [
            "systemd-nspawn", "-b", "-D", str(self.rootfs), f"--machine={self.machine}",
            "--register=no", "--keep-unit", "--console=read-only",
        ]
        if HOST_CA_BUNDLE.exists():
            command.append(f"--bind-ro={HOST_CA_BUNDLE}:/etc/ssl/certs/host-ca.crt")
        command += self.bind_mounts()
        with open(self.console_log, "wb") as console:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=console,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.pidfile.write_text(str(process.pid))

        def exited():
            if process.poll() is None:
                return None
            return f"systemd-nspawn exited with {process.returncode}; see {self.console_log}"
        self.wait_booted(timeout, "the container", "", exited)

    def wait_booted(self, timeout: float, what: str, details: str, exited=lambda: None) -> None:
        """Until the container's systemd is up (running or degraded, asked over SSH): then info.json and the SSH line
        (`details` before its systemd state). `exited()`: why the container's process is gone, or None. Past
        `timeout`: down(), and an error naming `what`."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            gone = exited()
            if gone:
                raise SimHostError(gone)
            try:
                state = self.ssh("systemctl", "is-system-running", check=False, timeout=10).stdout.strip()
                if state in ("running", "degraded"):
                    (self.state_dir / "info.json").write_text(json.dumps(self.info(), indent=2))
                    log(f"up: ssh -i {self.key} -p {self.ssh_port} root@{self.address} ({details}systemd {state})")
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.5)
        self.down()
        raise SimHostError(f"{what} did not become reachable over SSH within {timeout:.0f} s "
                           f"(last systemd state {state!r}); see {self.console_log}")

    def down(self, timeout: float = 30) -> None:
        pid = self.pid()
        if not pid:
            self.unmount()
            log(f"not running ({self.machine})")
            return
        os.kill(pid, signal.SIGTERM)  # nspawn asks the container's systemd to power off
        self._gone(pid, timeout, f"down ({self.machine})")

    def power_cut(self, timeout: float = 30) -> None:
        """Every process of the container at once, as a power cut ends them: SIGKILL to its init, whose PID namespace
        dies with it (no unit stops, nothing flushes); nspawn then exits. Its disk (the overlay's upper layer) keeps
        what was written. (The machine's kernel stays up, so data written but not yet synced survives here: the cut
        tests what the processes did, not the disk's cache.) `up()` boots it again."""
        pid = self.pid()
        if not pid:
            raise SimHostError(f"{self.machine} is not running")
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if not children:
            raise SimHostError(f"systemd-nspawn (pid {pid}) has no container init to kill")
        os.kill(int(children[0]), signal.SIGKILL)
        self._gone(pid, timeout, f"power cut ({self.machine}): its init and every process in it killed at once")

    def _gone(self, pid: int, timeout: float, done: str) -> None:
        """After down's or power_cut's signal: wait up to `timeout` s for nspawn (`pid`) to exit, SIGKILL it past
        that, then drop the pid file and the overlay and log `done`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)
        self.pidfile.unlink(missing_ok=True)
        self.unmount()
        log(done)

    def unmount(self) -> None:
        if self.overlay_lower is not None and os.path.ismount(self.rootfs):
            for _ in range(20):  # the container's last processes may hold it for a moment
                if subprocess.run(["umount", str(self.rootfs)], capture_output=True).returncode == 0:
                    return
                time.sleep(0.25)
            subprocess.run(["umount", "--lazy", str(self.rootfs)], check=False)

    def set_kernel_module(self, version: str | None) -> None:
        """The NVIDIA kernel module the container sees in /proc/driver/nvidia/version: in an LXC container,
        the Proxmox host's. A tmpfs over /proc/driver in the container's mount namespace (None: no module)."""
        script = ("mountpoint -q /proc/driver || mount -t tmpfs -o mode=755,size=64k sglang-deploy-fake /proc/driver; "
                  + ("mkdir -p /proc/driver/nvidia && cat > /proc/driver/nvidia/version" if version is not None
                     else "rm -rf /proc/driver/nvidia"))
        text = (f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Sep 23 09:55:41 UTC 2025\n"
                "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n") if version is not None else ""
        subprocess.run([*self.nsenter(), "sh", "-c", script], input=text, text=True, check=True)

    def nsenter(self) -> list[str]:
        """A command prefix: root in the container's mount namespace (its systemd's, nspawn's child)."""
        init = subprocess.run(["pgrep", "-P", str(self.pid()), "-x", "systemd"], capture_output=True, text=True)
        if init.returncode != 0:
            raise SimHostError("the container's systemd is not running")
        return ["nsenter", "-t", init.stdout.split()[0], "-m"]

    def ssh_data(self) -> dict:
        """pyinfra host data to reach the container over SSH."""
        return {"ssh_hostname": self.address, "ssh_port": self.ssh_port, "ssh_user": "root",
                "ssh_key": str(self.key), "ssh_known_hosts_file": str(self.known_hosts),
                "ssh_strict_host_key_checking": "accept-new"}

    def info(self) -> dict:
        return {
            "running": bool(self.pid()),
            "pid": self.pid(),
            "ssh_host": self.address,
            "ssh_port": self.ssh_port,
            "ssh_user": "root",
            "ssh_key": str(self.key),
            "known_hosts": str(self.known_hosts),
            "rootfs": str(self.rootfs),
            "node_exporter": f"http://{self.address}:{self.node_exporter_port}/metrics",
        }


def run_action(host, action: str, fresh: bool, prog: str) -> int:
    """up, down or status of one host, for a command line (simctl.py, lxchost.py): status exits 3 when it is down."""
    try:
        if action == "up":
            host.up(fresh=fresh)
        elif action == "down":
            host.down()
        else:
            print(json.dumps(host.info(), indent=2))
            return 0 if host.pid() else 3
    except SimHostError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 1
    return 0


def pyinfra_timed(*args: str, inventory: str = "inventory/sim.py") -> tuple[float, str]:
    """Run `pyinfra -y INVENTORY ARGS` from the repository (benchmarks): (wall seconds, output); exits on failure."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pyinfra", "-y", inventory, *args], cwd=REPO_ROOT,
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"pyinfra {' '.join(args)} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return time.perf_counter() - started, result.stdout + result.stderr
