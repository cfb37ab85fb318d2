"""The doctor's lever suspects (issue 36): speculation slower than none, the all-reduce path the server reports,
the draft step's share of the cycle and what a hot-vocabulary token map would save, the KV dtype and attention
backend on Ampere. Each with its evidence and the profile edit or tune command that tests it. Pure: the inputs
are what hostside/doctor_collect.py gathers (server_info, environment, SGLang's own log lines, the active
release's tune-results.json, the checkpoint's bytes); diagnosis.py ranks and prints them.

Figures: ../shared/notes/anchors-refresh-4.md (club-3090's bf16 KV + FlashAttention against fp8 KV + FlashInfer,
+32 % decode on 2x3090; vllm#35387's MTP 3 at 32.7 tok/s against 57 without speculation after a graph downgrade;
custom all-reduce on a P2P pair +7 to +12.5 %).
"""

from __future__ import annotations

from ..hostside.contract.findings import ABResults, TuneResults
from ..tune import search as tune
from ..hostside.evidence import allreduce_path  # noqa: F401 - the doctor's name for it
from ..roofline import separate_draft
from ..tune.axes import PCIE_IPC_WORLD_SIZES
from .suspect import Suspect

# sm_80 / sm_86 / sm_87 cards by name (nvidia-smi's): no FP8 tensor cores, FlashAttention 3 needs sm_90.
AMPERE = ("A6000", "A5000", "A4500", "A4000", "A2000", "A100", "A800", "A40", "A30", "A16", "A10", " A2",
          "RTX 3090", "RTX 3080", "RTX 3070", "RTX 3060", "Orin")
TOKEN_MAP_SIZES = (32768, 65536)  # what the doctor prices when the profile offers none (FR-Spec's 32k; 64k)
TOKEN_MAP_ALGORITHMS = ("NEXTN", "EAGLE")  # eagle_worker_v2.init_lm_head; EAGLE3 and DFLASH ignore the map


def is_ampere(gpu_name: str | None) -> bool:
    return bool(gpu_name) and any(key.lower() in f" {gpu_name}".lower() for key in AMPERE)


# --- speculation slower than none -----------------------------------------------------------------

def speculation_vs_none(last_tune: TuneResults | ABResults | None, active: str | None,
                        objective: tune.Objective = tune.Objective(), what: str = "the last tune"):
    """From the active release's last tune (its tune-results.json) or last A/B (ab-results.json, what="the doctor's
    A/B"): the release without speculation (the `nospec` control) measured faster than the release itself by more
    than both measurements' noise."""
    if not last_tune or (active and last_tune.original not in (None, active)):
        return None
    results = {entry.id: tune.Measured.from_entry(entry) for entry in last_tune.results}
    nospec, original = results.get("nospec"), results.get(tune.BASELINE.id)
    if not (nospec and original and nospec.measured and original.measured):
        return None
    slower = sorted(m.candidate.id for m in results.values() if m.measured and m.candidate.axis not in ("nospec",)
                    and m.median_decode < nospec.median_decode and m is not original)
    return nospec_suspect(nospec, original, f"{what} ({last_tune.stamp or 'undated'})", objective,
                          f"; {len(slower)} other speculative candidate(s) slower than none too" if slower else "")


def nospec_suspect(nospec: tune.Measured, original: tune.Measured, source: str,
                   objective: tune.Objective = tune.Objective(), more: str = ""):
    """The release without speculation faster than the release by more than both measurements' noise
    (tune.clear_gain): the suspect, with both speeds and spreads; None otherwise. `source` says which measurement
    (the last tune, or the doctor's A/B: ab.py)."""
    if not (nospec.measured and original.measured) or not tune.clear_gain(nospec, original, objective):
        return None
    gain = (nospec.median_decode / original.median_decode - 1) * 100
    return Suspect(
        id="speculation-slower-than-none", title="speculative decoding is slower than no speculation",
        evidence=(f"{source} measured the release without speculation at "
                  f"{nospec.median_decode:.1f} tok/s (spread {nospec.noise() or 0:.1f} %) against "
                  f"{original.median_decode:.1f} (spread {original.noise() or 0:.1f} %, tau {original.tau or 0:.2f}) "
                  "with it" + more),
        expected_gain=f"+{gain:.0f} % by turning it off; more by finding why the draft/verify path is slow (a CUDA "
                      "graph downgrade on Ampere did this to MTP 3 in vllm#35387: 32.7 against 57 tok/s)",
        gain_pct=gain,
        fix="check that draft and verify decode in CUDA graphs (the doctor's cuda-graphs suspect, the journal's "
            "capture lines); re-measure both: `pyinfra inventory/<host>.py tune.py --data tune_space=nospec,spec`; "
            "or remove --speculative-algorithm and its --speculative-* flags from the profile")


# --- the all-reduce path --------------------------------------------------------------------------

