"""The release history as a table and a picture (history.py): gate results and perf-watch samples of every
retained release, over time, with the release switches marked. Pure functions of the store's history
(hostside/contract/history.StoreHistory, read through its attributes); no external assets."""

from __future__ import annotations

import datetime
import html

from .hostside.contract.history import StoreHistory
from .hostside.store import environment_differences, flag_differences

SERIES = (("decode_tok_s", "decode tok/s (1 stream)", "#1f77b4"), ("accept_length", "acceptance length τ", "#d62728"))


def _time(text):
    try:
        value = datetime.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def points(document: StoreHistory) -> list[dict]:
    """One row per measurement, oldest first: source gate|watch, release, time, decode, tau, ttft, status."""
    rows = []
    for release in document.releases:
        gate = release.gate
        if gate and _time(gate.at):
            rows.append({"at": _time(gate.at), "release": release.id, "source": "gate",
                         "status": gate.verdict or "-", "decode_tok_s": gate.decode_tok_s,
                         "accept_length": gate.accept_length, "ttft_s": gate.ttft_s, "roofline_tok_s": None})
        for entry in release.watch:
            if not _time(entry.at):
                continue
            rows.append({"at": _time(entry.at), "release": release.id,
                         "source": "watch" if entry.event == "measure" else entry.event,
                         "status": (entry.status or "-") + (" DRIFT" if entry.drift else ""),
                         "decode_tok_s": entry.decode_tok_s, "accept_length": entry.accept_length,
                         "ttft_s": entry.ttft_s, "roofline_tok_s": entry.roofline_tok_s, "drift": bool(entry.drift)})
    return sorted(rows, key=lambda row: row["at"])


def switches(document: StoreHistory) -> list[dict]:
    """Each time a release became active or the watch restarted it: {at, release, event, restart, flags},
    oldest first; flags: the command-line flags, then the environment variables, that differ from the release
    active before (activations)."""
    out = []
    argv = {release.id: release.exec_start for release in document.releases}
    env = {release.id: release.environment for release in document.releases}
    for release in document.releases:
        for event in release.history:
            if event.event.startswith(("activated", "restarted by the watch", "interrupted")) and _time(event.at):
                out.append({"at": _time(event.at), "release": release.id, "event": event.event,
                            "restart": event.event.startswith("restarted")})
    out.sort(key=lambda item: item["at"])
    previous = None
    for item in out:
        item["flags"] = []
        if not item["restart"]:
            if previous and previous != item["release"] and argv.get(previous) and argv.get(item["release"]):
                changed = flag_differences(argv[item["release"]], argv[previous])
                if env.get(previous) is not None and env.get(item["release"]) is not None:
                    changed += environment_differences(env[item["release"]], env[previous])
                item["flags"] = changed or ["(same flags)"]
            previous = item["release"]
    return out


def floors(document: StoreHistory) -> dict:
    """The active release's gate floors (decode_tok_s, accept_length), drawn as dashed lines."""
    release = document.release(document.state.active)
    return {key: value for key, value in (release.floors.to_dict() if release else {}).items() if value}


def _fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def table(document: StoreHistory) -> str:
    header = f"{'time (UTC)':20} {'release':14} {'source':14} {'status':16} {'tok/s':>7} {'tau':>5} {'TTFT ms':>8}"
    lines = [header, "-" * len(header)]
    marks = switches(document)
    for row in points(document):
        while marks and marks[0]["at"] <= row["at"]:
            mark = marks.pop(0)
            lines.append(_mark_line(mark))
        ttft = None if row["ttft_s"] is None else row["ttft_s"] * 1000
        lines.append(f"{row['at']:%Y-%m-%d %H:%M:%S}  {row['release']:14} {row['source']:14} {row['status']:16} "
                     f"{_fmt(row['decode_tok_s']):>7} {_fmt(row['accept_length'], 2):>5} {_fmt(ttft, 0):>8}")
    for mark in marks:
        lines.append(_mark_line(mark))
    return "\n".join(lines)


def _mark_line(mark):
    flags = f" [{'; '.join(mark['flags'])}]" if mark.get("flags") else ""
    return f"{mark['at']:%Y-%m-%d %H:%M:%S}  --> {mark['release']} {mark['event']}{flags}"


