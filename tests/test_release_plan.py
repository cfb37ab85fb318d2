"""The release plan (sglang_deploy/release_plan.py) without a host: what to switch to, one id on every node, what to
roll back to, the listing, the service a verb addresses."""

from types import SimpleNamespace

import pytest

from conftest import PROVEN, proven_with, store_report
from sglang_deploy.hostside.store import content_hash
from sglang_deploy.plan import plan_for_host
from sglang_deploy.release_plan import (Decision, Peer, build_meta, decide, listing, rollback_target, server_digest,
                                         with_peers)


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    """plan_for_host needs an API key (a missing one fails the plan unless the profile says auth: none)."""
    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "sk-test-key-for-the-plan-0123")


def plan_of(path):
    return plan_for_host({"profile": str(path), "gpus": 2, "gpu_topology": "pcie"})


store_with = store_report  # the ReleaseStore fact: each release as its meta.json fields


def test_decide_new_unchanged_and_inconsistent():
    plan = plan_of(PROVEN)
    meta = build_meta(plan, "0001-x").to_dict()
    assert meta["content_hash"] == content_hash(plan.rendered.unit, plan.rendered.env)
    first = decide(plan, store_with())
    assert first.is_new and first.switch and first.release_id.startswith("0001-")
    stored = {**meta, "id": first.release_id}
    same = decide(plan, store_with(stored, active=first.release_id))
    assert not same.switch and not same.is_new
    broken = decide(plan, store_with(stored, active=first.release_id, consistent=False))
    assert broken.switch and not broken.is_new and "not consistent" in broken.reason
    restart = decide(plan, store_with(stored, active=first.release_id), restart_needed=True)
    assert restart.switch and restart.release_id == first.release_id