def pcie_ipc_fix(path: dict, server_info: dict) -> str | None:
    """The PCIe-IPC arm to try when custom all-reduce is off on a PCIe pair (opt-in in SGLang; bf16 only)."""
    tp = int(server_info.get("tp_size") or 1)
    if path["path"] != "nccl" or tp not in PCIE_IPC_WORLD_SIZES or int(server_info.get("nnodes") or 1) > 1:
        return None
    return ("with custom all-reduce off, try SGLang's PCIe-IPC all-reduce (opt-in, bf16, world size 2/4/8): "
            'environment SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: {value: "1", reason: "custom all-reduce off, A/B '
            'measured"}; measure it with `pyinfra inventory/<host>.py tune.py --data tune_space=nccl`, and keep it '
            "only if the output check passes (custom all-reduce over a patched P2P path answered garbage at "
            "plausible speed: club-3090 #922)")


# --- the draft step's share and a token map -------------------------------------------------------

def token_map_opportunity(bound: dict | None, checkpoint: dict | None, server_info: dict, sizes=TOKEN_MAP_SIZES):
    """MTP/EAGLE drafts read the whole LM head each step: the draft steps' share of the cycle's bytes, and the
    roofline with a hot-vocabulary head of N tokens (SGLang's --speculative-token-map; the head shrinks to N of
    the vocabulary's rows)."""
    algorithm = server_info.get("speculative_algorithm")
    if not bound or not checkpoint or algorithm not in TOKEN_MAP_ALGORITHMS or separate_draft(server_info):
        return None
    if server_info.get("speculative_token_map"):
        return None  # a map is in use
    vocab = checkpoint.get("vocab_size")
    tp = int(server_info.get("tp_size") or 1)
    head = checkpoint["bytes"]["lm_head"] / tp
    steps = bound["steps"]
    if not (vocab and steps and head):
        return None
    draft_share = steps * bound["draft_step_gb_per_gpu"] / bound["cycle_gb_per_gpu"]
    head_share = head / 1e9 / bound["draft_step_gb_per_gpu"]
    priced = []
    for size in sizes:
        if size >= vocab:
            continue
        saved = steps * head * (1 - size / vocab) / 1e9
        gain = (bound["cycle_gb_per_gpu"] / (bound["cycle_gb_per_gpu"] - saved) - 1) * 100
        priced.append((size, saved, gain))
    if not priced:
        return None
    best = max(gain for _, _, gain in priced)
    return Suspect(
        id="token-map", title="the draft steps read the whole LM head: a hot-vocabulary token map would shrink it",
        evidence=(f"{steps} draft step(s) of {bound['draft_step_gb_per_gpu']:.2f} GB per GPU are "
                  f"{draft_share * 100:.0f} % of the cycle's {bound['cycle_gb_per_gpu']:.1f} GB; the LM head is "
                  f"{head_share * 100:.0f} % of each step ({head / 1e9:.2f} GB, {vocab} rows); "
                  + "; ".join(f"a map of {size}: -{saved:.2f} GB a cycle, roofline +{gain:.0f} %"
                              for size, saved, gain in priced)
                  + " (acceptance may drop: measure it)"),
        expected_gain=f"up to +{best:.0f} % of the roofline (syv-ai measured +10 % on one 3090 with a 40k map)",
        gain_pct=best,
        fix="build one: `sglang-deploy token-map CORPUS --model DIR --size N`, put it in the weights directory and "
            "freeze its manifest again, list N in the profile's tune.vocab_sizes and measure it with "
            "`pyinfra inventory/<host>.py tune.py --data tune_space=vocab` (output-checked; SGLang applies it on "
            "NEXTN/EAGLE only)")


# --- KV dtype and attention backend on Ampere -----------------------------------------------------

def kv_attention(server_info: dict, gpu_name: str | None):
    """(a line saying what is in use, a suspect when the KV cache is fp8 on Ampere)."""
    kv = server_info.get("kv_cache_dtype")
    attention = server_info.get("attention_backend")
    draft_attention = server_info.get("speculative_draft_attention_backend")
    if kv is None and attention is None:
        return None, None
    line = (f"KV cache {kv or 'auto'}, attention backend {attention or 'auto'}"
            + (f", draft attention {draft_attention}" if draft_attention else "")
            + (f" on {gpu_name}" if gpu_name else ""))
    if not is_ampere(gpu_name):
        return line, None
    line += ("; on Ampere peers measured bf16 KV + FlashAttention 32 % faster than fp8 KV + FlashInfer (vLLM, 2x3090): "
             "`tune.py --data tune_space=kv,attention` measures what SGLang's resolution accepts here")
    if not str(kv or "").lower().startswith("fp8"):
        return line, None
    return line, Suspect(
        id="fp8-kv-on-ampere", title="the KV cache is fp8 on an Ampere GPU",
        evidence=(f"/server_info kv_cache_dtype={kv}, attention_backend={attention} on {gpu_name} (sm_8x has no FP8 "
                  "tensor cores: the attention kernels upcast the cache on every read)"),
        expected_gain="up to +32 % decode (club-3090: bf16 KV + FlashAttention against fp8 KV + FlashInfer on 2x3090, "
                      "vLLM; SGLang's figure unmeasured) at the cost of about half the KV tokens",
        gain_pct=15.0,
        fix="measure it: `pyinfra inventory/<host>.py tune.py --data tune_space=kv,attention`; or in the profile "
            "--kv-cache-dtype auto (the doctor's memory line shows the KV pool it leaves)")