def _chart(rows, marks, key, label, color, floor=None, width=900, height=260):
    """One inline SVG line chart of `key` over time; switches as dashed verticals labelled by release id."""
    data = [(row["at"].timestamp(), row[key], row["source"]) for row in rows if row.get(key) is not None]
    left, right, top, bottom = 60, 20, 20, 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{html.escape(label)} over time" data-series="{key}">',
           f'<text x="{left}" y="14" font-size="13">{html.escape(label)}</text>']
    if not data:
        svg.append(f'<text x="{left}" y="{height // 2}" font-size="12">no measurements</text></svg>')
        return "\n".join(svg)
    times = [t for t, _, _ in data] + [m["at"].timestamp() for m in marks]
    t0, t1 = min(times), max(times)
    bound = [(row["at"].timestamp(), row["roofline_tok_s"]) for row in rows
             if key == "decode_tok_s" and row.get("roofline_tok_s")]
    values = [v for _, v, _ in data] + ([floor] if floor else []) + [v for _, v in bound]
    v0, v1 = 0.0, max(values) * 1.15 or 1.0

    def x(t):
        return left + (t - t0) / ((t1 - t0) or 1) * (width - left - right)

    def y(v):
        return height - bottom - (v - v0) / (v1 - v0) * (height - top - bottom)

    svg.append(f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>')
    svg.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#999"/>')
    for tick in (v1 / 4 * i for i in range(5)):
        svg.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" font-size="10" text-anchor="end">{tick:.1f}</text>')
    if floor:
        svg.append(f'<line class="floor" x1="{left}" y1="{y(floor):.1f}" x2="{width - right}" y2="{y(floor):.1f}" '
                   f'stroke="#888" stroke-dasharray="2,3"/><text x="{width - right}" y="{y(floor) - 3:.1f}" '
                   f'font-size="10" text-anchor="end">floor {floor}</text>')
    for mark in marks:
        mx = x(mark["at"].timestamp())
        svg.append(f'<line class="switch" x1="{mx:.1f}" y1="{top}" x2="{mx:.1f}" y2="{height - bottom}" stroke="#2ca02c" '
                   f'stroke-dasharray="4,3"><title>{html.escape(_mark_line(mark).split("-->", 1)[1].strip())}</title></line>'
                   f'<text x="{mx + 3:.1f}" y="{top + 10}" font-size="10" fill="#2ca02c">'
                   f'{"restart" if mark.get("restart") else html.escape(mark["release"])}</text>')
    if bound:
        line = " ".join(f"{'M' if i == 0 else 'L'}{x(t):.1f},{y(v):.1f}" for i, (t, v) in enumerate(bound))
        svg.append(f'<path class="roofline" d="{line}" fill="none" stroke="#7f7f7f" stroke-dasharray="1,3" '
                   f'stroke-width="1.5"><title>roofline (bandwidth bound at the measured τ)</title></path>'
                   f'<text x="{x(bound[-1][0]) - 4:.1f}" y="{y(bound[-1][1]) - 4:.1f}" font-size="10" '
                   f'text-anchor="end" fill="#7f7f7f">roofline {bound[-1][1]:.0f}</text>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{x(t):.1f},{y(v):.1f}" for i, (t, v, _) in enumerate(data))
    svg.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
    for t, v, source in data:
        shape = "rect" if source == "gate" else "circle"
        if shape == "rect":
            svg.append(f'<rect class="point gate" x="{x(t) - 4:.1f}" y="{y(v) - 4:.1f}" width="8" height="8" fill="{color}">'
                       f'<title>gate {v:.2f}</title></rect>')
        else:
            svg.append(f'<circle class="point {html.escape(source)}" cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{color}">'
                       f'<title>{html.escape(source)} {v:.2f}</title></circle>')
    first, last = datetime.datetime.fromtimestamp(t0, datetime.timezone.utc), datetime.datetime.fromtimestamp(t1, datetime.timezone.utc)
    svg.append(f'<text x="{left}" y="{height - 12}" font-size="10">{first:%Y-%m-%d %H:%M}</text>'
               f'<text x="{width - right}" y="{height - 12}" font-size="10" text-anchor="end">{last:%Y-%m-%d %H:%M} UTC</text>')
    svg.append("</svg>")
    return "\n".join(svg)


def release_list(document: StoreHistory) -> str:
    """Every retained release, measured or not (a release that failed to start has no point to draw)."""
    active = document.state.active
    lines = []
    for release in document.releases:
        gate = release.gate
        measured = (f"gate {gate.verdict} {_fmt(gate.decode_tok_s)} tok/s tau {_fmt(gate.accept_length, 2)}"
                    if gate and gate.verdict else "never measured by the gate")
        lines.append(f"{'*' if release.id == active else ' '} {release.id:14} {release.created or '?':26} "
                     f"{release.verdict or 'unverified':13} {measured}; {len(release.watch)} watch entries")
    return "\n".join(lines)


def page(document: StoreHistory, host_name: str, floors: dict | None = None) -> str:
    """A self-contained HTML page: two inline SVG charts and the table (no scripts, styles or fonts from outside)."""
    floors = floors or {}
    rows, marks = points(document), switches(document)
    charts = "\n".join(_chart(rows, marks, key, label, color, floors.get(key)) for key, label, color in SERIES)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(host_name)}: "
            f"{html.escape(document.service)} history</title></head>\n<body style=\"font-family: sans-serif\">\n"
            f"<h1>{html.escape(host_name)}: {html.escape(document.service)}.service, release history</h1>\n"
            f"<p>Active release: {html.escape(str(document.state.active))}. Squares: the gate at "
            f"a switch; dots: the perf watch; dashed green lines: release switches and watch restarts.</p>\n"
            f"{charts}\n<pre>{html.escape(table(document))}</pre>\n"
            f"<h2>Retained releases</h2>\n<pre>{html.escape(release_list(document))}</pre>\n</body></html>\n")
