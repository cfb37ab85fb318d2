"""history.py's table and page from a store document (no host)."""

import copy
import re
import xml.etree.ElementTree as ET

import pytest

from sglang_deploy import history
from sglang_deploy.hostside.contract.history import StoreHistory

DOCUMENT = {
    "service": "sglang", "state": {"active": "0002-bbbbbbbb"},
    "releases": [
        {"id": "0001-aaaaaaaa", "history": [{"at": "2026-11-01T10:00:00+00:00", "event": "activated (deploy)"}],
         "gate": {"verdict": "pass", "at": "2026-11-01T10:01:00+00:00", "decode_tok_s": 52.0, "accept_length": 3.2,
                  "ttft_s": 0.03}, "floors": {"decode_tok_s": 45, "accept_length": 2.8},
         "watch": [{"at": "2026-11-01T16:00:00+00:00", "event": "measure", "status": "ok", "decode_tok_s": 51.0,
                    "accept_length": 3.1, "ttft_s": 0.03, "drift": []},
                   {"at": "2026-11-01T22:00:00+00:00", "event": "measure", "status": "busy"}]},
        {"id": "0002-bbbbbbbb", "history": [{"at": "2026-11-02T10:00:00+00:00", "event": "activated (deploy)"},
                                            {"at": "2026-11-02T17:00:00+00:00", "event": "restarted by the watch (drift)"}],
         "gate": {"verdict": "pass", "at": "2026-11-02T10:01:00+00:00", "decode_tok_s": 55.0, "accept_length": 3.4,
                  "ttft_s": 0.03}, "floors": {"decode_tok_s": 45, "accept_length": 2.8},
         "watch": [{"at": "2026-11-02T16:59:00+00:00", "event": "measure", "status": "ok", "decode_tok_s": 19.0,
                    "accept_length": 1.2, "ttft_s": 0.03, "drift": ["acceptance length 1.20 is below 2.8"]},
                   {"at": "2026-11-02T17:00:10+00:00", "event": "after-restart", "status": "ok", "decode_tok_s": 50.0,
                    "accept_length": 3.2, "ttft_s": 0.03, "drift": []}]},
    ],
}


def typed(document):
    """A test's document as `hostside.store history` prints it (contract/history.StoreHistory): what it leaves out filled
    with the values of a release that has none (no created time, no floors, watch entries without a unix time)."""
    releases = [{"created": "2026-10-31T00:00:00+00:00", "verdict": None, "exec_start": [], "environment": {},
                 "history": [], "gate": None, **release,
                 "floors": {"decode_tok_s": None, "accept_length": None, **release.get("floors", {})},
                 "watch": [{"unix": 0, "release": release["id"], **entry} for entry in release.get("watch", [])]}
                for release in document["releases"]]
    return StoreHistory.from_dict({"state": {}, **document, "releases": releases})


def test_table_orders_measurements_and_marks_switches():
    text = history.table(typed(DOCUMENT))
    lines = text.splitlines()
    assert lines[2] == "2026-11-01 10:00:00  --> 0001-aaaaaaaa activated (deploy)"
    assert "ok DRIFT" in text and "busy" in text and "after-restart" in text
    order = [line.split()[2] for line in lines[2:] if not line.split()[2] == "-->"]
    assert order == ["0001-aaaaaaaa"] * 3 + ["0002-bbbbbbbb"] * 3
    assert text.index("restarted by the watch") < text.index("after-restart")


def test_page_is_self_contained_and_draws_both_series():
    page = history.page(typed(DOCUMENT), "ct129", history.floors(typed(DOCUMENT)))
    assert not re.search(r"(src|href)=|<script|<link|@import|url\(", page)
    body = page.split("<body", 1)[1].split("<pre>")[0]
    svgs = re.findall(r"<svg.*?</svg>", body, re.S)
    assert len(svgs) == 2
    for svg in svgs:
        root = ET.fromstring(svg)  # well-formed XML
        ns = "{http://www.w3.org/2000/svg}"
        assert len(root.findall(f"{ns}line[@class='switch']")) == 3  # 2 activations + 1 restart
        assert len(root.findall(f"{ns}rect[@class='point gate']")) == 2
        assert len(root.findall(f"{ns}circle")) == 3  # busy run has no value
        assert root.find(f"{ns}line[@class='floor']") is not None
    assert "0002-bbbbbbbb" in svgs[0] and "floor 2.8" in svgs[1] and "floor 45" in svgs[0]


