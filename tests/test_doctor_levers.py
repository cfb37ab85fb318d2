"""The doctor's lever suspects on fixture evidence: speculation slower than none (the last tune's control), the
all-reduce path from SGLang's own log lines, the draft step's share and a token map's saving, the KV dtype and
attention backend on Ampere."""

import re
from pathlib import Path

import pytest

from conftest import doctor_collection
from sglang_deploy.doctor import levers as doctor_levers
from sglang_deploy.doctor.diagnosis import diagnose, format_report
from sglang_deploy.hostside import evidence
from sglang_deploy.hostside.contract.findings import TuneResults
from sglang_deploy.hostside.safetensors_headers import summarize
from sglang_deploy.sim.synthetic_checkpoint import write as write_qwen_like
from test_doctor_logic import GATE, PCIE, PROVEN_INFO

A6000 = [{"name": "NVIDIA RTX A6000", "index": 0}]


def repeats(decode, spread=0.01, tau=None):
    return [{"decode_tok_s": decode * (1 + d), "aggregate_tok_s": 3 * decode, **({"accept_length": tau} if tau else {})}
            for d in (-spread, 0.0, spread)]


def tune_results(entries, original_id="0003-aaaaaaaa", stamp="20261202T080000Z"):
    """A tune-results.json as doctor_collect.last_tune passes it on (TuneResults), with these entries."""
    return TuneResults.from_dict({"host": "ct129", "service": "sglang", "profile": "profiles/p.yaml",
                                  "original": original_id, "session": "s", "stamp": stamp, "signature": "{}",
                                  "settings": {}, "elapsed_s": 60.0, "results": entries})


def entry(id, axis, flags, repeats):
    return {"id": id, "axis": axis, "flags": flags, "env": {}, "valid": True, "error": None, "repeats": repeats,
            "duration_s": 10.0}


def tune_doc(nospec, original, spread=0.01, original_id="0003-aaaaaaaa"):
    """The last tune: the original and its nospec control."""
    return tune_results([
        entry("original", "baseline", {}, repeats(original, spread, 3.1)),
        entry("nospec", "nospec", {"--speculative-algorithm": None}, repeats(nospec, spread)),
        entry("steps2-topk1-draft3", "spec", {}, repeats(original * 0.95, spread))], original_id)


@pytest.mark.parametrize("document, active, found", [
    (tune_doc(nospec=57.0, original=32.7), "0003-aaaaaaaa", True),  # vllm#35387's figures: the graph downgrade
    (tune_doc(nospec=30.0, original=52.0), "0003-aaaaaaaa", False),  # speculation pays, as on CT129
    (tune_doc(nospec=52.5, original=52.0), "0003-aaaaaaaa", False),  # within the min gain
    (tune_doc(nospec=55.0, original=52.0, spread=0.08), "0003-aaaaaaaa", False),  # inside both spreads
    (tune_doc(nospec=57.0, original=32.7), "0004-bbbbbbbb", False),  # a tune of another release
    (tune_results([entry("original", "baseline", {}, repeats(50))], stamp="x"), None, False),
    (None, "0003-aaaaaaaa", False),
], ids=["graph-downgrade", "spec-pays", "min-gain", "noise", "other-release", "no-control", "no-tune"])
def test_speculation_slower_than_none_from_the_last_tune(document, active, found):
    suspect = doctor_levers.speculation_vs_none(document, active)
    assert (suspect is not None) is found
    if found:
        assert "57.0 tok/s" in suspect.evidence and "32.7" in suspect.evidence and suspect.gain_pct > 70
        assert "1 other speculative candidate(s) slower than none" in suspect.evidence
        assert "tune.py --data tune_space=nospec,spec" in suspect.fix


def test_speculation_slower_than_none_ranks_first_in_the_report(tmp_path):
    write_qwen_like(tmp_path)
    result = diagnose(doctor_collection(server_info=PROVEN_INFO, gate=GATE, checkpoint=summarize(tmp_path),
                                        last_tune=tune_doc(57.0, 32.7), active="0003-aaaaaaaa"), A6000, PCIE)
    assert result["suspects"][0]["id"] == "speculation-slower-than-none"
    assert "1. [speculation-slower-than-none]" in format_report(result)


SGLANG = Path.home() / ".cache" / "sglang-deploy" / "validators" / "sglang-0.5.23" / "lib" / "python3.11" / \
    "site-packages" / "sglang" / "srt" / "distributed"


