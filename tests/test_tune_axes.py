"""The tune's nospec, kv and attention axes (sglang_deploy/tune/axes.py) without a host: candidates from what SGLang's
own resolution accepts on the A6000, the no-speculation control in the search and the table, the profile edits, and
the simulator's model of the levers (sim/hardware.py: the cited +32 %, start failures, the planted trap)."""

import random
from pathlib import Path

import pytest

from sglang_deploy.tune import axes as tune_axes, edit as tune_edit, report as tune_report, search as tune
from sglang_deploy.profile import load_profile
from sglang_deploy.sim import hardware
from test_tune_logic import MACHINE, MODEL, PROVEN, flags_of, runner  # noqa: F401 - runner: the fixture

DFLASH = PROVEN.with_name("qwen3.6-27b-dflash-2xa6000.yaml")


def resolved_of(flags: dict) -> dict:
    """The fields hardware.resolve reads, for a profile's flags (as SGLang resolves the proven profile)."""
    out = {"tp_size": 2, "max_running_requests": 16, "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 16}},
           "attention_backend": flags.get("--attention-backend") or "flashinfer",
           "kv_cache_dtype": flags.get("--kv-cache-dtype") or "auto"}
    if flags.get("--speculative-algorithm"):
        out.update(speculative_algorithm=flags["--speculative-algorithm"],
                   speculative_num_steps=flags.get("--speculative-num-steps"),
                   speculative_eagle_topk=flags.get("--speculative-eagle-topk"),
                   speculative_num_draft_tokens=flags.get("--speculative-num-draft-tokens"),
                   speculative_draft_attention_backend=flags.get("--speculative-draft-attention-backend"))
    return out


def sim_tok_s(flags: dict, env: dict | None = None):
    eff = hardware.resolve(resolved_of(flags), env or {}, MACHINE, MODEL)
    return hardware.expected_tok_s(eff, MACHINE, MODEL), hardware.start_problem(eff, MACHINE)


# --- which values: SGLang's resolution decides ---------------------------------------------------------------

def test_accepted_values_keep_what_the_resolution_accepts_once_per_resolved_value():
    answers = {(): (None, {"kv_cache_dtype": "auto"}), ("--kv-cache-dtype", "auto"): (None, {"kv_cache_dtype": "auto"}),
               ("--kv-cache-dtype", "fp8_e4m3"): (None, {"kv_cache_dtype": "fp8_e4m3"}),
               ("--kv-cache-dtype", "mxfp8"): ("ValueError: requires an SM100+ (Blackwell) GPU", {}),
               ("--kv-cache-dtype", "bf16"): (None, {"kv_cache_dtype": "bf16"}),
               ("--kv-cache-dtype", "bfloat16"): (None, {"kv_cache_dtype": "bf16"})}
    asked = []

    def ask(extra):
        asked.append(tuple(extra))
        return answers[tuple(extra)]

    accepted = tune_axes.accepted_values("--kv-cache-dtype", ["auto", "fp8_e4m3", "mxfp8", "bf16", "bfloat16"], ask)
    assert accepted.values == ["fp8_e4m3", "bf16"]  # auto is the profile's own; bfloat16 resolves to bf16
    assert accepted.same_as == {"bfloat16": "bf16"} and list(accepted.refused) == ["mxfp8"]
    assert "SM100" in accepted.refused["mxfp8"] and "refused by SGLang's resolution: mxfp8" in accepted.summary()
    assert len(asked) == 6  # every choice asked, none assumed


def test_a_wanted_value_the_parser_does_not_offer_is_refused_without_asking():
    accepted = tune_axes.accepted_values("--attention-backend", ["flashinfer", "fa3"],
                                         lambda extra: (None, {"attention_backend": extra[1] if extra else "flashinfer"}),
                                         wanted=["fa3", "flash_attn"])
    assert accepted.values == ["fa3"] and "not a choice of --attention-backend" in accepted.refused["flash_attn"]


