"""history.py's table and page from a store document (no host)."""

import re
import xml.etree.ElementTree as ET

from sglang_deploy import history

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


def test_table_orders_measurements_and_marks_switches():
    text = history.table(DOCUMENT)
    lines = text.splitlines()
    assert lines[2] == "2026-11-01 10:00:00  --> 0001-aaaaaaaa activated (deploy)"
    assert "ok DRIFT" in text and "busy" in text and "after-restart" in text
    order = [line.split()[2] for line in lines[2:] if not line.split()[2] == "-->"]
    assert order == ["0001-aaaaaaaa"] * 3 + ["0002-bbbbbbbb"] * 3
    assert text.index("restarted by the watch") < text.index("after-restart")


def test_page_is_self_contained_and_draws_both_series():
    page = history.page(DOCUMENT, "ct129", history.floors(DOCUMENT))
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
    page = history.page({"service": "sglang", "releases": []}, "h")
    assert page.count("no measurements") == 2
