"""The LXC test host (testbed/lxchost.py): CT129's unprivileged Proxmox container, with nesting on and off.

The preflight (hostside/preflight/runner.py) must refuse a release that cannot start there before anything changes, name
the cause and the fix, and the sandbox report must say what this kind of host does not enforce.
"""

import json
import os
import shutil
from pathlib import Path

import pytest

from aptrepo import DRIVER_PIN, DRIVER_SIBLINGS, AptRepo, installed_versions, provisioning_packages
from conftest import BASE_SSH_PORT, PROVEN, TEST_MACHINE, SimHostSession, proven_with, simhost_available

pytestmark = pytest.mark.simhost

STATE_PATHS = "/etc/systemd/system /etc/sglang-deploy /var/lib/sglang-deploy /var/lib/sglang /var/cache/sglang"


def lxc_session(tmp_path_factory, name, nesting, port_offset):
    reason = simhost_available() or (None if shutil.which("lxc-start") else "lxc is not installed")
    if reason:
        pytest.skip(f"LXC test host unavailable: {reason}")
    from testbed.lxchost import LxcHost

    # container root (uid 100000 here) must traverse to its rootfs: not under pytest's 0700 temporary directory
    state_dir = Path(f"/var/tmp/sglang-deploy-tests/{TEST_MACHINE}-{name}")
    LxcHost(state_dir=state_dir, machine=f"{TEST_MACHINE}-{name}").down()  # one left by an interrupted run
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True)
    os.chmod(state_dir.parent, 0o755)
    session = SimHostSession(state_dir)
    session.host = LxcHost(state_dir=state_dir, ssh_port=BASE_SSH_PORT + port_offset, machine=f"{TEST_MACHINE}-{name}",
                           nesting=nesting, device_mode=0o666)
    session.host.up(fresh=True)
    return session


def lxc_host(tmp_path_factory, name, nesting, port_offset):
    session = lxc_session(tmp_path_factory, name, nesting=nesting, port_offset=port_offset)
    yield session
    session.host.down()
    remove(session)


@pytest.fixture(scope="module")
def nested(tmp_path_factory):
    yield from lxc_host(tmp_path_factory, "lxc-nesting", nesting=True, port_offset=30)


@pytest.fixture(scope="module")
def unnested(tmp_path_factory):
    yield from lxc_host(tmp_path_factory, "lxc-no-nesting", nesting=False, port_offset=31)


def remove(session):
    from testbed.lxchost import mounted

    assert not mounted(session.host.state_dir / "sglang-install")  # never delete through the install's bind mount
    shutil.rmtree(session.host.state_dir, ignore_errors=True)


def store_state(session) -> dict:
    return json.loads(session.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))


def tree_digest(session) -> str:
    """Every file under the paths a deploy writes, with its content hash, mode and owner."""
    return session.sh(f"find {STATE_PATHS} -xdev \\( -type f -o -type l \\) 2>/dev/null | sort | "
                      "while read -r f; do printf '%s %s ' \"$f\" \"$(stat -c '%a %U %G' \"$f\")\"; "
                      "sha256sum < \"$f\" 2>/dev/null || readlink \"$f\"; done; true")


def test_the_container_is_what_proxmox_runs(nested):
    assert nested.sh("cat /proc/self/uid_map").split() == ["0", "100000", "65536"]  # unprivileged
    assert "lxcfs" in nested.sh("grep lxcfs /proc/self/mountinfo | head -1")
    nodes = nested.sh("stat -c '%n %a %U:%G %t:%T' /dev/nvidia0 /dev/nvidiactl").splitlines()
    assert nodes == ["/dev/nvidia0 666 root:root 1:3", "/dev/nvidiactl 666 root:root 1:3"]


