"""Gate statistics and effective-config checks without a host."""

import math
import random

import pytest

from conftest import INCIDENT, PROVEN, bench_measurement, release_meta
from sglang_deploy.gate import expectations, gate_config
from sglang_deploy.hostside.contract.gate import GateExpect, GateResult, GateSettings
from sglang_deploy.hostside.lib.gate import config_problems, evaluate, ratio_interval, table
from sglang_deploy.hostside.switch import choose_baseline
from sglang_deploy.plan import plan_for_host


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    """plan_for_host needs an API key (a missing one fails the plan unless the profile says auth: none)."""
    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "sk-test-key-for-the-plan-0123")

SETTINGS = GateSettings(min_decode_tok_s=45, min_accept_length=2.8, max_regression_pct=10, samples=5, warmup=1,
                        max_new_tokens=256, concurrency=4, on_inconclusive="rollback")
KINDS = ["prose", "code", "chat", "prose", "code"]


def measurement(rates, taus=None, errors=()):
    """The bench's answer with these decode rates (and taus): no TTFT or aggregate rows."""
    return bench_measurement(rates, taus, errors, kinds=KINDS, ttft_s=None)


BASE = [49.0, 55.0, 52.0, 49.5, 54.5]  # per-prompt differences are deterministic


def table_of(result, **fields):
    """The table of evaluate's result as the gate writes it (a GateResult, with no config problems)."""
    return table(GateResult.from_dict({**result, "config_problems": [], **fields}))


def test_pass_on_floors_without_baseline():
    result = evaluate(measurement(BASE), SETTINGS)
    assert result["verdict"] == "pass" and result["comparison"] is None


def test_incident_fails_on_both_floors():
    result = evaluate(measurement([39.5, 42.0, 40.6, 40.1, 42.1], [1.7, 1.8, 1.8, 1.75, 1.84]), SETTINGS,
                      baseline=measurement(BASE))
    assert result["verdict"] == "fail"
    assert any("below the floor 45" in r for r in result["reasons"]) and any("2.8" in r for r in result["reasons"])
    assert "GATE FAIL" in table_of(result)


def test_ten_percent_regression_fails_although_above_the_floor():
    slow = [r * 0.90 * (1 + e) for r, e in zip(BASE, [0.01, -0.01, 0.005, 0.0, -0.005])]
    result = evaluate(measurement(slow), SETTINGS.but(min_decode_tok_s=40), baseline=measurement(BASE))
    assert result["verdict"] == "fail" and "slower than the baseline" in result["reasons"][0]
    assert result["comparison"]["regression_pct"] == pytest.approx(10, abs=1.5)


def test_noise_alone_passes():
    noisy = [r * (1 + e) for r, e in zip(BASE, [0.02, -0.015, 0.01, -0.02, 0.015])]
    assert evaluate(measurement(noisy), SETTINGS, baseline=measurement(BASE))["verdict"] == "pass"


def test_a_small_significant_slowdown_under_half_the_tolerance_passes():
    slower = [r * 0.97 for r in BASE]
    assert evaluate(measurement(slower), SETTINGS, baseline=measurement(BASE))["verdict"] == "pass"


def test_too_noisy_is_inconclusive():
    wild = [r * (1 + e) for r, e in zip(BASE, [0.35, -0.3, 0.25, -0.32, 0.3])]
    result = evaluate(measurement(wild), SETTINGS.but(min_decode_tok_s=None), baseline=measurement(BASE))
    assert result["verdict"] == "inconclusive" and "straddles 0.95" in result["inconclusive"][0]
    assert result["comparison"]["low"] < 0.95 <= result["comparison"]["high"]


def test_a_faster_release_passes_although_its_speedup_differs_by_prompt():
    """The issue's step 4: 3-step MTP against a 1-step baseline; code gains most, chat least."""
    slow = [39.5, 41.0, 40.6, 40.1, 41.5]
    speedups = [1.22, 1.52, 1.18, 1.26, 1.45]  # per-prompt: the acceptance gain depends on the text
    result = evaluate(measurement([r * s for r, s in zip(slow, speedups)]), SETTINGS, baseline=measurement(slow))
    comparison = result["comparison"]
    assert result["verdict"] == "pass", result
    assert comparison["high"] - comparison["low"] > 0.2  # wide, yet all of it on the fast side of 0.95
    assert comparison["low"] > 1.0 and comparison["change_pct"] == pytest.approx(32, abs=3)
    text = table_of(result)
    assert "% faster than the baseline" in text and "GATE PASS" in text


