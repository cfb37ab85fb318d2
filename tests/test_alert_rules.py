"""The Prometheus alert rules beside the dashboard (dashboards/sglang-deploy.rules.yml), run by `promtool test rules`
(Debian's `prometheus` package) on series taken from the watch's own textfile output (hostside/watch.py), so a
renamed metric breaks the test. Without promtool the test is skipped, except where CI requires the simulated host's
tools (SGLANG_DEPLOY_REQUIRE_SIMHOST=1): there a missing promtool fails."""

import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO, watch_entry
from sglang_deploy.hostside import watch

RULES = REPO / "dashboards" / "sglang-deploy.rules.yml"
FLOORS = {"decode": 45, "accept": 2.8}
SAMPLE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("SGLANG_DEPLOY_REQUIRE_SIMHOST") == "1":
            pytest.fail("promtool is missing (Debian's prometheus package; scripts/bootstrap installs it)")
        pytest.skip("promtool is not installed (apt-get install prometheus); CI requires it")
    return found


def series(release: str, decode: float, accept: float, output: str, ran_at: str) -> list[dict]:
    """promtool input series for every sample the watch writes for one release; `ran_at`: the expanding notation
    of the last run's timestamp (a constant: the watch stopped; 0+60x...: it keeps running)."""
    history = [watch_entry(status="ok", decode_tok_s=decode, accept_length=accept, ttft_s=0.2, unix=0,
                           output={"verdict": output, "reasons": [], "inconclusive": [],
                                   "known_right": 8 if output == "pass" else 5, "total": 8, "degenerate": 0})]
    out = []
    for line in watch.textfile("sglang", release, history, "pass", 0, FLOORS).splitlines():
        match = SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        timestamp = name.endswith("_timestamp_seconds")
        out.append({"series": f"{name}{{{labels}}}", "values": ran_at if timestamp else f"{value}x1000"})
    return out


def annotations(name: str, release: str, summary: str | None) -> dict:
    """The rule's annotations as Prometheus renders them for this release (the label templates filled in); a
    summary that prints the alert's value is given as the test expects it."""
    import yaml

    rule = next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if r["alert"] == name)
    out = {}
    for key, text in rule["annotations"].items():
        text = text.replace("{{ $labels.service }}", "sglang").replace("{{ $labels.release }}", release)
        out[key] = summary if key == "summary" and summary is not None else text
    return out


def alert(name: str, release: str, summary: str | None = None, **extra) -> dict:
    return {"exp_labels": {"service": "sglang", "release": release, "severity": extra.pop("severity", "warning"),
                           **extra}, "exp_annotations": annotations(name, release, summary)}


def test_the_alert_rules_fire_on_the_watchs_own_metrics_and_only_then(tmp_path):
    binary = promtool()
    inputs = series("bad", 40.0, 2.1, "fail", "0x1000") + series("good", 52.0, 3.2, "pass", "0+60x1000")
    names = {s["series"].split("{")[0] for s in inputs}
    used = set(re.findall(r"sglang_deploy_watch_\w+", RULES.read_text()))
    assert used and used <= names, f"the rules read metrics the watch does not write: {used - names}"
    tests = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": inputs,
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "SGLangDecodeBelowFloor", "exp_alerts": [
                alert("SGLangDecodeBelowFloor", "bad", "sglang decodes at 40.0 tok/s, below the gate's floor")]},
            {"eval_time": "10m", "alertname": "SGLangAcceptanceBelowFloor", "exp_alerts": [
                alert("SGLangAcceptanceBelowFloor", "bad", "sglang accepts 2.10 tokens per verify, below the floor")]},
            {"eval_time": "1m", "alertname": "SGLangOutputCheckFailing",
             "exp_alerts": [alert("SGLangOutputCheckFailing", "bad",
                                  "sglang answers the known-answer prompts wrongly (fail)", severity="critical",
                                  verdict="fail")]},
            {"eval_time": "12h", "alertname": "SGLangWatchStale", "exp_alerts": []},
            {"eval_time": "14h", "alertname": "SGLangWatchStale", "exp_alerts": [
                alert("SGLangWatchStale", "bad", "the perf watch of sglang has not run for 14h 0m 0s")]},
            {"eval_time": "14h", "alertname": "SGLangWatchMetricsAbsent", "exp_alerts": []},
        ]}]}
    path = tmp_path / "alert-rules-test.yml"
    path.write_text(json.dumps(tests, indent=1))
    result = subprocess.run([binary, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_promtool_checks_the_rules_file():
    binary = promtool()
    result = subprocess.run([binary, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "5 rules found" in result.stdout, result.stdout + result.stderr
