"""Tune, the pure part: candidates from a profile, robust scores, the search and the choice.

The verb (tune.py at the top) validates each candidate with SGLang's parser and the rules, runs it on the
host as a temporary release (hostside/tune_session.py) and feeds the measurements back here. Nothing in
this module touches a host; the search is driven through a `measure(candidate)` callback so tests run it
against a model. A candidate's profile text is edit.py's, the tables and the plot report.py's.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass

from ..rules import AXES  # the search's order, named below tune/ (the tune_space setting reads it too)
from .axes import NCCL_PROTOS_PCIE, LeverAxes, lever_candidates, nccl_candidates  # noqa: F401
from .candidate import (BASELINE, ROBUST_K, Candidate, Measured, mad, robust_score,  # noqa: F401 - the search's names
                        spec_settings, spread_pct)

STEPS_RANGE = (1, 2, 3, 4, 5, 6)
TOPKS = (1, 2, 4)
SPEC_COUNT_FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")


class BudgetExhausted(Exception):
    """The next measurement would not fit the remaining budget."""


# --- speculative settings -------------------------------------------------------------------------

def matching_draft_tokens(steps: int, topk: int) -> int:
    """topk 1: the chain (steps + 1, SGLang forces it); topk k: the whole tree SGLang can build, 1 + k x steps."""
    return steps + 1 if topk == 1 else 1 + topk * steps


def spec_id(steps: int, topk: int, drafts: int) -> str:
    return f"steps{steps}-topk{topk}-draft{drafts}"


def spec_candidate(flags: dict, steps: int, topk: int) -> Candidate:
    drafts = matching_draft_tokens(steps, topk)
    changes = {"--speculative-num-steps": steps, "--speculative-eagle-topk": topk,
               "--speculative-num-draft-tokens": drafts}
    if topk > 1 and "--page-size" not in flags:
        # SGLang drafts topk > 1 trees only with page size 1 unless the attention backend is tree-capable
        # (speculative_hook.py); stated explicitly, as SGLang resolves it on the A6000 anyway (flashinfer, 1).
        changes["--page-size"] = 1
    if topk == 1 and "--page-size" not in flags:
        changes["--page-size"] = None
    changes = {name: value for name, value in changes.items() if flags.get(name) != value}
    return Candidate(spec_id(steps, topk, drafts), "spec", tuple(sorted(changes.items())))


# --- drafters ----------------------------------------------------------------------------------------

def drafter_name(draft: dict) -> str:
    """A short, unique name for an offered drafter: its algorithm, repository or directory name, and a digest of
    its source and manifest (two drafters of one name, or one offered with two algorithms, stay apart)."""
    source = draft["source"]
    tail = re.sub(r"[^A-Za-z0-9._-]", "-", source.split("@")[0].rstrip("/").split("/")[-1])[:32]
    digest = hashlib.sha256(json.dumps([source, draft.get("manifest"), draft.get("algorithm") or "DFLASH"])
                            .encode()).hexdigest()[:6]
    return f"{(draft.get('algorithm') or 'DFLASH').lower()}-{tail}-{digest}"


def drafter_candidates(flags: dict, drafters: list[dict]) -> list[Candidate]:
    """One candidate per offered drafter (tune.drafters): its algorithm, its draft model as speculative.draft, and
    the step/topk/draft-token flags removed (SGLang forces steps 1 and reads the block size from the draft)."""
    out = []
    for draft in drafters:
        changes = {"--speculative-algorithm": draft.get("algorithm") or "DFLASH",
                   **{name: None for name in SPEC_COUNT_FLAGS if name in flags}}
        entry = tuple(sorted((key, value) for key, value in draft.items()
                             if key in ("source", "manifest", "config") and value is not None))
        out.append(Candidate(f"drafter-{drafter_name(draft)}", "drafter", tuple(sorted(changes.items())), (), entry))
    return out


# --- the other axes ---------------------------------------------------------------------------------

def graph_candidates(flags: dict, concurrency: int) -> list[Candidate]:
    """Decode graph batch limit against max-running-requests: equal (the rule decode-graph-covers-batch), at
    several sizes around the measured concurrency; the declared pair is the baseline."""
    running = flags.get("--max-running-requests")
    graph_bs = flags.get("--cuda-graph-max-bs-decode")
    sizes = sorted({max(concurrency, 1), max(2 * concurrency, 8), 16, 32} - {None})
    out = []
    for size in sizes:
        changes = {"--max-running-requests": size, "--cuda-graph-max-bs-decode": size}
        changes = {k: v for k, v in changes.items() if flags.get(k) != v}
        if changes and not (running == size and graph_bs == size):
            out.append(Candidate(f"running{size}-graphbs{size}", "graphs", tuple(sorted(changes.items()))))
    return out


@dataclass(frozen=True)
class Objective:
    min_aggregate_fraction: float = 0.95  # of the original release's aggregate score
    noise_max_pct: float = 5.0  # a candidate noisier than this cannot win
    tie_pct: float = 1.0  # within this of the best: prefer fewer draft tokens, then fewer changes
    min_gain_pct: float = 2.0  # a change must beat the original by this much (a noise-level gain changes nothing)


def acceptable(measured: Measured, baseline: Measured | None, objective: Objective) -> tuple[bool, str | None]:
    if not measured.valid:
        return False, f"invalid: {measured.invalid_reason}"
    if measured.error:
        return False, measured.error
    if not measured.measured:
        return False, "no measurement"
    noise = measured.noise()
    if noise is not None and noise > objective.noise_max_pct:
        return False, f"noisy: spread {noise:.1f} % > {objective.noise_max_pct:g} %"
    if baseline and baseline.aggregate and measured.aggregate is not None:
        floor = objective.min_aggregate_fraction * baseline.aggregate
        if measured.aggregate < floor:
            return False, (f"aggregate {measured.aggregate:.1f} tok/s < {objective.min_aggregate_fraction * 100:g} % "
                           f"of the original's {baseline.aggregate:.1f}")
    return True, None


def draft_tokens_of(candidate: Candidate, original_flags: dict) -> int:
    if candidate.draft:
        return 99  # a drafter's block (16 for DFlash b16): in a tie the profile's own speculation stays
    flags = {**original_flags, **candidate.flag_changes}
    spec = spec_settings({k: v for k, v in flags.items() if v is not None})
    return spec[2] if spec else 0


def gain_needed_pct(measured: Measured, baseline: Measured, objective: Objective) -> float:
    """What a candidate must gain over the original to count: min_gain_pct, or more when the two measurements'
    spreads together are larger (a gain inside the noise of either is no gain)."""
    return max(objective.min_gain_pct, math.hypot(measured.noise() or 0.0, baseline.noise() or 0.0))


def clear_gain(measured: Measured, baseline: Measured, objective: Objective) -> bool:
    """The medians differ by more than gain_needed_pct (the robust scores already subtract each one's own noise:
    comparing them would credit a steady candidate with the original's noise)."""
    mine, theirs = measured.median_decode, baseline.median_decode
    return bool(mine and theirs) and mine >= theirs * (1 + gain_needed_pct(measured, baseline, objective) / 100)


def choose(results: list[Measured], baseline: Measured, objective: Objective, original_flags: dict,
           assumed=None) -> Measured:
    """The best single-stream decode among acceptable candidates that beat the original by gain_needed_pct; within
    tie_pct of it, the one with the fewest draft tokens, then the fewest changes (vLLM's rule: the smallest K
    within 1 % of the best). `assumed(candidate) -> why or None`: a candidate whose speed rests on an assumed factor
    of the simulator (not measured on that card and engine) is never chosen."""
    ok = [m for m in results if acceptable(m, baseline, objective)[0]
          and not (assumed and m.candidate.id != BASELINE.id and assumed(m.candidate))]
    if baseline is not None and baseline.decode:
        ok = [m for m in ok if m is baseline or m.candidate.id == BASELINE.id or clear_gain(m, baseline, objective)]
    if not ok:
        return baseline
    best = max(m.decode for m in ok)
    close = [m for m in ok if m.decode >= best * (1 - objective.tie_pct / 100)]
    return min(close, key=lambda m: (draft_tokens_of(m.candidate, original_flags),
                                     len(m.candidate.flags) + len(m.candidate.env), -m.decode))


def pareto(results: list[Measured]) -> list[Measured]:
    """Measured candidates no other beats on both single-stream decode and aggregate."""
    points = [m for m in results if m.measured and m.aggregate is not None]
    return [m for m in points if not any(o is not m and o.decode >= m.decode and o.aggregate >= m.aggregate
                                         and (o.decode > m.decode or o.aggregate > m.aggregate) for o in points)]


# --- the search -----------------------------------------------------------------------------------

class Search(LeverAxes):
    """Coordinate descent (nospec, kv and attention: axes.LeverAxes): speculative steps at the current topk (walking in the improving direction), then
    topk 1/2/4 at the best steps (and the steps around it when a tree wins), then the graph sizes, then the
    NCCL settings; each axis starts from the best so far. `measure(candidate) -> Measured` runs one (or
    answers from saved results); it raises BudgetExhausted when the next one would not fit."""

    def __init__(self, original_flags: dict, original_env: dict, axes, concurrency: int, topology: str | None,
                 measure, objective: Objective = Objective(), steps_range=STEPS_RANGE, topks=TOPKS, drafters=(),
                 choices: dict | None = None, order: list | None = None, assumed=None):
        self.flags, self.env = original_flags, original_env
        # candidate -> why its speed is an assumption of the simulator, or None (the controller's, on a simulated
        # host: sim/hardware.assumed_factors); such a candidate is measured and shown, never adopted or built on
        self.assumed = assumed
        self.choices = choices or {}  # flag -> axes.Accepted: the values SGLang's resolution accepts
        self.drafters = list(drafters)
        self.axes = [axis for axis in (order or AXES) if axis in axes]  # order: discipline.axis_order
        self.concurrency, self.topology = concurrency, topology
        self.measure_fn = measure
        self.objective = objective
        self.steps_range, self.topks = tuple(steps_range), tuple(topks)
        self.results: dict[str, Measured] = {}
        self.baseline: Measured | None = None
        self.stopped: str | None = None
        self.stopped_axis: str | None = None  # the axis the budget stopped in (discipline.unreached)
        self.on_invalid = None  # called with each row recorded without a measurement (vocab's not-built sizes)

    def planned(self) -> int:
        """An upper bound of the candidates this search may measure (for the ETA)."""
        count = 1
        if "spec" in self.axes and spec_settings(self.flags):
            count += len(self.steps_range) - 1 + len(self.topks) - 1 + 2
        if "drafter" in self.axes:
            count += len(self.drafters)
        count += self.lever_count()
        if "graphs" in self.axes:
            count += len(graph_candidates(self.flags, self.concurrency))
        if "nccl" in self.axes:
            count += len(nccl_candidates(self.flags, self.env, self.topology))
        return count

    def run_one(self, candidate: Candidate) -> Measured:
        if candidate.id not in self.results:
            self.results[candidate.id] = self.measure_fn(candidate)
        return self.results[candidate.id]

    def value(self, measured: Measured) -> float:
        ok, _ = acceptable(measured, self.baseline, self.objective)
        if ok and self.assumed and measured.candidate.id != BASELINE.id and self.assumed(measured.candidate):
            return -math.inf  # an assumed gain is not built on by a later axis either
        return measured.decode if ok else -math.inf

    def run(self) -> Measured:
        try:
            self.baseline = self.run_one(BASELINE)
            best = self.baseline
            for axis in self.axes:
                self.stopped_axis = axis
                best = getattr(self, f"axis_{axis}")(best)
            self.stopped_axis = None
        except BudgetExhausted as why:
            self.stopped = str(why) or "budget exhausted"
        return choose(list(self.results.values()), self.baseline, self.objective, self.flags, self.assumed) \
            if self.baseline else None

    def better(self, measured: Measured, than: Measured) -> bool:
        return self.value(measured) > self.value(than)

    def axis_spec(self, best: Measured) -> Measured:
        current = spec_settings(self.flags)
        if not current:
            return best
        steps0, topk0, _ = current

        def at(steps, topk):
            return self.run_one(self.with_best(best, spec_candidate(self.flags, steps, topk)))

        def walk(topk, start_steps, start):
            top, top_steps = start, start_steps
            for direction in (+1, -1):
                steps = start_steps + direction
                while steps in self.steps_range:
                    measured = at(steps, topk)
                    if not self.better(measured, top):
                        break
                    top, top_steps = measured, steps
                    steps += direction
                if top_steps != start_steps:
                    break  # it moved: the other direction was already worse than the start
            return top, top_steps

        top, top_steps = walk(topk0, steps0, best)
        for topk in self.topks:
            if topk == topk0:
                continue
            measured = at(top_steps, topk)
            if self.better(measured, top):
                tree_top, tree_steps = walk(topk, top_steps, measured)
                top, top_steps = tree_top, tree_steps
        return top if self.better(top, best) else best

    def with_best(self, best: Measured, candidate: Candidate) -> Candidate:
        """Apply a candidate of one axis on top of the best so far from the other axes."""
        if best.candidate.id == BASELINE.id or best.candidate.axis == candidate.axis:
            return candidate
        if candidate.axis == "drafter" and best.candidate.axis == "spec":
            return candidate  # a drafter replaces the speculation the spec axis tuned
        merged = best.candidate.merged(candidate)
        return Candidate(f"{best.candidate.id}+{candidate.id}", candidate.axis, merged.flags, merged.env, merged.draft)

    def clearly_better(self, measured: Measured, than: Measured) -> bool:
        """For a knob (graphs, nccl): better, and by more than the two measurements' noise (clear_gain), so a
        later axis does not build on a change that only won by noise."""
        return self.better(measured, than) and clear_gain(measured, than, self.objective)

    def clear_winner(self, best: Measured, candidates) -> Measured:
        """Each candidate on top of the best so far; the one that beats it by more than the noise (clearly_better)."""
        top = best
        for candidate in candidates:
            measured = self.run_one(self.with_best(best, candidate))
            if self.clearly_better(measured, top):
                top = measured
        return top

    def axis_drafter(self, best: Measured) -> Measured:
        """Each offered drafter against the best speculation so far (the profile's own, tuned), on the whole mix."""
        return self.clear_winner(best, drafter_candidates(self.flags, self.drafters))

    def axis_graphs(self, best: Measured) -> Measured:
        return self.clear_winner(best, graph_candidates(self.flags, self.concurrency)
                                 + lever_candidates("--cuda-graph-backend-decode", self.flags, self.choices))

    def axis_nccl(self, best: Measured) -> Measured:
        return self.clear_winner(best, nccl_candidates(self.flags, self.env, self.topology))


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"