@pytest.mark.parametrize("path, cls_name", [
    ("device_communicators/custom_all_reduce_utils.py", "CustomAllreduce"),
    ("device_communicators/custom_all_reduce_utils.py", "CustomAllReduceV2"),
])
def test_the_journal_patterns_match_sglangs_own_warnings(path, cls_name):
    """Every `{cls_name} is disabled ...` warning in SGLang 0.5.23's source, as it would log it, is read as a
    fallback; so are the PCIe-IPC all-reduce's own fallback lines."""
    source = SGLANG / path
    if not source.exists():
        pytest.skip("SGLang 0.5.23's validator env is not built here")
    text = source.read_text()
    warnings = re.findall(r'logger\.warning\(\s*((?:f?"[^"]*"\s*)+)', text)
    disabled = ["".join(re.findall(r'f?"([^"]*)"', w)).replace("{cls_name}", cls_name) for w in warnings
                if "is disabled" in w]
    assert len(disabled) == 4, disabled  # across nodes, world size, more than two PCIe-only GPUs, no P2P
    for line in disabled:
        assert evidence.log_findings(f"WARNING x.py:1: {line}\n")["custom_all_reduce_fallback"], line
    state = (SGLANG / "parallel_state.py").read_text()
    pcie = (SGLANG / "device_communicators" / "pcie_ipc_ar.py").read_text()
    assert 'f"Setup FlashInfer PCIe-IPC allreduce failed with {e}."' in state
    assert '"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is set but this FlashInfer build has "' in pcie
    for line in ("Setup FlashInfer PCIe-IPC allreduce failed with boom.",
                 "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is set but this FlashInfer build has no pcie_ipc_comm; falling "
                 "back to NCCL all-reduce."):
        assert evidence.log_findings(line)["pcie_ipc_fallback"] == line


NO_P2P = "CustomAllreduce is disabled because your platform lacks GPU P2P capability or P2P test failed."


