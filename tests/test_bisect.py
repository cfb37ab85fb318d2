"""The regression bisect without a host: two releases decomposed into single differences, each a valid candidate
profile, the verdict from measurements, and the refusals before anything reaches the host."""

from __future__ import annotations

import json

import pytest

from conftest import INCIDENT, PROVEN, store_report, write_profile
from sglang_deploy import bisect_release
from sglang_deploy.tune import search as tune
from sglang_deploy.profile import load_profile


def dump(path):
    return load_profile(path).model_dump(mode="json")


def measured(name, decode, spread=0.005, tau=3.0, release=None):
    """Three repeats around `decode` (± spread as a fraction)."""
    repeats = [{"decode_tok_s": decode * (1 + d), "aggregate_tok_s": 4 * decode, "accept_length": tau}
               for d in (-spread, 0.0, spread)]
    return tune.Measured(tune.Candidate(name, "bisect"), repeats=repeats, release_id=release)


# --- decomposition --------------------------------------------------------------------------------

def test_the_seed_incident_is_one_difference_the_speculative_counts_together():
    found, ignored = bisect_release.differences(dump(PROVEN), dump(INCIDENT))
    assert [(d.name, d.kind, d.text()) for d in found] == [
        ("speculation", "flags", "--speculative-num-draft-tokens: 4 -> 2, --speculative-num-steps: 3 -> 1")]
    assert "description" in ignored and "gate" in ignored
    assert found[0].candidate.flag_changes == {"--speculative-num-steps": 1, "--speculative-num-draft-tokens": 2}


def test_the_incidents_difference_alone_renders_the_incidents_server(tmp_path, monkeypatch):
    """Applied to the proven profile's text, the single difference gives the incident's unit and environment, byte
    for byte but for the profile's name (SGLang's parser and resolution validate it on the way)."""
    from sglang_deploy.plan import plan_for_host

    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "k" * 24)
    [difference], _ = bisect_release.differences(dump(PROVEN), dump(INCIDENT))
    candidate = write_profile(tmp_path, bisect_release.profile_text(PROVEN.read_text(), difference), "alone.yaml")
    assert "# one shard per A6000" in candidate.read_text()  # the user's comments kept

    def rendered(path):
        plan = plan_for_host({"profile": str(path), "simulated": True, "gpus": 2, "gpu_topology": "pcie"})
        return (plan.rendered.unit + plan.rendered.env).replace(f"profile {path.stem}", "profile P")
    assert rendered(candidate) == rendered(INCIDENT) != rendered(PROVEN)


def edited(**changes):
    """The proven profile's dump with nested keys changed ("a|b|c": value; None removes)."""
    document = json.loads(json.dumps(dump(PROVEN)))
    for path, value in changes.items():
        *parents, last = path.split("|")
        target = document
        for key in parents:
            if target.get(key) is None:
                target[key] = {}
            target = target[key]
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value
    return document


DRAFT = {"source": "hf://org/drafter@" + "a" * 40, "manifest": "manifests/d.json", "config": None}

DECOMPOSITION = [
    # (id, changes to the refused release, [(name, kind, measurable)], ignored)
    ("an-environment-variable", {"environment|NCCL_PROTO": "Simple"}, [("NCCL_PROTO", "environment", True)], []),
    ("a-reason-only", {"environment|NCCL_CUMEM_ENABLE": {"value": "0", "reason": "why"}}, [],
     ["environment.NCCL_CUMEM_ENABLE (its reason only)"]),
    ("the-decode-batch-together", {"sglang|flags|--max-running-requests": 8,
                                   "sglang|flags|--cuda-graph-max-bs-decode": 8},
     [("--max-running-requests + --cuda-graph-max-bs-decode", "flags", True)], []),
    ("two-flags-apart", {"sglang|flags|--mem-fraction-static": 0.8, "sglang|flags|--disable-custom-all-reduce": True},
     [("--disable-custom-all-reduce", "flags", True), ("--mem-fraction-static", "flags", True)], []),
    ("a-flag-turned-off-is-absent", {"sglang|flags|--enable-metrics": False},
     [("--enable-metrics", "flags", True)], []),
    ("another-drafter", {"sglang|flags|--speculative-algorithm": "DFLASH", "speculative|draft": DRAFT,
                         "sglang|flags|--speculative-num-steps": None, "sglang|flags|--speculative-eagle-topk": None,
                         "sglang|flags|--speculative-num-draft-tokens": None},
     [("drafter", "drafter", True)], []),
    ("speculation-off", {"sglang|flags|--speculative-algorithm": None, "sglang|flags|--speculative-num-steps": None,
                         "sglang|flags|--speculative-eagle-topk": None,
                         "sglang|flags|--speculative-num-draft-tokens": None},
     [("speculation off", "drafter", True)], []),
    ("other-weights", {"model|path": "/srv/models/other"}, [("weights", "weights", True)], []),
    # a downgrade: the version, and each default the two option tables hold differently (0.5.23's None is written by
    # no flag of 0.5.22: named, not measured; the upgrade's pins are in test_upgrade_logic.py)
    ("another-sglang", {"sglang|version": "0.5.22"}, [("sglang.version", "install", False)] + [
        (dest, "default", False) for dest in ("enable_decoder_swa_bounded_replay", "enable_fused_qk_norm_rope",
                                              "enable_tf32_matmul", "mm_enable_dp_encoder")], []),
    ("the-served-name-and-gate", {"model|served_name": "x", "gate|samples": 3}, [],
     ["gate", "model.served_name"]),
]


