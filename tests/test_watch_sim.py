"""The perf watch on the simulated CT129: the timer's service measures the active release, Debian's real
node_exporter serves its textfile metrics on loopback, and acceptance drift triggers a restart."""

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import proven_with
from sglang_deploy.history import points as history_points
from sglang_deploy.hostside.contract.history import StoreHistory
from test_deploy_sim import grand_total

pytestmark = pytest.mark.simhost

STORE = "/var/lib/sglang-deploy/sglang"
# What the closing note quotes: node_exporter's sample and the drift test's log (results/ is not committed).
EVIDENCE = Path(__file__).resolve().parent.parent / "results" / "ct129-sim"


def keep(name: str, text: str) -> None:
    EVIDENCE.mkdir(parents=True, exist_ok=True)
    (EVIDENCE / name).write_text(text)
    print(f"{name} ({EVIDENCE / name}):\n{text}")
PROM = "/var/lib/prometheus/node-exporter/sglang-deploy-sglang.prom"


def node_exporter(simhost) -> dict:
    """node_exporter's own /metrics, read on loopback and parsed by prometheus_client: {(name, labels): value}."""
    url = f"http://127.0.0.1:{simhost.host.node_exporter_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def watch_samples(metrics: dict, name: str) -> dict:
    return {labels: value for (metric, labels), value in metrics.items() if metric == f"sglang_deploy_watch_{name}"}


def history(simhost, release: str) -> list[dict]:
    return [json.loads(line) for line in simhost.sh(f"cat {STORE}/releases/{release}/watch.jsonl").splitlines()]


def active(simhost) -> str:
    return json.loads(simhost.sh(f"cat {STORE}/state.json"))["active"]


