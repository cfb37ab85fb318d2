"""Tune's pure parts: candidates, profile edits, robust scores, the choice, and the search against the sim's model."""

import random
from pathlib import Path

import pytest

from sglang_deploy import tune
from sglang_deploy.profile import load_profile
from sglang_deploy.sim import hardware

ROOT = Path(__file__).resolve().parent.parent
INCIDENT = ROOT / "profiles" / "qwen3.6-27b-mtp1-2xa6000.yaml"
PROVEN = ROOT / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml"
MACHINE, MODEL = hardware.load_data("2xa6000-pcie"), hardware.load_data("qwen3.6-27b-fp8")


def flags_of(path):
    return {k: v for k, v in load_profile(path).sglang.flags.items() if v is not False}


def model_tok_s(flags):
    """The simulator's noiseless single-stream rate for a flag set (its own hardware model)."""
    spec = tune.spec_settings(flags)
    steps, topk, drafts = spec if spec else (0, 0, 0)
    eff = hardware.Effective(tp=2, spec_algorithm="EAGLE" if spec else None, spec_steps=steps, spec_topk=topk,
                             draft_tokens=drafts, decode_graphs=True, graph_max_bs=16, custom_allreduce=True, p2p=True,
                             nccl_proto=None, max_running=16)
    decode = hardware.expected_tok_s(eff, MACHINE, MODEL)
    tau = decode * hardware.cycle_ms(eff, MACHINE, MODEL, 1) / 1e3
    return decode, 4 * tau / hardware.cycle_ms(eff, MACHINE, MODEL, 4) * 1e3


def fake_measure(original, noise=0.01, seed=1, log=None):
    rng = random.Random(seed)

    def measure(candidate):
        flags = {**original, **candidate.flag_changes}
        flags = {k: v for k, v in flags.items() if v is not None}
        decode, aggregate = model_tok_s(flags)
        if log is not None:
            log.append(candidate.id)
        repeats = [{"decode_tok_s": decode * rng.gauss(1, noise), "aggregate_tok_s": aggregate * rng.gauss(1, noise)}
                   for _ in range(3)]
        return tune.Measured(candidate, repeats=repeats, duration_s=10)
    return measure


def test_robust_score_is_median_minus_scaled_mad():
    assert tune.robust_score([50, 52, 51]) == pytest.approx(51 - 1.4826 * 1)
    assert tune.spread_pct([50, 52, 51]) == pytest.approx(1.4826 / 51 * 100)
    assert tune.robust_score([None, 0]) is None  # no successful repeat, no score


def test_spec_candidates_match_draft_tokens_and_need_page_size_1_for_trees():
    flags = flags_of(INCIDENT)
    chain = tune.spec_candidate(flags, 4, 1)
    assert chain.flag_changes == {"--speculative-num-steps": 4, "--speculative-num-draft-tokens": 5}
    tree = tune.spec_candidate(flags, 3, 2)
    assert tree.flag_changes == {"--speculative-num-steps": 3, "--speculative-eagle-topk": 2,
                                 "--speculative-num-draft-tokens": 7, "--page-size": 1}
    assert tune.spec_settings({}) is None


def test_apply_changes_edits_the_profile_text_and_keeps_comments():
    text = PROVEN.read_text()
    candidate = tune.Candidate("x", "spec", (("--page-size", 1), ("--speculative-eagle-topk", 2),
                                             ("--speculative-num-draft-tokens", 7), ("--context-length", None)),
                               (("NCCL_PROTO", (("reason", "tune candidate"), ("value", "LL"))),))
    out = tune.apply_changes(text, candidate, {"--speculative-eagle-topk": "tuned: 1 -> 2"}, description="tuned")
    path = Path(__file__).parent / "_tune_edit.yaml"
    try:
        path.write_text(out)
        profile = load_profile(path)
    finally:
        path.unlink()
    flags = profile.sglang.flags
    assert (flags["--speculative-eagle-topk"], flags["--speculative-num-draft-tokens"], flags["--page-size"]) == (2, 7, 1)
    assert "--context-length" not in flags and profile.description == "tuned"
    assert profile.environment["NCCL_PROTO"].value == "LL"
    assert "--speculative-eagle-topk: 2  # tuned: 1 -> 2" in out
    assert "--tp-size: 2                         # one shard per A6000" in out  # untouched lines keep their comment