@pytest.mark.parametrize("case", DECOMPOSITION, ids=[c[0] for c in DECOMPOSITION])
def test_each_difference_is_found_alone(case):
    _, changes, expected, ignored = case
    found, skipped = bisect_release.differences(dump(PROVEN), edited(**changes))
    assert [(d.name, d.kind, d.candidate is not None) for d in found] == expected
    assert [i for i in skipped if i != "description"] == ignored
    for difference in found:
        assert (difference.candidate is None) == bool(difference.why_not)


def test_each_measurable_difference_applies_to_the_profile_text():
    text = PROVEN.read_text()
    found, _ = bisect_release.differences(dump(PROVEN), edited(**{"model|path": "/srv/models/other",
                                                                   "environment|NCCL_PROTO": "Simple"}))
    by_name = {d.name: d for d in found}
    assert "  path: /srv/models/other" in bisect_release.profile_text(text, by_name["weights"])
    assert 'NCCL_PROTO: "Simple"' in bisect_release.profile_text(text, by_name["NCCL_PROTO"])
    off, _ = bisect_release.differences(dump(PROVEN), edited(**{"sglang|flags|--speculative-algorithm": None}))
    assert "--speculative-algorithm" not in bisect_release.profile_text(text, off[0])


def test_releases_of_different_services_are_refused():
    with pytest.raises(bisect_release.BisectError, match="different services"):
        bisect_release.differences(dump(PROVEN), edited(**{"service|name": "other"}))


# --- the verdict ----------------------------------------------------------------------------------

OBJECTIVE = tune.Objective()
SPEC = bisect_release.Difference("speculation", "flags", (("--speculative-num-steps", 3, 1),),
                                 tune.Candidate("alone-speculation", "bisect"))
GRAPHS = bisect_release.Difference("--max-running-requests", "flags", (("--max-running-requests", 16, 12),),
                                   tune.Candidate("alone-running", "bisect"))
VERSION = bisect_release.Difference("sglang.version", "install", (("sglang.version", "0.5.23", "0.5.22"),),
                                    why_not="another SGLang version needs its own virtualenv")

VERDICTS = [
    # (id, good, refused, [(difference, decode or None or "fail")], reproduced, culprits, in the sentence)
    ("one-culprit", 52.0, 40.0, [(SPEC, 40.2), (GRAPHS, 51.8)], True, ["speculation"],
     "the change that costs the speed: speculation (--speculative-num-steps: 3 -> 1): alone it runs 40.2 tok/s"),
    ("two-culprits-largest-first", 52.0, 38.0, [(GRAPHS, 49.0), (SPEC, 40.0)], True,
     ["speculation", "--max-running-requests"], "also slower alone: --max-running-requests (-5.8 %)"),
    ("a-noise-level-drop-is-no-culprit", 52.0, 40.0, [(SPEC, 51.5)], True, [],
     "no single difference is slower alone by more than the noise"),
    ("unmeasured-named-in-the-combination", 52.0, 44.0, [(GRAPHS, 51.9), (VERSION, None)], True, [],
     "or from what was not measured alone (sglang.version)"),
    ("not-reproduced", 52.0, 51.6, [(SPEC, 51.7)], False, [], "the slowdown did not reproduce in this session"),
    ("a-difference-that-fails-alone", 52.0, 40.0, [(SPEC, 40.0), (GRAPHS, "fail")], True, ["speculation"],
     "fails alone: --max-running-requests (output check failed: garbage)"),
]