@pytest.fixture(scope="module")
def watched(simhost, tmp_path_factory):
    """A release of its own, measured by the gate (the worker's host may already run the proven profile,
    deployed without a gate by another module; redeploying that would switch nothing)."""
    profile = proven_with(tmp_path_factory.mktemp("watch"), "environment:\n",
                          'environment:\n  SGLANG_SIM_NOTE: "perf-watch tests"\n', "watched.yaml")
    result = simhost.deploy(profile=profile, gate=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    simhost.watched_profile = profile
    return simhost


def test_deploy_enables_the_hardened_timer_and_a_redeploy_changes_nothing(watched):
    simhost = watched
    assert simhost.sh("systemctl is-enabled sglang-watch.timer; systemctl is-active sglang-watch.timer").split() == [
        "enabled", "active"]
    unit = simhost.sh("systemctl cat sglang-watch.service")
    assert "ProtectSystem=strict" in unit and "CapabilityBoundingSet=\n" in unit and "Type=oneshot" in unit
    assert simhost.sh("systemctl show -p NextElapseUSecMonotonic --value sglang-watch.timer").strip() not in ("", "0")
    result = simhost.deploy(profile=simhost.watched_profile)
    assert result.returncode == 0, result.stderr[-3000:]
    operations, succeeded, failed, unchanged = grand_total(result)
    assert (succeeded, failed, unchanged) == ("-", "-", operations), result.stdout[-5000:]


def test_one_watch_run_is_exported_by_node_exporter(watched):
    simhost = watched
    release = active(simhost)
    simhost.sh("systemctl start sglang-watch.service")  # a oneshot: returns when the run is done
    last = history(simhost, release)[-1]
    assert last["status"] == "ok" and last["samples"] == 3 and last["drift"] == [], last
    assert last["output"]["verdict"] == "pass" and (last["output"]["known_right"], last["output"]["total"]) == (3, 3)
    assert 45 < last["decode_tok_s"] < 90 and last["accept_length"] > 2.8
    assert simhost.api_key not in simhost.sh(f"cat {STORE}/releases/{release}/watch.jsonl {PROM}")
    assert simhost.api_key not in simhost.sh("journalctl -u sglang-watch.service --no-pager")
    metrics = node_exporter(simhost)
    labels = (("release", release), ("service", "sglang"))
    assert watch_samples(metrics, "decode_tokens_per_second") == {labels: pytest.approx(last["decode_tok_s"])}
    assert watch_samples(metrics, "accept_length")[labels] == pytest.approx(last["accept_length"])
    assert watch_samples(metrics, "ttft_seconds")[labels] > 0
    assert watch_samples(metrics, "last_success_timestamp_seconds")[labels] == pytest.approx(last["unix"])
    assert watch_samples(metrics, "gate_verdict") == {tuple(sorted(labels + (("verdict", "pass"),))): 1.0}
    assert watch_samples(metrics, "output_ok") == {tuple(sorted(labels + (("verdict", "pass"),))): 1.0}
    # decode / roofline: roofline.json staged with the release, the synthetic checkpoint's bytes (13.5 GB per
    # GPU per verify pass), 768 GB/s for an RTX A6000, the measured tau.
    roofline = json.loads(simhost.sh(f"cat {STORE}/releases/{release}/roofline.json"))
    assert (roofline["gpu"], roofline["bandwidth_gbs"], roofline["tp"], roofline["steps"]) == (
        "NVIDIA RTX A6000", 768, 2, 3)
    assert last["roofline_tok_s"] == pytest.approx(139 * last["accept_length"] / 3.25, rel=0.03)
    assert watch_samples(metrics, "roofline_fraction")[labels] == pytest.approx(
        last["decode_tok_s"] / last["roofline_tok_s"], rel=1e-3)
    assert 0.2 < last["roofline_fraction"] < 1
    # node_exporter's own view of the file: read without error, its mtime there for staleness alerts.
    assert metrics[("node_textfile_scrape_error", ())] == 0.0
    assert ("node_textfile_mtime_seconds", (("file", PROM.rsplit("/", 1)[1]),)) in metrics or \
        ("node_textfile_mtime_seconds", (("file", PROM),)) in metrics
    keep("node-exporter-sample.txt", simhost.sh(f"curl -s http://127.0.0.1:{simhost.host.node_exporter_port}"
                                                "/metrics | grep -E '^sglang_deploy_watch|^node_textfile'"))


def test_a_busy_server_is_not_measured(watched):
    simhost = watched
    release = active(simhost)
    before = len(history(simhost, release))
    body = json.dumps({"text": "busy", "sampling_params": {"max_new_tokens": 1500, "ignore_eos": True}})
    port = json.loads(simhost.sh(f"cat {STORE}/releases/{release}/meta.json"))["probe_url"].rsplit(":", 1)[1]
    simhost.sh(f"(curl -s -H 'Authorization: Bearer {simhost.api_key}' -d '{body}' "
               f"http://127.0.0.1:{port}/generate >/dev/null 2>&1 &) ; sleep 2; systemctl start sglang-watch.service")
    entries = history(simhost, release)
    assert len(entries) == before + 1
    assert entries[-1]["status"] == "busy" and entries[-1]["running"] >= 1, entries[-1]
    assert "busy, skipped" in entries[-1]["detail"]
    metrics = node_exporter(simhost)
    labels = (("release", release), ("service", "sglang"))
    assert watch_samples(metrics, "last_run_ok") == {tuple(sorted(labels + (("status", "busy"),))): 0.0}
    assert labels in watch_samples(metrics, "decode_tokens_per_second")  # the last success is still exported


def test_acceptance_drift_restarts_the_server_and_acceptance_comes_back(watched, tmp_path):
    simhost = watched
    variant = proven_with(tmp_path, '  CUDA_DEVICE_ORDER: PCI_BUS_ID',
                          '  CUDA_DEVICE_ORDER: PCI_BUS_ID\n  SGLANG_SIM_ACCEPT_COLLAPSE_AFTER: "4"')
    text = variant.read_text().replace("\ngate:", "\nwatch:\n  on_drift: restart\n  drift_runs: 1\n  samples: 2\n"
                                                "  max_restarts_per_day: 1\n\ngate:")
    # The watch sends the gate's max_new_tokens: 64 instead of 256 keeps each collapsed run short (no gate here).
    text = text.replace("  max_new_tokens: 256", "  max_new_tokens: 64")
    variant.write_text(text)
    result = simhost.deploy(profile=variant)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    release = active(simhost)
    # Readiness sent 1 request; this run sends 3 (warmup + 2): acceptance still intact.
    simhost.sh("systemctl start sglang-watch.service")
    assert history(simhost, release)[-1]["drift"] == []
    pid_before = simhost.main_pid()
    simhost.sh("systemctl start sglang-watch.service")  # requests 5-7: acceptance has collapsed
    entries = history(simhost, release)
    drift, restart, after = entries[-3:]
    assert drift["status"] == "ok" and drift["accept_length"] < 1.5 and "acceptance length" in drift["drift"][0]
    assert restart["event"] == "restart" and restart["status"] == "restarted"
    assert after["event"] == "after-restart" and after["accept_length"] > 2.8 and after["drift"] == []
    assert simhost.main_pid() != pid_before
    journal = simhost.sh("journalctl -u sglang-watch.service --no-pager")
    assert "restarting sglang.service: drift 1 times in a row" in journal
    meta = json.loads(simhost.sh(f"cat {STORE}/releases/{release}/meta.json"))
    assert "restarted by the watch" in meta["history"][-1]["event"]
    metrics = node_exporter(simhost)
    labels = (("release", release), ("service", "sglang"))
    assert watch_samples(metrics, "accept_length")[labels] > 2.8
    assert watch_samples(metrics, "restarts")[labels] == 1.0
    # The restarted process collapses again after 4 requests: the day's one restart is spent, so this
    # drift is recorded (restart-withheld, a journal warning) and the server is left alone.
    pid_restarted = simhost.main_pid()
    simhost.sh("systemctl start sglang-watch.service")
    entries = history(simhost, release)
    drift_again, withheld = entries[-2:]
    assert drift_again["accept_length"] < 1.5 and drift_again["drift"]
    assert withheld["event"] == "restart-withheld" and withheld["status"] == "capped", withheld
    assert "reached --max-restarts-per-day 1" in withheld["detail"] and simhost.main_pid() == pid_restarted
    warnings = simhost.sh("journalctl -u sglang-watch.service -p warning --no-pager -o short-iso")
    assert "NOT restarting sglang.service" in warnings and "restarting sglang.service: drift" in warnings
    metrics = node_exporter(simhost)
    assert watch_samples(metrics, "restarts_withheld")[labels] == 1.0
    assert watch_samples(metrics, "restarts_last_day")[labels] == 1.0
    assert watch_samples(metrics, "accept_length")[labels] < 1.5
    keep("watch-drift.log", "watch.jsonl (the last 5 entries):\n" + "\n".join(json.dumps(e, sort_keys=True)
                                                                               for e in entries[-5:])
         + "\n\njournalctl -u sglang-watch.service -p warning:\n" + warnings)


def test_history_verb_writes_the_table_and_the_page(watched):
    simhost = watched
    from conftest import REPO

    result = simhost.pyinfra("history.py")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    directory = REPO / "results" / "ct129-sim"
    text, page = (directory / "history.txt").read_text(), (directory / "history.html").read_text()
    first = json.loads(simhost.sh(f"cat {STORE}/state.json"))["active"]
    releases = [release.id for release in StoreHistory.loads((directory / "history.json").read_text()).releases]
    assert len(releases) >= 2 and first in releases
    assert "after-restart" in text and "ok DRIFT" in text and "restarted by the watch" in text
    assert "restart-withheld capped" in text
    # The variants differ in environment only: the switch is labelled with the variable that changed.
    assert "env SGLANG_SIM_ACCEPT_COLLAPSE_AFTER: (absent) -> 4" in text, text
    assert all(release in page for release in releases) and page.count("<svg") == 2
    assert "<script" not in page and "src=" not in page
    assert simhost.api_key not in text + page + (directory / "history.json").read_text()
    # The PNG: every measurement a point, both releases' switches and the restart marked, the roofline drawn.
    png = directory / "history.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "history.png: " in result.stdout + result.stderr
    document = StoreHistory.loads((directory / "history.json").read_text())
    measured = [row for row in history_points(document) if row["decode_tok_s"] is not None]
    drawn = re.search(r"history.png: (\d+) points, (\d+) switches and restarts, (\d+) roofline points",
                      result.stdout + result.stderr)
    assert drawn and int(drawn.group(1)) == 2 * len(measured), result.stdout[-2000:]
    assert int(drawn.group(2)) >= 3 and int(drawn.group(3)) >= 3
    # The page as a real browser builds it: both releases, one dot or square per measurement, the floors.
    from browser import dump_dom

    dom = dump_dom(directory / "history.html")
    decode_svg = re.search(r'<svg[^>]*data-series="decode_tok_s".*?</svg>', dom, re.S).group(0)
    assert decode_svg.count("<circle") + decode_svg.count("<rect") == len(measured)
    assert all(release in dom for release in releases) and dom.count('class="floor"') == 2
    assert 'class="roofline"' in decode_svg
    print(f"history written to {directory} (history.png: {png.stat().st_size} bytes):\n{text}")


def test_a_server_that_starts_answering_garbage_drifts(watched, tmp_path):
    """Fast but wrong between deploys (the fault stands in for a release whose answers went bad at uptime): the
    watch's short output check counts it as drift, in its history and in node_exporter's metrics."""
    simhost = watched
    garbage = proven_with(tmp_path, "environment:\n",
                          'environment:\n  SGLANG_SIM_NOTE: "watch garbage"\n  SGLANG_SIM_FAULT_OUTPUT: garbage\n',
                          "garbage.yaml")
    result = simhost.deploy(profile=garbage)  # skip_gate: the gate's own output check would refuse it
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    release = active(simhost)
    simhost.sh("systemctl start sglang-watch.service")
    last = history(simhost, release)[-1]
    assert last["status"] == "ok" and last["output"]["verdict"] == "fail", last
    assert any(reason.startswith("output: ") for reason in last["drift"]), last["drift"]
    assert 45 < last["decode_tok_s"]  # as fast as ever
    labels = (("release", release), ("service", "sglang"))
    metrics = node_exporter(simhost)
    assert watch_samples(metrics, "output_ok") == {tuple(sorted(labels + (("verdict", "fail"),))): 0.0}
    assert watch_samples(metrics, "drift_streak")[labels] == 1.0
