"""The tune's discipline (issue 36): the order of the axes by expected gain, what the budget did not reach, and the
winner measured again beside the incumbent before it is written. Pure; controller.py applies it.

A tuner that picked a configuration from noise (TurboLLM#62) and a tuned command slower than the hand one
(ggrun#16) are what this guards against: a candidate wins only by a gain larger than both measurements' spreads
(tune.clear_gain), and that gain must hold in a second, paired measurement.
"""

from __future__ import annotations

from . import search as tune
from ..hostside.contract.findings import DoctorReport

# Expected gain of each axis on CT129-class hosts, % single-stream decode: the doctor's own estimates (doctor.py and
# doctor/levers.py gain_pct; sources in ../shared/notes/anchors-refresh-4.md). nospec is the control: always first.
EXPECTED_GAIN_PCT = {"spec": 30.0,  # weak-speculation: the incident's 1 -> 3 steps, ~40 -> ~52 tok/s
                     "drafter": 37.0,  # a DFlash-class drafter over MTP: peers +30-45 %
                     "kv": 15.0,  # fp8-kv-on-ampere: peers up to +32 % with FlashAttention, SGLang's unmeasured
                     "attention": 10.0,  # the other half of the same peer figure
                     "vocab": 10.0,  # token-map: a 40k draft vocabulary +10 % on one 3090 (syv-ai); roofline +22 %
                     "graphs": 8.0,  # batch-limit / graph-batch-limit: aggregate throughput
                     "nccl": 5.5}  # custom-all-reduce: +3-8 %
# Which suspect of the doctor's report (doctor.json) speaks for which axis.
SUSPECT_AXES = {"weak-speculation": "spec", "no-speculation": "spec", "low-acceptance": "spec",
                "drafter": "drafter", "token-map": "vocab", "fp8-kv-on-ampere": "kv", "custom-all-reduce": "nccl",
                "p2p-unavailable": "nccl",
                "nccl-debug-knobs": "nccl", "batch-limit": "graphs", "graph-batch-limit": "graphs",
                "cuda-graphs": "graphs"}
# An axis that must come after another: a drafter replaces the speculation the spec axis tuned (Search.with_best).
AFTER = {"drafter": "spec"}


def expected_gains(doctor: DoctorReport | None = None) -> dict:
    """The default estimates, each raised to the doctor's own estimate where its report for this release (doctor.json)
    names a suspect or an opportunity of that axis."""
    gains = dict(EXPECTED_GAIN_PCT)
    for entry in (doctor.suspects + doctor.opportunities if doctor else []):
        axis = SUSPECT_AXES.get(entry.get("id"))
        if axis and isinstance(entry.get("gain_pct"), (int, float)):
            gains[axis] = max(gains.get(axis, 0.0), float(entry["gain_pct"]))
    return gains


def axis_order(axes, gains: dict | None = None) -> list:
    """The search's order: the no-speculation control first, then the largest expected gain first (ties in
    tune.AXES order), each axis after the one it builds on (AFTER)."""
    gains = gains or EXPECTED_GAIN_PCT
    wanted = [axis for axis in tune.AXES if axis in axes]
    ordered = sorted((a for a in wanted if a != "nospec"), key=lambda a: (-gains.get(a, 0.0), tune.AXES.index(a)))
    for later, earlier in AFTER.items():
        if later in ordered and earlier in ordered and ordered.index(later) < ordered.index(earlier):
            ordered.remove(earlier)
            ordered.insert(ordered.index(later), earlier)
    return (["nospec"] if "nospec" in wanted else []) + ordered


def unreached(search, stopped_axis: str | None, why: str | None) -> list[str]:
    """What the budget did not reach: the axis it stopped in (with the candidate that did not fit) and every axis
    after it, with the candidates each would have measured where they are known before the search reaches them."""
    if why is None:
        return []
    if stopped_axis is None:  # before the original was measured: nothing was reached
        out, later = [f"the original: not measured ({why})"], list(search.axes)
    else:
        out = [f"{stopped_axis}: stopped ({why})"]
        later = search.axes[search.axes.index(stopped_axis) + 1:]
    for axis in later:
        ids = candidate_ids(search, axis)
        out.append(f"{axis}: not started" + (f" ({len(ids)}: {', '.join(ids)})" if ids else ""))
    return out


def candidate_ids(search, axis: str) -> list[str]:
    from . import axes as tune_axes

    if axis == "graphs":
        return [c.id for c in tune.graph_candidates(search.flags, search.concurrency)
                + tune_axes.graph_backend_candidates(search.choices)]
    if axis == "nccl":
        return [c.id for c in tune.nccl_candidates(search.flags, search.env, search.topology)]
    if axis == "drafter":
        return [c.id for c in tune.drafter_candidates(search.flags, search.drafters)]
    if axis == "kv":
        return [c.id for c in tune_axes.kv_candidates(search.choices)]
    if axis == "attention":
        return [c.id for c in tune_axes.attention_candidates(search.choices)
                + tune_axes.draft_attention_candidates(search.flags, search.choices)]
    if axis == "vocab":
        from .vocab import FLAG, candidates

        return [c.id for c in candidates(search.choices.get(FLAG))]
    if axis == "nospec":
        return ["nospec"] if tune_axes.nospec_candidate(search.flags) else []
    return []  # spec: a walk whose candidates depend on what it measures


def confirmed(winner: tune.Measured, incumbent: tune.Measured, objective: tune.Objective) -> tuple[bool, str]:
    """The winner measured again right beside the incumbent: it must still beat it by more than min_gain_pct and
    both spreads (tune.clear_gain), and still pass the objective (noise, aggregate floor)."""
    if not winner.measured or not incumbent.measured:
        what = winner if not winner.measured else incumbent
        return False, f"the re-measurement failed: {what.candidate.id}: {what.error or what.invalid_reason}"
    ok, why = tune.acceptable(winner, incumbent, objective)
    if not ok:
        return False, f"measured again: {why}"
    gain = (winner.median_decode / incumbent.median_decode - 1) * 100
    needed = tune.gain_needed_pct(winner, incumbent, objective)
    if not tune.clear_gain(winner, incumbent, objective):
        return False, (f"measured again beside the original: {winner.median_decode:.1f} against "
                       f"{incumbent.median_decode:.1f} tok/s ({gain:+.1f} %), not above the {needed:.1f} % its "
                       "spreads and tune_min_gain_pct require")
    return True, (f"confirmed beside the original: {winner.median_decode:.1f} against {incumbent.median_decode:.1f} "
                  f"tok/s ({gain:+.1f} %, more than the {needed:.1f} % needed)")
