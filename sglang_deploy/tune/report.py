"""What the tune reports: the results table, the Pareto front, the gain per content class, the steps plot and the
tuned profile's comments. Text and pictures only; the choice is search.py's.
"""

from __future__ import annotations

from pathlib import Path

from ..rules import TUNE_AXES
from .search import BASELINE, Measured, Objective, acceptable, pareto, spec_settings
from .axes import slower_than_nospec


def change_comment(name: str, before, after, measured: Measured, baseline: Measured) -> str:
    gain = (measured.decode / baseline.decode - 1) * 100 if baseline.decode else 0.0
    aggregate = ""
    if measured.aggregate and baseline.aggregate:
        aggregate = f", aggregate {(measured.aggregate / baseline.aggregate - 1) * 100:+.1f} %"
    return (f"tuned: {before if before is not None else '(unset)'} -> {after if after is not None else '(unset)'}; "
            f"single stream {gain:+.1f} % ({baseline.decode:.1f} -> {measured.decode:.1f} tok/s, spread "
            f"{measured.noise() or 0:.1f} % vs {baseline.noise() or 0:.1f} %){aggregate}")


def table(results: list[Measured], baseline: Measured | None, winner: Measured | None, objective: Objective,
          original_flags: dict, assumed=None) -> str:
    header = (f"{'candidate':56} {'axis':9} {'steps':>5} {'topk':>4} {'draft':>5} {'decode':>7} {'spread':>7} {'tau':>5} "
              f"{'aggr':>7} {'vs orig':>8}  note")
    lines = [header, "-" * len(header)]
    pareto_ids = {m.candidate.id for m in pareto(results)}
    slower = slower_than_nospec(results)
    for m in results:
        flags = {**original_flags, **m.candidate.flag_changes}
        spec = spec_settings({k: v for k, v in flags.items() if v is not None}) or (0, 0, 0)
        if m.candidate.draft:  # SGLang forces steps and topk 1; the draft tokens are the drafter's block
            spec = (1, 1, "blk")
        ok, why = acceptable(m, baseline, objective)
        if m.measured:
            vs = f"{(m.decode / baseline.decode - 1) * 100:+.1f} %" if baseline and baseline.decode else "-"
            tau = f"{m.tau:5.2f}" if m.tau else f"{'-':>5}"  # no speculation: no acceptance length
            cols = (f"{m.decode:7.1f} {m.noise() or 0:6.1f}% {tau} "
                    f"{m.aggregate if m.aggregate is not None else 0:7.1f} {vs:>8}")
        else:
            cols = f"{'-':>7} {'-':>7} {'-':>5} {'-':>7} {'-':>8}"
        notes = []
        if winner is not None and m is winner:
            notes.append("WINNER")
        if m.candidate.id == BASELINE.id:
            notes.append("original")
        if m.candidate.id in pareto_ids:
            notes.append("pareto")
        if m.candidate.id in slower:
            notes.append(f"SLOWER THAN NO SPECULATION ({slower[m.candidate.id]:.1f})")
        if m.candidate.axis == "nospec":
            notes.append("control: no speculation")
        path = (m.allreduce or {}).get("path")
        if path and (m.candidate.axis == "nccl" or path != ((baseline.allreduce if baseline else None) or {}).get(
                "path", path)):
            notes.append(f"all-reduce: {path}" + (" (custom FELL BACK)" if "SGLang's log" in
                                                   (m.allreduce or {}).get("why", "") else ""))
        if m.resumed:
            notes.append("resumed")
        why_assumed = assumed(m.candidate) if assumed and m.candidate.id != BASELINE.id else None
        if why_assumed and m.measured:
            notes.append(f"assumed, not measured here: {why_assumed}; never adopted")
        if not ok and why:
            notes.append(why)
        lines.append(f"{m.candidate.id[:56]:56} {m.candidate.axis[:9]:9} {spec[0]:>5} {spec[1]:>4} {spec[2]:>5} {cols}  {'; '.join(notes)}")
    return "\n".join(lines)