@pytest.mark.parametrize("info, environ, findings, path", [
    (PROVEN_INFO, {}, {}, "custom"),
    ({**PROVEN_INFO, "tp_size": 1}, {}, {}, "none"),
    ({**PROVEN_INFO, "nnodes": 2}, {}, {}, "nccl"),
    (PROVEN_INFO, {}, {"custom_all_reduce_fallback": NO_P2P}, "nccl"),
    ({**PROVEN_INFO, "disable_custom_all_reduce": True}, {}, {}, "nccl"),
    ({**PROVEN_INFO, "disable_custom_all_reduce": True}, {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, {}, "pcie_ipc"),
    ({**PROVEN_INFO, "disable_custom_all_reduce": True}, {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"},
     {"pcie_ipc_fallback": "Setup FlashInfer PCIe-IPC allreduce failed with x."}, "nccl"),
    ({**PROVEN_INFO, "tp_size": 3, "disable_custom_all_reduce": True}, {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, {},
     "nccl"),
], ids=["custom", "one-gpu", "nodes", "fallback-in-the-log", "disabled", "pcie-ipc", "pcie-ipc-failed",
        "pcie-ipc-world-size"])
def test_the_all_reduce_path_is_what_the_server_reports(info, environ, findings, path):
    assert doctor_levers.allreduce_path(info, environ, findings)["path"] == path


def test_custom_all_reduce_off_offers_the_pcie_ipc_arm_with_the_output_check():
    result = diagnose(doctor_collection(server_info=PROVEN_INFO, gate=GATE,
                                        log_findings={"custom_all_reduce_fallback": NO_P2P}), A6000, PCIE)
    [suspect] = [s for s in result["suspects"] if s["id"] == "custom-all-reduce"]
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in suspect["fix"] and "output check" in suspect["fix"]
    assert f"all-reduce: nccl (SGLang's log: {NO_P2P!r})" in result["notes"]


def test_the_draft_steps_share_and_a_token_maps_saving_on_ct129(tmp_path):
    """CT129's roofline: 3 draft steps of 1.48 GB of a 17.9 GB cycle, the LM head most of each (its 248320 rows read
    from the header); a 32k map saves about 3 GB a cycle."""
    write_qwen_like(tmp_path, header_only=True)
    checkpoint = summarize(tmp_path)
    assert checkpoint["vocab_size"] == 248320
    result = diagnose(doctor_collection(server_info=PROVEN_INFO, gate=GATE, checkpoint=checkpoint), A6000, PCIE)
    [opportunity] = [o for o in result["opportunities"] if o["id"] == "token-map"]
    assert re.search(r"3 draft step\(s\) of 1\.4\d GB per GPU are 2\d % of the cycle's 1\d\.\d GB", opportunity["evidence"])
    assert re.search(r"the LM head is 8\d % of each step", opportunity["evidence"]), opportunity["evidence"]
    gain_32k = float(re.search(r"a map of 32768: -[0-9.]+ GB a cycle, roofline \+(\d+) %", opportunity["evidence"])[1])
    assert 18 <= gain_32k <= 26  # the anchors' estimate for 40k: +22 %
    assert result["suspects"] == []  # an opportunity, not a defect
    assert "opportunity: [token-map]" in format_report(result)
    with_map = diagnose(doctor_collection(server_info={**PROVEN_INFO, "speculative_token_map": "/srv/maps/hot-32k.pt"},
                                          gate=GATE, checkpoint=checkpoint), A6000, PCIE)
    assert not [o for o in with_map["opportunities"] if o["id"] == "token-map"]


@pytest.mark.parametrize("info, gpu, suspect, says", [
    ({"kv_cache_dtype": "fp8_e4m3", "attention_backend": "flashinfer"}, "NVIDIA RTX A6000", "fp8-kv-on-ampere",
     "KV cache fp8_e4m3, attention backend flashinfer on NVIDIA RTX A6000; on Ampere"),
    ({"kv_cache_dtype": "auto", "attention_backend": "flashinfer"}, "NVIDIA GeForce RTX 3090", None,
     "tune_space=kv,attention"),
    ({"kv_cache_dtype": "fp8_e4m3", "attention_backend": "fa3"}, "NVIDIA H200", None,
     "KV cache fp8_e4m3, attention backend fa3 on NVIDIA H200"),
    ({}, "NVIDIA RTX A6000", None, None),
], ids=["fp8-on-a6000", "bf16-on-3090", "fp8-on-hopper", "unknown"])
def test_kv_dtype_and_attention_backend_on_ampere(info, gpu, suspect, says):
    line, found = doctor_levers.kv_attention(info, gpu)
    assert (found.id if found else None) == suspect
    assert (says in line) if says else line is None
    if found:
        assert "tune.py --data tune_space=kv,attention" in found.fix and "--kv-cache-dtype auto" in found.fix


def test_under_the_planted_graph_fault_the_tunes_control_makes_the_doctor_name_it(tmp_path):
    """The simulator's graph fault (SGLANG_SIM_FAULT_SPEC_GRAPH_DOWNGRADE, from vllm#35387): the tune's nospec
    control, measured against the model, beats the proven MTP 3; the tune's document makes the doctor name
    "speculation slower than none" first. Without the fault, MTP 3 stays well ahead and nothing is named."""
    from sglang_deploy.tune import search as tune
    from test_tune_axes import CHOICES, flags_of, resolved_of, PROVEN as PROVEN_PROFILE
    from sglang_deploy.sim import hardware
    from test_tune_logic import MACHINE, MODEL

    def tune_document(env):
        def measure(candidate):
            flags = {k: v for k, v in {**flags_of(PROVEN_PROFILE), **candidate.flag_changes}.items() if v is not None}
            eff = hardware.resolve(resolved_of(flags), env, MACHINE, MODEL)
            decode = hardware.expected_tok_s(eff, MACHINE, MODEL)
            return tune.Measured(candidate, repeats=repeats(decode), release_id="0003-aaaaaaaa")
        search = tune.Search(flags_of(PROVEN_PROFILE), {}, ("nospec",), 4, "pcie", measure, choices=CHOICES)
        search.run()
        return tune_results([m.to_json() for m in search.results.values()], stamp="sim")

    faulted = tune_document({"SGLANG_SIM_FAULT_SPEC_GRAPH_DOWNGRADE": "1"})
    by_id = {entry.id: entry for entry in faulted.results}
    ratio = by_id["original"].decode_score / by_id["nospec"].decode_score
    assert ratio == pytest.approx(32.7 / 57.0, abs=0.03)  # the cited ratio
    write_qwen_like(tmp_path, header_only=True)
    result = diagnose(doctor_collection(server_info=PROVEN_INFO, gate=GATE, checkpoint=summarize(tmp_path),
                                        last_tune=faulted, active="0003-aaaaaaaa"), A6000, PCIE)
    assert result["suspects"][0]["id"] == "speculation-slower-than-none"
    healthy = tune_document({})
    assert doctor_levers.speculation_vs_none(healthy, "0003-aaaaaaaa") is None
