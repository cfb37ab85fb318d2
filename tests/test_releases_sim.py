"""Releases on the simulated CT129: rollback, automatic rollback, interrupted switches, lock, retention."""

import json
import re
import signal
import subprocess
import time

import pytest

from conftest import PROVEN, REPO, TEST_SERVICE_PORT, proven_with
from sglang_deploy.hostside.lib.service import server_argv

pytestmark = pytest.mark.simhost

UNIT = "/etc/systemd/system/sglang.service"
ENV = "/etc/sglang-deploy/sglang/sglang.env"
STORE = "/var/lib/sglang-deploy/sglang"


def state(simhost) -> dict:
    out = simhost.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang")
    return json.loads(out)


def release_of(store, release_id) -> dict:
    return next(r for r in store["releases"] if r["id"] == release_id)


def deploy_ok(simhost, profile, *extra):
    result = simhost.deploy(*extra, profile=profile)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return state(simhost)["state"]["active"]


def env_variant(tmp_path, name, **env):
    lines = "".join(f'  {key}: "{value}"\n' for key, value in env.items())
    return proven_with(tmp_path, "environment:\n", "environment:\n" + lines, name)


def assert_running(simhost, release_id):
    store = state(simhost)
    assert store["state"]["active"] == release_id and store["consistent"], json.dumps(store, indent=1)[-3000:]
    assert simhost.http("/health")[0] == 200
    meta = release_of(store, release_id)
    cmdline = simhost.sh(f"tr '\\0' '\\n' < /proc/{simhost.main_pid()}/cmdline").splitlines()
    assert cmdline[1:] == server_argv(meta["exec_start"])  # python3 + the release's ExecStart behind the redactor
    return store


