"""A simulated fleet (simhost up --count 3): the canary-then-batches rollout, stopped by a failed gate.

One module, one fleet of 3 hosts (distinct SSH, GPU server and node_exporter ports), so xdist keeps it on
one worker. Only the GPU servers are simulated; SSH, systemd and HTTP are real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import CONTROLLER, FLEET_MACHINE, FLEET_SERVICE_PORT, FLEET_SSH_PORT, PROVEN, REPO, proven_with, \
    SIM_START_SECONDS, simhost_available, write_profile

pytestmark = pytest.mark.simhost

STORE = "/var/lib/sglang-deploy/sglang"
DROP_IN = "/etc/systemd/system/sglang.service.d/debug.conf"
SMALL_GATE_FLOOR = 30


class FleetSession:
    def __init__(self, state_dir):
        from testbed.simfleet import Fleet

        self.fleet = Fleet(state_dir=state_dir, count=3, ssh_port=FLEET_SSH_PORT, service_port=FLEET_SERVICE_PORT,
                           machine=FLEET_MACHINE, start_seconds=SIM_START_SECONDS)
        self.env = {**os.environ, "SGLANG_DEPLOY_SIMFLEET_DIR": str(state_dir), "PYTHONUNBUFFERED": "1"}
        self.hosts = []

    def names(self) -> list[str]:
        return [host.machine for host in self.hosts]

    def sh(self, index: int, command: str) -> str:
        result = self.hosts[index].ssh(command, check=False)
        assert result.returncode == 0, f"{command!r} on host {index}: {result.stderr}"
        return result.stdout

    def run(self, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
        return subprocess.run([*CONTROLLER, *args], cwd=REPO, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def pyinfra(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return self.run("-m", "pyinfra", "-y", "inventory/sim_fleet.py", *args, timeout=timeout)

    def process(self, index: int) -> str:
        """The server's main pid and start time: equal before and after means not restarted."""
        return self.sh(index, "systemctl show -p MainPID -p ExecMainStartTimestampMonotonic --value sglang")

    def store_state(self, index: int) -> dict:
        return json.loads(self.sh(index, f"cat {STORE}/state.json"))

    def release_ids(self, index: int) -> list[str]:
        return self.sh(index, f"ls {STORE}/releases 2>/dev/null || true").split()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    reason = simhost_available()
    if reason:
        pytest.skip(f"simulated hosts unavailable: {reason}")
    from testbed.simhost import port_in_use

    busy = [p for i in range(3) for p in (FLEET_SERVICE_PORT + i, FLEET_SSH_PORT + i) if port_in_use(p)]
    if busy:
        pytest.fail(f"the fleet's ports {busy} on 127.0.0.1 are in use (SGLANG_DEPLOY_TEST_FLEET_SSH_PORT and "
                    "SGLANG_DEPLOY_TEST_FLEET_SERVICE_PORT set the bases)")
    session = FleetSession(tmp_path_factory.mktemp("simfleet"))
    try:
        session.fleet.up(fresh=True)
        session.hosts = session.fleet.hosts()
        yield session
    finally:
        session.fleet.down()
        session.fleet.remove()
        shutil.rmtree(session.fleet.state_dir, ignore_errors=True)


def test_fleet_hosts_are_separate_machines_with_their_own_ports(fleet):
    info = json.loads((fleet.fleet.state_dir / "fleet.json").read_text())
    assert info["groups"] == {"canary": [fleet.names()[0]], "fleet": fleet.names()}
    assert len({h["ssh_port"] for h in info["hosts"]}) == len({h["service_port"] for h in info["hosts"]}) == 3
    machine_ids = {fleet.sh(i, "cat /etc/machine-id").strip() for i in range(3)}
    assert len(machine_ids) == 3  # one shared lower rootfs, but each host its own identity
    assert [fleet.sh(i, "hostname").strip() for i in range(3)] == fleet.names()
    # A write on one host stays on that host (the shared rootfs is only the read-only lower layer).
    fleet.sh(0, "echo only-here > /etc/fleet-probe")
    assert fleet.hosts[1].ssh("cat /etc/fleet-probe", check=False).returncode != 0