KINDS = ("prose", "code", "chat")


def kind_gains(measured: Measured, baseline: Measured) -> str:
    """'prose +19 %, code +52 %, chat +35 % (spread x %)': the gain per content class of the prompt mix."""
    mine, theirs = measured.by_kind(), baseline.by_kind()
    parts = [f"{kind} {(mine[kind] / theirs[kind] - 1) * 100:+.0f} %" for kind in KINDS
             if mine.get(kind) and theirs.get(kind)]
    return ", ".join(parts) or "no per-class figures"


def kind_table(results: list[Measured], baseline: Measured | None) -> str:
    """Median decode per content class for the original and every measured drafter, no-speculation, KV dtype,
    attention and token-map candidate (acceptance, and so their gain, depends on the text)."""
    axes = {axis.name for axis in TUNE_AXES if axis.by_kind}
    rows = [m for m in results if m.measured and (m.candidate.axis in axes or m is baseline) and m.by_kind()]
    if baseline is None or len(rows) < 2:
        return ""
    lines = ["per content class (median single-stream decode, tok/s):",
             f"  {'candidate':40} " + " ".join(f"{kind:>7}" for kind in KINDS) + "  vs original"]
    for m in rows:
        kinds = m.by_kind()
        cells = " ".join(f"{kinds[kind]:7.1f}" if kinds.get(kind) else f"{'-':>7}" for kind in KINDS)
        lines.append(f"  {m.candidate.id[:40]:40} {cells}  " + ("(original)" if m is baseline else kind_gains(m, baseline)))
    return "\n".join(lines)


def pareto_table(results: list[Measured]) -> str:
    points = sorted(pareto(results), key=lambda m: -m.decode)
    if len(points) <= 1:
        return ""
    lines = ["Pareto front (single-stream decode vs aggregate; neither beats the other on both):"]
    lines += [f"  {m.candidate.id:56} {m.decode:7.1f} tok/s single stream, {m.aggregate:7.1f} tok/s aggregate"
              for m in points]
    return "\n".join(lines)


def tuned_comments(winner: Measured, baseline: Measured, original_flags: dict, original_env: dict) -> dict:
    """The tuned profile's comment on each flag and variable the winner changes (change_comment); a drafter's
    gain also by content class."""
    comments = {}
    for name, value in winner.candidate.flags:
        comments[name] = change_comment(name, original_flags.get(name), value, winner, baseline)
    if winner.candidate.draft and "--speculative-algorithm" in comments:  # the drafter's gain by content class
        comments["--speculative-algorithm"] += "; " + kind_gains(winner, baseline)
    for name, value in winner.candidate.env:
        shown = dict(value)["value"] if isinstance(value, tuple) else value
        before = original_env.get(name)
        before = before.get("value") if isinstance(before, dict) else before
        comments[name] = change_comment(name, before, shown, winner, baseline)
    return comments


def steps_plot(results: list[Measured], original_flags: dict, path: Path) -> Path | None:
    """Single-stream decode over speculative steps, a line per topk, written to `path`; None without matplotlib
    or without a measured speculative candidate."""
    try:
        # deferred: optional, matplotlib is the plot extra (pyproject.toml)
        import matplotlib

        matplotlib.use("Agg")
        # deferred: optional, matplotlib is the plot extra (pyproject.toml)
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    by_topk: dict = {}
    for m in results:
        if not m.measured:
            continue
        flags = {**original_flags, **m.candidate.flag_changes}
        spec = spec_settings({k: v for k, v in flags.items() if v is not None})
        if spec and m.candidate.axis in ("spec", "baseline"):
            by_topk.setdefault(spec[1], []).append((spec[0], m.decode))
    if not by_topk:
        return None
    figure, axes = plt.subplots(figsize=(6, 4))
    for topk, points in sorted(by_topk.items()):
        points.sort()
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"topk {topk}")
    axes.set_xlabel("speculative steps")
    axes.set_ylabel("single-stream decode tok/s (robust score)")
    axes.legend()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