def test_nccl_candidates_are_valid_for_the_topology_and_keep_reasoned_knobs():
    ids = [c.id for c in tune.nccl_candidates({}, {}, "pcie")]
    assert "nccl-proto-ll128" not in ids and "nccl-proto-ll" in ids and "custom-allreduce-off" in ids
    assert "nccl-proto-ll128" in [c.id for c in tune.nccl_candidates({}, {}, "nvlink")]
    reasoned = {"NCCL_PROTO": {"value": "LL", "reason": "verified"}}
    assert not [c for c in tune.nccl_candidates({}, reasoned, "pcie") if "proto" in c.id]


def measured(id_, decode, aggregate, axis="spec", flags=()):
    return tune.Measured(tune.Candidate(id_, axis, flags), repeats=[{"decode_tok_s": decode, "aggregate_tok_s": aggregate}
                                                                    for _ in range(3)])


def test_choice_respects_the_aggregate_floor_noise_and_prefers_fewer_draft_tokens_in_a_tie():
    base = measured("original", 40, 140, "baseline")
    fast_but_starves_batch = measured("a", 60, 120, flags=(("--speculative-num-steps", 6),
                                                           ("--speculative-num-draft-tokens", 7)))
    noisy = tune.Measured(tune.Candidate("n", "spec"), repeats=[{"decode_tok_s": v, "aggregate_tok_s": 150}
                                                                for v in (40, 70, 55)])
    deep = measured("deep", 52.3, 150, flags=(("--speculative-num-steps", 5), ("--speculative-num-draft-tokens", 6)))
    shallow = measured("shallow", 52.0, 150, flags=(("--speculative-num-steps", 4),
                                                    ("--speculative-num-draft-tokens", 5)))
    objective = tune.Objective()
    flags = {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": 1, "--speculative-num-draft-tokens": 2}
    assert tune.acceptable(fast_but_starves_batch, base, objective)[1].startswith("aggregate 120.0")
    assert tune.acceptable(noisy, base, objective)[1].startswith("noisy")
    assert tune.choose([base, fast_but_starves_batch, noisy, deep, shallow], base, objective, flags) is shallow
    assert {m.candidate.id for m in tune.pareto([base, fast_but_starves_batch, deep, shallow])} == {"a", "deep"}


@pytest.mark.parametrize("start", [INCIDENT, PROVEN])
def test_search_finds_the_simulators_optimum_from_either_profile(start):
    flags = flags_of(start)
    log = []
    search = tune.Search(flags, {}, ("spec",), 4, "pcie", fake_measure(flags, log=log))
    winner = search.run()
    everything = {**flags, **winner.candidate.flag_changes}
    best_possible = max(model_tok_s({**flags, **tune.spec_candidate(flags, s, k).flag_changes})[0]
                        for s in tune.STEPS_RANGE for k in tune.TOPKS)
    assert model_tok_s(everything)[0] >= 0.985 * best_possible
    assert model_tok_s(everything)[0] >= model_tok_s(flags_of(PROVEN))[0]
    assert everything["--speculative-eagle-topk"] == 1 and len(log) <= 8, log  # coordinate descent, not a grid


def test_the_search_stops_at_the_budget_with_the_best_so_far():
    flags = flags_of(INCIDENT)
    inner = fake_measure(flags)
    calls = []

    def measure(candidate):
        if len(calls) == 3:
            raise tune.BudgetExhausted("budget: 0s left")
        calls.append(candidate.id)
        return inner(candidate)
    search = tune.Search(flags, {}, ("spec",), 4, "pcie", measure)
    winner = search.run()
    assert calls == ["original", "steps2-topk1-draft3", "steps3-topk1-draft4"]
    assert search.stopped == "budget: 0s left" and winner.candidate.id == "steps3-topk1-draft4"


def test_other_axes_build_on_the_best_spec_setting():
    flags = flags_of(PROVEN)
    log = []
    search = tune.Search(flags, {}, ("spec", "graphs", "nccl"), 4, "pcie", fake_measure(flags, log=log))
    search.run()
    graph_ids = [i for i in log if "graphbs" in i]
    assert graph_ids and all(i.startswith("steps4-topk1-draft5+") for i in graph_ids), log
