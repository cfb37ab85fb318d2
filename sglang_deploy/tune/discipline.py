"""The tune's discipline (issue 36): the order of the axes by expected gain, what the budget did not reach, and the
winner measured again beside the incumbent before it is written. Pure; controller.py applies it.

A tuner that picked a configuration from noise (TurboLLM#62) and a tuned command slower than the hand one
(ggrun#16) are what this guards against: a candidate wins only by a gain larger than both measurements' spreads
(tune.clear_gain), and that gain must hold in a second, paired measurement.
"""

from __future__ import annotations

from . import search as tune
from ..hostside.contract.findings import DoctorReport
from ..rules import TUNE_AXES
from .axes import LEVER_AXES, axis_candidates, nospec_candidate
from .vocab import FLAG, candidates

# Each axis's record (rules.TUNE_AXES): its expected gain, % single-stream decode (nospec is the control: always
# first), the doctor's suspects that speak for it, and the axis it must come after (Search.with_best).
EXPECTED_GAIN_PCT = {axis.name: axis.gain_pct for axis in TUNE_AXES if axis.gain_pct is not None}
SUSPECT_AXES = {suspect: axis.name for axis in TUNE_AXES for suspect in axis.suspects}
AFTER = {axis.name: axis.after for axis in TUNE_AXES if axis.after}


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
    levers = [c.id for record in LEVER_AXES if record.name == axis
              for c in axis_candidates(record, search.flags, search.choices)]
    if axis == "graphs":
        return [c.id for c in tune.graph_candidates(search.flags, search.concurrency)] + levers
    if axis == "nccl":
        return [c.id for c in tune.nccl_candidates(search.flags, search.env, search.topology)]
    if axis == "drafter":
        return [c.id for c in tune.drafter_candidates(search.flags, search.drafters)]
    if axis in ("kv", "attention"):
        return levers
    if axis == "vocab":
        return [c.id for c in candidates(search.choices.get(FLAG))]
    if axis == "nospec":
        return ["nospec"] if nospec_candidate(search.flags) else []
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
