"""The release history as a PNG (history.py): decode tok/s and acceptance length over time, gate results and
perf-watch samples, release switches marked by id and flag changes, watch restarts, the gate's floors and the
decode roofline. matplotlib with its Agg backend (no display); an optional dependency: `pip install -e
'.[plot]'` (the `test` extra includes it). Returns what it drew, for the tests and the log."""

from __future__ import annotations

from pathlib import Path

from .history import SERIES, points, switches
from .history import floors as gate_floors

DECODE = SERIES[0][2]  # the series' labels and colours are the SVG page's (history.SERIES)
ROOFLINE, SWITCH, RESTART, WITHHELD = "#7f7f7f", "#2ca02c", "#ff7f0e", "#9467bd"


class PlotUnavailable(RuntimeError):
    pass


def _pyplot():
    try:
        # deferred: optional, matplotlib is the plot extra (pyproject.toml)
        import matplotlib
    except ImportError as error:
        raise PlotUnavailable("matplotlib is not installed (pip install -e '.[plot]'): no history.png") from error
    matplotlib.use("Agg")
    # deferred: optional, matplotlib is the plot extra (pyproject.toml)
    import matplotlib.pyplot as plt

    return plt


def _short(flags: list[str], limit: int = 2, width: int = 48) -> str:
    shown = [flag if len(flag) <= width else flag[: width - 1] + "…" for flag in flags[:limit]]
    return "\n".join(shown + ([f"+{len(flags) - limit} more"] if len(flags) > limit else []))


def picture(document, path: Path, host_name: str) -> dict:
    """Write the PNG to `path`; returns {path, points, switches: [label] (switches, restarts, withheld restarts),
    floors, roofline_points, series}."""
    plt = _pyplot()
    # deferred: optional, matplotlib is the plot extra (pyproject.toml)
    from matplotlib.lines import Line2D

    rows, marks, floors = points(document), switches(document), gate_floors(document)
    fig, (decode_ax, tau_ax) = plt.subplots(2, 1, figsize=(11, 7), sharex=True, dpi=100)
    fig.suptitle(f"{host_name}: {document.service}.service, release history (active {document.state.active})")
    drawn = {"points": 0, "roofline_points": 0, "switches": [], "floors": {}, "series": []}
    for ax, (key, label, color) in zip((decode_ax, tau_ax), SERIES):
        data = [row for row in rows if row.get(key) is not None]
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if data:
            ax.plot([row["at"] for row in data], [row[key] for row in data], color=color, linewidth=1.2)
            drawn["series"].append(key)
        for source, marker, size in (("gate", "s", 40), ("watch", "o", 22), ("after-restart", "^", 36)):
            chosen = [row for row in data if row["source"] == source]
            if chosen:
                ax.scatter([row["at"] for row in chosen], [row[key] for row in chosen], marker=marker, s=size,
                           color=color, zorder=3)
                drawn["points"] += len(chosen)
        drifting = [row for row in data if row.get("drift")]
        if drifting:
            ax.scatter([row["at"] for row in drifting], [row[key] for row in drifting], marker="x", s=70,
                       color="black", zorder=4)
        if floors.get(key):
            ax.axhline(floors[key], color="#555555", linestyle="--", linewidth=1)
            ax.annotate(f"floor {floors[key]:g}", xy=(1, floors[key]), xycoords=("axes fraction", "data"),
                        xytext=(-4, 3), textcoords="offset points", ha="right", fontsize=8, color="#555555")
            drawn["floors"][key] = floors[key]
    bound = [row for row in rows if row.get("roofline_tok_s")]
    if bound:
        decode_ax.plot([row["at"] for row in bound], [row["roofline_tok_s"] for row in bound], color=ROOFLINE,
                       linestyle=":", linewidth=1.5, marker=".")
        drawn["roofline_points"] = len(bound)
    for mark in marks:
        color = RESTART if mark["restart"] else SWITCH
        text = "restart" if mark["restart"] else mark["release"] + ("\n" + _short(mark["flags"]) if mark["flags"] else "")
        for ax in (decode_ax, tau_ax):
            ax.axvline(mark["at"], color=color, linestyle="--", linewidth=1)
        decode_ax.annotate(text, xy=(mark["at"], 1), xycoords=("data", "axes fraction"), xytext=(3, -3),
                           textcoords="offset points", va="top", fontsize=7, color=color)
        drawn["switches"].append(text)
    for row in rows:
        if row["source"] == "restart-withheld":  # drift past the day's restart cap: recorded, not acted on
            for ax in (decode_ax, tau_ax):
                ax.axvline(row["at"], color=WITHHELD, linestyle=":", linewidth=1.2)
            decode_ax.annotate("restart withheld\n(daily cap)", xy=(row["at"], 1), xycoords=("data", "axes fraction"),
                               xytext=(-3, -3), textcoords="offset points", va="top", ha="right", fontsize=7,
                               color=WITHHELD)
            drawn["switches"].append("restart withheld")
    for ax in (decode_ax, tau_ax):
        ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.12)  # room for the switch labels
    if not rows:
        decode_ax.text(0.5, 0.5, "no measurements", transform=decode_ax.transAxes, ha="center")
    legend = [Line2D([], [], color=DECODE, marker="s", linestyle="", label="gate at a switch"),
              Line2D([], [], color=DECODE, marker="o", linestyle="", label="perf watch"),
              Line2D([], [], color="black", marker="x", linestyle="", label="drift"),
              Line2D([], [], color=ROOFLINE, linestyle=":", label="roofline (bandwidth bound at the measured τ)"),
              Line2D([], [], color=SWITCH, linestyle="--", label="release switch (id, flags changed)"),
              Line2D([], [], color=RESTART, linestyle="--", label="restart by the watch"),
              Line2D([], [], color=WITHHELD, linestyle=":", label="restart withheld (daily cap)"),
              Line2D([], [], color="#555555", linestyle="--", label="gate floor")]
    fig.legend(handles=legend, fontsize=8, loc="lower center", ncol=4, frameon=False)
    tau_ax.set_xlabel("time (UTC)")
    fig.autofmt_xdate(bottom=0.2)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return dict(drawn, path=str(path))