def test_a_slower_release_fails_although_its_slowdown_differs_by_prompt():
    factors = [0.84, 0.78, 0.86, 0.82, 0.79]
    result = evaluate(measurement([r * f for r, f in zip(BASE, factors)]), SETTINGS.but(min_decode_tok_s=40),
                      baseline=measurement(BASE))
    assert result["verdict"] == "fail" and result["comparison"]["high"] < 0.95
    assert "% slower than the baseline" in result["reasons"][0] and "below the floor" not in " ".join(result["reasons"])


def test_an_interval_straddling_the_threshold_is_inconclusive():
    near = [r * f for r, f in zip(BASE, [0.95, 0.97, 0.93, 0.96, 0.94])]
    result = evaluate(measurement(near), SETTINGS, baseline=measurement(BASE))
    assert result["verdict"] == "inconclusive" and not result["reasons"]
    assert result["comparison"]["low"] < 0.95 <= result["comparison"]["high"]


def test_one_disturbed_request_cannot_fail_an_unchanged_release():
    disturbed = [r * f for r, f in zip(BASE, [1.0, 1.01, 0.55, 0.99, 1.0])]
    result = evaluate(measurement(disturbed), SETTINGS.but(min_decode_tok_s=None), baseline=measurement(BASE))
    assert result["verdict"] != "fail" and result["comparison"]["high"] > 0.95


def test_false_fail_rate_at_the_threshold_is_at_most_five_percent():
    """The upper bound is a one-sided 95 % bound: a release exactly at the threshold fails <= 5 % of the time."""
    rng = random.Random(12)
    for n in (3, 5, 12):
        fails = sum(ratio_interval([0.95 * math.exp(rng.gauss(0, 0.04)) for _ in range(n)])[2] < 0.95
                    for _ in range(4000))
        assert 0.035 <= fails / 4000 <= 0.065, (n, fails)


def gated(verdict, at="2025-01-01T00:00:00+00:00"):
    return release_meta(verdict="good" if verdict == "pass" else "bad", gate={"verdict": verdict, "at": at,
                                                                                         "summary": verdict})


def test_a_release_forced_good_by_skip_gate_is_no_baseline():
    proven = ("0001-aaaaaaaa", gated("pass"), "pass")
    incident = ("0002-bbbbbbbb", gated("fail").but(verdict="good", verdict_by="skip_gate"), "fail")
    # The step 4: the proven release again, the forced 1-step release is the last good one.
    release, note = choose_baseline([proven, incident], last_good="0002-bbbbbbbb", current="0001-aaaaaaaa")
    assert release is None
    assert "no passed baseline" in note and "0002-bbbbbbbb" in note and "gate fail" in note
    # Another release that passed earlier is used instead, and the note says why the last good one is not.
    other = ("0003-cccccccc", gated("pass", at="2025-01-02T00:00:00+00:00"), "pass")
    release, note = choose_baseline([proven, incident, other], last_good="0002-bbbbbbbb", current="0004-dddddddd")
    assert release == "0003-cccccccc" and "last release that passed its gate" in note and "0002-bbbbbbbb" in note
    # Never measured (skip_gate on a fresh release) is no baseline either.
    unmeasured = ("0005-eeeeeeee", release_meta(verdict="good", gate=None, verdict_by="skip_gate"), None)
    release, note = choose_baseline([unmeasured], last_good="0005-eeeeeeee", current="0006-ffffffff")
    assert release is None and "never measured" in note


def test_the_last_good_release_is_the_baseline_when_it_passed():
    older = ("0001-aaaaaaaa", gated("pass", at="2025-01-03T00:00:00+00:00"), "pass")
    last_good = ("0002-bbbbbbbb", gated("pass", at="2025-01-02T00:00:00+00:00"), "pass")
    assert choose_baseline([older, last_good], "0002-bbbbbbbb", "0003-cccccccc")[0] == "0002-bbbbbbbb"
    # A meta that says pass without a stored passed result (the switch died in between) does not count.
    assert choose_baseline([older[:2] + ("fail",)], None, "0003-cccccccc")[0] is None
    # The release being gated is never its own baseline.
    assert choose_baseline([older], "0001-aaaaaaaa", "0001-aaaaaaaa")[0] is None


def test_the_table_names_the_baseline():
    result = evaluate(measurement(BASE), SETTINGS)
    assert "baseline: no passed baseline" in table_of(result, baseline={
        "release": None, "note": "no passed baseline: no other release on this host has passed"})


def test_request_errors_are_inconclusive():
    result = evaluate(measurement(BASE, errors=["sample 3: HTTP Error 500"]), SETTINGS)
    assert result["verdict"] == "inconclusive" and "request error" in result["inconclusive"][0]


