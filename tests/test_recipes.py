"""Real launch recipes written by others (SGLang's docs and CI, its cookbook, users' issues, community composes), as
translated in ../shared/notes/sglang-0.5.23-conformance-audit-4.md (Part 1, "The 16 recipes"), through `check --full`
on the A6000 stand-in with each recipe's GPU count.

The rule: a recipe SGLang 0.5.23 accepts and the A6000 can start passes check, or each refusal is a waivable rule of
the tool whose message says how to waive it, and with those waivers written it passes; a recipe SGLang refuses (its
parser, its resolution, its start on sm_86) is refused with SGLang's reason. Each case names its source."""

import copy

import pytest
import yaml

from conftest import DFLASH, PROVEN, dflash_profile, synthetic_draft, write_profile
from sglang_deploy.profile import load_profile
from sglang_deploy.rules import WAIVABLE
from sglang_deploy.validate.check import check_profile

SGLANG_REFUSES = {"sglang-parser", "sglang-resolution", "sglang-start"}

# id: (source, GPUs, flags, environment, service, served name, drafter, the rules check reports)
RECIPES = {
    "R01": ("sgl-project/sglang:docs/basic_usage/qwen3.md@104ef15a (Qwen3-Next TP4)", 4,
            {"--tp-size": 4}, {}, {}, None, None, []),
    "R03": ("sgl-project/sglang:test/manual/4-gpu-models/test_qwen3_next_models.py@330491bf (TestQwen3Next)", 4,
            {"--tp-size": 4, "--chunked-prefill-size": 2048, "--mamba-scheduler-strategy": "extra_buffer",
             "--mamba-track-interval": 128}, {}, {}, None, None, ["sglang-parser"]),
    "R05": ("sgl-project/sglang:test/registered/4-gpu-models/test_qwen3_next_models_mtp.py@228d4c85 "
            "(TestQwen3NextMTPTopk)", 4,
            {"--trust-remote-code": True, "--speculative-algorithm": "NEXTN", "--speculative-num-steps": 5,
             "--speculative-eagle-topk": 4, "--speculative-num-draft-tokens": 8, "--mem-fraction-static": 0.8,
             "--tp-size": 4, "--chunked-prefill-size": 2048, "--mamba-scheduler-strategy": "extra_buffer",
             "--mamba-track-interval": 128}, {}, {}, None, None, ["sglang-parser", "flag-runs-code"]),
    "R07": ("sgl-project/sglang:test/manual/4-gpu-models/test_qwen35_models_archived.py@008b79d2 (TestQwen35FP4MTP)",
            4, {"--tp-size": 4, "--chunked-prefill-size": 2048, "--mamba-radix-cache-strategy": "extra_buffer",
                "--mamba-track-interval": 128, "--mamba-ssm-dtype": "bfloat16", "--max-running-requests": 128,
                "--reasoning-parser": "qwen3", "--attention-backend": "trtllm_mha", "--speculative-algorithm": "NEXTN",
                "--speculative-num-steps": 3, "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 4,
                "--mem-fraction-static": 0.8,
                "--model-loader-extra-config": '{"enable_multithread_load": true,"num_threads": 64}'},
            {}, {}, None, None, ["sglang-resolution", "flag-runs-code"]),
    "R09": ("sgl-project/sglang:docs/src/snippets/configs/Qwen/qwen3.6.jsx@ec170fd9 {h100, 27b, fp8, low-latency}", 1,
            {"--speculative-algorithm": "EAGLE", "--speculative-num-steps": 3, "--speculative-eagle-topk": 1,
             "--speculative-num-draft-tokens": 4, "--mamba-radix-cache-strategy": "extra_buffer",
             "--mem-fraction-static": 0.8}, {}, {"host": "0.0.0.0"}, None, None, []),
    "R11": ("sgl-project/sglang:docs/src/snippets/configs/Qwen/qwen3.6.jsx@ec170fd9 {b200, 27b, bf16, low-latency}", 1,
            {"--speculative-algorithm": "EAGLE", "--speculative-num-steps": 3, "--speculative-eagle-topk": 1,
             "--speculative-num-draft-tokens": 4, "--mamba-radix-cache-strategy": "extra_buffer",
             "--attention-backend": "trtllm_mha", "--mem-fraction-static": 0.8}, {}, {"host": "0.0.0.0"}, None, None,
            ["sglang-resolution"]),
    "R13": ("sgl-project/sglang:docs/src/snippets/configs/Qwen/qwen3.8-27b.jsx@00ac7105 {rtx6000, fp8} + EAGLE", 1,
            {"--trust-remote-code": True, "--kv-cache-dtype": "fp8_e4m3", "--mem-fraction-static": 0.85,
             "--attention-backend": "flashinfer", "--chunked-prefill-size": 2048, "--reasoning-parser": "qwen3",
             "--tool-call-parser": "qwen3_coder", "--speculative-algorithm": "EAGLE", "--speculative-num-steps": 3,
             "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 4,
             "--enable-linear-replayssm-spec": True, "--mamba-radix-cache-strategy": "extra_buffer",
             "--mamba-ssm-dtype": "float32"}, {}, {"host": "0.0.0.0"}, None, None, ["flag-runs-code"]),
    "R15": ("sgl-project/sglang:docs/src/snippets/configs/Qwen/qwen3.8-27b.jsx@00ac7105 {rtx6000, fp8} + DFLASH2", 1,
            {"--trust-remote-code": True, "--kv-cache-dtype": "fp8_e4m3", "--mem-fraction-static": 0.85,
             "--attention-backend": "flashinfer", "--chunked-prefill-size": 2048, "--reasoning-parser": "qwen3",
             "--tool-call-parser": "qwen3_coder", "--speculative-algorithm": "DFLASH",
             "--speculative-num-draft-tokens": 8, "--mamba-radix-cache-strategy": "extra_buffer",
             "--mamba-ssm-dtype": "float32"}, {}, {"host": "0.0.0.0"}, None, "dflash", ["flag-runs-code"]),
    "R19": ("https://github.com/sgl-project/sglang/pull/16708 (Qwen3-Next TP4 NEXTN, PD prefill)", 4,
            {"--trust-remote-code": True, "--enable-metrics": True, "--tp-size": 4, "--mem-fraction-static": 0.8,
             "--torch-compile-max-bs": 8, "--context-length": 32768, "--speculative-algorithm": "NEXTN",
             "--speculative-num-steps": 3, "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 4,
             "--tool-call-parser": "qwen25", "--mamba-scheduler-strategy": "extra_buffer",
             "--preferred-sampling-params": '{"temperature":0.7,"top_p":0.8,"top_k":20,"min_p":0}',
             "--chunked-prefill-size": 4096, "--enable-request-time-stats-logging": True,
             "--decode-log-interval": 10, "--disaggregation-ib-device": "mlx5_bond_0,mlx5_bond_1,mlx5_bond_2,mlx5_bond_3",
             "--disaggregation-mode": "prefill"}, {}, {"host": "0.0.0.0"}, "xop3qwen80bnexttest", None,
            ["sglang-parser", "flag-runs-code", "flag-serves-other-weights", "flag-exposes-service", "flag-exposes-service"]),
    "R21": ("noonghunna/club-3090:models/qwen3.6-27b/sglang/compose/single/eagle3-experimental.yml@06dbbaf2", 1,
            {"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-quantization": "unquant",
             "--speculative-num-steps": 3, "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 4,
             "--max-running-requests": 1, "--max-mamba-cache-size": 1, "--max-total-tokens": 8192,
             "--disable-radix-cache": True, "--mamba-scheduler-strategy": "no_buffer", "--mm-attention-backend": "sdpa",
             "--dtype": "bfloat16", "--kv-cache-dtype": "fp8_e5m2", "--context-length": 8192,
             "--mem-fraction-static": 0.92, "--disable-cuda-graph": True, "--cpu-offload-gb": 2,
             "--trust-remote-code": True},
            {"SGLANG_ENABLE_SPEC_V2": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
            {"host": "0.0.0.0"}, "qwen3.6-27b-eagle3", None,
            # the EAGLE3 drafter is not translated (no stand-in here): draft-model names the missing source
            ["sglang-parser", "flag-runs-code", "draft-model", "env-not-reviewed"]),
    "R23": ("https://huggingface.co/FasterDFlash/Hanrui/blob/main/test/start_server_dflash.sh (host 0.0.0.0: a LAN "
            "address is refused by the profile schema by design)", 2,
            {"--speculative-algorithm": "DFLASH", "--tp-size": 2, "--dtype": "bfloat16", "--attention-backend": "fa3",
             "--mem-fraction-static": 0.3, "--trust-remote-code": True},
            {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}, {"host": "0.0.0.0"}, None, "dflash",
            ["flag-runs-code", "mem-fraction-range", "env-not-reviewed"]),
    "R25": ("g0t4/examples:vllm/qwen3-next/notes.fish (the Qwen3-Next model card's SGLang MTP command)", 4,
            {"--tp-size": 4, "--context-length": 262144, "--mem-fraction-static": 0.8,
             "--speculative-algorithm": "NEXTN", "--speculative-num-steps": 3, "--speculative-eagle-topk": 1,
             "--speculative-num-draft-tokens": 4}, {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}, {}, None, None,
            ["env-not-reviewed"]),
    "R27": ("sgl-project/sglang:docs/src/snippets/configs/Qwen/qwen3.8-27b.jsx@00ac7105 {h200, fp8}", 1,
            {"--trust-remote-code": True, "--kv-cache-dtype": "fp8_e4m3", "--mem-fraction-static": 0.85,
             "--attention-backend": "flashinfer", "--chunked-prefill-size": 32768, "--max-prefill-tokens": 32768,
             "--reasoning-parser": "qwen3", "--tool-call-parser": "qwen3_coder",
             "--mamba-radix-cache-strategy": "extra_buffer", "--mamba-ssm-dtype": "float32"},
            {}, {"host": "0.0.0.0"}, None, None, ["flag-runs-code"]),
    "R29": ("sgl-project/sglang:docs/src/snippets/configs/Qwen/qwen3.8-27b.jsx@00ac7105 {h200, fp8} + MTP + fa3 "
            "('SM90 only')", 1,
            {"--trust-remote-code": True, "--kv-cache-dtype": "fp8_e4m3", "--mem-fraction-static": 0.85,
             "--chunked-prefill-size": 32768, "--max-prefill-tokens": 32768, "--reasoning-parser": "qwen3",
             "--tool-call-parser": "qwen3_coder", "--mamba-radix-cache-strategy": "extra_buffer",
             "--mamba-ssm-dtype": "float32", "--speculative-algorithm": "EAGLE", "--speculative-num-steps": 3,
             "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 4, "--attention-backend": "fa3"},
            {}, {"host": "0.0.0.0"}, None, None, ["sglang-start", "flag-runs-code"]),
    "R30": ("noonghunna/club-3090:models/qwen3.8-27b/sglang/compose/dual/fp8/mtp.yml@00d41a88 (2x3090, v0.5.19)", 2,
            {"--tp-size": 2, "--disable-custom-all-reduce": True, "--quantization": "fp8",
             "--kv-cache-dtype": "fp8_e4m3", "--mamba-ssm-dtype": "bfloat16", "--chunked-prefill-size": 2048,
             "--attention-backend": "flashinfer", "--context-length": 131072, "--mem-fraction-static": 0.92,
             "--max-running-requests": 1, "--trust-remote-code": True, "--reasoning-parser": "qwen3",
             "--tool-call-parser": "qwen3_coder", "--speculative-algorithm": "EAGLE", "--speculative-num-steps": 4,
             "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 5},
            {}, {"host": "0.0.0.0"}, "qwen3.8-27b", None, ["flag-runs-code"]),
}
# R17 (sglang#34918, DSPARK) needs a DSpark drafter stand-in this repository does not have: left out.


def recipe_profile(tmp_path, key, waivers=()):
    _, _, flags, env, service, served, drafter, _ = RECIPES[key]
    base = yaml.safe_load((DFLASH if drafter else PROVEN).read_text())
    document = copy.deepcopy(base)
    document["sglang"]["flags"] = dict(flags)
    document["environment"] = {**base.get("environment", {}), **env}
    document["service"].update(service)
    if served:
        document["model"]["served_name"] = served
    if waivers:
        document["waivers"] = {rule: f"recipe {key}: reviewed" for rule in waivers}
    if drafter:
        document["speculative"]["draft"].pop("config", None)  # frozen: the manifest's own copy
        draft = tmp_path / "dflash-standin"
        if not draft.exists():
            synthetic_draft(draft)
        return dflash_profile(tmp_path, draft, f"{key}.yaml", yaml.safe_dump(document, sort_keys=False))
    return write_profile(tmp_path, yaml.safe_dump(document, sort_keys=False), f"{key}.yaml")


def check(path, gpus):
    return check_profile(load_profile(path), gpus=gpus, topology="pcie", path="full")


@pytest.fixture
def drafts(tmp_path, monkeypatch):
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path))


@pytest.mark.parametrize("key", sorted(RECIPES), ids=lambda key: f"{key}")
def test_recipe(tmp_path, drafts, key):
    source, gpus, _, _, _, _, _, expected = RECIPES[key]
    report = check(recipe_profile(tmp_path, key), gpus)
    rules = [p.rule for p in report.problems]
    assert rules == expected, (source, report.lines())
    for problem in report.problems:
        untranslated = key == "R21" and problem.rule == "draft-model"
        assert problem.rule in SGLANG_REFUSES or problem.rule in WAIVABLE or untranslated, (source, problem)
        if problem.rule in WAIVABLE:
            assert f"`waivers: {{{problem.rule}: \"" in problem.message, (source, problem.message)
    if not SGLANG_REFUSES & set(rules):  # SGLang accepts: with the waivers its messages name, it passes
        waived = check(recipe_profile(tmp_path, key, waivers=set(rules)), gpus)
        assert waived.ok, (source, waived.lines())
    else:
        assert rules[0] in SGLANG_REFUSES  # SGLang's reason comes first