def test_two_deploys_then_rollback_restores_release_one_byte_for_byte(simhost, tmp_path):
    first = deploy_ok(simhost, PROVEN)
    second = deploy_ok(simhost, proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 14"))
    assert first != second
    # What a compromised service user leaves behind (security review 3, finding 6) does not outlive the rollback.
    simhost.sh("runuser -u sglang -- sh -c 'echo NCCL_NET_PLUGIN=/var/lib/sglang/x.so > /var/lib/sglang/.nccl.conf'")
    result = simhost.pyinfra("rollback.py")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert_running(simhost, first)
    for name, installed in (("sglang.service", UNIT), ("sglang.env", ENV)):
        assert simhost.sh(f"sha256sum < {installed}") == simhost.sh(f"sha256sum < {STORE}/releases/{first}/{name}")
    kept = json.loads(simhost.sh(f"cat {STORE}/last_switch.json"))["forensics"]
    assert kept.startswith(f"{STORE}/forensics/") and f"moved aside for forensics: {kept}" in result.stdout + result.stderr
    assert simhost.sh(f"cat {kept}/var__lib__sglang/.nccl.conf; test ! -e /var/lib/sglang/.nccl.conf && echo gone")\
        .split() == ["NCCL_NET_PLUGIN=/var/lib/sglang/x.so", "gone"]


def test_a_manual_rollback_runs_the_targets_preflight_first(simhost, tmp_path):
    first = deploy_ok(simhost, PROVEN)
    second = deploy_ok(simhost, env_variant(tmp_path, "second.yaml", SGLANG_SIM_NOTE="preflight-rollback"))
    before = (simhost.checksums(UNIT, ENV), simhost.start_timestamp())
    simhost.sh("install -d -o sglang -m 700 /var/cache/sglang/triton && touch /var/cache/sglang/triton/kernel-marker")
    simhost.host.device_mode = 0o600  # the service user can no longer open the (stand-in) GPU nodes
    try:
        simhost.host.device_nodes()
        result = simhost.pyinfra("rollback.py", "--data", f"release={first}")
    finally:
        simhost.host.device_mode = 0o666
        simhost.host.device_nodes()
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "cannot open /dev/nvidiactl" in output and "mode 0600" in output, output[-3000:]
    assert (simhost.checksums(UNIT, ENV), simhost.start_timestamp()) == before  # nothing restarted
    assert state(simhost)["state"]["active"] == second
    skipped = simhost.pyinfra("rollback.py", "--data", f"release={first}", "--data", "skip_preflight=true")
    assert skipped.returncode == 0 and "WITHOUT its preflight" in skipped.stdout + skipped.stderr
    assert_running(simhost, first)
    # JIT caches do not outlive a rollback (security review 3, finding 6): the service user's cache directory is
    # kept for forensics in the store, and the restarted server begins with an empty one
    kept = json.loads(simhost.sh(f"cat {STORE}/last_switch.json"))["forensics"]
    assert "kernel-marker" in simhost.sh(f"ls {kept}/var__cache__sglang/triton").split()
    assert "kernel-marker" not in simhost.sh("ls /var/cache/sglang/triton 2>/dev/null; true").split()


def test_rollback_to_any_retained_release_and_the_listing(simhost, tmp_path):
    target = deploy_ok(simhost, proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 13"))
    deploy_ok(simhost, PROVEN)
    dry = simhost.pyinfra("rollback.py", "--data", f"release={target}", "--dry", "--diff")
    assert dry.returncode == 0 and "+    --max-running-requests 13 \\" in dry.stdout + dry.stderr
    result = simhost.pyinfra("rollback.py", "--data", f"release={target}")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert_running(simhost, target)
    listing = simhost.pyinfra("releases.py")
    output = listing.stdout + listing.stderr
    assert f"*g{target}" in output or f"* {target}" in output
    assert "--max-running-requests: 13 -> 16" in output
    before = simhost.checksums(UNIT, ENV), simhost.start_timestamp()
    missing = simhost.pyinfra("rollback.py", "--data", "release=0999-deadbeef")
    assert missing.returncode != 0 and "release 0999-deadbeef is not retained on the host" in missing.stdout + missing.stderr
    assert (simhost.checksums(UNIT, ENV), simhost.start_timestamp()) == before  # nothing changed
    assert state(simhost)["state"]["active"] == target


def test_crash_at_start_rolls_back_automatically(simhost, tmp_path):
    good = deploy_ok(simhost, PROVEN)
    result = simhost.deploy(profile=env_variant(tmp_path, "crash.yaml", SGLANG_SIM_CRASH_AT_START=1))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "FAILED at stage 'active'" in output and "SIMULATED FAULT" in output, output[-4000:]  # the failed start's journal
    assert f"automatic rollback to {good}: healthy again" in output
    assert f"what the service user wrote was moved aside for forensics: {STORE}/forensics/" in output
    store = assert_running(simhost, good)
    failed = re.search(r"release (\d{4}-[0-9a-f]{8}) FAILED", output)  # this deploy's release, not another test's
    bad = [r for r in store["releases"] if r.get("verdict") == "bad" and failed and r["id"] == failed.group(1)]
    assert bad and bad[-1]["history"][-1]["event"].startswith("failed to start"), failed


def test_hang_at_start_times_out_and_rolls_back(simhost, tmp_path):
    good = deploy_ok(simhost, PROVEN)
    hang = env_variant(tmp_path, "hang.yaml", SGLANG_SIM_HANG_AT_START=1)
    hang.write_text(hang.read_text().replace("start_timeout_s: 1800", "start_timeout_s: 12"))
    result = simhost.deploy(profile=hang)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "FAILED at stage 'health'" in output and "not ready within 12 s" in output
    assert "still starting after 4 s of 12 s (stage health)" in output  # progress while it waits
    assert "start_timeout_s: a cold first start" in output
    assert_running(simhost, good)


def test_automatic_rollbacks_are_capped(simhost, tmp_path):
    deploy_ok(simhost, proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 15"))  # count 0
    crash = env_variant(tmp_path, "crash2.yaml", SGLANG_SIM_CRASH_AT_START=1, SGLANG_SIM_NOTE="cap")
    first = simhost.deploy(profile=crash, cap=1)
    assert first.returncode != 0 and "automatic rollback" in first.stdout + first.stderr
    second = simhost.deploy(profile=crash, cap=1)
    assert second.returncode != 0 and "1 automatic rollbacks in a row (cap 1)" in second.stdout + second.stderr
    assert "switch refused" in second.stdout + second.stderr
    deploy_ok(simhost, PROVEN)  # the running good release is still there; a good deploy resets the count


def test_interrupted_switch_leaves_a_service_and_the_next_deploy_converges(simhost, tmp_path):
    first = deploy_ok(simhost, PROVEN)
    variant = proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 11")
    second = deploy_ok(simhost, variant)
    running_pid = simhost.main_pid()
    # The switch back to `first` dies after writing the unit and before the restart.
    died = simhost.host.ssh(
        f"cd /opt/sglang-deploy/lib && SGLANG_DEPLOY_TEST_DIE_AFTER=unit-written python3 -m hostside.switch "
        f"--service sglang --release {first} --probe-url http://127.0.0.1:{TEST_SERVICE_PORT} --timeout 30", check=False)
    assert died.returncode == 9
    store = state(simhost)
    assert not store["consistent"] and store["state"]["switching"]["to"] == first
    assert simhost.sh(f"test -s {UNIT} && systemctl is-active sglang").strip() == "active"
    assert simhost.main_pid() == running_pid  # the old release still serves
    # The next deploy (of whatever profile) converges: here the second release again.
    result = simhost.deploy(profile=variant)
    assert result.returncode == 0 and "not consistent" in result.stdout + result.stderr
    assert_running(simhost, second)


def test_the_environment_file_reads_as_systemd_reads_it(simhost):
    """The consistency check parses the environment file itself: real systemd must agree, for the values the
    renderer quotes (quotes, backslashes, $, backticks, spaces)."""
    from sglang_deploy.hostside.lib.service import env_file_values
    from sglang_deploy.render import env_quote

    values = {"SGLANG_A": 'x"y', "SGLANG_B": "C:\\path", "SGLANG_C": "$HOME/x", "SGLANG_D": '{"a": 1}',
              "SGLANG_E": "a b", "SGLANG_F": "back`tick", "SGLANG_G": "it's", "SGLANG_H": "0"}
    text = "".join(f"{key}={env_quote(value)}\n" for key, value in values.items())
    assert env_file_values(text) == values
    simhost.sh(f"cat > /tmp/quoting.env <<'EOF'\n{text}EOF")
    out = simhost.sh("systemd-run -q --wait --pipe -p EnvironmentFile=/tmp/quoting.env env -0")
    seen = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    assert {key: seen.get(key) for key in values} == values


def test_a_server_restarted_without_a_declared_variable_is_seen_and_the_redeploy_restores_it(simhost):
    """The incident's shape, in the environment: a hand restart under a local override drops a declared
    variable. Unit and environment file are untouched, so only the process tells; the same deploy restarts it."""
    release = deploy_ok(simhost, PROVEN)
    drop_in = "/etc/systemd/system/sglang.service.d/by-hand.conf"
    try:
        simhost.sh(f"mkdir -p {drop_in.rsplit('/', 1)[0]} && printf '[Service]\\nUnsetEnvironment=NCCL_CUMEM_ENABLE\\n'"
                   f" > {drop_in} && systemctl daemon-reload && systemctl restart sglang")
        simhost.wait_healthy()  # past the fork/exec window: the process's own environment
        # While the override stays, a restart would not help: named, not counted as inconsistent.
        store = state(simhost)
        assert store["consistent"] and store["inconsistent"] == []
        assert any("NCCL_CUMEM_ENABLE" in p and drop_in in p for p in store["problems"]), store["problems"]
    finally:
        simhost.sh(f"rm -f {drop_in} && systemctl daemon-reload")
    # The override is gone but the process started under it still lacks the variable: inconsistent, and the
    # deploy restarts it.
    store = state(simhost)
    assert not store["consistent"] and store["inconsistent"] == [
        "the server process's environment differs from the release's in NCCL_CUMEM_ENABLE"]
    result = simhost.deploy(profile=PROVEN)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "the server process's environment differs from the release's in NCCL_CUMEM_ENABLE" in output
    assert_running(simhost, release)
    assert "NCCL_CUMEM_ENABLE=0" in simhost.sh(f"tr '\\0' '\\n' < /proc/{simhost.main_pid()}/environ")


def test_killed_controller_does_not_stop_the_switch_and_a_concurrent_deploy_is_refused(simhost, tmp_path):
    deploy_ok(simhost, PROVEN)
    # The start outlasts the concurrent deploy's checks before it looks at the lock, on a busy machine too.
    slow = env_variant(tmp_path, "slow.yaml", SGLANG_SIM_START_SECONDS=30)
    controller = subprocess.Popen(simhost.pyinfra_command(*simhost.deploy_args(profile=slow)), cwd=REPO,
                                  env=simhost.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not state(simhost)["lock"]:
        time.sleep(0.3)
    holder = state(simhost)["lock"]
    assert holder, "the switch never took the lock"
    concurrent = simhost.deploy(profile=PROVEN)
    output = concurrent.stdout + concurrent.stderr
    assert concurrent.returncode != 0 and "another deploy or rollback is running" in output
    assert holder["owner"] in output
    controller.send_signal(signal.SIGKILL)  # the controller dies mid-switch; SSH drops
    controller.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (state(simhost)["lock"] or not state(simhost)["consistent"]):
        time.sleep(0.5)
    store = state(simhost)
    assert store["consistent"] and release_of(store, store["state"]["active"])["profile"] == "slow"


def test_retention_after_four_deploys_keeping_two(simhost, tmp_path):
    """keep_releases=2 (the default keeps 5; the prune's choice itself is test_store's): after four new
    releases the last two are kept, the two before them are gone, and the last good one is never dropped."""
    ids = [deploy_ok(simhost, proven_with(tmp_path, "--max-running-requests: 16",
                                          f"--max-running-requests: {n}", f"keep{n}.yaml"), "--data", "keep_releases=2")
           for n in range(3, 7)]
    store = state(simhost)
    retained = [r["id"] for r in store["releases"]]
    assert set(ids[-2:]) <= set(retained) and not set(ids[:2]) & set(retained)
    assert store["state"]["last_good"] in retained and len(retained) <= 3


def test_a_server_that_exits_0_is_restarted(simhost, tmp_path):
    """Restart=always: a CUDA fault that exits 0 (vllm-project/vllm#53726) is no reason to stay down."""
    profile = proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_SIM_EXIT0_AFTER_REQUESTS: "2"\n',
                          "exit0.yaml")
    result = simhost.deploy(profile=profile)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    before = int(simhost.sh("systemctl show -p NRestarts --value sglang").strip())
    for _ in range(4):  # readiness sent one; the third request makes it exit 0
        simhost.sh(f"curl -s -m 10 -o /dev/null -H 'Authorization: Bearer {simhost.api_key}' "
                   f"http://127.0.0.1:{TEST_SERVICE_PORT}/generate -d '{{\"text\": \"x\", \"sampling_params\": "
                   "{\"max_new_tokens\": 2}}'; true")
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and int(simhost.sh("systemctl show -p NRestarts --value sglang").strip()) == before:
        time.sleep(1)
    assert int(simhost.sh("systemctl show -p NRestarts --value sglang").strip()) == before + 1
    assert "exiting with status 0" in simhost.sh("journalctl -u sglang --no-pager -o cat | grep -F 'status 0' | tail -1")
    simhost.wait_healthy()
