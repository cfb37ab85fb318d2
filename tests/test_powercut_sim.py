"""Power cuts and a reboot on the simulated CT129 (issue 50): a boot serves a release that passed its gate.

One named point of the sweep runs here (the issue's case: the new release's unit written and its server starting);
every point is benchmarks/powercut_sweep.py, its table in docs/measurements.md. The model-only simulator server.
"""

import pytest

from conftest import PROVEN, TEST_SERVICE_PORT, proven_with
from testbed.powercut import cut, next_deploy, store_state, wait_healthy

pytestmark = pytest.mark.simhost


def test_a_cut_while_the_new_release_starts_boots_the_last_good_release(simhost, tmp_path):
    deployed = simhost.deploy(profile=PROVEN)
    assert deployed.returncode == 0, (deployed.stdout + deployed.stderr)[-3000:]
    good = store_state(simhost)["state"]["active"]
    variant = proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 12", "cut.yaml")
    result = cut(simhost, "readiness", variant, TEST_SERVICE_PORT)
    assert result.reached and not result.violations, result
    assert result.active == good and result.recovered["action"] == "rolled back"
    pending = result.recovered["interrupted"]
    store = store_state(simhost)
    meta = next(r for r in store["releases"] if r["id"] == pending)
    assert meta["verdict"] == "interrupted" and meta["history"][-1]["event"].startswith("interrupted (boot recovery")
    assert simhost.sh("systemctl is-active sglang-recover.service").strip() == "active"
    journal = simhost.sh("journalctl -b -u sglang-recover.service --no-pager -o cat")
    assert f"back to the last good release {good}" in journal
    listed = simhost.pyinfra("releases.py")
    assert "boot recovery" in listed.stdout + listed.stderr and "rolled back" in listed.stdout + listed.stderr
    next_deploy(simhost, result, variant)  # the interrupted release's profile again: one switch, and it holds
    assert not result.violations and store_state(simhost)["state"]["active"] == pending, result


def test_a_plain_reboot_brings_the_service_and_the_watch_back_without_a_deploy(simhost):
    if not store_state(simhost)["state"]["active"]:  # run alone: a release to come back
        assert simhost.deploy(profile=PROVEN).returncode == 0
    before = store_state(simhost)
    assert before["consistent"]
    simhost.host.down()  # a clean shutdown: nspawn asks the container's systemd to power off
    simhost.host.up()
    assert wait_healthy(simhost, TEST_SERVICE_PORT, 120) is not None
    after = store_state(simhost)
    assert after["consistent"] and after["state"]["active"] == before["state"]["active"], after["inconsistent"]
    assert after["state"].get("recovered") == before["state"].get("recovered")  # nothing to recover
    assert simhost.sh("systemctl is-enabled sglang-watch.timer; systemctl is-active sglang-watch.timer").split() == \
        ["enabled", "active"]
    assert simhost.sh("systemctl show -p NextElapseUSecMonotonic --value sglang-watch.timer").strip() not in ("", "0")