def test_no_measurements_still_renders():
    page = history.page(typed({"service": "sglang", "releases": []}), "h")
    assert page.count("no measurements") == 2


def test_switches_carry_the_flags_that_changed():
    document = copy.deepcopy(DOCUMENT)
    document["releases"][0]["exec_start"] = ["python", "-m", "sglang.launch_server", "--speculative-num-steps", "3"]
    document["releases"][1]["exec_start"] = ["python", "-m", "sglang.launch_server", "--speculative-num-steps", "1",
                                             "--enable-metrics"]
    marks = history.switches(typed(document))
    assert [(m["release"], m["restart"], m["flags"]) for m in marks] == [
        ("0001-aaaaaaaa", False, []),
        ("0002-bbbbbbbb", False, ["--enable-metrics: (absent) -> on", "--speculative-num-steps: 3 -> 1"]),
        ("0002-bbbbbbbb", True, [])]
    assert "--> 0002-bbbbbbbb activated (deploy) [--enable-metrics: (absent) -> on; --speculative-num-steps: 3 -> 1]" \
        in history.table(typed(document))
    document["releases"][1]["exec_start"] = document["releases"][0]["exec_start"]
    assert history.switches(typed(document))[1]["flags"] == ["(same flags)"]
    # An environment-only change is labelled too (releases from the store's history carry their environment).
    document["releases"][0]["environment"] = {"NCCL_CUMEM_ENABLE": "0", "NCCL_ALGO": "Ring"}
    document["releases"][1]["environment"] = {"NCCL_CUMEM_ENABLE": "0", "NCCL_PROTO": "Simple"}
    assert history.switches(typed(document))[1]["flags"] == ["env NCCL_ALGO: Ring -> (absent)",
                                                      "env NCCL_PROTO: (absent) -> Simple"]


def test_png_draws_points_switches_floors_and_the_roofline(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from PIL import Image

    from sglang_deploy.history_png import DECODE, ROOFLINE, picture

    document = copy.deepcopy(DOCUMENT)
    document["releases"][1]["exec_start"] = ["x", "--speculative-num-steps", "1"]
    document["releases"][0]["exec_start"] = ["x", "--speculative-num-steps", "3"]
    for entry in document["releases"][1]["watch"]:
        entry["roofline_tok_s"] = 139 * entry["accept_length"] / 3.25
    document["releases"][1]["watch"].append({"at": "2026-11-02T23:00:00+00:00", "event": "restart-withheld",
                                              "status": "capped"})
    drawn = picture(typed(document), tmp_path / "out" / "history.png", "ct129")
    # 2 gate + 3 watch (the busy run has no value) per chart, the after-restart one included
    assert drawn["points"] == 10 and drawn["roofline_points"] == 2
    assert drawn["switches"] == ["0001-aaaaaaaa", "0002-bbbbbbbb\n--speculative-num-steps: 3 -> 1", "restart",
                                 "restart withheld"]
    assert drawn["floors"] == {"decode_tok_s": 45, "accept_length": 2.8}
    image = Image.open(tmp_path / "out" / "history.png")
    assert image.format == "PNG" and image.size == (1100, 700)
    image = image.convert("RGB")
    colors = {color for _, color in image.getcolors(maxcolors=1 << 20)}
    for hex_color in (DECODE, ROOFLINE, "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"):
        assert tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5)) in colors, hex_color
    assert (tmp_path / "out" / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_without_measurements(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from sglang_deploy.history_png import picture

    drawn = picture(typed({"service": "sglang", "releases": []}), tmp_path / "h.png", "h")
    assert drawn["points"] == 0 and (tmp_path / "h.png").stat().st_size > 1000


def test_the_page_names_every_retained_release_even_one_never_measured():
    document = copy.deepcopy(DOCUMENT)
    document["releases"].insert(0, {"id": "0000-cccccccc", "created": "2026-10-31T09:00:00+00:00", "verdict": "bad",
                                    "history": [{"at": "2026-10-31T09:01:00+00:00", "event": "failed to start: x"}],
                                    "gate": None, "watch": []})
    page = history.page(typed(document), "host")
    listed = page.split("<h2>Retained releases</h2>", 1)[1]
    assert all(release["id"] in listed for release in document["releases"])
    assert re.search(r"0000-cccccccc .* bad +never measured by the gate; 0 watch entries", listed)
    assert re.search(r"\* 0002-bbbbbbbb .* gate pass 55\.0 tok/s tau 3\.40; 2 watch entries", listed)
