"""Roofline from safetensors headers, and the doctor's suspects, without a host."""

import json

import pytest

from conftest import bench_measurement, doctor_collection
from sglang_deploy.doctor.diagnosis import diagnose, format_report, suspects_from
from sglang_deploy.hostside.safetensors_headers import summarize
from sglang_deploy.roofline import roofline
from sglang_deploy.sim.synthetic_checkpoint import write as write_qwen_like
from sglang_deploy.sim.synthetic_checkpoint import write_safetensors


def write_checkpoint(directory, tensors, config=None):
    write_safetensors(directory / "model.safetensors", tensors)
    (directory / "config.json").write_text(json.dumps(config or {}))


TENSORS = [
    ("model.embed_tokens.weight", "BF16", [500, 1000]),           # 1 MB, gathered: not read
    ("model.layers.0.mlp.up_proj.weight", "F8_E4M3", [1000, 1000]),  # 1 MB
    ("model.layers.1.mlp.up_proj.weight", "F8_E4M3", [1000, 1000]),  # 1 MB
    ("model.layers.1.input_layernorm.weight", "F32", [250]),        # 1 KB
    ("lm_head.weight", "BF16", [500, 1000]),                         # 1 MB
    ("mtp.layers.0.mlp.up_proj.weight", "F8_E4M3", [1000, 1000]),   # 1 MB
    ("model.visual.blocks.0.attn.qkv.weight", "BF16", [100, 100]),   # not read in text decode
]


def test_bytes_by_role_from_headers(tmp_path):
    write_checkpoint(tmp_path, TENSORS)
    summary = summarize(tmp_path)
    assert summary["bytes"] == {"layers": 2_001_000, "lm_head": 1_000_000, "embedding": 1_000_000,
                                "mtp": 1_000_000, "vision": 20_000}


def test_roofline_arithmetic(tmp_path):
    write_checkpoint(tmp_path, TENSORS)
    result = roofline(summarize(tmp_path), tp=2, steps=3, tau=3.0, bandwidth_gbs=1.0, measured_tok_s=200)
    # per GPU: verify (2.001 + 1) / 2 MB, draft (1 + 1) / 2 MB; cycle 1.5005 + 3 MB = 4.5005 MB at 1 GB/s
    assert result["verify_gb_per_gpu"] == pytest.approx(0.0015005)
    assert result["draft_step_gb_per_gpu"] == pytest.approx(0.001)
    assert result["roofline_tok_s"] == pytest.approx(3.0 / 0.0045005)
    assert result["mbu"] == pytest.approx(200 / (3.0 / 0.0045005))


def test_tied_embeddings_count_as_the_lm_head(tmp_path):
    write_checkpoint(tmp_path, [t for t in TENSORS if t[0] != "lm_head.weight"], {"tie_word_embeddings": True})
    assert summarize(tmp_path)["bytes"]["lm_head"] == 1_000_000


def test_ct129_roofline_near_139_tok_s(tmp_path):
    write_qwen_like(tmp_path)
    result = roofline(summarize(tmp_path), tp=2, steps=3, tau=3.25, bandwidth_gbs=768)
    assert result["verify_gb_per_gpu"] == pytest.approx(13.5, abs=0.1)
    assert result["draft_step_gb_per_gpu"] == pytest.approx(1.48, abs=0.05)
    assert result["roofline_tok_s"] == pytest.approx(139, abs=2)


# /server_info as SGLang 0.5.23 reports the proven profile: resolved values (EAGLE, cuda_graph_config).
PROVEN_INFO = {"tp_size": 2, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
               "speculative_num_draft_tokens": 4, "disable_custom_all_reduce": False, "max_running_requests": 16,
               "cuda_graph_max_bs_decode": 16, "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 16}},
               "internal_states": [{"avg_spec_accept_length": 3.2, "effective_max_running_requests_per_dp": 16,
                                    "memory_usage": {"graph": {"target_verify": 0.4}}}]}
PCIE = {"interconnect": "pcie", "p2p_read_ok": True, "p2p_read_statuses": ["OK"]}
GATE = bench_measurement([52.0], [3.2], concurrency=4)  # the bench's answer (hostside/contract/gate.Measurement)


def top(info=PROVEN_INFO, environ=None, topology=PCIE, gpus=(), gate=GATE, log_findings=None, costly_env=()):
    found = suspects_from(info, environ or {}, topology, list(gpus), gate, None, log_findings, costly_env)
    return [s.id for s in found]


def test_proven_configuration_has_no_suspect():
    assert top() == []


