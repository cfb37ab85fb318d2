"""The tune searches only what can start on the host's card and adopts only measured gains: attention x KV x draft
judged together by the release's start-feasibility data before any deploy, one candidate per configuration (the
original's own never), dropped values listed with their reasons and counts, an empty axis saying why, and the
simulator's assumed factors (sim/data: `_assumed`) never crowning a winner."""

import pytest

from sglang_deploy.validate import start_feasibility as sf
from sglang_deploy.sim import hardware
from sglang_deploy.tune import axes as tune_axes, report as tune_report, search as tune, vocab as tune_vocab
from test_tune_axes import CHOICES, sim_measure
from test_tune_logic import PROVEN, flags_of

DATA = sf.load("0.5.23")


def fake_start(resolved):
    import json

    config = json.loads((PROVEN.parent.parent / "manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json").read_text())
    verdict = sf.judge(DATA, (8, 6), config, {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                                              **resolved})
    verdict.card = "sm_86"
    return verdict


def test_values_that_cannot_start_are_dropped_and_one_configuration_is_one_candidate():
    """As SGLang resolves them on the A6000: auto/bf16/bfloat16 are the checkpoint's bf16 KV, the original's own;
    triton with fp8_e4m3 cannot start on sm_86 (Triton's fp8e4nv floor), fa4 neither (paged KV on SM 8.x)."""
    answers = {"--kv-cache-dtype": {"auto": "auto", "bf16": "bf16", "bfloat16": "bfloat16", "fp8_e4m3": "fp8_e4m3"},
               "--attention-backend": {"flashinfer": "flashinfer", "fa3": "fa3", "fa4": "fa4", "triton": "triton"}}

    def ask(extra, base=None):
        resolved = {"attention_backend": "flashinfer", "kv_cache_dtype": "auto", **(base or {})}
        if extra:
            resolved[tune_axes.LEVERS[extra[0]].dest] = answers[extra[0]][extra[1]]
        return None, resolved

    kv = tune_axes.accepted_values("--kv-cache-dtype", list(answers["--kv-cache-dtype"]), ask, start=fake_start)
    assert kv.values == ["fp8_e4m3"] and not kv.dropped, kv.summary()
    assert kv.same_as == {"bf16": "bf16 (the original's own)", "bfloat16": "bf16 (the original's own)"}
    on_fp8 = tune_axes.accepted_values("--attention-backend", list(answers["--attention-backend"]),
                                       lambda extra: ask(extra, {"kv_cache_dtype": "fp8_e4m3"}), start=fake_start)
    assert on_fp8.values == ["flashinfer"] or on_fp8.values == [], on_fp8.summary()
    assert set(on_fp8.dropped) == {"fa3", "fa4", "triton"}, on_fp8.summary()
    assert "only from capability 89" in on_fp8.dropped["triton"] and "cannot start on sm_86" in on_fp8.dropped["triton"]
    assert "3 dropped" in on_fp8.summary()
    without = tune_axes.accepted_values("--kv-cache-dtype", list(answers["--kv-cache-dtype"]), ask)
    assert without.values == ["bf16", "bfloat16", "fp8_e4m3"]  # before: three spellings of one configuration


@pytest.mark.usefixtures("probe_sockets")
def test_on_the_a6000_the_attention_axis_offers_only_what_can_start():
    """SGLang 0.5.23's own resolution under the A6000's facts, then the start-feasibility data: of a target set
    covering each reason, fa3 and triton remain (benchmarks/tune_candidates.py counts the whole axis: 41 -> 4)."""
    from sglang_deploy.plan import plan_for_host
    from sglang_deploy.tune.levers import asker, starter

    data = {"profile": str(PROVEN), "gpus": 2, "gpu_topology": "pcie", "simulated": True}
    plan = plan_for_host(data, need_key=False)
    ask, choices = asker(plan, data)
    start = starter(plan, data)
    wanted = ["fa3", "triton", "fa4", "hpc_ops", "aiter", "torch_native"]
    target = tune_axes.accepted_values("--attention-backend", choices("--attention-backend"), ask, wanted, start)
    assert target.values == ["fa3", "triton"], target.summary()
    assert set(target.dropped) == {"fa4", "hpc_ops", "aiter", "torch_native"}, target.summary()
    assert "EAGLE is not supported in decode attention backend torch_native" in target.dropped["torch_native"]
    kv = tune_axes.accepted_values("--kv-cache-dtype", choices("--kv-cache-dtype"), ask, None, start)
    assert kv.values == ["fp8_e5m2", "fp8_e4m3"] and set(kv.same_as) == {"bf16", "bfloat16"}, kv.summary()


