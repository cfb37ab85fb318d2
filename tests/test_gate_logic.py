"""Gate statistics and effective-config checks without a host."""

import pytest

from conftest import INCIDENT, PROVEN
from sglang_deploy.gate import expectations, gate_config
from sglang_deploy.hostside.gate import config_problems, evaluate, table
from sglang_deploy.plan import plan_for_host


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    """plan_for_host needs an API key (a missing one fails the plan unless the profile says auth: none)."""
    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "sk-test-key-for-the-plan-0123")

SETTINGS = {"min_decode_tok_s": 45, "min_accept_length": 2.8, "max_regression_pct": 10}
KINDS = ["prose", "code", "chat", "prose", "code"]


def measurement(rates, taus=None, errors=()):
    taus = taus or [3.2] * len(rates)
    samples = [{"kind": k, "decode_tok_s": r, "accept_length": t} for k, r, t in zip(KINDS, rates, taus)]

    def summary(values):
        ordered = sorted(values)
        median = ordered[len(values) // 2]
        return {"median": median, "min": ordered[0], "max": ordered[-1], "spread_pct": (ordered[-1] - ordered[0]) / median * 100}
    return {"samples": samples, "decode_tok_s": summary(rates), "accept_length": summary(taus), "errors": list(errors),
            "config": {"concurrency": 4}}


BASE = [49.0, 55.0, 52.0, 49.5, 54.5]  # per-prompt differences are deterministic


def test_pass_on_floors_without_baseline():
    result = evaluate(measurement(BASE), SETTINGS)
    assert result["verdict"] == "pass" and result["comparison"] is None


def test_incident_fails_on_both_floors():
    result = evaluate(measurement([39.5, 42.0, 40.6, 40.1, 42.1], [1.7, 1.8, 1.8, 1.75, 1.84]), SETTINGS,
                      baseline=measurement(BASE))
    assert result["verdict"] == "fail"
    assert any("below the floor 45" in r for r in result["reasons"]) and any("2.8" in r for r in result["reasons"])
    assert "GATE FAIL" in table(result)


def test_ten_percent_regression_fails_although_above_the_floor():
    slow = [r * 0.90 * (1 + e) for r, e in zip(BASE, [0.01, -0.01, 0.005, 0.0, -0.005])]
    result = evaluate(measurement(slow), {**SETTINGS, "min_decode_tok_s": 40}, baseline=measurement(BASE))
    assert result["verdict"] == "fail" and "slower than the last good release" in result["reasons"][0]
    assert result["comparison"]["regression_pct"] == pytest.approx(10, abs=1.5)


def test_noise_alone_passes():
    noisy = [r * (1 + e) for r, e in zip(BASE, [0.02, -0.015, 0.01, -0.02, 0.015])]
    assert evaluate(measurement(noisy), SETTINGS, baseline=measurement(BASE))["verdict"] == "pass"


def test_a_small_significant_slowdown_under_half_the_tolerance_passes():
    slower = [r * 0.97 for r in BASE]
    assert evaluate(measurement(slower), SETTINGS, baseline=measurement(BASE))["verdict"] == "pass"


def test_too_noisy_is_inconclusive():
    wild = [r * (1 + e) for r, e in zip(BASE, [0.35, -0.3, 0.25, -0.32, 0.3])]
    result = evaluate(measurement(wild), {**SETTINGS, "min_decode_tok_s": None}, baseline=measurement(BASE))
    assert result["verdict"] == "inconclusive" and "too noisy" in result["inconclusive"][0]


def test_request_errors_are_inconclusive():
    result = evaluate(measurement(BASE, errors=["sample 3: HTTP Error 500"]), SETTINGS)
    assert result["verdict"] == "inconclusive" and "request error" in result["inconclusive"][0]


def test_config_problems_name_the_exact_difference():
    expect = {"decode_graphs": True, "custom_all_reduce": True,
              "resolved": {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3},
              "environment": {"NCCL_CUMEM_ENABLE": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}}
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
    assert gate_config(plan_for_host({"profile": str(INCIDENT)}))["expect"]["resolved"]["speculative_num_steps"] == 1
    assert gate_config(plan)["settings"]["min_decode_tok_s"] == 45
