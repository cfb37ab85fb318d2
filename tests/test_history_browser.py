"""history.py's HTML page in a real browser (headless Chromium): what it builds and paints."""

import copy
import re
import xml.etree.ElementTree as ET

import pytest

from browser import dump_dom, screenshot
from sglang_deploy import history
from test_history_logic import DOCUMENT, typed

SVG = "{http://www.w3.org/2000/svg}"


def rgb(hex_color: str) -> tuple:
    return tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))


def shown(page_path):
    """The charts as Chromium built them: [(series, svg root)] from its DOM, and its painted colours."""
    dom = dump_dom(page_path)
    charts = [(re.search(r'data-series="([^"]+)"', svg).group(1), ET.fromstring(svg))
              for svg in re.findall(r"<svg.*?</svg>", dom, re.S)]
    return dom, charts


def test_chromium_shows_both_charts_with_points_switches_and_floors(tmp_path):
    document = copy.deepcopy(DOCUMENT)
    for entry in document["releases"][1]["watch"]:
        entry["roofline_tok_s"] = round(139 * entry["accept_length"] / 3.25, 1)
    page = tmp_path / "history.html"
    page.write_text(history.page(typed(document), "ct129", history.floors(typed(document))))
    dom, charts = shown(page)
    assert [series for series, _ in charts] == ["decode_tok_s", "accept_length"]
    assert [len(root.findall(f"{SVG}path[@class='roofline']")) for _, root in charts] == [1, 0]
    assert "roofline 137" in dom
    for series, root in charts:
        # 2 gate squares and 3 watch dots (the busy run has no value), 3 switch lines, one floor.
        assert len(root.findall(f"{SVG}rect[@class='point gate']")) == 2
        assert len(root.findall(f"{SVG}circle")) == 3
        assert len(root.findall(f"{SVG}line[@class='switch']")) == 3
        floor = root.findall(f"{SVG}line[@class='floor']")
        assert len(floor) == 1 and 20 <= float(floor[0].get("y1")) <= 220
        labels = [text.text for text in root.iter(f"{SVG}text")]
        assert "0001-aaaaaaaa" in labels and "0002-bbbbbbbb" in labels
    assert "floor 45" in dom and "floor 2.8" in dom and "Active release: 0002-bbbbbbbb" in dom
    assert "ok DRIFT" in dom  # the table under the charts
    from PIL import Image  # comes with matplotlib (the test extra)

    image = Image.open(screenshot(page, tmp_path / "shot.png")).convert("RGB")
    colors = image.getcolors(maxcolors=1 << 22)
    for name, color in (("decode", "#1f77b4"), ("acceptance", "#d62728"), ("switch", "#2ca02c"), ("floor", "#888888"),
                        ("roofline", "#7f7f7f")):
        # thin lines are antialiased: count the pixels within a small distance of the colour
        near = sum(count for count, c in colors if sum((a - b) ** 2 for a, b in zip(c, rgb(color))) < 30 ** 2)
        assert near >= 20, f"the {name} colour {color} is painted on {near} pixels only"


def test_chromium_shows_the_empty_page(tmp_path):
    page = tmp_path / "empty.html"
    page.write_text(history.page(typed({"service": "sglang", "releases": []}), "h"))
    dom, charts = shown(page)
    assert len(charts) == 2 and dom.count("no measurements") == 2
    assert not any(root.findall(f"{SVG}circle") for _, root in charts)


@pytest.mark.parametrize("hostile", ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>'])
def test_a_hostile_release_id_stays_text(tmp_path, hostile):
    document = {"service": "sglang", "state": {"active": hostile}, "releases": [
        {"id": hostile, "history": [{"at": "2026-11-01T10:00:00+00:00", "event": "activated (deploy)"}],
         "gate": {"verdict": "pass", "at": "2026-11-01T10:01:00+00:00", "decode_tok_s": 52.0, "accept_length": 3.2,
                  "ttft_s": 0.03}, "floors": {}, "watch": []}]}
    page = tmp_path / "hostile.html"
    page.write_text(history.page(typed(document), "h"))
    dom, charts = shown(page)
    assert "<script>" not in dom and "<img" not in dom and len(charts) == 2
