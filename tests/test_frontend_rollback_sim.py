"""SGLang 0.5.23's own `sglang serve` on the simulated CT129 (host data sim_server=sglang; only the Scheduler is
modelled) through a refused start, a switch and a rollback: SGLang's own run_scheduler_process takes the server down
and the good release comes back; the API key stays out of every output, file and journal line.

The other module on SGLang's own front end beside test_frontend_sim (the gate's verdicts): a module each, so that
their two chains of starts run side by side on two workers."""

import pytest

from conftest import PROVEN, proven_with
from test_frontend_sim import assert_key_nowhere

pytestmark = pytest.mark.simhost


@pytest.fixture(scope="module")
def proven(simhost):
    result = simhost.deploy(profile=PROVEN)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_a_refused_start_exits_with_sglangs_own_error(simhost, tmp_path, proven):
    # --speculative-adaptive on a hybrid model passes the parser: the modelled scheduler fails it at start, and
    # SGLang's own run_scheduler_process takes the server down (rank 0 died during initialization)
    bad = proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_SIM_CRASH_AT_START: "1"\n', "crash.yaml")
    result = simhost.deploy(profile=bad, gate=True)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "scheduler died during initialization" in output or "Scheduler hit an exception" in output, output[-3000:]
    # readiness printed the journal of the failed start, and the good release is back
    assert "SGLANG_SIM_CRASH_AT_START" in output and "healthy again" in output, output[-3000:]
    assert simhost.http("/health")[0] == 200


def test_a_switch_and_a_rollback_and_the_key_is_in_no_output_file_or_journal_line(simhost, proven, tmp_path):
    variant = proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 12", "variant.yaml")
    assert simhost.deploy(profile=variant).returncode == 0, simhost.transcript[-1][-3000:]
    before = simhost.start_timestamp()
    assert simhost.pyinfra("rollback.py").returncode == 0, simhost.transcript[-1][-3000:]
    assert simhost.start_timestamp() != before and simhost.http("/health")[0] == 200
    assert_key_nowhere(simhost, starts=5)  # proven, crash, proven again, variant, the rollback
