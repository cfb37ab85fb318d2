"""The perf watch without a host: its settings, its units, its decisions and its textfile format."""

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import PROFILES, PROVEN, gate_document, proven_with, release_meta, watch_entry
from sglang_deploy.hostside.contract import paths as host_paths
from sglang_deploy.hostside.contract.document import DocumentError
from sglang_deploy.hostside.contract.findings import DoctorReport
from sglang_deploy.hostside.contract.release import Roofline
from sglang_deploy.hostside.contract.store import StoreState
from sglang_deploy.hostside import watch
from sglang_deploy.profile import ProfileError, load_profile
from sglang_deploy.render import RenderError, parse_unit, render_watch, unquote_exec

METRICS = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen",tp_rank="0"} 2.0
sglang:num_running_reqs{model_name="qwen",tp_rank="1"} 1.0
sglang:num_queue_reqs{model_name="qwen"} 7.0
"""


def test_running_requests_sums_the_series_and_ignores_other_metrics():
    assert watch.running_requests(METRICS) == 3.0
    assert watch.running_requests("sglang:num_queue_reqs 4\n") is None
    assert watch.running_requests("") is None


def test_drift_reasons_and_streak():
    assert watch.drift_reasons({"accept_length": 1.2, "decode_tok_s": 80}, 2.0, 60) == [
        "acceptance length 1.20 is below 2.0"]
    assert len(watch.drift_reasons({"accept_length": 1.2, "decode_tok_s": 40}, 2.0, 60)) == 2
    assert watch.drift_reasons({"accept_length": 3.0, "decode_tok_s": 70}, 2.0, 60) == []
    assert watch.drift_reasons({"accept_length": None, "decode_tok_s": 70}, None, None) == []
    ok, drift = watch_entry(status="ok", drift=[]), watch_entry(status="ok", drift=["x"])
    busy = watch_entry(status="busy")
    assert watch.drift_streak([drift, ok, drift, busy, drift]) == 2  # a skipped run neither counts nor breaks
    assert watch.drift_streak([drift, drift, watch_entry(event="restart", status="restarted"), drift]) == 1
    assert watch.drift_streak([]) == 0


def test_history_is_bounded():
    assert watch.bounded(list(range(600)), 500) == list(range(100, 600))


def parsed(text):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_textfile_keeps_the_last_success_after_a_skipped_run():
    history = [watch_entry(status="ok", decode_tok_s=71.5, accept_length=3.1, ttft_s=0.21, unix=1000.0),
               watch_entry(status="busy", unix=2000.0)]
    text = watch.textfile("sglang", "0002-abcdef12", history, "pass", 2000.0)
    assert "# TYPE sglang_deploy_watch_decode_tokens_per_second gauge" in text
    values = parsed(text)
    labels = (("release", "0002-abcdef12"), ("service", "sglang"))
    assert values[("sglang_deploy_watch_decode_tokens_per_second", labels)] == 71.5
    assert values[("sglang_deploy_watch_accept_length", labels)] == 3.1
    assert values[("sglang_deploy_watch_last_success_timestamp_seconds", labels)] == 1000.0
    assert values[("sglang_deploy_watch_last_run_timestamp_seconds", labels)] == 2000.0
    assert values[("sglang_deploy_watch_last_run_ok", tuple(sorted(labels + (("status", "busy"),))))] == 0
    assert values[("sglang_deploy_watch_gate_verdict", tuple(sorted(labels + (("verdict", "pass"),))))] == 1
    # No timestamps: every sample line is "name{labels} value".
    assert all(len(line.rsplit("} ", 1)[1].split()) == 1 for line in text.splitlines() if not line.startswith("#"))


def test_textfile_write_is_atomic_and_readable(tmp_path):
    path = watch.write_textfile(str(tmp_path / "textfile"), "sglang", "x 1\n")
    assert path.endswith("/sglang-deploy-sglang.prom") and open(path).read() == "x 1\n"
    assert [p.name for p in (tmp_path / "textfile").iterdir()] == ["sglang-deploy-sglang.prom"]
    assert oct((tmp_path / "textfile" / "sglang-deploy-sglang.prom").stat().st_mode & 0o777) == "0o644"


def test_profile_watch_defaults_and_rendered_units():
    profile = load_profile(PROVEN)
    assert (profile.watch.interval, profile.watch.samples, profile.watch.on_drift) == ("6h", 3, "record")
    rendered = render_watch(profile)
    entries = parse_unit(rendered.service)
    service = dict((key, value) for section, key, value in entries if section == "Service" and key)
    assert service["Type"] == "oneshot" and service["ProtectSystem"] == "strict"
    assert service["ReadWritePaths"] == "-/var/lib/sglang-deploy/sglang -/var/lib/prometheus/node-exporter"
    assert service["CapabilityBoundingSet"] == "" and service["NoNewPrivileges"] == "yes"
    assert unquote_exec(service["ExecStart"])[:5] == ["/usr/bin/python3", "-m", "hostside.watch", "--service", "sglang"]
    assert service["WorkingDirectory"] == "/opt/sglang-deploy/lib"  # where -m finds the host package
    timer = dict((key, value) for section, key, value in parse_unit(rendered.timer) if key)
    assert timer["OnUnitActiveSec"] == "6h" and timer["RandomizedDelaySec"] == "15min"
    assert render_watch(profile) == rendered
    # the service's watch, not the profile's: another profile with the same watch settings renders the same bytes, so
    # its deploy neither rewrites the files nor restarts the timer (whose 6 h count would start again)
    other = load_profile(PROFILES / "qwen3.6-27b-mtp1-2xa6000.yaml")
    assert other.name != profile.name and other.watch == profile.watch and render_watch(other) == rendered


def test_watch_settings_reach_the_command_line(tmp_path):
    path = proven_with(tmp_path, "\ngate:", "\nwatch:\n  interval: 30min\n  on_drift: restart\n"
                                           "  drift_min_accept_length: 2.5\n  samples: 2\n"
                                           "  max_restarts_per_day: 1\n\ngate:")
    argv = render_watch(load_profile(path)).exec_start
    assert argv[argv.index("--max-restarts-per-day") + 1] == "1"
    assert argv[argv.index("--on-drift") + 1] == "restart"
    assert argv[argv.index("--drift-min-accept-length") + 1] == "2.5" and argv[argv.index("--samples") + 1] == "2"
    assert "OnUnitActiveSec=30min" in render_watch(load_profile(path)).timer


@pytest.mark.parametrize("setting, expected", [
    ("interval: 6 hours", "must be a systemd time span"),
    ("interval: 0h", "must be longer than 0"),
    ('interval: "6h\\nExecStartPre=/bin/sh"', "interval"),
    ("textfile_dir: /etc/cron.d", "must be a normalized absolute directory under /var/lib"),
    ("textfile_dir: /var/lib/../etc", "must be a normalized absolute directory"),
    ("on_drift: reboot", "on_drift"),
    ("samples: 0", "samples"),
    ("max_restarts_per_day: -1", "max_restarts_per_day"),
    ('max_restarts_per_day: "3; reboot"', "max_restarts_per_day"),
    ("every: 6h", "unknown key"),
])
def test_bad_watch_settings_are_refused_with_their_line(tmp_path, setting, expected):
    path = proven_with(tmp_path, "\ngate:", f"\nwatch:\n  {setting}\n\ngate:")
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    assert expected in str(error.value) and f"{path}:" in str(error.value) and "watch." in str(error.value)


def test_a_timer_value_cannot_add_a_directive():
    from sglang_deploy.render import WATCH_TIMER_KEYS, check_unit_structure

    with pytest.raises(RenderError):
        check_unit_structure("[Unit]\nDescription=x\n[Timer]\nOnActiveSec=1h\nOnCalendar=daily\n[Install]\n"
                             "WantedBy=timers.target\n", None, sections=("Unit", "Timer", "Install"),
                             keys=WATCH_TIMER_KEYS)


def test_history_file_keeps_the_last_lines(tmp_path):
    path = str(tmp_path / "watch.jsonl")
    watch.save_history(path, [watch_entry(unix=i) for i in range(30)], 10)
    assert [e.unix for e in watch.read_history(path)] == list(range(20, 30))
    with open(path, "a") as f:
        f.write("{torn line\n")
    assert len(watch.read_history(path)) == 10  # a torn line is skipped, not fatal
    with open(path, "a") as f:  # an entry that is not one: named, with its line
        f.write(json.dumps({**json.loads(watch_entry().line()), "decode": 50.0}) + "\n")
    with pytest.raises(DocumentError, match=f"{path}:12: unknown field 'decode'"):
        watch.read_history(path)


def fake_release(tmp_path, monkeypatch, config=None, measurement=None):
    """A release store under tmp_path with one active release; idle server, fixed measurement."""
    from sglang_deploy.hostside import store as store_module

    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    store = store_module.Store("sglang")
    directory = tmp_path / "sglang" / "releases" / "0001-aaaaaaaa"
    directory.mkdir(parents=True)
    (directory / "meta.json").write_text(release_meta(probe_url="http://127.0.0.1:1", gate={
        "verdict": "pass", "summary": "pass", "at": "2026-11-01T00:00:00+00:00"}).dump())
    (directory / "gate-config.json").write_text((config or gate_document(min_accept_length=2.8,
                                                                         min_decode_tok_s=45)).dump())
    store.save_state(StoreState(active="0001-aaaaaaaa"))
    monkeypatch.setattr(watch, "idle_check", lambda *a: (None, None, 0.0))
    monkeypatch.setattr(watch, "measure", lambda *a: dict(measurement or {
        "status": "ok", "decode_tok_s": 20.0, "accept_length": 1.2, "ttft_s": 0.03, "samples": 3}))
    return directory


def watch_args(tmp_path, **overrides):
    values = dict(service="sglang", samples=3, max_running_requests=0, on_drift="record", drift_min_accept_length=None,
                  drift_runs=1, max_restarts_per_day=3, history_lines=500, textfile_dir=str(tmp_path / "textfile"),
                  output_prompts=0)
    return type("Args", (), {**values, **overrides})()


def test_record_mode_does_not_restart(tmp_path, monkeypatch):
    """on_drift: record with a drifting measurement: recorded, no systemctl call."""
    directory = fake_release(tmp_path, monkeypatch)
    calls = []
    monkeypatch.setattr(watch, "systemctl", lambda *a: calls.append(a))
    args = watch_args(tmp_path)
    assert watch.run(args) == 0 and watch.run(args) == 0
    entries = watch.read_history(str(directory / "watch.jsonl"))
    assert [len(e.drift) for e in entries] == [2, 2] and calls == []
    assert 'sglang_deploy_watch_drift_streak{service="sglang",release="0001-aaaaaaaa"} 2.0' in \
        (tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text()


def test_wrong_answers_at_full_speed_are_drift(tmp_path, monkeypatch):
    """A measurement at full speed whose short output check fails drifts, is exported, and restarts on_drift."""
    directory = fake_release(tmp_path, monkeypatch, measurement={
        "status": "ok", "decode_tok_s": 52.0, "accept_length": 3.2, "ttft_s": 0.03, "samples": 3})
    asked = []

    from sglang_deploy.hostside.contract.gate import OutputCheck

    def output_run(url, api_key, model, baseline=None, limit=None):
        asked.append(limit)
        return OutputCheck(verdict="fail", reasons=["output: 2 of 3 known answers wrong: arith: no 391"],
                           inconclusive=[], prompts_digest="sha256:x", prompts_version=1, known_right=1, total=3,
                           degenerate=0, agreement=None, compared=0, results=[])  # output_check.run's answer

    monkeypatch.setattr(watch.output_check, "run", output_run)
    calls = []
    monkeypatch.setattr(watch, "systemctl", lambda *a: calls.append(a) or type("R", (), {"returncode": 1})())
    args = watch_args(tmp_path, output_prompts=3, on_drift="restart")
    assert watch.run(args) == 0
    [entry, restart] = watch.read_history(str(directory / "watch.jsonl"))
    assert asked == [3] and entry.drift == ["output: 2 of 3 known answers wrong: arith: no 391"]
    assert restart.event == "restart" and calls == [("restart", "sglang.service")]
    text = (tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text()
    assert 'sglang_deploy_watch_output_ok{service="sglang",release="0001-aaaaaaaa",verdict="fail"} 0.0' in text
    assert 'sglang_deploy_watch_output_known_right{service="sglang",release="0001-aaaaaaaa"} 1.0' in text


def test_restarts_are_capped_per_day_and_the_withheld_one_is_recorded(tmp_path, monkeypatch, capsys):
    """on_drift: restart, cap 2 a day: two restarts, then drift is recorded (restart-withheld), not acted on;
    a restart older than 24 h does not count."""
    import time

    directory = fake_release(tmp_path, monkeypatch)
    old = {"event": "restart", "status": "restarted", "unix": time.time() - 2 * 86400, "at": "old",
           "release": "0001-aaaaaaaa"}
    (directory / "watch.jsonl").write_text(json.dumps(old) + "\n")
    calls = []
    monkeypatch.setattr(watch, "systemctl", lambda *a: calls.append(a) or type("R", (), {"returncode": 0})())
    monkeypatch.setattr(watch, "wait_healthy", lambda *a: True)
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")  # as under systemd: lines carry their syslog priority
    args = watch_args(tmp_path, on_drift="restart", max_restarts_per_day=2)
    for _ in range(4):
        assert watch.run(args) == 0
    assert calls == [("restart", "sglang.service")] * 2
    events = [e.event for e in watch.read_history(str(directory / "watch.jsonl"))]
    assert events == ["restart"] + ["measure", "restart", "after-restart"] * 2 + ["measure", "restart-withheld"] * 2
    withheld = watch.read_history(str(directory / "watch.jsonl"))[-1]
    assert withheld.status == "capped" and "2 restarts in the last 24 h reached --max-restarts-per-day 2" in \
        withheld.detail
    journal = capsys.readouterr().out
    assert journal.count("<4>restarting sglang.service: drift") == 2
    assert journal.count("<4>NOT restarting sglang.service") == 2
    meta = json.loads((directory / "meta.json").read_text())
    assert [e["event"][:22] for e in meta["history"]] == ["restarted by the watch"] * 2
    values = parsed((tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text())
    labels = (("release", "0001-aaaaaaaa"), ("service", "sglang"))
    assert values[("sglang_deploy_watch_restarts", labels)] == 3  # the old one too
    assert values[("sglang_deploy_watch_restarts_last_day", labels)] == 2
    assert values[("sglang_deploy_watch_restarts_withheld", labels)] == 2


def test_decode_over_the_roofline_is_exported(tmp_path, monkeypatch):
    """roofline.json (staged by the deploy) + the checkpoint's bytes + the measured tau -> the doctor's bound."""
    from sglang_deploy.roofline import release_inputs, roofline
    from sglang_deploy.hostside.safetensors_headers import summarize
    from test_doctor_logic import TENSORS, write_checkpoint

    model = tmp_path / "model"
    model.mkdir()
    write_checkpoint(model, TENSORS)
    measurement = {"status": "ok", "decode_tok_s": 200.0, "accept_length": 3.0, "ttft_s": 0.03, "samples": 3}
    directory = fake_release(tmp_path, monkeypatch, measurement=measurement)
    resolved = {"tp_size": 2, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3}
    inputs = release_inputs(resolved, str(model), "NVIDIA RTX A6000")
    assert (inputs.bandwidth_gbs, inputs.tp, inputs.steps) == (768, 2, 3)
    (directory / "roofline.json").write_text(inputs.dump())
    assert watch.run(watch_args(tmp_path)) == 0
    entry = watch.read_history(str(directory / "watch.jsonl"))[-1]
    expected = roofline(summarize(model), 2, 3, 3.0, 768, 200.0)
    assert entry.roofline_tok_s == pytest.approx(expected["roofline_tok_s"], rel=1e-3)
    assert entry.roofline_fraction == pytest.approx(200.0 * 0.0045005 / 768 / 3.0, rel=1e-3)
    assert entry.bandwidth_source == "datasheet (NVIDIA RTX A6000)"
    values = parsed((tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text())
    labels = (("release", "0001-aaaaaaaa"), ("service", "sglang"))
    assert values[("sglang_deploy_watch_roofline_fraction", labels)] == entry.roofline_fraction
    assert values[("sglang_deploy_watch_roofline_tokens_per_second", labels)] == entry.roofline_tok_s
    # The doctor's GPU probe measured 600 GB/s for this release: it replaces the datasheet's figure.
    bound = {**roofline(summarize(model), 2, 3, 3.0, 600, 200.0), "bandwidth_source": "measured (probe, read-only reduction)"}
    (directory / "doctor.json").write_text(DoctorReport.from_dict({"roofline": bound, "suspects": [], "notes": [],
                                                                   "simulated": True, "release": "0001-aaaaaaaa",
                                                                   "errors": []}).dump())
    assert watch.run(watch_args(tmp_path)) == 0
    entry = watch.read_history(str(directory / "watch.jsonl"))[-1]
    assert entry.roofline_fraction == pytest.approx(200.0 * 0.0045005 / 600 / 3.0, rel=1e-3)
    assert entry.bandwidth_source.startswith("measured")


def test_no_roofline_without_its_inputs(tmp_path):
    entry = {"decode_tok_s": 50.0, "accept_length": 3.0}
    assert watch.roofline_bound(None, {"bytes": {}}, entry) == {}
    inputs = Roofline(gpu=None, bandwidth_gbs=None, bandwidth_source="unknown GPU None", tp=1, algorithm="EAGLE",
                      steps=3, model_path="/m", draft_path=None)
    assert watch.roofline_bound(inputs, {"bytes": {}}, entry) == {}
    checkpoint = {"bytes": {"layers": 2e9, "lm_head": 1e9, "mtp": 0, "embedding": 0, "vision": 0}}
    plain = watch.roofline_bound(inputs.but(bandwidth_gbs=300, algorithm=None, steps=0), checkpoint, entry)
    assert plain["roofline_tok_s"] == pytest.approx(100.0)  # no speculation: tau 1, 3 GB per token at 300 GB/s


def test_a_hostile_checkpoint_leaves_the_roofline_out_not_the_measurement(tmp_path, monkeypatch):
    """The model directory may be writable by the service user; the watch (root) reads its headers."""
    import struct

    from sglang_deploy.roofline import release_inputs

    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 62) + b"{}")
    measurement = {"status": "ok", "decode_tok_s": 50.0, "accept_length": 3.0, "ttft_s": 0.03, "samples": 3}
    directory = fake_release(tmp_path, monkeypatch, measurement=measurement)
    (directory / "roofline.json").write_text(release_inputs({"tp_size": 2}, str(model), "RTX A6000").dump())
    assert watch.run(watch_args(tmp_path)) == 0
    entry = watch.read_history(str(directory / "watch.jsonl"))[-1]
    assert entry.decode_tok_s == 50.0 and entry.roofline_fraction is None


def test_the_gpu_that_bounds_decode():
    from sglang_deploy.roofline import model_gpu, release_inputs, reported_gpu

    assert model_gpu({}) == "NVIDIA RTX A6000"  # the simulator's hardware model
    assert model_gpu({"SGLANG_SIM_MACHINE": "../../etc/passwd"}) is None
    assert reported_gpu({"gpus": [{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}]}) == "NVIDIA H200"
    assert reported_gpu({"gpus": []}) is None
    unknown = release_inputs({"tp_size": 1}, "/m", "Some GPU")
    assert unknown.bandwidth_gbs is None and unknown.bandwidth_source == "unknown GPU 'Some GPU'"
    assert release_inputs({"tp_size": 2, "speculative_algorithm": None, "speculative_num_steps": 3}, "/m",
                          "NVIDIA H200").steps == 0  # no speculation: no draft steps
