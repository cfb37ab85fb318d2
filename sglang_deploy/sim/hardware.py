"""The simulator's hardware model: decode speed follows from bandwidth, collectives and launch costs.

Inputs are data (``data/<machine>.json``, ``data/<model>.json``) plus what the simulated process was
started with: its flags and its own environment (NCCL_*). Nothing here is a per-scenario constant:
a speculative cycle costs one verify pass plus k draft steps, each pass costs weight bytes over
effective bandwidth plus its all-reduces plus, without CUDA graphs, its kernel launches.
Standard library only: this module runs on the simulated host with the system python3.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

# shipped beside the simulator (roles/simulator.py SIM_SHIPS)
from sglang_deploy import releases
from sglang_deploy.token_map.size import map_size
from sglang_deploy.validate import gpu_facts, start_feasibility

DATA_DIR = Path(__file__).resolve().parent / "data"


def load_data(name: str) -> dict:
    return json.loads((DATA_DIR / f"{name}.json").read_text())


@dataclass(frozen=True)
class Effective:
    """The configuration the simulated server actually runs with (after SGLang's own resolution)."""

    tp: int
    spec_algorithm: str | None
    spec_steps: int  # 0: no speculation
    spec_topk: int
    draft_tokens: int
    decode_graphs: bool
    graph_max_bs: int
    custom_allreduce: bool
    p2p: bool  # GPU peer-to-peer usable by NCCL
    nccl_proto: str | None
    max_running: int
    notes: tuple[str, ...] = field(default=())  # log lines explaining fallbacks
    launch_blocking: bool = False  # CUDA_LAUNCH_BLOCKING=1 in the process
    nccl_debug: bool = False  # NCCL_DEBUG=INFO or TRACE in the process
    drafter: str | None = None  # a separate draft model's algorithm (DFLASH): one block-parallel draft pass a cycle
    draft_bytes: float = 0.0  # its weights, from the draft checkpoint's safetensors headers (whole model)
    attention_backend: str = "flashinfer"  # SGLang's resolved --attention-backend
    draft_attention_backend: str | None = None  # --speculative-draft-attention-backend (None: the target's)
    kv_cache_dtype: str = "auto"
    spec_graph_downgrade: bool = False  # PLANTED FAULT: speculative decode lost its graphs (data: spec_graph_downgrade)
    token_map_size: int = 0  # --speculative-token-map's ids when the draft head uses it (0: the whole vocabulary)
    token_map_error: str | None = None  # the map cannot be read: the worker fails at start, as load_token_map does


# SGLang's own custom all-reduce warning when P2P is missing
# (srt/distributed/device_communicators/custom_all_reduce_utils.py).
CUSTOM_ALLREDUCE_NO_P2P = ("CustomAllreduce is disabled because your platform lacks GPU P2P capability or P2P test "
                           "failed. To silence this warning, specify disable_custom_all_reduce=True explicitly.")


def default_decode_max_bs(gpu_memory_gib: float, tp: int) -> int:
    """The decode graph batch limit SGLang picks by GPU memory when none is given
    (srt/arg_groups/memory_hook.py handle_gpu_memory_settings: lines 89-180)."""
    mib = gpu_memory_gib * 1024
    if mib < 20 * 1024:
        return 8
    if mib < 35 * 1024:
        return 48 if tp < 4 else 160
    if mib < 60 * 1024:
        return 32 if tp < 4 else 160
    return 256 if tp < 4 else 512


def checkpoint_bytes(directory: str) -> int:
    """Tensor bytes a checkpoint declares in its safetensors headers (data regions may be absent)."""
    total = 0
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors"):
            with open(os.path.join(directory, name), "rb") as handle:
                (size,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(size))
            total += sum(end - start for key, value in header.items() if key != "__metadata__"
                         for start, end in [value["data_offsets"]])
    return total


def resolve(resolved: dict, env: dict, machine: dict, model: dict | None = None) -> Effective:
    """The runtime state for SGLang's resolved arguments (validate/resolution.py: SGLang's own hooks) on this
    machine and process environment: what the resolution cannot know (P2P, the GPU memory defaults)."""
    notes = []
    tp = int(resolved.get("tp_size") or 1)
    algorithm = resolved.get("speculative_algorithm")
    steps = int(resolved.get("speculative_num_steps") or 0) if algorithm else 0
    topk = int(resolved.get("speculative_eagle_topk") or 1) if algorithm else 0
    drafts = int(resolved.get("speculative_num_draft_tokens") or steps + 1) if algorithm else 0
    decode = (resolved.get("cuda_graph_config") or {}).get("decode") or {}
    decode_graphs = decode.get("backend") != "disabled"
    # The scheduler sizes the batch from KV capacity when nothing declared it; the simulator models 48.
    max_running = int(resolved.get("max_running_requests") or 48)
    graph_max_bs = decode.get("max_bs") or default_decode_max_bs(machine["gpu_memory_gib"], tp)
    if not decode.get("max_bs") and resolved.get("max_running_requests"):
        graph_max_bs = min(graph_max_bs, int(resolved["max_running_requests"]))
    nccl_p2p_level = env.get("NCCL_P2P_LEVEL", "").upper()
    p2p = bool(machine["p2p"]) and env.get("NCCL_P2P_DISABLE", "0") != "1"
    if nccl_p2p_level in ("LOC",) or (nccl_p2p_level == "NVL" and not machine["nvlink"]):
        p2p = False
        notes.append(f"NCCL_P2P_LEVEL={nccl_p2p_level}: NCCL peer-to-peer disabled between the GPUs")
    custom = not resolved.get("disable_custom_all_reduce") and tp > 1
    if custom and not machine["p2p"]:
        custom = False
        notes.append(CUSTOM_ALLREDUCE_NO_P2P)
    proto = env.get("NCCL_PROTO", "").upper() or None
    drafter = algorithm if algorithm in ((model or {}).get("drafters") or {}) else None
    draft_bytes = 0.0
    if drafter:
        steps = 1  # SGLang forces it for DFLASH; the block (draft tokens) is what matters
        draft_bytes = float(checkpoint_bytes(resolved["speculative_draft_model_path"]))
    token_map_size, token_map_error = token_map(resolved, algorithm, drafter, notes)
    return Effective(
        tp=tp, spec_algorithm=algorithm, spec_steps=steps, spec_topk=topk,
        draft_tokens=drafts, decode_graphs=decode_graphs, graph_max_bs=int(graph_max_bs),
        custom_allreduce=custom, p2p=p2p, nccl_proto=proto, max_running=max_running, notes=tuple(notes),
        launch_blocking=env.get("CUDA_LAUNCH_BLOCKING", "0").strip() not in ("", "0"),
        nccl_debug=env.get("NCCL_DEBUG", "").strip().upper() in ("INFO", "TRACE"),
        drafter=drafter, draft_bytes=draft_bytes,
        attention_backend=resolved.get("attention_backend") or "flashinfer",
        draft_attention_backend=resolved.get("speculative_draft_attention_backend") if algorithm else None,
        kv_cache_dtype=resolved.get("kv_cache_dtype") or "auto",
        spec_graph_downgrade=env.get("SGLANG_SIM_FAULT_SPEC_GRAPH_DOWNGRADE", "0").strip() not in ("", "0"),
        token_map_size=token_map_size, token_map_error=token_map_error,
    )


# SGLang's EAGLE worker when an EAGLE3 run names a map (speculative/eagle_worker_v2.py init_token_map).
EAGLE3_IGNORES_MAP = ("Speculative token map specified, but EAGLE3 models already have this. Ignoring the specified "
                      "token map.")


def token_map(resolved: dict, algorithm: str | None, drafter: str | None, notes: list) -> tuple[int, str | None]:
    """(ids of the hot-vocabulary map the draft head uses, or 0; why it cannot be read). Where SGLang applies
    --speculative-token-map: the EAGLE/NEXTN worker (NEXTN resolves to EAGLE) loads it; EAGLE3 logs that it ignores
    it; a separate drafter's worker (DFLASH, DSPARK) never reads it. Its size comes from the file, read without
    torch, or its name (token_map/size.py); nothing is loaded."""
    path = resolved.get("speculative_token_map")
    if not path or not algorithm or drafter:
        return 0, None
    if algorithm == "EAGLE3":
        notes.append(EAGLE3_IGNORES_MAP)
        return 0, None
    if algorithm not in ("EAGLE", "NEXTN"):
        return 0, None
    size, why = map_size(str(path))
    if not size:
        return 0, f"FileNotFoundError: --speculative-token-map {path}: {why} (SIMULATED: load_token_map)"
    return size, None


def lm_head_bytes(model: dict) -> float:
    """The draft step's share of the LM head (whole model): vocabulary x hidden size x its bytes per parameter (the
    model data's BF16 head: 248320 x 5120 x 2 = 2.54 GB, 1.27 GB per GPU at TP 2, as anchors-refresh-4 section 4)."""
    return float(model["vocab_size"]) * float(model["hidden_size"]) * float(model.get("lm_head_bytes_per_param", 2))


def draft_step_bytes(eff: Effective, model: dict) -> float:
    """What one MTP/EAGLE draft step reads (whole model): the head shrinks to N of its vocabulary's rows with a map
    of N ids (eagle_worker_v2.init_lm_head: head.data[hot_token_id])."""
    full = float(model["draft_step_bytes"])
    vocab = float(model["vocab_size"])
    if not eff.token_map_size or eff.token_map_size >= vocab:
        return full
    return full - lm_head_bytes(model) * (1 - eff.token_map_size / vocab)


def out_of_map_share(eff: Effective, model: dict) -> float:
    """ASSUMPTION (model data token_map): the share of the target's tokens outside a map of N ids, which a draft
    head over those ids can never propose; a Zipf-shaped tail, ln(V/N) scaled to the share at the anchor size."""
    size, vocab = eff.token_map_size, float(model["vocab_size"])
    if not size or size >= vocab:
        return 0.0
    data = model.get("token_map") or {}
    anchor = float(data.get("anchor_size", 32768))
    return min(1.0, float(data.get("out_of_map_share", 0.0)) * math.log(vocab / size) / math.log(vocab / anchor))


def attention_factor(backend: str | None, machine: dict) -> float:
    """A pass's time under this attention backend against FlashInfer (data/<machine>.json attention_backends,
    MODELLED from the cited figures); 1.0 for a machine without the table."""
    return float((machine.get("attention_backends") or {}).get(backend or "flashinfer", 1.0))


def kv_factor(eff: Effective, machine: dict) -> float:
    return float((machine.get("kv_cache_dtypes") or {}).get(eff.kv_cache_dtype, 1.0))


# flag -> the machine table whose `_assumed` entries say which of its factors nobody measured on that card and engine
ASSUMED_TABLES = {"--attention-backend": "attention_backends", "--speculative-draft-attention-backend": "attention_backends",
                  "--kv-cache-dtype": "kv_cache_dtypes"}


# Flags whose modelled effect rests on the model's data (sim/data/<model>.json): the table of that data they read.
MODEL_ASSUMED = {"--speculative-token-map": "token_map"}


def assumed_factors(machine: dict, flags: dict, model: dict | None = None) -> str | None:
    """Which of these flag values the simulator speeds up or slows down only by an assumed factor (the machine's or
    the model's `_assumed`: no measurement on that card and engine); None when every factor they touch is measured or
    1.0."""
    found = []
    for flag, table in ASSUMED_TABLES.items():
        value = flags.get(flag)
        why = ((machine.get(table) or {}).get("_assumed") or {}).get(value) if isinstance(value, str) else None
        if why:
            found.append(f"{flag} {value} x{(machine.get(table) or {}).get(value)} ({why})")
    for flag, table in MODEL_ASSUMED.items():
        if flags.get(flag):
            found += [f"{flag}: {name} ({why})" for name, why in ((model or {}).get(table, {}).get("_assumed") or {})
                      .items()]
    return "; ".join(found) or None


def start_problem(eff: Effective, machine: dict) -> str | None:
    """Why the model runner cannot create the attention backend or KV cache on this machine (SGLang fails at start,
    after the resolution accepted the flags): the backends and dtypes the machine's data does not list."""
    backends = {k for k in (machine.get("attention_backends") or {}) if not k.startswith("_")}
    dtypes = {k for k in (machine.get("kv_cache_dtypes") or {}) if not k.startswith("_")}
    for name, backend in (("--attention-backend", eff.attention_backend),
                          ("--speculative-draft-attention-backend", eff.draft_attention_backend)):
        if backends and backend and backend not in backends:
            return (f"RuntimeError: {name} {backend} cannot run on {machine['gpu']} (sm_86) with this model "
                    f"(SIMULATED: the modelled backends are {', '.join(sorted(backends))})")
    if eff.token_map_error:
        return eff.token_map_error
    if dtypes and eff.kv_cache_dtype not in dtypes:
        return (f"RuntimeError: --kv-cache-dtype {eff.kv_cache_dtype} cannot run on {machine['gpu']} (sm_86) "
                f"(SIMULATED: the modelled dtypes are {', '.join(sorted(dtypes))})")
    return combination_problem(eff, machine)


def served_version() -> str:
    """The release the simulator serves: the profile's (the model-only server's shim sets SGLANG_SIM_SGLANG_VERSION,
    roles/simulator.py), else the newest reviewed (the simulated host's SGLang install)."""
    return os.environ.get("SGLANG_SIM_SGLANG_VERSION") or releases.newest_reviewed()


def combination_problem(eff: Effective, machine: dict) -> str | None:
    """The backend x KV dtype x draft backend combination judged together, as the real card would at start
    (validate/start_feasibility.py's data for the simulated SGLang release on the machine's compute capability): fa3 or
    triton with fp8_e4m3 KV on sm_86 fails although each value alone runs."""
    data = start_feasibility.load(served_version())
    known = [gpu for gpu in gpu_facts.KNOWN.values() if gpu.name == machine.get("gpu")]
    if data is None or not known:
        return None
    resolved = {"attention_backend": eff.attention_backend, "kv_cache_dtype": eff.kv_cache_dtype,
                "speculative_draft_attention_backend": eff.draft_attention_backend,
                "speculative_algorithm": eff.spec_algorithm if not eff.drafter else None,
                "speculative_num_steps": eff.spec_steps}
    verdict = start_feasibility.judge(data, known[0].capability, None, resolved)
    if verdict.starts is False:
        reason, source = verdict.fails[0]
        return f"RuntimeError: {reason} ({source}) (SIMULATED: as SGLang fails at start on this card)"
    return None


def _nccl_us(eff: Effective, machine: dict) -> float:
    base = machine["allreduce_us"]["nccl_p2p" if eff.p2p else "nccl_shm"]
    if eff.nccl_debug:
        base *= machine["env_costs"]["NCCL_DEBUG=INFO"]["nccl"]
    if eff.nccl_proto:
        factor = max((f for name, f in machine["nccl_proto_factor"].items() if name in eff.nccl_proto), default=1.0)
        if eff.nccl_proto == "LL128" and not machine["nvlink"]:
            factor *= 1.2  # forced where NCCL would never pick it
        base *= factor
    return base


def allreduce_us(eff: Effective, machine: dict) -> float:
    if eff.tp == 1:
        return 0.0
    if eff.custom_allreduce:
        return machine["allreduce_us"]["custom"]
    return _nccl_us(eff, machine)


def speculation(model: dict) -> dict:
    return model["speculation"]


def tree_shape(eff: Effective) -> tuple[int, float]:
    """(depth, alternatives per depth) of the draft tree SGLang verifies: a chain for topk 1 (draft tokens =
    steps + 1); for topk > 1 the draft tokens beyond the chain are spread over the depths, at most topk - 1
    alternatives each. Fewer draft tokens than steps + 1 cut the depth."""
    if not eff.spec_steps:
        return 0, 0.0
    if eff.drafter:  # a block-parallel drafter proposes draft tokens - 1 positions at once, one chain
        return max(1, eff.draft_tokens - 1), 0.0
    depth = max(1, min(eff.spec_steps, eff.draft_tokens - 1))
    extra = max(0, eff.draft_tokens - 1 - depth)
    return depth, min(max(0, eff.spec_topk - 1), extra / depth)


def spec_costs_ms(eff: Effective, machine: dict, model: dict, batch: int = 1) -> dict:
    """The speculative cycle's parts: k draft steps (each reads the MTP layer and the LM head; topk > 1 carries
    topk branches per step), a verify pass whose compute grows with the draft tokens of every running request,
    and the tree's bookkeeping for topk > 1."""
    spec = speculation(model)
    if not eff.spec_steps:
        return {"verify_tokens": 0.0, "tree": 0.0, "branches": 0.0}
    per_token = spec["verify_gflop_per_token"] / eff.tp / machine["dense_tflops_effective"]  # ms
    branches = max(0, eff.spec_topk - 1) * spec["draft_branch_ms"]
    return {"verify_tokens": per_token * (eff.draft_tokens - 1) * batch,
            "tree": spec["tree_build_ms"] if eff.spec_topk > 1 else 0.0, "branches": branches}


def cycle_ms(eff: Effective, machine: dict, model: dict, batch: int = 1) -> float:
    """Wall time of one decode cycle (verify + draft steps) for a batch of running requests."""
    bandwidth = machine["memory_bandwidth_gbs"] * 1e9 * machine["weight_read_efficiency"]
    downgraded = eff.spec_graph_downgrade and eff.spec_steps > 0
    graphs = eff.decode_graphs and batch <= eff.graph_max_bs and not downgraded
    ar = allreduce_us(eff, machine)
    launch = 0.0 if graphs else machine["kernel_launch_us"]
    issue = 0.0 if graphs else machine["python_collective_issue_us"] * (eff.tp > 1)
    spec = spec_costs_ms(eff, machine, model, batch)

    verify_ars = model["layers"] * model["allreduces_per_layer"] if eff.tp > 1 else 0
    verify = (model["verify_bytes"] / eff.tp / bandwidth * 1e3
              + verify_ars * (ar + issue) / 1e3
              + model["kernels_per_forward"] * launch / 1e3
              + spec["verify_tokens"] + spec["tree"])
    kv = kv_factor(eff, machine)
    verify *= attention_factor(eff.attention_backend, machine) * kv
    draft = 0.0
    if eff.drafter:  # one pass of the draft model over the block, its logits through the target's LM head
        drafter = model["drafters"][eff.drafter]
        draft_ars = drafter["allreduces_per_pass"] if eff.tp > 1 else 0
        draft = ((eff.draft_bytes + drafter["shared_lm_head_bytes"]) / eff.tp / bandwidth * 1e3
                 + drafter["pass_overhead_ms"] + draft_ars * (ar + issue) / 1e3
                 + drafter["kernels_per_pass"] * launch / 1e3)
    elif eff.spec_steps:
        draft_ars = model["draft_allreduces_per_step"] if eff.tp > 1 else 0
        draft = (draft_step_bytes(eff, model) / eff.tp / bandwidth * 1e3 + speculation(model)["draft_step_overhead_ms"]
                 + spec["branches"] + draft_ars * (ar + issue) / 1e3 + model["kernels_per_draft_step"] * launch / 1e3)
    draft *= attention_factor(eff.draft_attention_backend or eff.attention_backend, machine) * kv
    nccl = model["nccl_collectives_per_cycle"] * _nccl_us(eff, machine) / 1e3 if eff.tp > 1 else 0.0
    single = verify + (draft if eff.drafter else eff.spec_steps * draft) + nccl + machine["cycle_fixed_ms"]
    if downgraded:  # the planted graph fault (data/<machine>.json spec_graph_downgrade, from vllm#35387)
        single *= machine["spec_graph_downgrade"]["cycle_factor"]
    if eff.launch_blocking:  # no CPU/GPU overlap left (measured ratios, data/<machine>.json env_costs)
        single *= machine["env_costs"]["CUDA_LAUNCH_BLOCKING=1"]["graphs" if graphs else "eager"]
    return single * (1 + machine["batch_cost_per_extra_request"] * (batch - 1))


def accept_probabilities(eff: Effective, model: dict, prompt_kind: str, collapse: bool = False) -> list[float]:
    """Conditional acceptance of draft position i given positions < i were accepted.

    The data give the chain's per-position acceptance rate (the share of cycles whose position i is
    accepted, as vLLM's "Per-position acceptance" reports it; it decays with depth); the conditional
    rate of position i is rate[i] / rate[i-1]. A topk tree offers alternatives at each depth: it
    recovers a share of that position's misses, up to topk_recovery_max with many alternatives."""
    depth, alternatives = tree_shape(eff)
    if not depth:
        return []
    if collapse:
        return [0.15] * depth
    spec = model["drafters"][eff.drafter] if eff.drafter else speculation(model)
    rates = list(spec["accept_rate_by_position"])
    rates += [rates[-1] * (rates[-1] / rates[-2])] * max(0, depth - len(rates))
    recovery = 0.0 if eff.drafter else \
        spec["topk_recovery_max"] * (1 - math.exp(-alternatives / spec["topk_recovery_scale"]))
    shift = spec["accept_shift_by_prompt_kind"].get(prompt_kind, 0.0)
    in_map = 1.0 - out_of_map_share(eff, model)  # a hot-vocabulary head proposes only the map's ids
    out, previous = [], 1.0
    for rate in rates[:depth]:
        conditional = rate / previous
        previous = rate
        conditional += (1 - conditional) * recovery
        out.append(min(0.995, max(0.0, conditional + shift)) * in_map)
    return out


def expected_tau(probabilities: list[float]) -> float:
    tau, chain = 1.0, 1.0
    for p in probabilities:
        chain *= p
        tau += chain
    return tau


def expected_tok_s(eff: Effective, machine: dict, model: dict, prompt_kinds=("prose", "code", "chat")) -> float:
    """Single-stream decode rate the model predicts (mean over prompt kinds), without noise: for reports and
    for tests that ask where the optimum lies."""
    cycle = cycle_ms(eff, machine, model, 1)
    taus = [expected_tau(accept_probabilities(eff, model, kind)) for kind in prompt_kinds]
    return sum(taus) / len(taus) / cycle * 1e3


class SeededRandom(random.Random):
    """A request's random source that remembers its seed text (the per-position acceptance draws use it)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.seed_text = text


def token_difficulty(seed_text: str, position: int) -> float:
    """A uniform number per (request seed, output position): how hard that token of the text is to draft.
    Greedy requests of one prompt share it, so every configuration meets the same hard tokens (as a real
    model does on the same text) and differences between configurations are not luck of the draw."""
    digest = hashlib.blake2b(f"{seed_text}:{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2 ** 64


def draw_accepted(probabilities: list[float], rng: random.Random, position: int | None = None) -> int:
    """Tokens emitted by one verify pass: accepted draft tokens plus the bonus token.

    With the output position of the cycle's first token (and a SeededRandom), draft i is accepted when the
    difficulty of output token position + i is below its conditional acceptance probability."""
    accepted = 0
    seed_text = getattr(rng, "seed_text", None)
    for index, p in enumerate(probabilities):
        draw = token_difficulty(seed_text, position + index) if seed_text is not None and position is not None \
            else rng.random()
        if draw >= p:
            break
        accepted += 1
    return accepted + 1


def count_correct_drafts(histogram: list, accepted_drafts: int) -> None:
    """SGLang's Req.update_spec_correct_drafts_histogram (schedule_batch.py): one verify step that accepted
    `accepted_drafts` draft tokens (the bonus token excluded) counted at that index."""
    if len(histogram) <= accepted_drafts:
        histogram.extend([0] * (accepted_drafts - len(histogram) + 1))
    histogram[accepted_drafts] += 1


def prefill_ms(prompt_tokens: int, machine: dict) -> float:
    return machine["prefill_base_ms"] + prompt_tokens / machine["prefill_tokens_per_s"] * 1e3


def jitter(rng: random.Random, sigma: float) -> float:
    return math.exp(rng.gauss(0.0, sigma))


def roofline_tok_s(eff: Effective, machine: dict, model: dict, tau: float) -> float:
    """Bandwidth-only bound (all weight bytes at datasheet bandwidth), for reports."""
    if eff.drafter:
        drafts = eff.draft_bytes + model["drafters"][eff.drafter]["shared_lm_head_bytes"]
    else:
        drafts = eff.spec_steps * draft_step_bytes(eff, model)
    per_gpu = (model["verify_bytes"] + drafts) / eff.tp
    return tau / (per_gpu / (machine["memory_bandwidth_gbs"] * 1e9))