def small_gate(profile):
    """The gate sized to what these tests check (the rollout's order and stop, the router's path), not to the
    simulator's speed on a loaded 2-core machine: 3 short samples (the fewest the profile accepts) and a decode floor well under the simulated
    ~50 tok/s (CI measured 44.4 through the router while other simulated hosts ran). The floor's own decision is
    tested in test_router_logic and test_gate_logic; host 1 fails its gate on its configuration, not on speed."""
    text = profile.read_text()
    text = re.sub(r"(?m)^  samples: .*$", "  samples: 3", text)
    text = re.sub(r"(?m)^  min_decode_tok_s: .*$", f"  min_decode_tok_s: {SMALL_GATE_FLOOR}", text)
    profile.write_text(re.sub(r"(?m)^  max_new_tokens: .*$", "  max_new_tokens: 96", text))
    return profile


def test_rollout_canary_passes_a_failed_batch_stops_it_and_later_hosts_are_untouched(fleet, tmp_path):
    # Baseline on every host (in parallel; readiness only: the statistics are not the point here).
    baseline = fleet.pyinfra("deploy.py", "--data", f"profile={PROVEN}", "--data", "skip_gate=true")
    assert baseline.returncode == 0, baseline.stdout[-3000:] + baseline.stderr[-3000:]
    baseline_ids = [fleet.store_state(i)["active"] for i in range(3)]
    untouched_before = (fleet.process(2), fleet.sh(2, "sha256sum /etc/systemd/system/sglang.service"))
    # The fault: on host 1 only, a local drop-in the gate refuses (an undeclared costly variable).
    fleet.sh(1, f"mkdir -p {os.path.dirname(DROP_IN)} && printf '[Service]\\nEnvironment=CUDA_LAUNCH_BLOCKING=1\\n'"
                f" > {DROP_IN} && systemctl daemon-reload")
    variant = small_gate(proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 12"))
    log_file = tmp_path / "rollout.log"
    result = fleet.run("rollout.py", "inventory/sim_fleet.py", "--batch-size", "1", "--log", str(log_file),
                       "--data", f"profile={variant}", "--data", "max_auto_rollbacks=100")
    log = log_file.read_text()
    print(log)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    a, b, c = fleet.names()
    assert f"canary: {a} | batch 1: {b} | batch 2: {c}" in log
    assert "canary: PASSED" in log and "batch 1/2: FAILED" in log and "batch 2/2: deploying" not in log
    assert "rollout STOPPED at batch 1; 1 host(s) not deployed:" in log
    assert f"{c}: untouched" in log
    assert "CUDA_LAUNCH_BLOCKING=1 is not declared by the release but set by " + DROP_IN in log
    # The canary runs the new release, passed by its own gate.
    canary = fleet.store_state(0)
    assert canary["active"] != baseline_ids[0] and canary["last_good"] == canary["active"]
    gate = json.loads(fleet.sh(0, f"cat {STORE}/releases/{canary['active']}/gate-result.json"))
    assert gate["verdict"] == "pass" and gate["simulated"] is True
    # Host 1 tried it, failed its gate and is back on its own baseline.
    failed = fleet.store_state(1)
    assert failed["active"] == baseline_ids[1] and len(fleet.release_ids(1)) == 2
    new = next(r for r in fleet.release_ids(1) if r != baseline_ids[1])
    assert json.loads(fleet.sh(1, f"cat {STORE}/releases/{new}/meta.json"))["verdict"] == "bad"
    # Host 2: not restarted, same unit, no new release.
    assert (fleet.process(2), fleet.sh(2, "sha256sum /etc/systemd/system/sglang.service")) == untouched_before
    assert fleet.release_ids(2) == [baseline_ids[2]]
    # The fleet summary in the log: release and gate result per host.
    summary = log[log.index("fleet summary:"):]
    assert re.search(rf"{a}\s+{canary['active']}\s+good\s+pass ", summary)
    assert re.search(rf"{b}\s+{baseline_ids[1]}\s+good\s+not gated \(skip_gate\)\s+{new} bad: fail", summary)
    assert re.search(rf"{c}\s+{baseline_ids[2]}\s+good\s+not gated \(skip_gate\)\s+-", summary)


def chat(port: int, key: str | None, max_tokens: int = 20) -> int:
    import urllib.error
    import urllib.request

    body = json.dumps({"model": "qwen3.6-27b", "messages": [{"role": "user", "content": "hello"}],
                       "max_tokens": max_tokens}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            document = json.loads(response.read())
            assert document["choices"][0]["message"]["content"], document
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def generated_tokens(fleet, index: int, key: str) -> float:
    text = fleet.sh(index, f"curl -s -H 'Authorization: Bearer {key}' http://127.0.0.1:{FLEET_SERVICE_PORT + index}/metrics")
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("sglang:generation_tokens_total"))


def router_workers(fleet, port: int, key: str) -> dict:
    body = fleet.sh(0, f"curl -s -H 'Authorization: Bearer {key}' http://127.0.0.1:{port}/workers")
    return {w["url"]: w["is_healthy"] for w in json.loads(body)["workers"]}


def test_router_spreads_requests_over_the_workers_and_drops_a_dead_one(fleet, tmp_path):
    """SGLang's router (the real sglang-router wheel, in the container, under its hardened unit) in front of the
    three simulated workers left running by the rollout test (or fresh ones)."""
    if any(fleet.sh(i, "systemctl is-active sglang || true").strip() != "active" for i in range(3)):
        deployed = fleet.pyinfra("deploy.py", "--data", f"profile={PROVEN}", "--data", "skip_gate=true")
        assert deployed.returncode == 0, deployed.stdout[-3000:]
    port = FLEET_SERVICE_PORT + 5
    profile = small_gate(write_profile(tmp_path, PROVEN.read_text(), "router.yaml"))
    result = fleet.pyinfra("router.py", "--data", f"router_port={port}", "--data", "router_policy=round_robin",
                           "--data", "router_health_interval_s=2", "--data", "router_health_failures=1",
                           "--data", "router_gate=true", "--data", f"profile={profile}")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Router ready with 3 healthy worker(s)" in output
    # The fleet's gate through the router: the gate's client on the router host, the workers' floors.
    gate = re.search(r"gate through the router over 3 workers: PASS: decode ([0-9.]+) tok/s single stream, tau "
                     r"([0-9.]+), aggregate ([0-9.]+) tok/s at 12 streams", output)
    assert gate and float(gate.group(1)) >= SMALL_GATE_FLOOR and float(gate.group(2)) >= 2.8, output[-3000:]
    print(gate.group(0))
    key = (fleet.fleet.state_dir / "api_key").read_text().strip()
    assert key not in output
    # Hardened unit, a transient user, the key never on a command line.
    assert fleet.sh(0, "systemctl show -p DynamicUser --value sglang-router").strip() == "yes"
    pid = fleet.sh(0, "systemctl show -p MainPID --value sglang-router").strip()
    assert key not in fleet.sh(0, f"tr '\\0' ' ' < /proc/{pid}/cmdline")
    exposure = fleet.sh(0, "systemd-analyze security sglang-router.service | tail -1")
    print(exposure)
    assert float(re.search(r"level for \S+: ([0-9.]+)", exposure).group(1)) < 2.0
    urls = [f"http://127.0.0.1:{FLEET_SERVICE_PORT + i}" for i in range(3)]
    assert router_workers(fleet, port, key) == {url: True for url in urls}
    # Round robin over three workers: six requests, each worker generates for two of them.
    before = [generated_tokens(fleet, i, key) for i in range(3)]
    assert [chat(port, key) for _ in range(6)] == [200] * 6
    gained = [generated_tokens(fleet, i, key) - before[i] for i in range(3)]
    assert all(g >= 40 for g in gained), gained  # 2 x 20 tokens (health checks add 1 token each)
    # The workers enforce the key; the router passes the client's on.
    assert chat(port, None) == 401
    # A worker that stops is taken out by the router's health checks; requests go to the others.
    fleet.sh(2, "systemctl stop sglang")
    try:
        import time

        deadline = time.monotonic() + 30
        while router_workers(fleet, port, key).get(urls[2]) and time.monotonic() < deadline:
            time.sleep(1)
        assert router_workers(fleet, port, key) == {urls[0]: True, urls[1]: True, urls[2]: False}
        assert [chat(port, key) for _ in range(4)] == [200] * 4
    finally:
        fleet.sh(2, "systemctl start sglang")


TWO_NODES = REPO / "profiles" / "qwen3.6-27b-mtp-2nodes-2xa6000.yaml"


def two_node_variant(tmp_path, name: str, running: int = 16):
    """The 2-node profile on the test's ports, a rendezvous timeout that outlasts the wait for rank 0's start on
    a loaded machine (the start order is checked by the units' start times: a rank that gave up would restart),
    and a small gate sized to what the test checks (that rank 0 is gated and passes, not the simulator's speed
    while three simulated hosts share two cores): 4 short samples, the small floor, and a regression tolerance
    of 50 % (the most a profile may set since security review 3; it was 90 %), because rank 0's gate compares the 2-node server with a 1-node baseline measured
    under other load (CI measured 1.79x on 2 pairs, interval 0.49-6.55; then 1.07x on 3 pairs, interval
    0.69-1.65, with two samples slowed to 40-49 tok/s: both inconclusive). The regression decision itself is
    tested in test_gate_logic and test_gate_sim."""
    text = TWO_NODES.read_text()
    for old, new in ((r"(?m)^  dist_init_port: \d+", f"  dist_init_port: {FLEET_SERVICE_PORT + 6}"),
                     (r"(?m)^    --enable-metrics: true.*$", "    --enable-metrics: true\n    --dist-timeout: 90"),
                     (r"(?m)^  samples: .*$", "  samples: 4"), (r"(?m)^  max_new_tokens: .*$", "  max_new_tokens: 96"),
                     (r"(?m)^  min_decode_tok_s: .*$", f"  min_decode_tok_s: {SMALL_GATE_FLOOR}"),
                     (r"(?m)^  max_regression_pct: .*$", "  max_regression_pct: 50"),
                     (r"--max-running-requests: 16", f"--max-running-requests: {running}")):
        text, count = re.subn(old, new, text)
        assert count == 1, old
    path = tmp_path / name
    path.write_text(text)
    return path


def test_two_node_server_gates_rank0_and_rolls_back_together(fleet, tmp_path):
    fleet.sh(1, f"rm -f {DROP_IN} && systemctl daemon-reload")  # the rollout test's fault
    a, b, _ = fleet.names()
    # Histories that differ: host 1 gets one more (single-host) release than host 0.
    extra = fleet.pyinfra("deploy.py", "--limit", b, "--data", "skip_gate=true", "--data",
                          f"profile={proven_with(tmp_path, '--max-running-requests: 16', '--max-running-requests: 15')}")
    assert extra.returncode == 0, (extra.stdout + extra.stderr)[-3000:]
    assert len(fleet.release_ids(1)) > len(fleet.release_ids(0))
    first = fleet.pyinfra("deploy.py", "--limit", "nodes", "--data", f"profile={two_node_variant(tmp_path, 'n1.yaml')}",
                          "--data", "max_auto_rollbacks=100")
    output = first.stdout + first.stderr
    assert first.returncode == 0, output[-5000:]
    dist = f"127.0.0.1:{FLEET_SERVICE_PORT + 6}"
    assert f"[{b}] node 1 of 2 (--dist-init-addr {dist}): joins rank 0 and serves no HTTP" in output
    release = [fleet.store_state(i)["active"] for i in (0, 1)]
    assert release[0] == release[1]  # one release id across the nodes, one sequence number despite the histories
    # The start order: every node stopped, then the joining rank started, then rank 0 (gated).
    stop = output.index("Stop sglang on all 2 nodes")
    joiner = re.search(r"Switch sglang to release \S+ \(deploy\): restart, readiness, automatic", output).start()
    rank0 = re.search(r"Switch sglang to release \S+ \(deploy\): restart, readiness, gate", output).start()
    assert stop < joiner < rank0, output[-5000:]
    started = [int(fleet.sh(i, "systemctl show -p ExecMainStartTimestampMonotonic --value sglang")) for i in (0, 1)]
    assert started[1] < started[0]  # one kernel, one monotonic clock: rank 1 started first
    # One node alone is refused, for a deploy and a rollback, before anything changes.
    for verb, args in (("deployed", ("deploy.py", "--data", f"profile={two_node_variant(tmp_path, 'n1.yaml')}")),
                       ("rolled back", ("rollback.py",))):
        alone = fleet.pyinfra(*args[:1], "--limit", b, *args[1:])
        assert alone.returncode != 0 and f"this 2-node server is {verb} as a whole, but --limit/--exclude leaves out " \
            f"{a} of inventory group 'nodes'; nothing was changed" in alone.stdout + alone.stderr, alone.stderr[-3000:]
    assert [int(fleet.sh(i, "systemctl show -p ExecMainStartTimestampMonotonic --value sglang")) for i in (0, 1)] \
        == started
    for rank in (0, 1):
        cmdline = fleet.sh(rank, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang)/cmdline")
        assert "--tp-size 4" in cmdline and f"--nnodes 2 --node-rank {rank} --dist-init-addr {dist}" in cmdline
    # Rank 0 serves and passed its gate although SGLang dropped custom all-reduce across the nodes (by design).
    key = (fleet.fleet.state_dir / "api_key").read_text().strip()
    info = json.loads(fleet.sh(0, f"curl -s -H 'Authorization: Bearer {key}' http://127.0.0.1:{FLEET_SERVICE_PORT}/server_info"))
    assert (info["nnodes"], info["tp_size"]) == (2, 4)
    assert "spans across nodes" in fleet.sh(0, "journalctl -u sglang -n 200 --no-pager")
    gate = json.loads(fleet.sh(0, f"cat {STORE}/releases/{release[0]}/gate-result.json"))
    assert gate["verdict"] == "pass", gate
    assert fleet.sh(1, f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{FLEET_SERVICE_PORT + 1}/health; true")\
        .strip() == "000"  # rank 1 serves no HTTP
    # Only node 1 drifts (its environment file edited by hand; the processes run on): a redeploy restarts both
    # nodes, in the start order (readiness only: rank 0's gate is the first deploy's and the last one's).
    fleet.sh(1, "echo '# edited by hand' >> /etc/sglang-deploy/sglang/sglang.env")
    again = fleet.pyinfra("deploy.py", "--limit", "nodes", "--data", f"profile={two_node_variant(tmp_path, 'n1.yaml')}",
                          "--data", "max_auto_rollbacks=100", "--data", "skip_gate=true")
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-5000:]
    assert f"[{a}] release {release[0]}: node {b} is not consistent with its active release: the nodes of this " \
           "server restart together" in output, output[-5000:]
    restarted = [int(fleet.sh(i, "systemctl show -p ExecMainStartTimestampMonotonic --value sglang")) for i in (0, 1)]
    assert restarted[0] > started[0] and started[1] < restarted[1] < restarted[0]
    assert [fleet.store_state(i)["active"] for i in (0, 1)] == release
    assert json.loads(fleet.sh(1, "cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))[
        "consistent"]
    # Only node 1's secrets file changes (by hand): it must restart for them, so both nodes do (readiness only).
    fleet.sh(1, "echo '# edited by hand' >> /etc/sglang-deploy/sglang/secrets.yaml")
    rekeyed = fleet.pyinfra("deploy.py", "--limit", "nodes", "--data", f"profile={two_node_variant(tmp_path, 'n1.yaml')}",
                            "--data", "max_auto_rollbacks=100", "--data", "skip_gate=true")
    output = rekeyed.stdout + rekeyed.stderr
    assert rekeyed.returncode == 0, output[-5000:]
    assert f"[{a}] release {release[0]}: node {b} restarts for its changed secrets: the nodes of this server restart " \
           "together" in output, output[-5000:]
    started = restarted
    restarted = [int(fleet.sh(i, "systemctl show -p ExecMainStartTimestampMonotonic --value sglang")) for i in (0, 1)]
    assert restarted[0] > started[0] and started[1] < restarted[1] < restarted[0]
    assert [fleet.store_state(i)["active"] for i in (0, 1)] == release
    # A new release whose gate fails on rank 0: every node is back on the release above, together.
    fleet.sh(0, f"mkdir -p {os.path.dirname(DROP_IN)} && printf '[Service]\\nEnvironment=CUDA_LAUNCH_BLOCKING=1\\n'"
                f" > {DROP_IN} && systemctl daemon-reload")
    try:
        second = fleet.pyinfra("deploy.py", "--limit", "nodes", "--data", "max_auto_rollbacks=100", "--data",
                               f"profile={two_node_variant(tmp_path, 'n2.yaml', running=12)}")
    finally:
        fleet.sh(0, f"rm -f {DROP_IN} && systemctl daemon-reload")
    output = second.stdout + second.stderr
    assert second.returncode != 0 and "CUDA_LAUNCH_BLOCKING=1 is not declared" in output, output[-5000:]
    new = [sorted(fleet.release_ids(i))[-1] for i in (0, 1)]
    assert new[0] == new[1] != release[0]
    for rank in (0, 1):
        assert fleet.store_state(rank)["active"] == fleet.store_state(rank)["last_good"] == release[0]
        assert json.loads(fleet.sh(rank, f"cat {STORE}/releases/{new[0]}/meta.json"))["verdict"] == "bad"
    # Rank 1 ran the new release (its process ran) and was marked bad when it followed rank 0 back.
    events = [e["event"] for e in json.loads(fleet.sh(1, f"cat {STORE}/releases/{new[0]}/meta.json"))["history"]]
    assert events[-1] == "marked bad (rollback (rank 0 failed))", events
    import time

    deadline = time.monotonic() + 40  # the nodes rejoin (each restart breaks the other's rendezvous once)
    while time.monotonic() < deadline and fleet.hosts[0].ssh(
            f"curl -sf -o /dev/null http://127.0.0.1:{FLEET_SERVICE_PORT}/health", check=False).returncode != 0:
        time.sleep(1)
    assert fleet.sh(0, f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{FLEET_SERVICE_PORT}/health").strip() == "200"
    # By hand, rollback.py to the new release (its drop-in is gone now): all nodes, in the deploy's start order.
    back = fleet.pyinfra("rollback.py", "--limit", "nodes", "--data", f"release={new[0]}")
    output = back.stdout + back.stderr
    assert back.returncode == 0, output[-5000:]
    stop = output.index("Stop sglang on all 2 nodes")
    joiner = re.search(r"Switch sglang to release \S+ \(rollback\): restart, readiness, automatic", output).start()
    assert stop < joiner and output.count("(rollback): restart, readiness") >= 2, output[-5000:]
    assert [fleet.store_state(i)["active"] for i in (0, 1)] == [new[0], new[0]]
    started = [int(fleet.sh(i, "systemctl show -p ExecMainStartTimestampMonotonic --value sglang")) for i in (0, 1)]
    assert started[1] < started[0]
    assert fleet.sh(0, f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{FLEET_SERVICE_PORT}/health").strip() == "200"
