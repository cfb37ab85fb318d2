"""roles/stages.py without a host: the deploy's stages up to the refusals queue no operation, whatever stops the
deploy there (the profile, host data, or what the host reports), and each refusal names its cause.

This is the structural half of "a refused deploy changes nothing on the host"; tests/test_hostile_input_sim.py and
tests/test_deploy_sim.py keep one end-to-end case per kind (profile, host data, host facts, hardware) that checks
the host's files and the running server after a real refused deploy.
"""

import pytest
from pyinfra.api.exceptions import DeployError

from conftest import PROVEN, proven_with, store_report
from fakehost import run_role
from roles import stages
from roles.facts import DeployState

PASSWD_ALICE = "alice:x:1000:1000:Alice:/home/alice:/bin/bash"


def deploy_state(simulated=True, lock=None, passwd=None, units=None) -> dict:
    """A DeployState fact (roles/facts.py) of a simulated host that never had a release."""
    return {"simulated": simulated, "manifests": {}, "paths": {}, "files": {}, "timers": {}, "user": None,
            "store": store_report(lock=lock),
            "account": {"passwd": passwd, "uid_min": 1000}, "units": units or {"files": {}, "directories": {}},
            "weights": {"verified": False, "hub_client": False}, "draft": None, "offered": []}


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "api_key"
    path.write_text("sk-stages-test-key-0123456789\n")
    path.chmod(0o600)
    return path


def until_refusal(outcome: dict):
    """deploy.py's first stages, as a role: the outcome is "passed" or the refusal's text."""
    def role():
        try:
            plan = stages.plan()
            snapshots = stages.snapshots(plan)
            stages.refuse(plan, stages.facts(plan, snapshots), snapshots)
            outcome["result"] = "passed"
        except DeployError as error:
            outcome["result"] = str(error)
    return role


def run(tmp_path, key_file, change=None, data=(), facts=None):
    profile = proven_with(tmp_path, *change) if change else PROVEN
    outcome = {}
    ops = run_role(until_refusal(outcome), facts={DeployState: facts or deploy_state()},
                   data={"profile": str(profile), "simulated": True, "gpus": 2, "gpu_topology": "pcie",
                         "api_key_file": str(key_file), "sim_server": "model", **dict(data)})
    return outcome["result"], ops


CASES = [
    # (id, profile change, host data, host facts, expected in the refusal)
    ("root-user", ("  user: sglang", "  user: root"), {}, None, "service.user: 'root' is an existing system"),
    ("extras-shell", ("  launcher: serve\n", "  launcher: serve\n  extras: [\"all'; touch /tmp/pwned; echo '\"]\n"),
     {}, None, "sglang.extras: extra \"all'; touch /tmp/pwned; echo '\" is not a PEP 508 extra name"),
    ("remote-host", ("  host: 127.0.0.1", "  host: gpu.example.com"), {}, None, "service.host: must be an IP address"),
    ("unknown-algorithm", ("--speculative-algorithm: NEXTN", "--speculative-algorithm: MTP"), {}, None,
     "'MTP' is not a speculative algorithm"),
    ("old-flag-spelling", ("    --enable-metrics: true ", "    --enable-metrics: true\n    --cuda-graph-max-bs: 16 "),
     {}, None, "use --cuda-graph-max-bs-decode"),
    ("unknown-key", ("service:\n", "service:\n  restart: always\n"), {}, None, "service.restart: unknown key"),
    ("too-few-samples", ("  samples: 8", "  samples: 2"), {}, None,
     "gate.samples: 2 is too few: at least 3 are accepted"),
    ("missing-key-file", None, {"api_key_file": "secrets/nonexistent.api_key"}, None,
     "api_key_file: secrets/nonexistent.api_key does not exist (no API key"),
    ("key-file-outside-secrets", None, {"api_key_file": "/nonexistent/api_key"}, None,
     "api_key_file: '/nonexistent/api_key' is outside the repository's secrets/"),
    ("port-with-shell", None, {"port": "31200;touch /tmp/pwned"}, None, "port: must be an integer"),
    ("flag-not-yes-or-no", None, {"sim_server": "vllm"}, None, "sim_server: must be sglang or model"),
    ("login-account", ("  user: sglang", "  user: alice"), {}, deploy_state(passwd=PASSWD_ALICE),
     "service.user: 'alice' is an existing login account on the host (shell /bin/bash)"),
    ("foreign-unit", ("  name: sglang", "  name: other"), {},
     deploy_state(units={"files": {"/etc/systemd/system/other.service": False}, "directories": {}}),
     "service.name: other.service exists on the host and is not managed by sglang-deploy"),
    ("lock-held", None, {}, deploy_state(lock={"owner": "bob@ci (deploy)", "pid": 7, "since": "t0"}),
     "another deploy or rollback is running: bob@ci (deploy)"),
    ("not-simulated", None, {}, deploy_state(simulated=False), "the host lacks /etc/sglang-deploy-simulated"),
]


@pytest.mark.parametrize("case, change, data, facts, expected", CASES, ids=[c[0] for c in CASES])
def test_a_refused_deploy_queues_no_operation(tmp_path, key_file, case, change, data, facts, expected):
    result, ops = run(tmp_path, key_file, change, data, facts)
    assert expected in result and "nothing was changed on the host" in result, result
    assert ops.names == []


def test_a_good_deploy_passes_the_refusals_and_has_still_changed_nothing(tmp_path, key_file):
    result, ops = run(tmp_path, key_file)
    assert (result, ops.names) == ("passed", [])
    assert ("DeployState", ) == tuple(name for name, _ in ops.asked if name == "DeployState")
