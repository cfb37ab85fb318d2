"""The unit's process as the host sees it (hostside/lib/service.py): the command line a release's ExecStart runs as, and
the running process's environment against the release's environment file (names, never values)."""

import pytest

from conftest import PROVEN
from sglang_deploy.hostside.lib.service import cmdline_matches, env_file_values, environment_drift
from sglang_deploy.plan import plan_for_host


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    """plan_for_host needs an API key (a missing one fails the plan unless the profile says auth: none)."""
    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "sk-test-key-for-the-plan-0123")


def test_cmdline_match_allows_the_script_interpreter():
    argv = ["/v/bin/sglang", "serve", "--port", "1"]
    assert cmdline_matches(argv, argv)
    assert cmdline_matches(["/v/bin/python3", *argv], argv)
    assert not cmdline_matches(["/v/bin/python3", *argv[:-1], "2"], argv)


def test_environment_file_values_and_the_process_drift_names_only():
    text = plan_for_host({"profile": str(PROVEN), "gpus": 2, "gpu_topology": "pcie"}).rendered.env
    declared = env_file_values(text + "# a comment\nQUOTED=\"a b\"\n")
    assert declared["NCCL_CUMEM_ENABLE"] == "0" and declared["QUOTED"] == "a b" and "# a comment" not in declared
    import subprocess

    environ = {"NCCL_CUMEM_ENABLE": "0", "SGLANG_X": "a b"}
    import sys

    process = subprocess.Popen([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"],
                               env=environ, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "started\n"  # running, past exec: /proc/PID/environ is its own
        assert environment_drift(process.pid, environ) == []
        drift = environment_drift(process.pid, {"NCCL_CUMEM_ENABLE": "1", "SGLANG_X": "a b", "NCCL_ALGO": "Ring"})
        assert drift == ["NCCL_CUMEM_ENABLE", "NCCL_ALGO"]  # names, never values
    finally:
        process.kill()
        process.wait()
    assert environment_drift(2 ** 22 + 1, environ) is None  # no such process: nothing to compare