@pytest.mark.parametrize("change, expected", [
    ({"cuda_graph_config": {"decode": {"backend": "disabled", "max_bs": 16}}}, "cuda-graphs"),
    ({"internal_states": [{"memory_usage": {"graph": {"target_verify": 0.0}}}]}, "cuda-graphs"),
    ({"disable_custom_all_reduce": True}, "custom-all-reduce"),
    ({"speculative_num_steps": 1, "speculative_num_draft_tokens": 2}, "weak-speculation"),
    ({"speculative_algorithm": None}, "no-speculation"),
    ({"internal_states": [{**PROVEN_INFO["internal_states"][0], "effective_max_running_requests_per_dp": 2}]},
     "batch-limit"),
    ({"cuda_graph_config": {"decode": {"backend": "full", "max_bs": 2}}}, "graph-batch-limit"),
])
def test_server_side_defects(change, expected):
    assert top({**PROVEN_INFO, **change})[0] == expected


def test_custom_all_reduce_fallback_is_read_from_the_journal_not_the_field():
    line = ("CustomAllreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. "
            "To silence this warning, specify disable_custom_all_reduce=True explicitly.")
    assert top() == [] and PROVEN_INFO["disable_custom_all_reduce"] is False
    assert top(log_findings={"custom_all_reduce_fallback": line}) == ["custom-all-reduce"]


def test_undeclared_costly_environment_is_named_with_its_file():
    found = suspects_from(PROVEN_INFO, {}, PCIE, [], GATE, None, None,
                          [("CUDA_LAUNCH_BLOCKING", "1", "every launch waits", "/etc/systemd/system/sglang.service.d/d.conf")])
    assert [s.id for s in found] == ["costly-environment"]
    assert "/etc/systemd/system/sglang.service.d/d.conf" in found[0].fix


def test_environment_defects_and_ranking():
    assert top(environ={"NCCL_P2P_DISABLE": "1"}) == ["p2p-unavailable"]
    assert top(environ={"NCCL_P2P_LEVEL": "NVL"}) == ["p2p-unavailable"]
    assert top(environ={"NCCL_ALGO": "Tree"}) == ["nccl-debug-knobs"]
    # LL128 is a correctness risk: it ranks above a bigger perf suspect.
    assert top({**PROVEN_INFO, "speculative_num_steps": 1}, environ={"NCCL_PROTO": "LL128"})[:2] == [
        "nccl-ll128-forced", "weak-speculation"]
    assert top(environ={"NCCL_PROTO": "LL128"}, topology={"interconnect": "nvlink"}) == ["nccl-debug-knobs"]


def test_hardware_defects():
    assert top(topology={**PCIE, "p2p_read_ok": False, "p2p_read_statuses": ["CNS"]}) == ["p2p-unavailable"]
    assert top(gpus=[{"index": 1, "pcie.link.width.current": 8, "pcie.link.gen.max": 4}]) == ["pcie-link"]
    assert top(gate=bench_measurement([52.0], [2.1])) == ["low-acceptance"]


def test_report_with_roofline_and_no_suspect(tmp_path):
    write_qwen_like(tmp_path)
    collected = doctor_collection(server_info={**PROVEN_INFO, "simulated": True}, gate=GATE,
                                  checkpoint=summarize(tmp_path))
    result = diagnose(collected, [{"name": "NVIDIA RTX A6000", "index": 0}], PCIE)
    assert result["suspects"] == [] and result["roofline"]["bandwidth_source"].startswith("datasheet")
    text = format_report(result)
    assert "suspects: none found" in text and "measured: 52.0 tok/s" in text and "SIMULATED" in text


def test_probe_recorded_on_two_h200s_feeds_the_roofline(tmp_path):
    """The GPU probe's output as recorded on the lent 2x H200 machine (see docs/measurements.md)."""
    from sglang_deploy.hostside.contract.probes import GpuProbe

    probe = GpuProbe.loads((__import__("pathlib").Path(__file__).parent / "fixtures" / "h200x2-gpu-probe.json")
                           .read_text())  # as the doctor's collector reads it
    assert all(b.read_gbs >= 0.85 * 4800 for b in probe.bandwidth)
    assert probe.p2p.can_access_0_1 and max(probe.allreduce_default.latency_us.values()) < 20
    write_qwen_like(tmp_path)
    collected = doctor_collection(server_info=PROVEN_INFO, gate=GATE, probe=probe, checkpoint=summarize(tmp_path))
    result = diagnose(collected, [{"name": "NVIDIA H200", "index": 0}], {"interconnect": "nvlink"})
    assert result["roofline"]["bandwidth_source"].startswith("measured")
    assert result["roofline"]["bandwidth_gbs"] == min(b.read_gbs for b in probe.bandwidth)


