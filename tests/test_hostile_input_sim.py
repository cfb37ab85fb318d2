"""On the simulated CT129: refused input changes nothing on the host; the unit runs sandboxed (exposure
measured by systemd-analyze); authentication is required, checked at readiness and recorded per release."""

from __future__ import annotations

import json
import re

import pytest

from conftest import PROVEN, proven_with

pytestmark = pytest.mark.simhost

UNIT = "/etc/systemd/system/sglang.service"
ENV = "/etc/sglang-deploy/sglang/sglang.env"
SECRETS = "/etc/sglang-deploy/sglang/secrets.yaml"
STATE = "/var/lib/sglang-deploy/sglang/state.json"
WATCHED = (UNIT, ENV, SECRETS, STATE, "/etc/passwd", "/etc/group", "/etc/shadow")
MAX_EXPOSURE = 2.0


@pytest.fixture(scope="module")
def deployed(simhost):
    result = simhost.deploy(profile=PROVEN)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return simhost


def snapshot(simhost) -> str:
    """Checksums of the unit, environment, secrets, release store, accounts and every unit file, and the
    service's start time: anything a deploy could change."""
    return simhost.sh(
        "sha256sum " + " ".join(WATCHED) + "; find /etc/systemd/system /var/lib/sglang-deploy /opt/sglang-deploy/lib "
        "-type f -exec sha256sum {} + | sort; systemctl show -p ExecMainStartTimestampMonotonic sglang; true")


REFUSED = [
    # (id, profile change, host data, setup on the host, expected in the output): one case per kind that stops a
    # deploy (the profile, the host's facts, host data), end to end. The others, and these, are fast cases of
    # tests/test_roles_stages.py: the stages before the refusals queue no operation.
    ("unit-injection", ("  served_name: qwen3.6-27b", '  served_name: "q\\n[Service]\\nExecStartPre=+/bin/touch /tmp/pwned"'),
     (), None, "model.served_name: contains the control character U+000A"),
    ("existing-login-account", ("  user: sglang", "  user: alice"), (), "id alice || useradd -m -s /bin/bash alice",
     "service.user: 'alice' is an existing login account on the host (shell /bin/bash)"),
    ("port-with-shell", None, ("--data", "port=31200;touch /tmp/pwned"), None, "--data: port: must be an integer"),
]


@pytest.mark.parametrize("case, change, data, setup, expected", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_refused_deploy_changes_nothing_on_the_host(deployed, tmp_path, case, change, data, setup, expected):
    simhost = deployed
    if setup:
        simhost.sh(setup)
    profile = proven_with(tmp_path, *change) if change else PROVEN
    before = snapshot(simhost)
    result = simhost.deploy(*data, profile=profile)
    output = result.stdout + result.stderr
    after = snapshot(simhost)
    pwned = simhost.sh("ls /tmp/pwned 2>/dev/null; true").strip()
    assert (result.returncode, expected in output, "nothing was changed on the host" in output, after == before,
            pwned) == (1, True, True, True, ""), output[-2500:]


def exposure(simhost, unit: str) -> float:
    out = simhost.sh(f"systemd-analyze security {unit}")
    return float(re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out).group(1))


def test_the_unit_runs_sandboxed_with_exposure_at_most_2(deployed):
    simhost = deployed
    after = exposure(simhost, "sglang.service")
    # The same unit with every sandbox directive relaxed (as the unit was before the sandbox).
    relaxed = simhost.sh(f"sed -e '/^# RELAXED/d' {UNIT}")
    from sglang_deploy.hardening import DIRECTIVES

    bare = "\n".join(line for line in relaxed.splitlines() if line.split("=", 1)[0] not in DIRECTIVES
                     and not line.startswith("StartLimit"))
    simhost.sh(f"mkdir -p /tmp/bare && cat > /tmp/bare/sglang.service <<'EOF'\n{bare}\nEOF")
    before = exposure(simhost, "--offline=yes /tmp/bare/sglang.service")
    print(f"\nexposure (systemd-analyze security sglang.service, simulated host): {after}; without the sandbox: {before}")
    pid = simhost.main_pid()
    status = dict(line.split(":\t", 1) for line in simhost.sh(f"cat /proc/{pid}/status").splitlines() if ":\t" in line)
    # The simulator serves under the sandbox: no new privileges, no capabilities, a seccomp filter.
    assert (after <= MAX_EXPOSURE, before > 9, status["NoNewPrivs"].strip(), status["CapBnd"].strip(),
            status["Seccomp"].strip(), simhost.http("/health")[0]) == (True, True, "1", "0000000000000000", "2", 200), \
        (after, before, status)


def test_a_profile_relaxes_named_directives_and_the_unit_says_so(deployed, tmp_path):
    simhost = deployed
    relaxed = proven_with(tmp_path, "  host: 127.0.0.1", "  host: 127.0.0.1\n  relax: [ProtectHome, SystemCallFilter]")
    result = simhost.deploy(profile=relaxed)
    unit = simhost.sh(f"cat {UNIT}")
    shown = simhost.sh("systemctl show -p ProtectHome -p SystemCallFilter sglang")
    assert (result.returncode, "# RELAXED by the profile (service.relax): ProtectHome" in unit,
            "# RELAXED by the profile (service.relax): SystemCallErrorNumber" in unit, "ProtectHome=no" in shown,
            "SystemCallFilter=~" in shown.splitlines()) == (0, True, True, True, True), result.stderr[-2000:] + shown


