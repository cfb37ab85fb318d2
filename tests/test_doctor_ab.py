"""The doctor's A/B on request (`doctor.py --data ab=nospec`, doctor/ab.py) without a host: the verdict from the
two measurements, the same under the simulator's planted graph fault, the session's order (the active release,
then the temporary one without speculation), and its refusals before anything reaches the host."""

import pytest

from conftest import PROVEN, write_profile
from sglang_deploy.doctor import ab as doctor_ab
from sglang_deploy.tune import search as tune
from test_bisect import FakeStore
from test_doctor_levers import repeats


def measured(cid, decode, spread=0.01, tau=None, release="0001-aaaaaaaa", error=None):
    return tune.Measured(tune.Candidate(cid, "ab"), repeats=[] if error else repeats(decode, spread, tau),
                         release_id=release, error=error)


VERDICTS = [  # (id, active decode, nospec decode, spread, what the verdict says, suspect named)
    ("graph-downgrade", 32.7, 57.0, 0.01, "speculation is slower than none: 32.7 tok/s (spread 1.5 %, tau 3.10) "
     "with speculation, 57.0 (spread 1.5 %) without (+74.3 %)", True),
    ("spec-pays", 52.0, 30.0, 0.01, "speculation pays: 52.0 tok/s", False),
    ("noise", 52.0, 55.0, 0.08, "inside the noise: 52.0 tok/s (spread 11.9 %", False),
    ("min-gain", 52.0, 52.5, 0.01, "inside the noise", False),
]


@pytest.mark.parametrize("case", VERDICTS, ids=[c[0] for c in VERDICTS])
def test_the_verdict_names_speculation_slower_than_none_with_both_speeds(case):
    _, active, nospec, spread, says, named = case
    found = doctor_ab.verdict(measured("active", active, spread, tau=3.1), measured("nospec", nospec, spread))
    assert says in found["text"], found["text"]
    assert bool(found["suspect"]) == named
    if named:
        suspect = found["suspect"]
        assert suspect["id"] == "speculation-slower-than-none"
        assert "the doctor's A/B measured the release without speculation at 57.0 tok/s (spread 1.5 %) against " \
               "32.7 (spread 1.5 %, tau 3.10)" in suspect["evidence"]
        assert "remove --speculative-algorithm and its --speculative-* flags from the profile" in suspect["fix"]


def test_an_arm_that_failed_gives_no_verdict():
    found = doctor_ab.verdict(measured("active", 52.0), measured("nospec", 0, error="not ready after 60 s"))
    assert found == {"suspect": None, "text": "the release without speculation could not be measured (not ready "
                                              "after 60 s): no verdict"}
    assert "not ready after 60 s" in doctor_ab.table(measured("active", 52.0), measured("nospec", 0, error="not "
                                                                                         "ready after 60 s"))


def test_under_the_planted_graph_fault_the_ab_names_it():
    """The simulator's graph fault (SGLANG_SIM_FAULT_SPEC_GRAPH_DOWNGRADE, vllm#35387's ratio): the proven MTP 3
    against the same release without speculation, as the model runs them; without the fault speculation pays."""
    from sglang_deploy.sim import hardware
    from sglang_deploy.tune.axes import nospec_candidate
    from test_tune_axes import PROVEN as PROVEN_PROFILE, flags_of, resolved_of
    from test_tune_logic import MACHINE, MODEL

    flags = flags_of(PROVEN_PROFILE)
    off = {k: v for k, v in {**flags, **nospec_candidate(flags).flag_changes}.items() if v is not None}

    def both(env):
        speeds = [hardware.expected_tok_s(hardware.resolve(resolved_of(f), env, MACHINE, MODEL), MACHINE, MODEL)
                  for f in (flags, off)]
        return doctor_ab.verdict(measured("active", speeds[0]), measured("nospec", speeds[1]))

    faulted = both({"SGLANG_SIM_FAULT_SPEC_GRAPH_DOWNGRADE": "1"})
    assert faulted["suspect"]["id"] == "speculation-slower-than-none" and faulted["change_pct"] > 50
    assert both({})["text"].startswith("speculation pays")


def session(tmp_path, monkeypatch, profile=PROVEN):
    from sglang_deploy.hostside.store import content_hash
    from sglang_deploy.plan import plan_for_host

    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "k" * 24)
    data = {"profile": str(profile), "simulated": True, "gpus": 2, "gpu_topology": "pcie"}
    plan = plan_for_host(data)
    remote = FakeStore(content_hash(plan.rendered.unit, plan.rendered.env))
    return doctor_ab.SpecAB("host", data, remote, lambda line: None, "nospec", results_dir=tmp_path), remote