def test_with_nesting_the_proven_profile_deploys_and_passes_the_gate(nested, tmp_path):
    # the proven server configuration; a shorter gate (3 samples) keeps the suite in budget
    short = proven_with(tmp_path, "  samples: 8 ", "  samples: 3 ", "proven-short-gate.yaml")
    result = nested.deploy(profile=short, gate=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "preflight passed in" in output and "sandbox ok, devices ok" in output
    # the one module whose host runs the preflight's SGLang resolution (conftest PREFLIGHT_STACK_MODULES)
    assert "resolution ok" in output, output[-4000:]
    assert "GATE PASS" in output
    store = store_state(nested)
    assert store["state"]["active"] and store["consistent"]
    assert next(r for r in store["releases"] if r["id"] == store["state"]["active"])["verdict"] == "good"


def test_the_running_services_sandbox_matches_the_report(nested):
    pid = nested.main_pid()
    inside = f"nsenter -t {pid} -m -- setpriv --reuid=sglang --regid=sglang --init-groups "
    # probed from inside the running service's own mount namespace, as its user
    assert "Read-only" in nested.sh(inside + "sh -c 'touch /usr/x 2>&1; true'")
    assert "Permission denied" in nested.sh(inside + "sh -c 'ls /home 2>&1; true'")
    assert "Read-only" in nested.sh(inside + "sh -c '{ echo x > /proc/sys/kernel/hostname; } 2>&1; true'")
    assert "opened" in nested.sh(inside + "sh -c '{ exec 3<>/dev/fuse && echo opened; } 2>&1; true'")  # DevicePolicy inert
    limits = nested.sh(f"grep -E 'open files|locked memory' /proc/{pid}/limits")
    assert "1048576" not in limits and "unlimited" not in limits  # clamped by the container
    nested.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.preflight --service sglang --active --no-gpu --gpus 2 "
              "--json /tmp/report.json --quiet")
    from sglang_deploy.hostside.contract.probes import PreflightReport

    document = PreflightReport.loads(nested.sh("cat /tmp/report.json"), "/tmp/report.json")
    enforced = {row[0]: row[2] for row in document.sandbox}
    assert enforced["ProtectSystem"] and enforced["ProtectHome"] and enforced["ProtectKernelTunables"]
    assert enforced["DevicePolicy"] is False and enforced["LimitNOFILE"] is False and enforced["LimitMEMLOCK"] is False
    assert document.host == {"uid_map": ["0", "100000", "65536"], "unprivileged": True, "nesting": True}


def test_0660_nodes_and_a_hung_all_reduce_are_refused_before_the_switch_and_the_release_keeps_serving(nested,
                                                                                                       tmp_path):
    before, pid = store_state(nested), nested.main_pid()
    nested.host.set_device_mode(0o660)  # Proxmox's devN: default without mode=/gid=
    # and P2P through a translating IOMMU: the two-process all-reduce hangs (a fault of the host's "hardware", planted
    # for the GPU stand-in; the profile stays as it was, so SGLang's resolution is not asked again)
    nested.sh("mkdir -p /etc/sglang-sim && echo hang > /etc/sglang-sim/allreduce-fault")
    try:
        result = nested.deploy("--data", "container_id=129",
                               profile=proven_with(tmp_path, "  warmup: 1", "  warmup: 2"))
    finally:
        nested.host.set_device_mode(0o666)
        nested.sh("rm -f /etc/sglang-sim/allreduce-fault")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "cannot open /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia0, /dev/nvidia1: permission denied" in output
    assert "mode 0660, owner root:root" in output and "/etc/pve/lxc/129.conf" in output and "mode=0666" in output
    # the hang: refused with the fix after the simulated host's 10 s step timeout, the ranks killed, no unit left
    assert "did not finish in 10 s: rank(s) 0, 1 still waiting" in output and "its processes were killed" in output
    assert "`iommu=pt`" in output and "--disable-custom-all-reduce" in output
    assert nested.sh("systemctl list-units --all --no-legend 'sglang-deploy-preflight-*'; "
                     "pgrep -af '[p]reflight_allreduce'; true").strip() == ""
    assert "the release was not staged and nothing running was touched" in output
    after = store_state(nested)
    assert after["releases"] == before["releases"] and after["state"] == before["state"]
    assert nested.main_pid() == pid and nested.http("/health")[0] == 200


