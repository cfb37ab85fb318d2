"""End to end against the simulated CT129: real SSH, real systemd, real HTTP; only the GPU server is simulated."""

import json

import pytest

from conftest import PROVEN, SIM_START_SECONDS, TEST_SERVICE_PORT, proven_with

pytestmark = pytest.mark.simhost

UNIT = "/etc/systemd/system/sglang.service"
ENV = "/etc/sglang-deploy/sglang/sglang.env"
SECRETS = "/etc/sglang-deploy/sglang/secrets.yaml"


def grand_total(result) -> list[str]:
    """pyinfra's results row: operations, changed, errors, unchanged."""
    line = next(line for line in (result.stdout + result.stderr).splitlines() if "Grand total" in line)
    return line.split()[2:]


@pytest.fixture(scope="module")
def deployed(simhost):
    """The proven profile deployed once for this module's tests."""
    result = simhost.deploy(profile=PROVEN)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return simhost, result


def test_deploy_starts_the_service_as_declared(deployed):
    simhost, result = deployed
    assert "SIMULATED HOST" in result.stdout + result.stderr
    assert simhost.sh("systemctl is-active sglang").strip() == "active"
    status, _ = simhost.http("/health")
    assert status == 200
    # The running process has the unit's command line, and runs as the unprivileged service user.
    pid = simhost.main_pid()
    cmdline = simhost.sh(f"tr '\\0' ' ' < /proc/{pid}/cmdline")
    assert "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in cmdline
    assert f"--port {TEST_SERVICE_PORT}" in cmdline and simhost.api_key not in cmdline
    assert simhost.sh(f"stat -c %U /proc/{pid}").strip() == "sglang"
    environ = simhost.sh(f"tr '\\0' '\\n' < /proc/{pid}/environ")
    assert "NCCL_CUMEM_ENABLE=0" in environ.splitlines() and "HF_HUB_OFFLINE=1" in environ.splitlines()
    # the tests' modelled start (conftest.SIM_START_SECONDS), from the simulated host's systemd, not the release
    assert f"SGLANG_SIM_START_SECONDS={SIM_START_SECONDS}" in environ.splitlines()
    assert "SGLANG_SIM_START_SECONDS" not in simhost.sh(f"cat {ENV}")


def test_files_have_safe_modes_and_no_secret_outside_the_secrets_file(deployed):
    simhost, result = deployed
    modes = simhost.sh(f"stat -c '%n %a %U %G' {UNIT} {ENV} {SECRETS}").splitlines()
    assert modes == [f"{UNIT} 644 root root", f"{ENV} 600 root root", f"{SECRETS} 640 root sglang"]
    assert simhost.api_key not in simhost.sh(f"cat {UNIT} {ENV}")
    assert simhost.api_key in simhost.sh(f"cat {SECRETS}")
    assert simhost.api_key not in result.stdout + result.stderr


def test_api_key_is_enforced_by_the_server(deployed):
    simhost, _ = deployed
    assert simhost.http("/server_info")[0] == 401
    status, body = simhost.http("/server_info", key=simhost.api_key)
    info = json.loads(body)
    assert status == 200 and info["internal_states"][0]["simulated"] is True and info["speculative_num_steps"] == 3
    assert info["api_key"] == simhost.api_key  # as SGLang: /server_info carries the key; copies are redacted


def test_second_run_changes_nothing_and_does_not_restart(deployed):
    simhost, _ = deployed
    before = simhost.start_timestamp()
    result = simhost.deploy(profile=PROVEN)
    assert result.returncode == 0, result.stderr[-3000:]
    operations, succeeded, failed, unchanged = grand_total(result)
    assert (succeeded, failed, unchanged) == ("-", "-", operations)
    assert simhost.start_timestamp() == before


def test_secrets_mode_is_repaired_without_a_restart_and_a_new_key_restarts(deployed):
    simhost, _ = deployed
    before = simhost.start_timestamp()
    simhost.sh(f"chmod 644 {SECRETS}")  # SGLang reads it (--config) only at start: nothing to restart for
    result = simhost.deploy(profile=PROVEN)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert simhost.sh(f"stat -c '%a %U %G' {SECRETS}").split() == ["640", "root", "sglang"]
    assert simhost.start_timestamp() == before
    key_file = simhost.host.state_dir / "api_key"
    key_file.write_text("sk-rotated-key-for-the-restart-test\n")
    try:
        rotated = simhost.deploy(profile=PROVEN)
        assert rotated.returncode == 0, (rotated.stdout + rotated.stderr)[-3000:]
        assert "secrets or server program changed: restart" in rotated.stdout + rotated.stderr
        assert simhost.start_timestamp() != before
        assert simhost.http("/server_info", key="sk-rotated-key-for-the-restart-test")[0] == 200
        assert simhost.http("/server_info", key=simhost.api_key_original)[0] == 401
    finally:
        key_file.write_text(simhost.api_key_original + "\n")
        restored = simhost.deploy(profile=PROVEN)
    assert restored.returncode == 0 and simhost.http("/server_info", key=simhost.api_key_original)[0] == 200


def test_dry_run_diff_shows_the_change_masks_the_key_and_changes_nothing(deployed, tmp_path):
    simhost, _ = deployed
    variant = proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 12")
    sums_before, started_before = simhost.checksums(UNIT, ENV, SECRETS), simhost.start_timestamp()
    simhost.api_key_path = simhost.host.state_dir / "api_key"
    simhost.api_key_path.write_text("sk-rotated-key-for-the-diff-test\n")
    try:
        result = simhost.deploy("--dry", "--diff", profile=variant)
    finally:
        simhost.api_key_path.write_text(simhost.api_key_original + "\n")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "-    --max-running-requests 16 \\" in output and "+    --max-running-requests 12 \\" in output
    # the secrets file is decided by its sha256 and never read back (roles/ops.py secret_file)
    assert "Will write /etc/sglang-deploy/sglang/secrets.yaml: changed (secret: its content is not shown)" in output
    assert "sk-rotated-key-for-the-diff-test" not in output and simhost.api_key_original not in output
    assert simhost.checksums(UNIT, ENV, SECRETS) == sums_before
    assert simhost.start_timestamp() == started_before


# One case end to end (the other profile refusals are fast cases of tests/test_roles_stages.py: the stages before
# the refusals queue no operation).
@pytest.mark.parametrize("change, expected", [
    (("--tp-size: 2 ", "--tp-size: 4 "), "--tp-size 4 does not match the host's 2 GPU(s)"),
])
def test_bad_profile_fails_before_touching_the_host(deployed, tmp_path, change, expected):
    simhost, _ = deployed
    bad = proven_with(tmp_path, *change)
    sums_before, started_before = simhost.checksums(UNIT, ENV, SECRETS), simhost.start_timestamp()
    result = simhost.deploy(profile=bad)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert expected in output and str(bad) in output and "nothing was changed on the host" in output
    assert simhost.checksums(UNIT, ENV, SECRETS) == sums_before
    assert simhost.start_timestamp() == started_before
    assert simhost.sh("systemctl is-active sglang").strip() == "active"