@pytest.mark.parametrize("case", VERDICTS, ids=[c[0] for c in VERDICTS])
def test_the_verdict_names_the_change_that_costs_the_speed(case):
    _, good_tok_s, refused_tok_s, singles, reproduced, culprits, sentence = case
    good, refused = measured("good", good_tok_s, release="0001-aaaaaaaa"), measured("refused", refused_tok_s,
                                                                                     release="0002-bbbbbbbb")
    alone = []
    for difference, value in singles:
        if value == "fail":
            alone.append((difference, tune.Measured(difference.candidate, error="output check failed: garbage")))
        else:
            alone.append((difference, None if value is None else measured(difference.name, value)))
    verdict = bisect_release.verdict(good, refused, alone, OBJECTIVE)
    assert verdict["reproduced"] is reproduced
    assert [c["difference"] for c in verdict["culprits"]] == culprits
    assert sentence in verdict["text"], verdict["text"]
    table = bisect_release.table(good, refused, alone, OBJECTIVE)
    assert table.count("COSTS THE SPEED") == len(culprits), table
    assert "good 0001-aaaaaaaa (active)" in table and "refused 0002-bbbbbbbb" in table


def test_a_noisy_good_release_raises_the_bar():
    """A drop that would count against a steady release is inside the noise of a noisy one."""
    steady, noisy = measured("good", 52.0, 0.005), measured("good", 52.0, 0.06)
    alone = [(SPEC, measured("speculation", 49.0))]
    assert bisect_release.verdict(steady, measured("r", 49.0), alone, OBJECTIVE)["culprits"]
    assert not bisect_release.verdict(noisy, measured("r", 49.0), alone, OBJECTIVE)["culprits"]


def test_an_unmeasured_good_release_gives_no_verdict():
    good = tune.Measured(tune.Candidate("good", "bisect"), error="not ready at stage 'active'")
    verdict = bisect_release.verdict(good, measured("r", 40.0), [(SPEC, measured("s", 40.0))], OBJECTIVE)
    assert verdict["culprits"] == [] and "could not be measured" in verdict["text"]


# --- refusals before the host changes ------------------------------------------------------------

class FakeStore:
    """A remote that answers `store state` with one active release of the proven profile, and cat of profile.json."""

    def __init__(self, digest, refused_profile=None):
        self.digest, self.refused_profile, self.puts, self.commands = digest, refused_profile, [], []

    def run(self, command):
        self.commands.append(command)
        if "store state" in command or " state --service" in command:
            return True, json.dumps(store_report({"id": "0001-aaaaaaaa", "content_hash": self.digest},
                                                 {"id": "0002-bbbbbbbb", "content_hash": "other"},
                                                 active="0001-aaaaaaaa").to_dict()), ""
        if command.startswith("cat ") and command.endswith("profile.json") and self.refused_profile is not None:
            return True, json.dumps(self.refused_profile), ""
        return False, "", "no such file"

    def put(self, text, path):
        self.puts.append(path)


@pytest.mark.parametrize("release, refused_profile, message", [
    ("0001-aaaaaaaa", None, "0001-aaaaaaaa is the active release"),
    ("0009-cccccccc", None, "no retained release 0009-cccccccc of sglang"),
    ("0002-bbbbbbbb", None, "release 0002-bbbbbbbb has no readable profile.json on the host"),
    ("0002-bbbbbbbb", "proven", "runs the same server as 0001-aaaaaaaa"),
    ("0002-bbbbbbbb", "other-service", "the releases serve different services"),
], ids=["the-active-one", "not-retained", "no-profile", "no-difference", "another-service"])
def test_the_bisect_refuses_before_anything_reaches_the_host(tmp_path, monkeypatch, release, refused_profile,
                                                              message):
    from sglang_deploy.bisect_run import Bisect
    from sglang_deploy.hostside.store import content_hash
    from sglang_deploy.plan import plan_for_host
    from sglang_deploy.tune.host import TuneError

    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "k" * 24)
    data = {"profile": str(PROVEN), "simulated": True, "gpus": 2, "gpu_topology": "pcie"}
    plan = plan_for_host(data)
    profile = {"proven": dump(PROVEN), "other-service": edited(**{"service|name": "other"})}.get(refused_profile)
    remote = FakeStore(content_hash(plan.rendered.unit, plan.rendered.env), profile)
    with pytest.raises(TuneError, match=message):
        Bisect("host", data, remote, lambda line: None, release, results_dir=tmp_path).run()
    assert remote.puts == [] and not any("tune_session" in c for c in remote.commands)


