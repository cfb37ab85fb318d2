"""The tune's discipline without a host: the axes by expected gain, what the budget did not reach, and the winner
measured again beside the original before it is written."""

import pytest

from sglang_deploy.tune import discipline as tune_discipline, search as tune
from test_tune_logic import INCIDENT, PROVEN, fake_measure, flags_of, runner  # noqa: F401 - the runner fixture


def measured(name, decode, spread=0.005, axis="spec"):
    repeats = [{"decode_tok_s": decode * (1 + d), "aggregate_tok_s": 3 * decode} for d in (-spread, 0.0, spread)]
    return tune.Measured(tune.Candidate(name, axis), repeats=repeats, release_id="0002-bbbbbbbb")


ALL = ("nospec", "spec", "drafter", "kv", "attention", "graphs", "nccl")


def doctor_json(suspects=(), opportunities=()):
    """The doctor's report as the tune reads it (doctor.json, hostside/contract/findings.DoctorReport)."""
    from sglang_deploy.hostside.contract.findings import DoctorReport

    return DoctorReport.from_dict({"roofline": None, "suspects": list(suspects), "notes": [], "simulated": False,
                                   "release": "0001-aaaaaaaa", "errors": [], "opportunities": list(opportunities)})


@pytest.mark.parametrize("doctor, order", [
    (None, ["nospec", "spec", "drafter", "kv", "attention", "graphs", "nccl"]),
    # the doctor found custom all-reduce off and priced it at 40 %: nccl goes before everything but the control
    (doctor_json([{"id": "custom-all-reduce", "gain_pct": 40.0}]),
     ["nospec", "nccl", "spec", "drafter", "kv", "attention", "graphs"]),
    # a drafter worth 60 % still comes after the spec axis it replaces
    (doctor_json(opportunities=[{"id": "drafter", "gain_pct": 60.0}]),
     ["nospec", "spec", "drafter", "kv", "attention", "graphs", "nccl"]),
    # fp8 KV on Ampere at 40 % (above the drafter's 37): kv first; a lower doctor estimate never lowers the default
    (doctor_json([{"id": "fp8-kv-on-ampere", "gain_pct": 40.0}, {"id": "batch-limit", "gain_pct": 1.0}]),
     ["nospec", "kv", "spec", "drafter", "attention", "graphs", "nccl"]),
], ids=["defaults", "custom-all-reduce-off", "drafter-after-spec", "fp8-kv"])
def test_the_axes_run_largest_expected_gain_first(doctor, order):
    assert tune_discipline.axis_order(ALL, tune_discipline.expected_gains(doctor)) == order
    assert tune_discipline.axis_order(("graphs", "spec")) == ["spec", "graphs"]  # only the asked axes


def test_each_axis_is_raised_only_by_suspects_the_doctor_reports():
    """An axis's suspect ids (rules.TUNE_AXES) are ids the doctor writes: a renamed suspect would no longer raise it."""
    from pathlib import Path

    from sglang_deploy import doctor
    from sglang_deploy.rules import TUNE_AXES

    source = "".join(path.read_text() for path in Path(doctor.__file__).parent.glob("*.py"))
    suspects = [suspect for axis in TUNE_AXES for suspect in axis.suspects]
    assert len(suspects) == len(set(suspects)) == len(tune_discipline.SUSPECT_AXES)  # one axis per suspect
    assert [suspect for suspect in suspects if f'"{suspect}"' not in source] == []


