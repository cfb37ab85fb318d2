"""roles/rollback_stages.py without a host: a rollback refused (a held lock, no release to go back to) queues no
operation and says so in the deploy's words; the target's preflight is the deploy's, operation for operation (resolved
afresh)."""

import json

import pytest
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import FileContents

from conftest import PROVEN, store_report
from fakehost import FactsBy, run_role
from roles import rollback_stages, stages
from roles.facts import DeployState, ReleaseStore
from sglang_deploy.release_plan import Decision, build_meta, release_dir
from test_roles_stages import deploy_state

OLD, NEW = "0001-aaaaaaaa", "0002-bbbbbbbb"


@pytest.fixture
def data(tmp_path):
    key = tmp_path / "api_key"
    key.write_text("sk-rollback-stages-test-key-0123456789\n")
    key.chmod(0o600)
    return {"profile": str(PROVEN), "simulated": True, "gpus": 2, "gpu_topology": "pcie", "api_key_file": str(key),
            "sim_server": "model"}


def deployed(data):
    """The deploy's plan of PROVEN on the fake host, and the preflight operations the deploy queues for it."""
    found = {}

    def role():
        found["plan"] = stages.plan()
        stages.preflight(found["plan"], Decision(release_id=OLD, is_new=True, switch=True, reason="test"))

    ops = run_role(role, facts={DeployState: deploy_state()}, data=data)
    return found["plan"], ops


def store_of(plan, lock=None, verdicts=("good", None)):
    """The ReleaseStore fact of a host where OLD (the plan's release) ran and NEW is active."""
    releases = [build_meta(plan, release_id).but(verdict=verdict) for release_id, verdict in zip((OLD, NEW), verdicts)]
    return store_report(*releases, active=NEW, last_good=OLD, lock=lock)


def rolled_back(data, plan, store, **extra):
    outcome = {}

    def role():
        try:
            rollback = rollback_stages.target()
            rollback_stages.preflight(rollback, rollback_stages.prepare(rollback))
            outcome["result"] = rollback.target
        except DeployError as error:
            outcome["result"] = str(error)

    directory = release_dir(plan.profile.service.name, OLD)
    files = {f"{directory}/sglang.service": plan.rendered.unit.splitlines(),
             f"{directory}/sglang.env": plan.rendered.env.splitlines(),
             f"{directory}/resolved.json": json.dumps(plan.resolution).splitlines()}
    ops = run_role(role, facts={ReleaseStore: store, FileContents: FactsBy("path", files)}, data={**data, **extra})
    return outcome["result"], ops


def test_the_rollbacks_preflight_is_the_deploys_for_the_same_release(data):
    plan, deploy_ops = deployed(data)
    result, ops = rolled_back(data, plan, store_of(plan))
    assert result == OLD
    preflight = deploy_ops.named("Preflight of release")
    # the same command, but resolved afresh (a rollback trusts no acceptance cached in the service user's directory)
    assert ops.named("Preflight of release").text.replace(" --fresh", "") == preflight.text
    assert "--fresh" in ops.named("Preflight of release").text and "--fresh" not in preflight.text
    result, ops = rolled_back(data, plan, store_of(plan), skip_preflight=True)
    assert result == OLD and not [name for name in ops.names if "Preflight" in name]


@pytest.mark.parametrize("store, extra, expected", [
    ({"lock": {"owner": "bob@ci (deploy)", "pid": 7, "since": "t0"}}, {},
     "another deploy or rollback is running: bob@ci (deploy) (pid 7, since t0)"),
    ({"verdicts": (None, None)}, {}, f"no good release to roll back to (retained: {OLD} unverified, {NEW} unverified)"),
    ({}, {"release": "0999-deadbeef"}, f"release 0999-deadbeef is not retained on the host; retained: {OLD}, {NEW}"),
], ids=["lock-held", "no-good-release", "not-retained"])
def test_a_refused_rollback_queues_no_operation_and_says_it_as_the_deploy_does(data, store, extra, expected):
    plan, _ = deployed(data)
    result, ops = rolled_back(data, plan, store_of(plan, **store), **extra)
    assert result == f"fakehost: {stages.NOTHING_CHANGED}\n{expected}", result
    assert ops.names == []
