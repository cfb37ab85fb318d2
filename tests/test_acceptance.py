"""Acceptance per draft position (hostside/lib/acceptance.py) from SGLang's `spec_correct_drafts_histogram`: its meaning,
the simulator's engine producing it with SGLang's invariants, a drop at one position named, the gate table's lines.
Fast: no host."""

import argparse
import threading

import pytest

from conftest import bench_measurement
from sglang_deploy.hostside.lib import acceptance, gate
from sglang_deploy.hostside.contract.gate import GateResult, Sample
from sglang_deploy.sim import hardware
from sglang_deploy.sim.engine import Engine

# 100 verify steps: 10 accepted no draft, 10 one, 70 two, 5 three, 5 four (a chain of 4 drafts)
DROPPING = [10, 10, 70, 5, 5]


def test_the_histogram_counts_verify_steps_by_accepted_drafts():
    rates = acceptance.per_position(DROPPING)
    assert rates == pytest.approx([0.90, 0.80, 0.10, 0.05])  # share of verify steps whose position i was accepted
    assert acceptance.conditional(rates) == pytest.approx([0.90, 0.80 / 0.90, 0.10 / 0.80, 0.5])
    assert acceptance.merged([[1, 2], None, [0, 1, 3]]) == [1, 3, 3]
    assert acceptance.per_position([]) == [] and acceptance.per_position([0, 0]) == []


def test_a_drop_at_one_position_is_named():
    found = acceptance.drop(DROPPING)
    assert found["position"] == 3 and found["reached"] == 80
    assert found["conditional"] == pytest.approx(0.125)
    healthy = [20, 16, 13, 10, 41]  # conditional rates 0.80, 0.80, 0.79, 0.80
    assert acceptance.drop(healthy) is None
    few = [1, 1, 8, 0, 0]  # the same shape, but only 8 verify steps reach position 3: not judged
    assert acceptance.drop(few) is None


def sample(kind, histogram):
    """One of the bench's samples (hostside/contract/gate.Sample) with this histogram."""
    return Sample(kind=kind, completion_tokens=256, e2e_s=5.0, ttft_s=0.1, decode_tok_s=50.0, accept_length=3.0,
                  server_e2e_s=None, correct_drafts_histogram=histogram)


def test_the_gate_table_shows_acceptance_per_position_and_class():
    samples = [sample("prose", DROPPING), sample("code", [0, 0, 10, 10, 80])]
    summary = acceptance.summary(samples)
    assert summary["all"]["histogram"] == [10, 10, 80, 15, 85]
    assert summary["prose"]["drop"]["position"] == 3 and summary["code"]["drop"] is None
    result = GateResult(verdict="pass", reasons=[], inconclusive=[], rows=[], config_problems=[],
                        measurement=bench_measurement([50.0, 52.0], acceptance=summary))
    text = gate.table(result)
    assert "acceptance per draft position (prose, 100 verify steps): 1: 90% 2: 80% 3: 10% 4:  5%" in text
    assert "DROP at draft position 3 (prose): accepted in 12 % of the 80 verify steps" in text
    assert "DROP" not in "\n".join(line for line in text.splitlines() if "(code" in line)
    assert acceptance.summary([sample("prose", None)]) is None  # no speculation


def test_the_simulators_engine_keeps_sglangs_invariants():
    """SGLang (batch_result_processor.py): each verify step adds its accepted drafts n to spec_num_correct_drafts and
    counts histogram[n]; so sum(h) = spec_verify_ct and sum(k h[k]) = the drafts accepted."""
    resolved = {"tp_size": 2, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
                "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "max_running_requests": 4,
                "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 4}}}
    engine = Engine(argparse.Namespace(), {"SGLANG_SIM_SEED": "1"}, resolved)
    threading.Thread(target=engine.loop, daemon=True).start()
    request = engine.submit("Write a story about the sea", {"max_new_tokens": 400, "temperature": 0})
    while True:
        kind, value = request.events.get(timeout=60)
        if kind == "done":
            meta = value
            break
    histogram = meta["spec_correct_drafts_histogram"]
    assert sum(histogram) == meta["spec_verify_ct"] and len(histogram) <= 4  # at most 3 drafts a step
    drafts = sum(k * count for k, count in enumerate(histogram))
    # every verify step emits its accepted drafts plus the bonus token (the last one may be cut at max_new_tokens)
    assert meta["completion_tokens"] - 1 <= drafts + meta["spec_verify_ct"] <= meta["completion_tokens"] + 2
    rates = acceptance.per_position(histogram)
    model = hardware.accept_probabilities(engine.eff, engine.model, "prose")
    assert rates[0] == pytest.approx(model[0], abs=0.12)  # the modelled first-position acceptance, drawn


def test_count_correct_drafts_grows_the_list_as_sglang_does():
    histogram = []
    for accepted in (2, 0, 2, 3):
        hardware.count_correct_drafts(histogram, accepted)
    assert histogram == [1, 0, 2, 1]