def closed_session():
    """close's answer (session.TuneSession) of a session that restarted the original, and it came back."""
    from sglang_deploy.hostside.contract.session import TuneSession

    return TuneSession.from_dict({"state": "closed", "message": None, "status": {
        "session": "s1", "service": "sglang", "state": "closed", "pid": 1, "started": "t",
        "restore": {"needed": True, "ready": True}}})


def test_the_ab_measures_the_active_release_then_the_temporary_one(tmp_path, monkeypatch):
    ab, remote = session(tmp_path, monkeypatch)
    said = []
    ab.say = said.append
    asked = []

    def run_item(candidate, item, restart):
        asked.append((candidate.id, item["release_id"], sorted(item["files"] or {})))
        if item["files"]:  # the temporary release's meta.json reads on the host, naming the session that staged it
            from sglang_deploy.hostside.contract.release import ReleaseMeta

            meta = ReleaseMeta.loads(item["files"]["meta.json"])
            assert meta.tune.session == ab.session and meta.tune.temporary, meta.tune
        return measured(candidate.id, {"active": 32.7}.get(candidate.id, 57.0), release=item["release_id"])
    monkeypatch.setattr(ab, "run_item", run_item)
    monkeypatch.setattr(ab, "in_session", lambda body: (setattr(ab, "started", 0.0) or setattr(ab, "session", "s1")
                                                        or body(), closed_session()))
    document = ab.run()
    assert asked[0] == ("active", "0001-aaaaaaaa", [])
    nospec_id, temporary, files = asked[1]
    assert nospec_id == "nospec" and temporary.startswith("0003-") and "meta.json" in files
    assert document["verdict"]["suspect"]["id"] == "speculation-slower-than-none"
    assert any(line.startswith("VERDICT: speculation is slower than none: 32.7 tok/s") for line in said), said
    assert any("fix: check that draft and verify decode in CUDA graphs" in line for line in said), said
    assert len(list((tmp_path / "host").glob("0001-aaaaaaaa-ab-*.json"))) == 1
    assert remote.puts == ["/var/lib/sglang-deploy/sglang/releases/0001-aaaaaaaa/ab-results.json"]


def test_a_later_doctor_names_the_suspect_from_the_ab_kept_with_the_release(tmp_path):
    """ab-results.json (the tune's shape, doctor_collect.last_tune reads it) makes the plain doctor report name
    speculation slower than none, saying it comes from the A/B; a healthy A/B names nothing."""
    from conftest import doctor_collection
    from sglang_deploy.doctor.diagnosis import diagnose
    from sglang_deploy.hostside.contract.findings import ABResults
    from sglang_deploy.hostside.safetensors_headers import summarize
    from sglang_deploy.sim.synthetic_checkpoint import write as write_qwen_like
    from test_doctor_levers import A6000
    from test_doctor_logic import GATE, PCIE, PROVEN_INFO

    write_qwen_like(tmp_path, header_only=True)

    def report(active, nospec):
        document = doctor_ab.host_document("20261202T110000Z", "0003-aaaaaaaa", measured("active", active, tau=3.1),
                                           measured("nospec", nospec))
        return diagnose(doctor_collection(server_info=PROVEN_INFO, gate=GATE, checkpoint=summarize(tmp_path),
                                          last_ab=ABResults.from_dict(document), active="0003-aaaaaaaa"), A6000, PCIE)

    top = report(32.7, 57.0)["suspects"][0]
    assert top["id"] == "speculation-slower-than-none"
    assert top["evidence"].startswith("the doctor's A/B (20261202T110000Z) measured the release without speculation")
    assert "speculation-slower-than-none" not in [s["id"] for s in report(52.0, 30.0)["suspects"]]


def test_a_release_without_speculation_is_refused_before_the_host_changes(tmp_path, monkeypatch):
    text = PROVEN.read_text()
    for flag in ("--speculative-algorithm: NEXTN", "--speculative-num-steps: 3", "--speculative-eagle-topk: 1",
                 "--speculative-num-draft-tokens: 4"):
        text = "\n".join(line for line in text.splitlines() if flag not in line) + "\n"
    ab, remote = session(tmp_path, monkeypatch, write_profile(tmp_path, text, "nospec.yaml"))
    from sglang_deploy.tune.host import TuneError

    with pytest.raises(TuneError, match="does not speculate .no --speculative-algorithm.: nothing to compare"):
        ab.run()
    assert remote.puts == [] and not any("tune_session" in c for c in remote.commands)


def test_only_the_arms_it_knows():
    from sglang_deploy.settings import DoctorArgs

    with pytest.raises(ValueError, match="must be nospec, got 'spec'"):
        DoctorArgs.model_validate({"ab": "spec"})
