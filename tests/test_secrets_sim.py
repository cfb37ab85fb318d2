"""The API key appears in no file the tool writes and in none of its output.

SGLang itself returns the key from /server_info (with the launch command) and logs it at start
(``server_args=``); the simulator does the same, so these tests would catch a copy that is not redacted.
"""

import subprocess

import pytest

from conftest import REPO, proven_with

pytestmark = pytest.mark.simhost

# A short gate: what matters here is that it runs and writes its files, not its verdict against whatever
# baseline an earlier test on this worker's host left (2 paired prompts are often inconclusive).
SMALL_GATE = ("  max_new_tokens: 256\n  concurrency: 4",
              "  max_new_tokens: 64\n  concurrency: 2\n  on_inconclusive: keep")


def test_the_key_is_in_no_file_and_no_output(simhost, tmp_path):
    key = simhost.api_key
    outputs = []

    def run(*args):
        result = simhost.pyinfra(*args)
        outputs.append(result.stdout + result.stderr)
        return result

    good = proven_with(tmp_path, *SMALL_GATE, "good.yaml")
    good.write_text(good.read_text().replace("  samples: 8", "  samples: 3").replace("  warmup: 1", "  warmup: 0"))
    assert run(*simhost.deploy_args(profile=good, gate=True)).returncode == 0, outputs[-1][-3000:]
    # A release that dies at start: readiness copies the journal, which holds SGLang's server_args line.
    crash = proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_SIM_CRASH_AT_START: "1"\n', "crash.yaml")
    assert run(*simhost.deploy_args(profile=crash, gate=True)).returncode != 0
    # readiness printed the journal of the failed start (SGLang's own traceback through run_scheduler_process)
    assert "SGLANG_SIM_CRASH_AT_START" in outputs[-1], outputs[-1][-3000:]
    assert run("doctor.py").returncode == 0, outputs[-1][-3000:]
    assert run("releases.py").returncode == 0
    variant = proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 12", "variant.yaml")
    assert run(*simhost.deploy_args(profile=variant)).returncode == 0
    assert run("rollback.py").returncode == 0, outputs[-1][-3000:]
    assert run(*simhost.deploy_args("--dry", "--diff", profile=good)).returncode == 0

    # The server does hold it (so a leak would be visible): /server_info returns it, as SGLang's does.
    assert key in simhost.http("/server_info", key=key)[1]
    for number, output in enumerate(outputs):
        assert key not in output, f"command {number} printed the API key"
    # Every file the tool writes on the host, except the secrets file itself (0600, root:sglang).
    leaks = simhost.sh(f"grep -rlF -- '{key}' /var/lib/sglang-deploy /opt/sglang-deploy /etc/systemd/system "
                       "/etc/sglang-deploy /tmp /root 2>/dev/null | grep -v '^/etc/sglang-deploy/sglang/secrets.yaml$'; true")
    assert leaks.strip() == "", leaks
    # The journal: the server logs the key at every start (server_args=, as SGLang does); the log redactor in
    # front of it (ExecStart's first stage) replaced it, on this container's systemd.
    journal = simhost.sh(f"journalctl --no-pager -o cat | grep -cF -- '{key}'; true")
    assert journal.strip() == "0", "the API key is in the journal"
    started = simhost.sh("journalctl --no-pager -o cat -u sglang | grep -F 'server_args=' | tail -1")
    assert "'api_key': '<redacted>'" in started, started[-500:]
    local = subprocess.run(["grep", "-rlF", "--", key, str(REPO / "results")], capture_output=True, text=True)
    assert local.stdout.strip() == "", local.stdout