def test_decide_reuses_a_retained_release_with_the_same_content(tmp_path):
    proven, variant = plan_of(PROVEN), plan_of(proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 12"))
    r1 = {**build_meta(proven, "0001-a").to_dict(), "id": "0001-aaaaaaaa"}
    r2 = {**build_meta(variant, "0002-b").to_dict(), "id": "0002-bbbbbbbb"}
    decision = decide(proven, store_with(r1, r2, active="0002-bbbbbbbb"))
    assert (decision.release_id, decision.is_new, decision.switch) == ("0001-aaaaaaaa", False, True)


def used(at):
    return {"created": "2026-11-01T00:00:00+00:00", "history": [{"at": at, "event": "activated (deploy)"}]}


def test_rollback_target_is_previous_good_or_requested():
    releases = [{"id": "0001-aaaaaaaa", "verdict": "good", **used("2026-11-02T00:00:00+00:00")},
                {"id": "0002-bbbbbbbb", "verdict": "bad", **used("2026-11-03T00:00:00+00:00")},
                {"id": "0003-cccccccc", "verdict": "good", **used("2026-11-04T00:00:00+00:00")},
                {"id": "0004-dddddddd", "verdict": "good", **used("2026-11-01T12:00:00+00:00")}]
    store = store_with(*releases, active="0003-cccccccc")
    assert rollback_target(store) == "0001-aaaaaaaa"  # the good release used most recently before the active one
    assert rollback_target(store, "0002-bbbbbbbb") == "0002-bbbbbbbb"
    with pytest.raises(ValueError, match="not retained"):
        rollback_target(store, "0099-deadbeef")
    with pytest.raises(ValueError, match="no good release"):
        rollback_target(store_with({"id": "0001-aaaaaaaa", "verdict": None}, active="0001-aaaaaaaa"))


def test_listing_marks_active_and_shows_flag_differences():
    a = {"id": "0001-aaaaaaaa", "verdict": "good", "exec_start": ["x", "--steps", "3"], "sglang_version": "0.5.23"}
    b = {"id": "0002-bbbbbbbb", "verdict": "bad", "exec_start": ["x", "--steps", "1"], "sglang_version": "0.5.23"}
    lines = listing(store_with(a, b, active="0001-aaaaaaaa", last_good="0001-aaaaaaaa"))
    assert lines[1].startswith(" ") and "0002-bbbbbbbb" in lines[1] and "--steps: 3 -> 1" in lines[1]
    assert lines[2].startswith("*g0001-aaaaaaaa") and "(active)" in lines[2]


def test_decide_names_why_the_host_is_inconsistent():
    plan = plan_of(PROVEN)
    first = decide(plan, store_with())
    stored = build_meta(plan, first.release_id).to_dict()
    store = store_with(stored, active=first.release_id, consistent=False, inconsistent=[
        "the server process's environment differs from the release's in NCCL_CUMEM_ENABLE"])
    decision = decide(plan, store)
    assert decision.switch and decision.release_id == first.release_id
    assert decision.reason.endswith("differs from the release's in NCCL_CUMEM_ENABLE")


def test_the_nodes_of_a_server_restart_together():
    def node(active, consistent=True):
        return Peer(store_report(active=active, consistent=consistent), "d")

    mine = Decision("0003-abcdef12", False, False, "unchanged")
    same = node("0003-abcdef12")
    assert with_peers(mine, {"b": same}) is mine
    broken = with_peers(mine, {"b": same, "c": node("0003-abcdef12", consistent=False)})
    assert broken.switch and not broken.is_new and broken.release_id == mine.release_id
    assert broken.reason == "node c is not consistent with its active release: the nodes of this server restart together"
    renumbered = with_peers(mine, {"b": node("0002-abcdef12")})
    assert renumbered.switch and renumbered.reason.startswith("node b runs 0002-abcdef12")
    switching = Decision("0004-99999999", True, True, "new release")
    assert with_peers(switching, {"b": same}) is switching
    rekeyed = with_peers(mine, {"b": Peer(same.store, "d", restart=True)})
    assert rekeyed.switch and rekeyed.reason == "node b restarts for its changed secrets: the nodes of this server " \
                                                "restart together"


def test_one_release_id_names_the_release_on_every_node():
    """decide() from each node's side, with the same facts, picks the same id."""
    plan = plan_of(PROVEN)
    mine = decide(plan, store_with()).release_id.split("-", 1)[1]  # this node's content digest (prefix)
    a_digest = build_meta(plan, "0001-x").content_hash
    plan_b = SimpleNamespace(rendered=SimpleNamespace(unit="node b's unit", env=""))  # its rank, its port
    b_digest = content_hash(plan_b.rendered.unit, plan_b.rendered.env)
    server = server_digest([a_digest, b_digest])
    sid = server[:8]

    def node(digest, *ids, active, other_content=()):
        return store_report(*[{"id": i, "content_hash": "0" * 64 if i in other_content else digest} for i in ids],
                            active=active)

    # Both retain the release and run it: unchanged.
    a, b = node(a_digest, f"0003-{sid}", active=f"0003-{sid}"), node(b_digest, f"0003-{sid}", active=f"0003-{sid}")
    assert decide(plan, a, peers={"b": Peer(b, b_digest)}, server=server).switch is False
    assert decide(plan, a, peers={"b": Peer(b, b_digest)}, server=server).release_id == f"0003-{sid}"
    # Node b's content changed (its port, say) and its 0003 no longer matches: a new id past every node's
    # releases, although node a's own content is unchanged.
    changed = node(b_digest, f"0003-{sid}", "0004-99999999", active=f"0003-{sid}", other_content=(f"0003-{sid}",))
    fresh = decide(plan, a, peers={"b": Peer(changed, b_digest)}, server=server)
    assert (fresh.release_id, fresh.is_new, fresh.switch) == (f"0005-{sid}", True, True)
    # Deployed apart: node b retains the content under another number only: a new shared id.
    apart = decide(plan, a, peers={"b": Peer(node(b_digest, f"0002-{sid}", active=f"0002-{sid}"), b_digest)},
                   server=server)
    assert (apart.release_id, apart.is_new) == (f"0004-{sid}", True)
    # Both retain two ids of this content and run different ones: both sides pick the newest, node a restarts
    # because node b switches.
    a2 = node(a_digest, f"0002-{sid}", f"0003-{sid}", active=f"0003-{sid}")
    b2 = node(b_digest, f"0002-{sid}", f"0003-{sid}", active=f"0002-{sid}")
    from_a = decide(plan, a2, peers={"b": Peer(b2, b_digest)}, server=server)
    from_b = decide(plan_b, b2, peers={"a": Peer(a2, a_digest)}, server=server)
    assert from_a.release_id == from_b.release_id == f"0003-{sid}"
    assert not from_a.switch and from_b.switch and with_peers(from_a, {"b": Peer(b2, b_digest)}).switch
    # A release made before the server's digest was part of the id (the old scheme) is not reused.
    old = node(a_digest, f"0003-{mine}", active=f"0003-{mine}")
    assert decide(plan, old, peers={"b": Peer(node(b_digest, f"0003-{mine}", active=f"0003-{mine}"), b_digest)},
                  server=server).is_new
    # Alone (one node): a retained release with the same content is reused, whatever its number.
    alone = store_with({"id": "0001-0badc0de", "content_hash": "0" * 64}, build_meta(plan, f"0003-{mine}").to_dict(),
                       active="0001-0badc0de")
    assert decide(plan, alone).release_id == f"0003-{mine}"




def test_the_verbs_address_the_profiles_service_or_refuse_an_invalid_profile(tmp_path):
    from sglang_deploy.release_plan import service_of as service_of_settings
    from sglang_deploy.settings import HostSettings

    def service_of(data):
        return service_of_settings(HostSettings.of(data))

    assert service_of({}) == "sglang"
    renamed = proven_with(tmp_path, "service:\n  name: sglang\n", "service:\n  name: qwen\n", "renamed.yaml")
    assert service_of({"profile": str(renamed)}) == "qwen"
    broken = proven_with(tmp_path, "service:\n  name: sglang\n", "service:\n  name: qwen\n  restart_policy: always\n",
                         "broken.yaml")
    with pytest.raises(SystemExit) as refused:  # not "sglang": a rollback must not address another service
        service_of({"profile": str(broken)})
    assert "service.restart_policy: unknown key" in str(refused.value) and "--data service=NAME" in str(refused.value)
    assert service_of({"profile": str(broken), "service": "qwen"}) == "qwen"