@pytest.mark.usefixtures("probe_sockets")
def test_sglangs_resolution_on_the_a6000_refuses_blackwell_only_values():
    """The real question, asked of SGLang 0.5.23's own resolution under the A6000's facts (validator env)."""
    from sglang_deploy.plan import plan_for_host
    from sglang_deploy.tune.levers import asker

    data = {"profile": str(PROVEN), "gpus": 2, "gpu_topology": "pcie", "simulated": True}
    plan = plan_for_host(data, need_key=False)
    ask, choices = asker(plan, data)
    kv = tune_axes.accepted_values("--kv-cache-dtype", choices("--kv-cache-dtype"), ask)
    assert "fp8_e4m3" in kv.values and "mxfp8" in kv.refused and "Blackwell" in kv.refused["mxfp8"], kv.summary()
    attention = tune_axes.accepted_values("--attention-backend", choices("--attention-backend"), ask,
                                          wanted=["fa3", "triton", "trtllm_mha", "flex_attention"])
    assert attention.values == ["fa3", "triton"], attention.summary()
    assert "Hopper" in attention.refused["trtllm_mha"]  # refused on sm_86 by SGLang itself
    assert "Speculative decoding is currently not supported" in attention.refused["flex_attention"]
    graphs = tune_axes.accepted_values("--cuda-graph-backend-decode", choices("--cuda-graph-backend-decode"), ask)
    assert graphs.current == "full" and graphs.values == ["breakable", "disabled"], graphs.summary()


# --- candidates and the profile edit ---------------------------------------------------------------------------

def accepted(flag, *values):
    return tune_axes.Accepted(flag, None, list(values))


CHOICES = {"--kv-cache-dtype": accepted("--kv-cache-dtype", "fp8_e4m3"),
           "--attention-backend": accepted("--attention-backend", "fa3", "triton", "wave"),
           "--speculative-draft-attention-backend": accepted("--speculative-draft-attention-backend", "fa3")}


def test_nospec_removes_every_speculative_flag_and_the_draft_model(tmp_path):
    flags = flags_of(DFLASH)
    candidate = tune_axes.nospec_candidate(flags)
    assert candidate.axis == "nospec" and all(v is None for v in candidate.flag_changes.values())
    assert "--speculative-algorithm" in candidate.flag_changes
    path = tmp_path / "nospec.yaml"
    path.write_text(tune_edit.apply_changes(DFLASH.read_text(), candidate))
    profile = load_profile(path)
    assert not any(name.startswith("--speculative") for name in profile.sglang.flags)
    assert profile.speculative.draft is None  # a draft without an algorithm is refused by the check
    assert tune_axes.nospec_candidate({"--tp-size": 2}) is None  # nothing to compare against


def test_lever_candidates_are_named_by_axis_and_value():
    flags = flags_of(PROVEN)
    draft = "--speculative-draft-attention-backend"
    assert [c.id for c in tune_axes.lever_candidates("--kv-cache-dtype", flags, CHOICES)] == ["kv-fp8_e4m3"]
    assert [(c.id, c.axis) for c in tune_axes.lever_candidates("--attention-backend", flags, CHOICES)] == \
        [("attention-fa3", "attention"), ("attention-triton", "attention"), ("attention-wave", "attention")]
    assert [(c.id, c.axis) for c in tune_axes.lever_candidates(draft, flags, CHOICES)] == \
        [("draft-attention-fa3", "attention")]
    assert tune_axes.lever_candidates(draft, {}, CHOICES) == []  # no speculation, no draft backend


# --- the search against the simulator's model ----------------------------------------------------------------

def sim_measure(original, garbage=(), failing=True, seed=3):
    """The simulator's noiseless model with 1 % noise; a candidate whose backend the machine lacks fails to start;
    `garbage`: attention backends that answer garbage (the output check's error, as tune_runner reports it)."""
    rng = random.Random(seed)

    def measure(candidate):
        flags = {k: v for k, v in {**original, **candidate.flag_changes}.items() if v is not None}
        decode, problem = sim_tok_s(flags)
        if problem and failing:
            return tune.Measured(candidate, error=f"did not start: {problem}")
        if flags.get("--attention-backend") in garbage:
            return tune.Measured(candidate, error="output check failed: 8/8 answers wrong")
        repeats = [{"decode_tok_s": decode * rng.gauss(1, 0.01), "aggregate_tok_s": 3 * decode * rng.gauss(1, 0.01)}
                   for _ in range(3)]
        return tune.Measured(candidate, repeats=repeats, duration_s=10)
    return measure