def test_a_budget_that_cannot_hold_the_two_releases_is_a_clear_error(tmp_path, monkeypatch):
    from sglang_deploy.bisect_run import Bisect
    from sglang_deploy.tune.host import TuneError

    bisect = Bisect("host", {}, FakeStore("x"), lambda line: None, "0002-bbbbbbbb", results_dir=tmp_path)
    bisect.active, bisect.release, bisect.differences = "0001-aaaaaaaa", "0002-bbbbbbbb", []

    def no_room(candidate, item, restart):
        raise tune.BudgetExhausted("budget: the next candidate (good) needs about 0m40s, 0m10s left")
    monkeypatch.setattr(bisect, "run_item", no_room)
    with pytest.raises(TuneError, match="tune_budget_s does not fit the two releases' own measurements"):
        bisect.measure_all()


def test_each_difference_is_measured_alone_on_top_of_the_good_release(tmp_path, monkeypatch):
    """The good release, the refused one, then each difference as its own temporary release: one that renders the
    refused release's server reuses its measurement, one the rules refuse is never started, one past the budget is
    named as not reached."""
    from sglang_deploy.bisect_run import Bisect

    differences = [bisect_release.Difference(name, "flags", ((name, 1, 2),), tune.Candidate(f"alone-{name}", "bisect"))
                   for name in ("same-as-refused", "invalid", "measured", "late")]
    bisect = Bisect("host", {}, FakeStore("x"), lambda line: None, "0002-bbbbbbbb", results_dir=tmp_path)
    bisect.active, bisect.differences = "0001-aaaaaaaa", differences
    staged = {"alone-same-as-refused": ({"release_id": "0002-bbbbbbbb", "files": None}, None),
              "alone-invalid": (None, "[cuda-graphs-on] decode CUDA graphs are off"),
              "alone-measured": ({"release_id": "0003-cccccccc", "files": {"meta.json": "{}"}}, None),
              "alone-late": ({"release_id": "0004-dddddddd", "files": {"meta.json": "{}"}}, None)}
    monkeypatch.setattr(bisect, "stage_files", lambda candidate: staged[candidate.id])
    asked = []

    def run_item(candidate, item, restart):
        if candidate.id == "alone-late":
            raise tune.BudgetExhausted("budget: 0m00s left")
        asked.append((candidate.id, item["release_id"]))
        return measured(candidate.id, {"good": 52.0, "refused": 40.0}.get(candidate.id, 51.9))
    monkeypatch.setattr(bisect, "run_item", run_item)
    good, refused, alone = bisect.measure_all()
    assert asked == [("good", "0001-aaaaaaaa"), ("refused", "0002-bbbbbbbb"), ("alone-measured", "0003-cccccccc")]
    assert alone[0][1] is refused and not alone[1][1].valid and alone[2][1].median_decode == 51.9
    assert alone[3][1] is None
    verdict = bisect_release.verdict(good, refused, alone, OBJECTIVE)
    assert [c["difference"] for c in verdict["culprits"]] == ["same-as-refused"]
    assert "fails alone: invalid ([cuda-graphs-on]" in verdict["text"]
    assert "not reached (budget)" in bisect_release.table(good, refused, alone, OBJECTIVE)


def test_the_refused_releases_gate_result_is_read_typed(tmp_path):
    """Its gate-result.json through release.GateResult: a readable one by its fields, a renamed field said and
    left out (not read as "no reasons"), none as none."""
    from sglang_deploy.bisect_run import Bisect

    said = []
    result = {"verdict": "fail", "reasons": ["slower"], "inconclusive": [], "rows": [], "config_problems": [],
              "baseline_release": "0001-aaaaaaaa"}
    for stored, verdict in ((result, "fail"), ({**result, "reasonz": []}, None), (None, None)):
        store = FakeStore("x")
        store.run = lambda command, stored=stored: (stored is not None, json.dumps(stored), "")
        bisect = Bisect("host", {}, store, said.append, "0002-bbbbbbbb", results_dir=tmp_path)
        bisect.service = "sglang"  # what prepare() reads from the profile
        gate = bisect.gate_result("0002-bbbbbbbb")
        assert (gate.verdict if gate else None) == verdict
    assert said == ["its gate result is not read: release 0002-bbbbbbbb's gate-result.json: unknown field 'reasonz' "
                    "(GateResult has: baseline, baseline_release, comparison, config_problems, duration_s, "
                    "inconclusive, measurement, output, reasons, rows, simulated, verdict)"]