def test_config_problems_name_the_exact_difference():
    expect = GateExpect(decode_graphs=True, custom_all_reduce=True, venv="/opt/v", model_path="/models/m",
                        resolved={"speculative_algorithm": "EAGLE", "speculative_num_steps": 3},
                        environment={"NCCL_CUMEM_ENABLE": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    info = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 1, "disable_custom_all_reduce": False,
            "cuda_graph_config": {"decode": {"backend": "full"}},
            "internal_states": [{"memory_usage": {"graph": {"decode": 0.0, "target_verify": 0.0}}}]}
    findings = {"custom_all_reduce_fallback": "CustomAllreduce is disabled because your platform lacks GPU P2P "
                                              "capability or P2P test failed."}
    costly = [("CUDA_LAUNCH_BLOCKING", "1", "every kernel launch waits", "/etc/systemd/system/sglang.service.d/x.conf")]
    problems = config_problems(info, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}, False, ["x"], expect, findings, costly)
    text = "\n".join(problems)
    assert "decode CUDA graphs were not captured" in text and "custom all-reduce fell back to NCCL at runtime" in text
    assert "speculative_num_steps: SGLang resolves the release's command line to 3, the running server reports 1" in text
    assert "NCCL_CUMEM_ENABLE is declared (NCCL_CUMEM_ENABLE=0) but missing from the server process" in text
    assert "CUDA_DEVICE_ORDER is declared as 'PCI_BUS_ID' but the server process has 'FASTEST_FIRST'" in text
    assert "CUDA_LAUNCH_BLOCKING=1 is not declared by the release but set by /etc/systemd/system/sglang.service.d/x.conf" in text
    assert "process command line differs" in text
    disabled = {**info, "cuda_graph_config": {"decode": {"backend": "disabled"}}}
    assert "cuda_graph_config.decode.backend = 'disabled'" in "\n".join(config_problems(disabled, {}, True, [], expect))


def test_decode_graphs_are_read_from_the_captured_batch_sizes_not_a_memory_delta():
    """On a real card the decode/verify graphs can reuse the blocks the prefill graph freed in the shared pool: their
    memory deltas read 0.000 although they were captured. SGLang reports the captured batch sizes
    (internal_states[0].decode_cuda_graph_bs): a release with sizes and zero deltas passes, one with none fails."""
    expect = GateExpect(decode_graphs=True, custom_all_reduce=False, environment={}, venv="/opt/v", model_path="/m")
    zero = {"decode": 0.0, "target_verify": 0.0, "draft_decode": 0.0, "draft_extend": 0.0, "prefill": 0.31}

    def info(state):
        return {"cuda_graph_config": {"decode": {"backend": "full"}},
                "internal_states": [{"memory_usage": {"graph": zero}, **state}]}

    assert config_problems(info({"decode_cuda_graph_bs": [1, 2, 4, 8, 12, 16]}), {}, True, [], expect) == []
    assert config_problems(info({"decode_cuda_graph_bs": []}), {}, True, [], expect) == [
        "decode CUDA graphs were not captured (/server_info internal_states[0].decode_cuda_graph_bs = [])"]
    # a server that does not report the sizes: the graph memory is all there is to read
    assert "graph memory for decode/target_verify/draft phases is 0.000 GB" in config_problems(
        info({}), {}, True, [], expect)[0]
    assert config_problems(info({"memory_usage": {"graph": {**zero, "target_verify": 0.41}}}), {}, True, [], expect) == []
    ok_info = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "disable_custom_all_reduce": False,
               "cuda_graph_config": {"decode": {"backend": "full"}},
               "internal_states": [{"memory_usage": {"graph": {"target_verify": 0.4}}}]}
    assert config_problems(ok_info, {"NCCL_CUMEM_ENABLE": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, True, [], expect) == []


def test_expectations_are_sglangs_own_resolution_of_the_profile():
    plan = plan_for_host({"profile": str(PROVEN), "gpus": 2})
    expect = expectations(plan)
    assert expect["decode_graphs"] and expect["custom_all_reduce"]
    resolved = expect["resolved"]  # NEXTN is an alias SGLang resolves to EAGLE (speculative_hook.py)
    assert (resolved["speculative_algorithm"], resolved["speculative_num_steps"],
            resolved["speculative_num_draft_tokens"], resolved["max_running_requests"]) == ("EAGLE", 3, 4, 16)
    assert expect["environment"]["NCCL_CUMEM_ENABLE"] == "0"
    assert gate_config(plan_for_host({"profile": str(INCIDENT)})).expect.resolved["speculative_num_steps"] == 1
    assert gate_config(plan).settings.min_decode_tok_s == 45