def search(flags, axes, **kwargs):
    measured = sim_measure(flags, **kwargs)
    found = tune.Search(flags, {}, axes, 4, "pcie", measured, choices=CHOICES)
    return found, found.run()


def test_the_search_runs_every_lever_axis_in_order_and_adopts_the_modelled_gain():
    flags = flags_of(PROVEN)
    found, winner = search(flags, ("nospec", "kv", "attention"))
    ids = list(found.results)
    assert ids == ["original", "nospec", "kv-fp8_e4m3", "attention-fa3", "attention-triton", "attention-wave",
                   "attention-fa3+draft-attention-fa3"]
    assert found.planned() == len(ids)
    assert "did not start" in found.results["attention-wave"].error  # resolution-accepted, but not on this GPU
    assert found.results["kv-fp8_e4m3"].decode < found.results["original"].decode  # fp8 KV costs on Ampere
    assert winner.candidate.flag_changes.get("--attention-backend") == "fa3"
    assert winner.decode > 1.08 * found.baseline.decode


def test_the_garbage_but_fast_attention_candidate_is_never_adopted():
    flags = flags_of(PROVEN)
    found, winner = search(flags, ("attention",), garbage=("fa3",))
    assert "output check failed" in found.results["attention-fa3"].error
    assert winner.candidate.flag_changes.get("--attention-backend") != "fa3"
    table = tune_report.table(list(found.results.values()), found.baseline, winner, tune.Objective(), flags)
    assert "output check failed" in table


def test_speculation_slower_than_none_is_named_in_the_table():
    flags = flags_of(PROVEN)
    results = [tune.Measured(tune.BASELINE, repeats=[{"decode_tok_s": v, "aggregate_tok_s": 90} for v in (30, 31, 30)]),
               tune.Measured(tune_axes.nospec_candidate(flags),
                             repeats=[{"decode_tok_s": v, "aggregate_tok_s": 95} for v in (40, 41, 40)])]
    table = tune_report.table(results, results[0], results[0], tune.Objective(), flags)
    original, control = table.splitlines()[2:4]
    assert "SLOWER THAN NO SPECULATION (40.0)" in original and "original" in original
    assert "control: no speculation" in control and "SLOWER" not in control
    assert tune.choose(results, results[0], tune.Objective(), flags).candidate.id == "nospec"


# --- the simulator's model of the levers ------------------------------------------------------------------------

def test_the_simulator_reproduces_the_cited_kv_and_attention_gap():
    """bf16 KV + FlashAttention against fp8 KV + FlashInfer: +32 % decode (club-3090, 2x3090), as modelled."""
    flags = flags_of(PROVEN)
    fp8_flashinfer, _ = sim_tok_s({**flags, "--kv-cache-dtype": "fp8_e4m3"})
    bf16_fa, _ = sim_tok_s({**flags, "--kv-cache-dtype": "bf16", "--attention-backend": "fa3"})
    assert bf16_fa / fp8_flashinfer == pytest.approx(1.32, abs=0.01)
    nospec, _ = sim_tok_s({k: v for k, v in flags.items() if not k.startswith("--speculative")})
    assert nospec < 0.7 * sim_tok_s(flags)[0]  # with working graphs, MTP 3 is well ahead of no speculation
    assert "cannot run on NVIDIA RTX A6000" in sim_tok_s({**flags, "--attention-backend": "ascend"})[1]
    assert "--kv-cache-dtype nvfp4" in sim_tok_s({**flags, "--kv-cache-dtype": "nvfp4"})[1]