def test_without_nesting_the_deploy_is_refused_at_the_preflight_and_changes_nothing(unnested, tmp_path):
    result = unnested.deploy(profile=PROVEN, gate=True)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "226/NAMESPACE" in output and "/run/systemd/unit-root/proc: Permission denied" in output, output[-4000:]
    assert "features: nesting=1" in output and "service.relax: [ProtectKernelTunables, ProtectControlGroups]" in output
    assert "Switch sglang" not in output  # never reached
    assert unnested.sh("test -e /etc/systemd/system/sglang.service && echo unit; true").strip() == ""
    assert store_state(unnested)["releases"] == []
    # a second attempt (another release) leaves the host byte-identical
    snapshot = tree_digest(unnested)
    again = unnested.deploy(profile=proven_with(tmp_path, "  warmup: 1", "  warmup: 2"))
    assert again.returncode != 0 and "226/NAMESPACE" in again.stdout + again.stderr
    assert tree_digest(unnested) == snapshot


def test_without_nesting_relaxing_the_two_directives_deploys(unnested, tmp_path):
    relaxed = proven_with(tmp_path, "  user: sglang\n",
                          "  user: sglang\n  relax: [ProtectKernelTunables, ProtectControlGroups]\n", "relaxed.yaml")
    result = unnested.deploy(profile=relaxed)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "preflight passed in" in output and store_state(unnested)["state"]["active"]
    assert unnested.http("/health")[0] == 200


def test_skip_preflight_is_recorded_and_readiness_names_nesting(unnested):
    good = store_state(unnested)["state"]["active"]
    result = unnested.deploy("--data", "skip_preflight=true", profile=PROVEN)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "WITHOUT its preflight" in output, output[-3000:]
    assert "226/NAMESPACE" in output and "features: nesting=1" in output  # readiness explains the failed start
    store = store_state(unnested)
    assert store["state"]["active"] == good  # rolled back to the relaxed release
    [skipped] = [r for r in store["releases"] if r["id"] != good]
    meta = json.loads(unnested.sh(f"cat /var/lib/sglang-deploy/sglang/releases/{skipped['id']}/meta.json"))
    assert meta["preflight"] == "skipped (skip_preflight)"


def test_the_doctor_reports_what_this_container_does_not_enforce(nested):
    result = nested.pyinfra("doctor.py")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "host: unprivileged container (uid map 0 100000 65536); nesting (a fresh /proc for a unit): yes" in output
    assert "NOT enforced here: " in output and "DevicePolicy=closed" in output and "LimitMEMLOCK=infinity" in output