def test_the_memory_budget_is_the_servers_own_accounting_with_the_vision_tower():
    """startup_available is what is still free after start (a few GB), not the card: the card comes from nvidia-smi."""
    from sglang_deploy.doctor.diagnosis import format_report, memory_budget

    server_info = {"mem_fraction_static": 0.88, "tp_size": 2, "internal_states": [{"memory_usage": {
        "weight": 13.75, "kvcache": 25.8, "startup_available": 4.62,
        "graph": {"prefill": 0.31, "decode": 0.0, "target_verify": 0.41, "draft_decode": 0.14, "draft_extend": 0.07}}}]}
    checkpoint = {"bytes": {"layers": 2.2e10, "vision": 0.86e9}}
    cards = [47104, 47104]  # nvidia-smi memory.total, MiB: 46 GiB (ECC on)
    budget = memory_budget(server_info, checkpoint, cards)
    assert round(budget["pool_gb"], 2) == 40.48 and round(budget["outside_pool_gb"], 2) == 5.52
    assert round(budget["vision_gb"], 2) == 0.43 and round(budget["graph_gb"], 2) == 0.93
    assert budget["free_after_start_gb"] == 4.62  # not taken for the card: the pool would be 0.88 x 4.62
    text = format_report({"roofline": None, "suspects": [], "memory": budget})
    assert ("memory per GPU at --mem-fraction-static 0.88 of 46.0 GB: static pool 40.5 GB = weights 13.75 "
            "(vision tower 0.43 of it) + KV and state 25.8; graphs 0.93 and activations in the 5.5 GB outside it; "
            "4.62 GB still free after start (SGLang's startup_available)") in text
    assert memory_budget({"internal_states": [{}]}, None, cards) is None  # nothing to say without the server's accounting
    assert memory_budget(server_info, checkpoint, []) is None  # nor without the card's size


def test_mtp_heads_with_a_drafter_worth_it_are_an_opportunity_not_a_defect(tmp_path):
    write_qwen_like(tmp_path)
    collected = doctor_collection(server_info=PROVEN_INFO, gate=GATE, checkpoint=summarize(tmp_path))
    a6000 = [{"name": "NVIDIA RTX A6000", "index": 0}]
    result = diagnose(collected, a6000, PCIE)
    assert result["suspects"] == []
    [opportunity, token_map] = result["opportunities"]  # the drafter first, then a token map (test_doctor_levers)
    assert token_map["id"] == "token-map"
    assert opportunity["id"] == "drafter" and "(estimated)" in opportunity["evidence"]
    assert 20 < opportunity["gain_pct"] < 60 and "tune.drafters" in opportunity["fix"]
    offered = diagnose(collected.but(offered_drafts=[{"source": "file:///srv/drafters/d", "bytes": 3.46e9}]), a6000,
                       PCIE)
    assert "file:///srv/drafters/d" in offered["opportunities"][0]["fix"] and "tune_space=drafter" in offered[
        "opportunities"][0]["fix"]
    text = format_report(offered)
    assert "suspects: none found" in text and "opportunity: [drafter]" in text


def test_a_release_running_a_drafter_counts_its_bytes_and_gets_no_drafter_opportunity(tmp_path):
    import json as json_module

    from conftest import DFLASH_CONFIG
    from sglang_deploy.sim.synthetic_checkpoint import write_draft

    write_qwen_like(str(tmp_path / "target"))
    write_draft(str(tmp_path / "draft"), json_module.loads(DFLASH_CONFIG.read_text()), header_only=True)
    info = {**PROVEN_INFO, "speculative_algorithm": "DFLASH", "speculative_num_steps": 1,
            "speculative_num_draft_tokens": 16, "speculative_draft_model_path": "/srv/models/local--d/x"}
    base = doctor_collection(server_info=info, gate=bench_measurement([52.0], [4.2]),
                             checkpoint=summarize(str(tmp_path / "target")))
    a6000 = [{"name": "NVIDIA RTX A6000", "index": 0}]
    result = diagnose(base.but(draft_checkpoint=summarize(str(tmp_path / "draft"))), a6000, PCIE)
    assert result["opportunities"] == [] and result["suspects"] == []  # steps 1 is DFLASH's, not weak speculation
    without = diagnose(base, a6000, PCIE)["roofline"]
    assert result["roofline"]["draft_model"] and result["roofline"]["cycle_gb_per_gpu"] > without["cycle_gb_per_gpu"]