def test_the_planted_attention_trap_is_faster_and_garbage_only_for_its_backend():
    import argparse

    from sglang_deploy.sim.engine import Engine

    env = {"SGLANG_SIM_FAULT_OUTPUT": "garbage", "SGLANG_SIM_FAULT_OUTPUT_AT_ATTENTION": "triton"}
    flags = flags_of(PROVEN)
    trapped = Engine(argparse.Namespace(), env, resolved_of({**flags, "--attention-backend": "triton"}))
    honest = Engine(argparse.Namespace(), env, resolved_of(flags))
    assert trapped.output_fault == "garbage" and honest.output_fault is None
    triton, _ = sim_tok_s({**flags, "--attention-backend": "triton"})
    assert triton / trapped.slowdown > sim_tok_s(flags)[0]  # faster than the original: the trap's bait


@pytest.mark.parametrize("flags, env, offered", [
    ({"--tp-size": 2}, {}, True),
    ({"--tp-size": 2, "--disable-custom-all-reduce": True}, {}, True),
    ({"--tp-size": 3}, {}, False),  # pcie_ipc_ar.eligible_group: world size 2, 4 or 8
    ({"--tp-size": 2}, {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "0"}, False),  # the profile decides it already
], ids=["tp2", "custom-off", "tp3", "declared"])
def test_the_nccl_axis_offers_the_pcie_ipc_arm_with_custom_all_reduce_off(flags, env, offered):
    from sglang_deploy.tune import search as tune

    found = [c for c in tune.nccl_candidates(flags, env, "pcie") if c.id == "custom-allreduce-off+pcie-ipc"]
    assert bool(found) is offered
    if found:
        assert found[0].flag_changes == {"--disable-custom-all-reduce": True}
        assert found[0].env_changes["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"]["value"] == "1"


def test_each_candidates_all_reduce_path_is_what_its_server_reported():
    """The host session records the path (hostside/evidence.allreduce_path); the table names it on the nccl axis
    and wherever it differs from the original's, a custom all-reduce that fell back as such."""
    from sglang_deploy.tune import report as tune_report, search as tune

    def measured(id_, axis, path, why="x"):
        return tune.Measured(tune.Candidate(id_, axis), repeats=[{"decode_tok_s": 50.0, "aggregate_tok_s": 150.0}] * 3,
                             allreduce={"path": path, "why": why})
    original = measured("original", "baseline", "custom")
    results = [original, measured("custom-allreduce-off+pcie-ipc", "nccl", "pcie_ipc"),
               measured("attention-triton", "attention", "nccl", "SGLang's log: 'CustomAllreduce is disabled because'"),
               measured("kv-fp8_e4m3", "kv", "custom")]
    table = tune_report.table(results, original, None, tune.Objective(), {})
    lines = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert "all-reduce: pcie_ipc" in lines["custom-allreduce-off+pcie-ipc"]
    assert "all-reduce: nccl (custom FELL BACK)" in lines["attention-triton"]
    assert "all-reduce" not in lines["kv-fp8_e4m3"] and "all-reduce" not in lines["original"]
    again = tune.Measured.from_json(results[1].to_json())
    assert again.allreduce == {"path": "pcie_ipc", "why": "x"}


def test_the_graphs_axis_offers_the_decode_graph_backends_and_the_rules_refuse_disabled(runner):  # noqa: F811
    """breakable is a candidate; disabled, which SGLang accepts, is refused by the tool's rule before any start."""
    from sglang_deploy.tune import search as tune

    choices = {"--cuda-graph-backend-decode": accepted("--cuda-graph-backend-decode", "breakable", "disabled")}
    found = tune_axes.lever_candidates("--cuda-graph-backend-decode", {"--tp-size": 2}, choices)
    assert [c.id for c in found] == ["decode-graphs-breakable", "decode-graphs-disabled"]
    assert all(c.axis == "graphs" for c in found)
    search = tune.Search({"--tp-size": 2}, {}, ("graphs",), 4, "pcie", None, choices=choices)
    assert search.planned() == 1 + len(tune.graph_candidates({"--tp-size": 2}, 4)) + 2
    item, problem = runner.stage_files(found[1])
    assert item is None and "cuda-graphs-on" in problem, problem
    item, problem = runner.stage_files(found[0])
    assert problem is None and '"backend": "breakable"' in item["files"]["resolved.json"]
