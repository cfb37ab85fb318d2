"""Start feasibility per SGLang release (sglang_deploy/validate/start_feasibility.py): the committed data is what SGLang 0.5.23's
code and its kernel wheels say (re-derived and compared where the validator env is here), the judgement of a
resolved configuration on a card, and `check` refusing what cannot start on the host's card."""

import json
import os

import pytest

from conftest import PROVEN, proven_with
from sglang_deploy import releases
from sglang_deploy.validate import gpu_facts
from sglang_deploy.validate import start_feasibility as sf
from sglang_deploy.validate import scan as release_scan
from sglang_deploy.profile import load_profile
from sglang_deploy.validate.check import check_profile
from sglang_deploy.validate.validator_env import ensure_full_layer, env_built

DATA = sf.load("0.5.23")
CONFIG = json.loads((PROVEN.parent.parent / "manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json").read_text())
A6000, L40S, H100 = (8, 6), (8, 9), (9, 0)


def judge(capability, target, kv="auto", draft=None, algorithm="EAGLE", steps=3):
    return sf.judge(DATA, capability, CONFIG, {"attention_backend": target, "kv_cache_dtype": kv,
                                              "speculative_draft_attention_backend": draft,
                                              "speculative_algorithm": algorithm, "speculative_num_steps": steps})


def test_the_committed_data_is_what_the_release_says():
    """Re-derived from the validator env's sglang, sglang-kernel and triton: equal to the committed files."""
    if not env_built("0.5.23"):
        # CI (the whole test bed required) on empty caches: scripts/test's testbed/prepare.py is building it; wait
        if os.environ.get("SGLANG_DEPLOY_REQUIRE_SIMHOST") != "1":
            pytest.skip("the validator env of SGLang 0.5.23 is not built here")
        ensure_full_layer("0.5.23", quiet=True)
    assert sf.derive("0.5.23") == DATA, "run: python -m sglang_deploy.validate.start_feasibility derive-start 0.5.23"
    sources = {path.relative_to(sf.site_packages("0.5.23") / "sglang").as_posix(): path.read_text(errors="replace")
               .splitlines() for path in (sf.site_packages("0.5.23") / "sglang").rglob("*.py")}
    registry = release_scan.env_registry_of(sources)
    assert sorted(registry) == sorted(releases.env_registry("0.5.23"))
    assert release_scan.env_mentioned_of(sources, registry) == sorted(releases.env_mentioned("0.5.23"))


def test_the_data_cites_sglangs_lines():
    assert DATA["derived_from"] == {"sglang": "0.5.23", "sglang-kernel": "0.4.10", "triton": "3.8.0",
                                    "flashinfer-python": "0.7.2"}
    assert DATA["fa3"]["source"] == "sglang/srt/layers/attention/attention_registry.py:243"
    assert DATA["swaps"] == [{**DATA["swaps"][0], "backend": "fa3", "kv": "fp8_e5m2", "to": "triton"}]
    kernels = DATA["fa3_kernels"]  # read from the wheel's fatbin and symbols, not typed in
    assert kernels["elf_arches"] == ["80", "86", "90a"]
    assert set(kernels["instantiations"]["86"]) == {"bf16", "fp16"}
    assert "fp8_e4m3" in kernels["instantiations"]["90"]
    assert DATA["triton_fp8"]["min_capability"] == 89


@pytest.mark.parametrize("capability, target, kv, draft, starts, words", [
    (A6000, "flashinfer", "auto", None, True, ""),
    (A6000, "fa3", "auto", None, True, ""),  # FA3's sm_86 kernels take bf16, the checkpoint's auto KV
    (A6000, "fa3", "fp8_e4m3", None, False, "run_mha_fwd<86> for bf16, fp16 only"),
    (H100, "fa3", "fp8_e4m3", None, True, ""),  # the sm_90 kernels take fp8
    (A6000, "triton", "fp8_e4m3", None, False, "only from capability 89"),
    (L40S, "triton", "fp8_e4m3", None, True, ""),
    (A6000, "triton", "fp8_e5m2", None, True, ""),
    (A6000, "fa4", "auto", None, False, "paged KV"),
    (A6000, "flashinfer", "auto", "torch_native", False, "EAGLE is not supported in decode attention backend"),
    (A6000, "flashinfer", "auto", "fa3", True, ""),
    (A6000, "hpc_ops", "auto", None, False, "does not support speculative decoding"),
    (A6000, "flashmla", "auto", None, False, "kernels for"),
    (A6000, "trtllm_mla", "auto", None, False, "needs an MLA model"),
    (A6000, "aiter", "auto", None, None, "not shown to start"),
])
def test_the_judgement_on_a_card(capability, target, kv, draft, starts, words):
    verdict = judge(capability, target, kv, draft)
    assert verdict.starts is starts, verdict.summary()
    assert words in verdict.summary()
    assert all(":" in source for _, source in verdict.fails if source.endswith(".py") or ".py:" in source)


def test_the_auto_kv_dtype_is_the_checkpoints():
    """Qwen3.6-27B-FP8 declares no kv_cache_quant_algo: auto KV is its bf16 (kv_cache_dtype.py)."""
    assert sf.effective_kv(DATA, "auto", sf.model_facts(CONFIG)) == "bf16"
    fp8 = {**CONFIG, "quantization_config": {**CONFIG["quantization_config"], "kv_cache_quant_algo": "FP8"}}
    assert sf.effective_kv(DATA, "auto", sf.model_facts(fp8)) == "fp8_e4m3"
    assert judge(A6000, "fa3", "auto").starts and not sf.judge(DATA, A6000, fp8, {"attention_backend": "fa3",
                                                                                 "kv_cache_dtype": "auto"}).starts


def test_draft_decode_map_applies_only_with_more_than_one_step():
    assert judge(A6000, "flashinfer", draft="torch_native", steps=1).summary().count("EAGLE is not supported") == 1
    assert "extend" in judge(A6000, "flashinfer", draft="torch_native", steps=1).summary()


def check(path, gpu="a6000"):
    return check_profile(load_profile(path), gpus=2, topology="pcie", gpu=gpu_facts.model(gpu))


def test_check_refuses_what_cannot_start_on_the_hosts_card(tmp_path):
    path = proven_with(tmp_path, "    --enable-metrics: true ",
                       "    --attention-backend: triton\n    --kv-cache-dtype: fp8_e4m3\n    --enable-metrics: true ")
    report = check(path)
    assert [p.rule for p in report.problems] == ["sglang-start"], report.lines()
    assert "triton/backends/nvidia/compiler.py:204" in report.lines()[0] and "sm_86" in report.lines()[0]
    waived = proven_with(tmp_path, "service:", "waivers:\n  tp-matches-gpus: one GPU is enough here\nservice:", "w.yaml")
    assert check(waived).ok
    assert check(path, gpu="l40s").ok  # sm_89 has fp8e4nv: the same profile starts there


def test_check_reports_a_silent_swap_as_what_will_run(tmp_path):
    path = proven_with(tmp_path, "    --enable-metrics: true ",
                       "    --attention-backend: fa3\n    --kv-cache-dtype: fp8_e5m2\n    --enable-metrics: true ")
    report = check(path)
    assert report.ok, report.lines()
    [swap] = report.warnings
    assert swap.rule == "sglang-swap" and "runs triton" in swap.message
    assert "sglang/srt/arg_groups/overrides.py:1264" in swap.message and "target triton" in swap.message
