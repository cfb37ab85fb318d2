"""The simulator's hardware model: decode speed follows from bandwidth, collectives and launch costs.

Inputs are data (``data/<machine>.json``, ``data/<model>.json``) plus what the simulated process was
started with: its flags and its own environment (NCCL_*). Nothing here is a per-scenario constant:
a speculative cycle costs one verify pass plus k draft steps, each pass costs weight bytes over
effective bandwidth plus its all-reduces plus, without CUDA graphs, its kernel launches.
Standard library only: this module runs on the simulated host with the system python3.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

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


def resolve(args: dict, env: dict, machine: dict) -> Effective:
    """Apply SGLang's resolution rules to parsed args (dest -> value) and the process environment."""
    notes = []
    algorithm = args.get("speculative_algorithm")
    steps = int(args.get("speculative_num_steps") or (3 if algorithm else 0)) if algorithm else 0
    topk = int(args.get("speculative_eagle_topk") or 1) if algorithm else 0
    drafts = int(args.get("speculative_num_draft_tokens") or steps + 1) if algorithm else 0
    if algorithm and topk == 1 and drafts != steps + 1:
        notes.append(f"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 = {steps + 1} when topk == 1")
        drafts = steps + 1
    decode_graphs = not args.get("disable_cuda_graph") and args.get("cuda_graph_backend_decode") != "disabled"
    max_running = int(args.get("max_running_requests") or 48)
    graph_max_bs = int(args.get("cuda_graph_max_bs_decode") or min(max_running, 32))
    nccl_p2p_level = env.get("NCCL_P2P_LEVEL", "").upper()
    p2p = bool(machine["p2p"]) and env.get("NCCL_P2P_DISABLE", "0") != "1"
    if nccl_p2p_level in ("LOC",) or (nccl_p2p_level == "NVL" and not machine["nvlink"]):
        p2p = False
        notes.append(f"NCCL_P2P_LEVEL={nccl_p2p_level}: NCCL peer-to-peer disabled between the GPUs")
    custom = not args.get("disable_custom_all_reduce") and int(args.get("tp_size") or 1) > 1
    if custom and not machine["p2p"]:
        custom = False
        notes.append("Custom allreduce is disabled because this process does not have GPU P2P access")
    elif int(args.get("tp_size") or 1) > 1 and not custom:
        notes.append("Custom allreduce is disabled")
    proto = env.get("NCCL_PROTO", "").upper() or None
    return Effective(
        tp=int(args.get("tp_size") or 1), spec_algorithm=algorithm, spec_steps=steps, spec_topk=topk,
        draft_tokens=drafts, decode_graphs=decode_graphs, graph_max_bs=graph_max_bs,
        custom_allreduce=custom, p2p=p2p, nccl_proto=proto, max_running=max_running, notes=tuple(notes),
    )


def _nccl_us(eff: Effective, machine: dict) -> float:
    base = machine["allreduce_us"]["nccl_p2p" if eff.p2p else "nccl_shm"]
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


def cycle_ms(eff: Effective, machine: dict, model: dict, batch: int = 1) -> float:
    """Wall time of one decode cycle (verify + draft steps) for a batch of running requests."""
    bandwidth = machine["memory_bandwidth_gbs"] * 1e9 * machine["weight_read_efficiency"]
    graphs = eff.decode_graphs and batch <= eff.graph_max_bs
    ar = allreduce_us(eff, machine)
    launch = 0.0 if graphs else machine["kernel_launch_us"]
    issue = 0.0 if graphs else machine["python_collective_issue_us"] * (eff.tp > 1)

    verify_ars = model["layers"] * model["allreduces_per_layer"] if eff.tp > 1 else 0
    verify = (model["verify_bytes"] / eff.tp / bandwidth * 1e3
              + verify_ars * (ar + issue) / 1e3
              + model["kernels_per_forward"] * launch / 1e3)
    draft = 0.0
    if eff.spec_steps:
        draft_ars = model["draft_allreduces_per_step"] if eff.tp > 1 else 0
        draft = (model["draft_step_bytes"] / eff.tp / bandwidth * 1e3 + model["draft_step_overhead_ms"]
                 + draft_ars * (ar + issue) / 1e3 + model["kernels_per_draft_step"] * launch / 1e3)
    nccl = model["nccl_collectives_per_cycle"] * _nccl_us(eff, machine) / 1e3 if eff.tp > 1 else 0.0
    single = verify + eff.spec_steps * draft + nccl + machine["cycle_fixed_ms"]
    return single * (1 + machine["batch_cost_per_extra_request"] * (batch - 1))


def accept_probabilities(eff: Effective, model: dict, prompt_kind: str, collapse: bool = False) -> list[float]:
    """Conditional acceptance of draft token i given tokens < i were accepted."""
    if not eff.spec_steps:
        return []
    shift = model["accept_shift_by_prompt_kind"].get(prompt_kind, 0.0)
    probs = list(model["accept_probability_by_step"])[: eff.spec_steps]
    probs += [probs[-1]] * (eff.spec_steps - len(probs))
    if collapse:
        return [0.15] * eff.spec_steps
    return [min(0.995, max(0.0, p + shift)) for p in probs]


def expected_tau(probabilities: list[float]) -> float:
    tau, chain = 1.0, 1.0
    for p in probabilities:
        chain *= p
        tau += chain
    return tau


def draw_accepted(probabilities: list[float], rng: random.Random) -> int:
    """Tokens emitted by one verify pass: accepted draft tokens plus the bonus token."""
    accepted = 0
    for p in probabilities:
        if rng.random() >= p:
            break
        accepted += 1
    return accepted + 1


def prefill_ms(prompt_tokens: int, machine: dict) -> float:
    return machine["prefill_base_ms"] + prompt_tokens / machine["prefill_tokens_per_s"] * 1e3


def jitter(rng: random.Random, sigma: float) -> float:
    return math.exp(rng.gauss(0.0, sigma))


def roofline_tok_s(eff: Effective, machine: dict, model: dict, tau: float) -> float:
    """Bandwidth-only bound (all weight bytes at datasheet bandwidth), for reports."""
    per_gpu = (model["verify_bytes"] + eff.spec_steps * model["draft_step_bytes"]) / eff.tp
    return tau / (per_gpu / (machine["memory_bandwidth_gbs"] * 1e9))