def test_readiness_refuses_a_server_that_does_not_enforce_the_key(deployed, tmp_path):
    simhost = deployed
    assert simhost.deploy(profile=PROVEN).returncode == 0
    broken = proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_SIM_AUTH_BROKEN: "1"\n')
    result = simhost.deploy(profile=broken)
    switch = json.loads(simhost.sh("cat /var/lib/sglang-deploy/sglang/last_switch.json"))
    assert (result.returncode, switch["readiness"]["stage"], "got 200, not 401" in switch["readiness"]["detail"],
            switch["rollback_readiness"]["ready"]) == (1, "auth", True, True), json.dumps(switch, indent=1)[-2000:]


def test_auth_is_recorded_and_a_rollback_to_another_auth_mode_says_so(deployed, tmp_path):
    simhost = deployed
    open_profile = proven_with(tmp_path, "  host: 127.0.0.1", "  host: 127.0.0.1\n  auth: none")
    assert simhost.deploy(profile=open_profile).returncode == 0
    state = json.loads(simhost.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))
    unauthenticated = state["state"]["active"]
    assert simhost.deploy(profile=PROVEN).returncode == 0
    result = simhost.pyinfra("rollback.py", "--data", f"release={unauthenticated}")
    output = result.stdout + result.stderr
    metas = {r["id"]: r for r in json.loads(simhost.sh(
        "cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))["releases"]}
    status_without_key = simhost.http("/v1/models")[0]
    assert (result.returncode, metas[unauthenticated]["auth"], "runs WITHOUT an API key (auth none)" in output,
            status_without_key) == (0, "none", True, 200), output[-3000:]
    assert simhost.deploy(profile=PROVEN).returncode == 0  # back to authenticated for the tests that follow


SQUATTER = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Fake(BaseHTTPRequestHandler):
    def answer(self):
        with open(sys.argv[2], "a") as log:
            log.write(f"{self.path} {self.headers.get('Authorization', '-')}\n")
        body = json.dumps({"text": "hi", "meta_info": {"completion_tokens": 8}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = answer

HTTPServer(("127.0.0.1", int(sys.argv[1])), Fake).serve_forever()
'''


def test_a_squatter_on_the_port_never_receives_the_key(deployed, tmp_path):
    """A local user binds the port while SGLang loads: readiness sees a listener outside the unit's cgroup
    and stops before sending the key; the deploy fails instead of marking the squatter good."""
    from conftest import TEST_SERVICE_PORT

    simhost = deployed
    simhost.sh("cat > /usr/local/bin/squatter.py <<'EOF'\n" + SQUATTER + "\nEOF\nrm -f /tmp/squatter.log")
    # SGLang still loading (4 s) when readiness first looks at the port (as soon as the unit is active)
    variant = proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_SIM_START_SECONDS: "4"\n')
    simhost.sh("systemctl stop sglang && systemd-run --unit=squatter --uid=nobody python3 /usr/local/bin/squatter.py "
               f"{TEST_SERVICE_PORT} /tmp/squatter.log && sleep 1")
    try:
        result = simhost.deploy(profile=variant)
        switch = json.loads(simhost.sh("cat /var/lib/sglang-deploy/sglang/last_switch.json"))
        seen = simhost.sh("cat /tmp/squatter.log 2>/dev/null; true")
    finally:
        simhost.sh("systemctl stop squatter; true")
    assert (result.returncode != 0, switch["readiness"]["stage"], "held by pid" in switch["readiness"]["detail"],
            simhost.api_key in seen, "/health" in seen) == (True, "listener", True, False, True), (seen, switch)
    assert simhost.deploy(profile=PROVEN).returncode == 0  # the real server back for the tests that follow


def test_the_automatic_rollback_probes_the_target_releases_own_port(deployed, tmp_path):
    """A deploy that moves the port and fails: the rollback must probe the good release's port (it used to
    probe the failed one's for start_timeout_s and report a healthy server as 'ROLLBACK ALSO FAILED')."""
    from conftest import TEST_SPARE_PORT

    simhost = deployed
    assert simhost.deploy(profile=PROVEN).returncode == 0
    crash = proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_SIM_CRASH_AT_START: "1"\n')
    result = simhost.deploy("--data", f"port={TEST_SPARE_PORT}", profile=crash, timeout=240)
    switch = json.loads(simhost.sh("cat /var/lib/sglang-deploy/sglang/last_switch.json"))
    assert (result.returncode, switch["rollback_readiness"]["ready"], switch["rollback_readiness"]["elapsed_s"] < 60,
            simhost.http("/health")[0]) == (1, True, True, 200), json.dumps(switch, indent=1)[-2000:]
