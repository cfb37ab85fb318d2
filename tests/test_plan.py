"""The plan (sglang_deploy/plan.py) without a host: the API key, what the host reports that refuses a deploy before
any change (accounts, units, the simulated marker, the lock, an empty wheelhouse), the GPU count and topology from the
host's facts, and the GPU model SGLang's resolution runs under."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import proven_with, store_report
from sglang_deploy.validate import gpu_facts
from sglang_deploy.hostfacts import parse_gpus, parse_topology
from sglang_deploy.plan import Plan, PlanError, host_problems, resolve_api_key
from sglang_deploy.profile import load_profile
from sglang_deploy.render import render
from test_hostfacts import section


def line_with(path: Path, text: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# --- the API key ----------------------------------------------------------------------------------

def key_file(tmp_path, text, mode=0o600):
    path = tmp_path / f"api_key_{abs(hash(text))}"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


@pytest.mark.parametrize("case", ["missing-file", "empty-file", "short-key", "world-readable", "no-key-at-all",
                                  "key-with-a-newline", "key-starting-with-a-dash"])
def test_a_missing_or_unsafe_api_key_fails_the_plan(tmp_path, monkeypatch, case):
    monkeypatch.delenv("SGLANG_DEPLOY_API_KEY", raising=False)
    data, expected = {
        "missing-file": ({"api_key_file": str(tmp_path / "absent")}, "does not exist (no API key"),
        "empty-file": ({"api_key_file": key_file(tmp_path, "\n")}, "is empty"),
        "short-key": ({"api_key_file": key_file(tmp_path, "sk-short\n")}, "shorter than 16 characters"),
        "world-readable": ({"api_key_file": key_file(tmp_path, "sk-" + "x" * 30, 0o644)}, "readable by group/others"),
        "no-key-at-all": ({}, "no API key (api_key_file is not set and $SGLANG_DEPLOY_API_KEY is empty)"),
        "key-with-a-newline": ({"api_key_file": key_file(tmp_path, "sk-aaaaaaaaaaaa\nbbbbbbbbbbbbbbb\n")},
                               "contains whitespace or control characters"),
        # secrets.token_urlsafe gives one about 1 time in 64; SGLang's argparse would exit 2 at every start
        "key-starting-with-a-dash": ({"api_key_file": key_file(tmp_path, "-Jx3" + "a" * 40 + "\n")},
                                     "starts with '-', which SGLang's parser reads as an option"),
    }[case]
    with pytest.raises(PlanError) as raised:
        resolve_api_key(data, "api-key", where="profile.yaml:33: service.auth")
    assert expected in str(raised.value), str(raised.value)


def test_auth_none_is_explicit_and_renders_no_config(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "sk-a-key-that-must-not-be-used-0123")
    profile = load_profile(proven_with(tmp_path, "  host: 127.0.0.1", "  host: 127.0.0.1\n  auth: none"))
    rendered = render(profile, api_key=resolve_api_key({}, profile.service.auth))
    assert (profile.service.auth, "--config" in rendered.exec_start) == ("none", False)


# --- what the host reports ------------------------------------------------------------------------

def plan_for(tmp_path, user="sglang", name="sglang") -> Plan:
    profile = load_profile(proven_with(tmp_path, "  name: sglang\n  user: sglang", f"  name: {name}\n  user: {user}"))
    return Plan(profile=profile, rendered=None, port=30000, simulated=True, skipped_rules=())


HOST_FACT_CASES = [
    ("login-account", {"passwd": "alice:x:1000:1000:Alice:/home/alice:/bin/bash"}, None, None,
     "service.user: 'alice' is an existing login account on the host (shell /bin/bash)"),
    ("uid-0-alias", {"passwd": "alice:x:0:0::/root:/usr/sbin/nologin"}, None, None, "service.user: 'alice' has uid 0"),
    ("foreign-system-account", {"passwd": "alice:x:33:33:www:/var/www:/usr/sbin/nologin"}, None, None,
     "service.user: 'alice' is an existing account on the host (uid 33, home /var/www) that the tool did not create"),
    ("ssh-user", {"passwd": None}, None, "alice", "service.user: 'alice' is the inventory's SSH user"),
    ("foreign-unit", {"passwd": None}, {"files": {"/lib/systemd/system/alice.service": False}}, None,
     "service.name: alice.service exists on the host and is not managed by sglang-deploy"),
    ("foreign-state-directory", {"passwd": None}, {"directories": {"/var/lib/alice": "postgres"}}, None,
     "service.name: /var/lib/alice exists on the host, owned by postgres"),
]


@pytest.mark.parametrize("case, account, unit, ssh_user, expected", HOST_FACT_CASES, ids=[c[0] for c in HOST_FACT_CASES])
def test_host_facts_refuse_foreign_accounts_and_units(tmp_path, case, account, unit, ssh_user, expected):
    plan = plan_for(tmp_path, user="alice", name="alice")
    line = {"service.user": line_with(Path(plan.profile.source), "user: alice"),
            "service.name": line_with(Path(plan.profile.source), "name: alice")}[expected.split(":")[0]]
    problems = host_problems(plan, account, unit, ssh_user=ssh_user)
    assert len(problems) == 1 and problems[0].startswith(f"{plan.profile.source}:{line}: {expected}"), problems


def test_host_facts_accept_the_tools_own_account_and_unit(tmp_path):
    plan = plan_for(tmp_path)
    own = {"passwd": "sglang:x:998:998:sglang-deploy service user:/var/lib/sglang:/usr/sbin/nologin"}
    unit = {"files": {"/etc/systemd/system/sglang.service": True}, "directories": {"/var/lib/sglang": "sglang"}}
    assert host_problems(plan, own, unit, ssh_user="root") == []


def deploy_facts(simulated=True, lock=None):
    """The parts of roles.facts.DeployState that plan.refusals reads."""
    own = {"passwd": "sglang:x:998:998:sglang-deploy service user:/var/lib/sglang:/usr/sbin/nologin"}
    unit = {"files": {"/etc/systemd/system/sglang.service": True}, "directories": {"/var/lib/sglang": "sglang"}}
    return {"account": own, "units": unit, "simulated": simulated, "store": store_report(lock=lock)}


REFUSAL_CASES = [
    # (facts, host data, needs a hub client, the refusal expected, or None)
    (deploy_facts(), {}, False, None),
    (deploy_facts(simulated=False), {}, False, "the inventory says simulated=True but the host lacks"),
    (deploy_facts(lock={"owner": "bob@ci (deploy)", "pid": 4242, "since": "t0"}), {}, False,
     "another deploy or rollback is running: bob@ci (deploy) (pid 4242, since t0)"),
    (deploy_facts(), {"hub_wheelhouse": "EMPTY"}, True, "hub_wheelhouse: "),
    (deploy_facts(), {"hub_wheelhouse": "EMPTY"}, False, None),  # the client is there already: not used
    (deploy_facts(), {"ssh_user": "sglang"}, False, "'sglang' is the inventory's SSH user"),
]


@pytest.mark.parametrize("facts, data, needs_hub_client, expected", REFUSAL_CASES,
                         ids=["clean", "marker", "lock", "empty-wheelhouse", "wheelhouse-unused", "ssh-user"])
def test_what_the_host_reports_refuses_a_deploy_before_any_change(tmp_path, facts, data, needs_hub_client, expected):
    from sglang_deploy.plan import refusals
    from sglang_deploy.settings import HostSettings

    (tmp_path / "EMPTY").mkdir()
    data = {key: str(tmp_path / value) if key == "hub_wheelhouse" else value for key, value in data.items()}
    found = refusals(plan_for(tmp_path), facts, HostSettings.of(data), needs_hub_client=needs_hub_client)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


# --- the hardware the plan validates under ------------------------------------------------------------

def test_host_facts_feed_the_validation_rules():
    from sglang_deploy.hostfacts import detected_hardware
    from sglang_deploy.plan import PlanError, reconcile_hardware

    h200 = {"gpus": parse_gpus(section(0)), "topology": parse_topology(section(2), section(3))}
    detected = detected_hardware(h200)
    assert detected == {"gpus": 2, "gpu_topology": "nvlink", "gpu_names": ["NVIDIA H200", "NVIDIA H200"]}
    # Nothing declared: the host's facts are used (and said so).
    assert reconcile_hardware({}, detected) == (2, "nvlink", ["gpus 2 from the host's facts",
                                                            "gpu_topology nvlink from the host's facts"])
    # Declared and agreeing, or the host cannot tell yet (no GPU visible before the driver): the inventory's.
    assert reconcile_hardware({"gpus": 2, "gpu_topology": "nvlink"}, detected)[:2] == (2, "nvlink")
    assert reconcile_hardware({"gpus": 2, "gpu_topology": "pcie"}, detected_hardware({"gpus": []}))[:2] == (2, "pcie")
    # Declared and contradicted: an error naming both.
    try:
        reconcile_hardware({"gpus": 2, "gpu_topology": "pcie"}, detected)
    except PlanError as error:
        assert "inventory says gpu_topology pcie but the host reports nvlink" in str(error)
    else:
        raise AssertionError("a contradicted topology was accepted")


def test_the_plan_resolves_under_the_hosts_gpu():
    from sglang_deploy.plan import PlanError, gpu_model_for_host, host_settings

    assert gpu_model_for_host(host_settings({}), {"gpu_names": ["NVIDIA H200"] * 2})[0].key == "h200"
    assert gpu_model_for_host(host_settings({"gpu_model": "h100"}), {"gpu_names": []}) == (gpu_facts.model("h100"), None)
    with pytest.raises(PlanError, match="gpu_model: unknown GPU model 'v100'"):
        gpu_model_for_host(host_settings({"gpu_model": "v100"}), None)
