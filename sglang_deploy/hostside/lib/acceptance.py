"""Speculative acceptance per draft position, from SGLang's per-request histogram.

SGLang returns `meta_info.spec_correct_drafts_histogram` per request (tokenizer_manager.py, when the
request has one): entry k counts the verify steps that accepted exactly k draft tokens, the bonus token excluded
(Req.update_spec_correct_drafts_histogram in schedule_batch.py, called per verify in batch_result_processor.py).
So the share of verify steps whose draft position i was accepted is sum(h[k] for k >= i) / sum(h), and the
conditional acceptance of position i (given i - 1 was accepted) is that share over position i - 1's.
Standard library only: runs on the host (the gate's bench) and on the controller.
"""

from __future__ import annotations

DROP_FRACTION = 0.5  # a position accepted at under half the conditional rate of the best position before it
MIN_CYCLES = 20  # ... judged only where this many verify steps reached it


def merged(histograms) -> list[int]:
    """The element-wise sum of histograms (lists of counts), ignoring missing ones."""
    total: list[int] = []
    for histogram in histograms:
        for index, count in enumerate(histogram or []):
            if index >= len(total):
                total.extend([0] * (index + 1 - len(total)))
            total[index] += int(count)
    return total


def per_position(histogram: list[int]) -> list[float]:
    """Share of verify steps whose draft position 1, 2, ... was accepted."""
    steps = sum(histogram)
    if not steps:
        return []
    return [sum(histogram[index:]) / steps for index in range(1, len(histogram))]


def conditional(rates: list[float]) -> list[float]:
    out, previous = [], 1.0
    for rate in rates:
        out.append(rate / previous if previous else 0.0)
        previous = rate
    return out


def drop(histogram: list[int]) -> dict | None:
    """The first draft position accepted (given the one before it was) at under DROP_FRACTION of the best
    conditional rate before it, among positions that MIN_CYCLES verify steps reached; None when there is none."""
    steps = sum(histogram)
    rates = per_position(histogram)
    chain = conditional(rates)
    for index in range(1, len(chain)):
        reached = rates[index - 1] * steps
        best = max(chain[:index])
        if reached >= MIN_CYCLES and chain[index] < DROP_FRACTION * best:
            return {"position": index + 1, "conditional": chain[index], "best_before": best,
                    "reached": int(round(reached))}
    return None


def summary(samples: list) -> dict | None:
    """From the bench's samples (release.Sample: its kind and correct_drafts_histogram): the histogram, the rate
    per position and a drop, over all samples and per content class; None without any histogram."""
    if not any(s.correct_drafts_histogram for s in samples):
        return None
    kinds = sorted({s.kind or "all" for s in samples})
    out = {}
    for kind in ["all", *kinds]:
        histogram = merged(s.correct_drafts_histogram for s in samples if kind == "all" or s.kind == kind)
        if sum(histogram):
            out[kind] = {"histogram": histogram, "per_position": per_position(histogram), "drop": drop(histogram)}
    return out


def lines(acceptance: dict | None) -> list[str]:
    """The gate table's lines: acceptance per draft position per content class, and a drop named."""
    if not acceptance:
        return []
    out = []
    for kind, entry in acceptance.items():
        rates = " ".join(f"{index}:{rate * 100:3.0f}%" for index, rate in enumerate(entry["per_position"], 1))
        out.append(f"acceptance per draft position ({kind}, {sum(entry['histogram'])} verify steps): {rates}")
        found = entry.get("drop")
        if found:
            out.append(f"  DROP at draft position {found['position']} ({kind}): accepted in "
                       f"{found['conditional'] * 100:.0f} % of the {found['reached']} verify steps that reached it, "
                       f"against {found['best_before'] * 100:.0f} % at an earlier position")
    return out