def test_the_driver_step_installs_the_host_modules_user_space_and_follows_its_upgrade(nested):
    """Provisioning's driver step in the unprivileged container, against tests/aptrepo.py's repository with the real
    packages' relations: the host module's exact version installed, a version the repository lacks refused before
    any change, a host driver upgrade followed. Last on this host: the packages replace the GPU stand-ins (nvidia-smi, libcuda.so.1) that its
    simulated server and the preflight use."""
    repo = AptRepo(nested.host.state_dir / "apt")  # under the host's state directory: a data file a deploy may name
    repo.publish(provisioning_packages())
    # The container has a network namespace of its own: it reaches this machine at its veth's far end.
    url = repo.serve(nested.host.gateway)
    data = [arg for key, value in repo.host_data(url).items() for arg in ("--data", f"{key}={value}")]
    try:
        nested.sh("mv /etc/apt/sources.list /etc/apt/sources.list.disabled")  # only the test repository
        # the Proxmox host's module is older than the repository's newest (580.95.05): installed only through the
        # source pin (without it: "libcuda1 : Depends: nvidia-alternative (= 580.65.06-1) but 580.95.05-1 is to be
        # installed", tests/test_driver_apt.py)
        nested.host.set_kernel_module("580.65.06")
        result = nested.pyinfra("provision.py", "--data", "skip_python_env=true", *data)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-3000:]
        assert "in a lxc container: user-space driver missing -> 580.65.06" in output and "(simulated first)" in output
        assert installed_versions(nested.sh, *DRIVER_SIBLINGS) == {name: "580.65.06-1" for name in DRIVER_SIBLINGS}
        assert nested.sh(f"cat {DRIVER_PIN}") == ("Package: src:nvidia-graphics-drivers\nPin: version 580.65.06-*\n"
                                                  "Pin-Priority: 1001\n\n")
        # a host module the repository lacks: refused, naming both versions, before anything changes
        nested.host.set_kernel_module("580.126.01")
        before = nested.sh("dpkg-query -W")
        result = nested.pyinfra("provision.py", "--data", "skip_python_env=true", *data)
        output = result.stdout + result.stderr
        assert result.returncode != 0 and "libcuda1 580.126.01-* is not in the repository" in output \
            and "the kernel module is 580.126.01, user space here is 580.65.06" in output, output[-3000:]
        assert nested.sh("dpkg-query -W") == before and "Pin: version 580.65.06-*" in nested.sh(f"cat {DRIVER_PIN}")
        # the host's driver is upgraded: the next provisioning brings the container's user space along
        nested.host.set_kernel_module("580.95.05")
        result = nested.pyinfra("provision.py", "--data", "skip_python_env=true", *data)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-3000:]
        assert "user-space driver 580.65.06 -> 580.95.05" in output, output[-3000:]
        assert installed_versions(nested.sh, *DRIVER_SIBLINGS) == {name: "580.95.05-1" for name in DRIVER_SIBLINGS}
        assert nested.sh("ls /usr/lib/*/libcuda.so.5*").strip().endswith("libcuda.so.580.95.05")
        assert "Pin: version 580.95.05-*" in nested.sh(f"cat {DRIVER_PIN}")
    finally:
        repo.close()


def test_facts_print_the_proxmox_configuration(unnested):
    result = unnested.pyinfra("facts.py", "--data", "container_id=129")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "unprivileged container, uid map 0 100000 65536" in output and "nesting (a unit's fresh /proc" in output
    assert "pct set 129 --dev0 /dev/nvidia0,gid=" in output and "echo nesting=1" in output
    assert "Before=pve-guests.service" in output and "mode=0666" in output


def test_a_stale_lxcfs_mount_is_detached_and_lxcfs_started_again(tmp_path):
    """A CI job that ends kills its lxcfs and leaves the FUSE mount (ENOTCONN); the next run must recover, not fail."""
    if os.geteuid() != 0 or not shutil.which("lxcfs"):
        pytest.skip("needs root and lxcfs")
    import signal
    import subprocess
    import time

    from testbed.lxchost import ensure_lxcfs, lxcfs_state

    directory = Path("/var/tmp/sglang-deploy-tests") / f"lxcfs-{os.getpid()}"
    directory.mkdir(parents=True, exist_ok=True)
    try:
        assert lxcfs_state(directory) == "absent"
        ensure_lxcfs(directory)
        assert lxcfs_state(directory) == "up"
        for pid in subprocess.run(["pgrep", "-f", f"lxcfs .*{directory}$"], capture_output=True,
                                  text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 5
        while lxcfs_state(directory) != "stale" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lxcfs_state(directory) == "stale"
        ensure_lxcfs(directory)
        assert lxcfs_state(directory) == "up"
    finally:
        subprocess.run(["pkill", "-f", f"lxcfs .*{directory}$"])
        subprocess.run(["umount", "-l", str(directory)], capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)
        Path(f"{directory}.pid").unlink(missing_ok=True)
