"""Bandwidth roofline for speculative decode, from the checkpoint's own bytes.

One MTP/EAGLE cycle = one verify pass (transformer layers + LM head) + k draft steps (MTP layer +
LM head), all sharded over TP ranks; it emits tau tokens. tok/s <= tau * BW / bytes_per_cycle.
With a separate draft model (DFLASH: one block-parallel pass a cycle) the draft part is that model's bytes (its
own safetensors headers) plus the target's LM head, which the drafter's logits go through.
MBU = measured tok/s / roofline tok/s (the share of peak bandwidth the decode achieves).
"""

from __future__ import annotations

# Datasheet memory bandwidth, GB/s, used when no probe measured it.
DATASHEET_GBS = {"RTX A6000": 768, "A6000": 768, "RTX 3090": 936, "A100": 2039, "H100": 3350, "H200": 4800,
                 "L40S": 864}


def datasheet_bandwidth(gpu_name: str | None) -> float | None:
    for key, value in DATASHEET_GBS.items():
        if gpu_name and key.lower() in gpu_name.lower():
            return float(value)
    return None


def per_gpu_bytes(checkpoint: dict, tp: int) -> dict:
    b = checkpoint["bytes"]
    return {"verify": (b["layers"] + b["lm_head"]) / tp, "draft_step": (b["mtp"] + b["lm_head"]) / tp}


def draft_pass_bytes(checkpoint: dict, draft: dict, tp: int) -> float:
    """Per GPU, one pass of a separate draft model: its weights (not a vision tower, not embeddings it gathers)
    plus the target's LM head."""
    own = sum(value for key, value in draft["bytes"].items() if key not in ("embedding", "vision"))
    return (own + checkpoint["bytes"]["lm_head"]) / tp


def roofline(checkpoint: dict, tp: int, steps: int, tau: float, bandwidth_gbs: float,
             measured_tok_s: float | None = None, draft: dict | None = None) -> dict:
    """draft: the draft model's summarize() when the release decodes with one (its one pass replaces the steps)."""
    sizes = per_gpu_bytes(checkpoint, tp)
    if draft is not None:
        sizes["draft_step"], steps = draft_pass_bytes(checkpoint, draft, tp), 1
    cycle_bytes = sizes["verify"] + steps * sizes["draft_step"]
    cycle_s = cycle_bytes / (bandwidth_gbs * 1e9)
    bound = tau / cycle_s
    result = {"verify_gb_per_gpu": sizes["verify"] / 1e9, "draft_step_gb_per_gpu": sizes["draft_step"] / 1e9,
              "cycle_gb_per_gpu": cycle_bytes / 1e9, "cycle_ms_at_roofline": cycle_s * 1e3, "tau": tau,
              "steps": steps, "bandwidth_gbs": bandwidth_gbs, "roofline_tok_s": bound,
              "draft_model": draft is not None,
              "at_75pct_mbu_tok_s": 0.75 * bound}
    if measured_tok_s:
        result.update(measured_tok_s=measured_tok_s, mbu=measured_tok_s / bound)
    return result