def test_the_dropped_values_are_rows_of_the_table_with_reasons_and_counts():
    flags = flags_of(PROVEN)
    attention = tune_axes.Accepted("--attention-backend", "flashinfer", ["fa3"],
                                   dropped={"fa4": "cannot start on sm_86: FA4 paged KV (interface.py:1431)"})
    choices = {**CHOICES, "--attention-backend": attention}
    found = tune.Search(flags, {}, ("attention",), 4, "pcie", sim_measure(flags), choices=choices)
    found.run()
    row = found.results["attention-fa4"]
    assert not row.valid and not row.repeats and "dropped, never started: cannot start on sm_86" in row.invalid_reason
    table = tune_report.table(list(found.results.values()), found.baseline, None, tune.Objective(), flags)
    assert "attention-fa4" in table and "FA4 paged KV" in table
    assert "--attention-backend: 1 candidate(s), 0 the same configuration as another, 0 refused by SGLang's " \
        "resolution, 1 dropped before any start" in "\n".join(found.axis_notes())


def test_an_assumed_factor_is_measured_but_never_adopted():
    """fa3's x0.90 and fp8 KV's x1.19 are assumptions of the simulator (sim/data/2xa6000-pcie.json `_assumed`): the
    candidate is measured and shown, marked, and the original stays the choice."""
    machine = hardware.load_data("2xa6000-pcie")
    assert "club-3090" in hardware.assumed_factors(machine, {"--attention-backend": "fa3"})
    assert hardware.assumed_factors(machine, {"--kv-cache-dtype": "fp8_e4m3"})
    assert hardware.assumed_factors(machine, {"--attention-backend": "flashinfer", "--kv-cache-dtype": "bf16"}) is None
    model = hardware.load_data("qwen3.6-27b-fp8")  # a token map's net gain rests on an assumed out-of-map share
    assert "out_of_map_share" in hardware.assumed_factors(machine, {"--speculative-token-map": "/m.pt"}, model)
    assert hardware.assumed_factors(machine, {"--speculative-token-map": "/m.pt"}) is None  # no model, no claim
    flags = flags_of(PROVEN)

    def assumed(candidate):
        return hardware.assumed_factors(machine, candidate.flag_changes)

    found = tune.Search(flags, {}, ("attention",), 4, "pcie", sim_measure(flags), choices=CHOICES, assumed=assumed)
    winner = found.run()
    fa3 = found.results["attention-fa3"]
    assert fa3.decode > 1.05 * found.baseline.decode  # the simulator runs the modelled gain ...
    assert winner.candidate.id == "original"  # ... and the tune does not adopt it
    table = tune_report.table(list(found.results.values()), found.baseline, winner, tune.Objective(), flags, assumed)
    assert "assumed, not measured here" in next(line for line in table.splitlines() if line.startswith("attention-fa3"))


def test_an_empty_vocab_axis_says_why_and_how_to_give_it_a_candidate():
    from sglang_deploy.profile import load_profile

    offer = tune_vocab.offer(load_profile(PROVEN), flags_of(PROVEN), lambda extra: (None, {}))
    assert not offer.maps
    assert "sglang-deploy token-map" in offer.summary() and "tune.token_maps" in offer.summary()
    assert "does not speculate" in tune_vocab.offer(load_profile(PROVEN), {}, lambda extra: (None, {})).summary()


def test_no_committed_profile_claims_an_assumed_gain():
    """Every committed profile's flags rest on no assumed factor of the simulator (a sim-tuned profile built on one
    was removed)."""
    from sglang_deploy.profile import load_profile

    machine, model = hardware.load_data("2xa6000-pcie"), hardware.load_data("qwen3.6-27b-fp8")
    for path in sorted(PROVEN.parent.glob("*.yaml")):
        assert hardware.assumed_factors(machine, load_profile(path).sglang.flags, model) is None, path


@pytest.mark.parametrize("backend, words", [("fa3", "run_mha_fwd<86> for bf16, fp16 only"),
                                            ("triton", "only from capability 89")])
def test_the_simulated_a6000_fails_a_combination_each_of_whose_values_runs(backend, words):
    """The simulator judged one axis at a time and ran fa3 + fp8_e4m3; now the combination fails at start as the
    A6000 would (validate/start_feasibility.py), while each value alone still runs."""
    from test_tune_axes import sim_tok_s

    flags = flags_of(PROVEN)
    assert sim_tok_s({**flags, "--attention-backend": backend})[1] is None
    assert sim_tok_s({**flags, "--kv-cache-dtype": "fp8_e4m3"})[1] is None
    _, problem = sim_tok_s({**flags, "--attention-backend": backend, "--kv-cache-dtype": "fp8_e4m3"})
    assert problem and words in problem and "SIMULATED" in problem
