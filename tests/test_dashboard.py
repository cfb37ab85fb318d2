"""The Grafana dashboard in dashboards/: every metric it queries is one the perf watch writes, one of
node_exporter's textfile collector (read from the real node_exporter in test_watch_sim), or one of SGLang's
own /metrics as docs/conformance.md lists them (with SGLang 0.5.23's source lines)."""

import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO, watch_entry
from sglang_deploy.hostside import watch

DASHBOARD = REPO / "dashboards" / "sglang-deploy.json"
# node_exporter's textfile collector; test_watch_sim::test_one_watch_run_is_exported_by_node_exporter finds
# each of them in the real node_exporter's /metrics.
NODE_EXPORTER = {"node_textfile_mtime_seconds", "node_textfile_scrape_error"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset",
                "bool", "le", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers outside label matchers, ranges, strings, grouping
    clauses, not called as functions, not keywords or numbers."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if not call and name.lower() not in PROMQL_WORDS:
            names.add(name)
    return names


def queries(dashboard: dict) -> list[str]:
    out = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        match = re.fullmatch(r"label_values\(([^,]+),\s*\w+\)", variable["definition"])
        assert match, f"template variable {variable['name']}: {variable['definition']!r}"
        out.append(match.group(1))
    return out


def watch_metrics() -> set[str]:
    """Every gauge the watch writes, from a history that fills them all."""
    history = [watch_entry(status="ok", decode_tok_s=55.0, accept_length=3.3, ttft_s=0.03, unix=1.0,
                           roofline_tok_s=141.0, roofline_fraction=0.39, drift=["x"]),
               watch_entry(event="restart", status="restarted", unix=2.0),
               watch_entry(event="restart-withheld", status="capped", unix=3.0)]
    text = watch.textfile("sglang", "0001-aaaaaaaa", history, "pass", 4.0)
    return {family.name for family in text_string_to_metric_families(text)}


def sglang_metrics() -> set[str]:
    """SGLang's /metrics names from docs/conformance.md's `GET /metrics` row (a histogram's series too)."""
    row = next(line for line in (REPO / "docs" / "conformance.md").read_text().splitlines()
               if line.startswith("| `GET /metrics`"))
    listed = re.findall(r"`([a-z_:]+)`", row.split("|")[1])
    names = {name if name.startswith("sglang:") else f"sglang:{name}" for name in listed if name != "GET"}
    histograms = {name for name in names if name.endswith("_seconds")}
    return names | {f"{name}{suffix}" for name in histograms for suffix in ("_bucket", "_sum", "_count")}


def test_the_name_extraction_finds_what_a_query_reads():
    assert metric_names('histogram_quantile(0.5, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket'
                        '{job=~"$j"}[$__rate_interval])))') == {"sglang:time_to_first_token_seconds_bucket"}
    assert metric_names('time() - node_textfile_mtime_seconds{file=~".*sglang-deploy-.*"}') == {
        "node_textfile_mtime_seconds"}
    assert metric_names("rate(sglang:made_up_total[5m]) / on (instance) x_y") == {"sglang:made_up_total", "x_y"}


def test_every_queried_metric_exists():
    dashboard = json.loads(DASHBOARD.read_text())
    known = watch_metrics() | NODE_EXPORTER | sglang_metrics()
    used = set().union(*(metric_names(expr) for expr in queries(dashboard)))
    assert used - known == set(), f"queried but not written by the watch nor listed in docs/conformance.md: {used - known}"
    # What the issue asks the dashboard to show: the watch's figures and SGLang's acceptance, throughput, graphs.
    for name in ("sglang_deploy_watch_decode_tokens_per_second", "sglang_deploy_watch_roofline_fraction",
                 "sglang_deploy_watch_accept_length", "sglang:spec_accept_length", "sglang:gen_throughput",
                 "sglang:is_cuda_graph", "node_textfile_mtime_seconds"):
        assert name in used, name
    unused = {name for name in watch_metrics() if name not in used}
    assert unused == set(), f"written by the watch but on no panel: {unused}"


def test_the_dashboard_imports_cleanly():
    """Grafana's import format: a data-source input, unique panel ids, panels inside the 24-column grid."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}" and panel["targets"], panel["title"]
    cells = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


@pytest.mark.parametrize("expr", ["sglang:spec_accept_lenght", "sglang_deploy_watch_decode_tok_s"])
def test_a_misspelt_metric_would_be_caught(expr):
    assert metric_names(expr) - (watch_metrics() | NODE_EXPORTER | sglang_metrics()) == {expr}