def test_the_budget_names_what_it_did_not_reach():
    flags = flags_of(PROVEN)
    inner = fake_measure(flags)
    calls = []

    def measure(candidate):
        if len(calls) == 3:
            raise tune.BudgetExhausted("budget: the next candidate (x) needs about 0m20s, 0m05s left")
        calls.append(candidate.id)
        return inner(candidate)
    search = tune.Search(flags, {}, ("spec", "graphs", "nccl"), 4, "pcie", measure)
    search.run()
    lines = tune_discipline.unreached(search, search.stopped_axis, search.stopped)
    graphs = [c.id for c in tune.graph_candidates(flags, 4)]
    nccl = [c.id for c in tune.nccl_candidates(flags, {}, "pcie")]
    assert lines == ["spec: stopped (budget: the next candidate (x) needs about 0m20s, 0m05s left)",
                     f"graphs: not started ({len(graphs)}: {', '.join(graphs)})",
                     f"nccl: not started ({len(nccl)}: {', '.join(nccl)})"]
    before_anything = tune.Search(flags, {}, ("spec",), 4, "pcie", lambda c: (_ for _ in ()).throw(
        tune.BudgetExhausted("budget: none")))
    before_anything.run()
    assert tune_discipline.unreached(before_anything, before_anything.stopped_axis, before_anything.stopped) == [
        "the original: not measured (budget: none)", "spec: not started"]
    complete = tune.Search(flags, {}, ("graphs",), 4, "pcie", inner)
    complete.run()
    assert tune_discipline.unreached(complete, complete.stopped_axis, complete.stopped) == []


@pytest.mark.parametrize("winner, incumbent, ok, says", [
    (measured("w", 55.0), measured("o", 50.0), True, "confirmed beside the original: 55.0 against 50.0"),
    (measured("w", 50.5), measured("o", 50.0), False, "not above the 2.0 %"),  # the gain vanished
    (measured("w", 55.0, spread=0.05), measured("o", 50.0, spread=0.05), False, "noisy: spread"),
    (tune.Measured(tune.Candidate("w", "spec"), error="output check failed: garbage"), measured("o", 50.0), False,
     "the re-measurement failed: w: output check failed: garbage"),
], ids=["holds", "vanished", "noisy", "failed"])
def test_the_winner_must_hold_its_gain_beside_the_original(winner, incumbent, ok, says):
    confirmed, why = tune_discipline.confirmed(winner, incumbent, tune.Objective())
    assert confirmed is ok and says in why, why


@pytest.mark.parametrize("again, written", [(55.0, True), (50.2, False), ("budget", False)],
                         ids=["holds", "vanishes", "no-budget-left"])
def test_an_unconfirmed_winner_is_not_written(runner, again, written):  # noqa: F811 - the fixture
    runner.search.baseline = baseline = measured("original", 50.0)
    winner = measured("steps3-topk1-draft4", 55.0)
    winner.candidate = tune.spec_candidate(flags_of(INCIDENT), 3, 1)
    asked = []

    def run_item(candidate, item, restart):
        asked.append((candidate.id, item["release_id"]))
        if again == "budget":
            raise tune.BudgetExhausted("budget: 0m00s left")
        return measured(candidate.id, 50.0 if candidate.id.startswith("original") else again)
    runner.run_item = run_item
    chosen = runner.confirm(winner)
    assert (chosen is winner) is written and (chosen is baseline) is not written
    assert runner.confirmation["confirmed"] is written
    if again != "budget":
        assert [a[0] for a in asked] == ["original (again)", "steps3-topk1-draft4 (again)"]
        assert asked[0][1] == runner.active and asked[1][1] != runner.active
    assert runner.document()["confirmation"]["why"] == runner.confirmation["why"]


def test_the_search_keeps_room_for_the_confirmation(runner):  # noqa: F811 - the fixture
    """60 s budget, the last candidate took 20 s (estimate 22 s): 44 s stay reserved, so the next one does not fit
    while searching; the confirmation itself may use them."""
    runner.durations = [20.0]
    with pytest.raises(tune.BudgetExhausted, match="needs about"):
        runner.run_item(tune.spec_candidate(flags_of(INCIDENT), 2, 1), {"release_id": "0002-bbbbbbbb"}, False)
    assert runner.remote.puts == []
    runner.confirming = True
    assert runner.reserved_s() == 0.0
