"""The release store's documents (hostside/contract/): the controller's and the host's spelling of each field is
one, the reader is strict about new documents and tolerant of releases already on hosts."""

import dataclasses
import json
import subprocess
import sys

import pytest

from conftest import PROVEN, REPO, bench_measurement, doctor_collection, gate_document, release_meta
from sglang_deploy.hostside.contract import paths as host_paths
from sglang_deploy.hostside.contract.document import DocumentError
from sglang_deploy.hostside.contract.gate import GateConfig, GateExpect, GateSettings
from sglang_deploy.hostside.contract.release import ReleaseMeta
from sglang_deploy.hostside.contract.store import StoreState
from sglang_deploy.hostside import store as store_module
from sglang_deploy.profile.sections import GateSection


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "sk-test-key-for-the-plan-0123")


@pytest.mark.parametrize("section, document", [(GateSection, GateSettings)])
def test_each_profile_section_and_its_host_document_have_the_same_fields(section, document):
    """A field renamed on one side only (min_decode_tok_s) fails here, not as a floor the host reads as None."""
    assert set(section.model_fields) == document.field_names()


def test_the_controller_writes_exactly_the_documents_fields():
    """gate.expectations and release_plan.build_meta spell every field the host reads, and no other."""
    from sglang_deploy.gate import expectations, gate_config
    from sglang_deploy.plan import plan_for_host
    from sglang_deploy.release_plan import build_meta

    plan = plan_for_host({"profile": str(PROVEN), "gpus": 2})
    assert set(expectations(plan)) == GateExpect.field_names()
    meta = build_meta(plan, "0001-aaaaaaaa")  # its strict reader refuses a field the host does not know
    assert ReleaseMeta.loads(meta.dump()) == meta and json.loads(meta.dump())["format"] == ReleaseMeta.FORMAT
    config = gate_config(plan)
    assert GateConfig.loads(config.dump()) == config and config.settings.min_decode_tok_s == 45


SETTINGS = GateSection().model_dump(mode="json")
EXPECT = {"decode_graphs": True, "custom_all_reduce": False, "environment": {}, "venv": "/v", "model_path": "/m"}
META = json.loads(release_meta().dump())


def without(data, key):
    return {k: v for k, v in data.items() if k != key}


@pytest.mark.parametrize("document, data, message", [
    (GateConfig, {"settings": {**without(SETTINGS, "min_decode_tok_s"), "min_decode_tokens_s": 45}, "expect": EXPECT},
     "gate-config.json settings: unknown field 'min_decode_tokens_s'"),
    (GateConfig, {"settings": without(SETTINGS, "min_decode_tok_s"), "expect": EXPECT},
     "gate-config.json settings: required field 'min_decode_tok_s' is missing"),
    (GateConfig, {"settings": {**SETTINGS, "min_decode_tok_s": "45"}, "expect": EXPECT},
     "gate-config.json settings: field 'min_decode_tok_s' is '45'; accepted: float or None"),
    (GateConfig, {"settings": {**SETTINGS, "samples": True}, "expect": EXPECT},
     "gate-config.json settings: field 'samples' is True; accepted: int"),
    (GateConfig, {"settings": SETTINGS}, "gate-config.json: required field 'expect' is missing"),
    (GateConfig, {"settings": SETTINGS, "expect": without(EXPECT, "decode_graphs")},
     "gate-config.json expect: required field 'decode_graphs' is missing"),
    (GateConfig, {"format": 2, "settings": SETTINGS, "expect": EXPECT},
     "gate-config.json: format 2 is not one this sglang-deploy reads (1 to 1)"),
    (GateConfig, ["settings"], "gate-config.json: not a JSON object (list)"),
    (ReleaseMeta, without(META, "content_hash"), "meta.json: required field 'content_hash' is missing"),
    (ReleaseMeta, {**META, "verdcit": "good"}, "meta.json: unknown field 'verdcit'"),
    (ReleaseMeta, {**META, "history": {}}, "meta.json: field 'history' is {}; accepted: list"),
    (ReleaseMeta, {**META, "node": {"rank": 1, "nnodes": 2}}, "meta.json node: required field 'dist_init_addr'"),
    (ReleaseMeta, {**META, "node": {"rank": "1", "nnodes": 2, "dist_init_addr": "10.0.0.1:50000"}},
     "meta.json node: field 'rank' is '1'; accepted: int"),
    (ReleaseMeta, {**META, "gate": {"verdict": "pass", "at": "t"}},
     "meta.json gate: required field 'summary' is missing"),
    (ReleaseMeta, {**META, "gate": {"verdict": "pass", "summary": "pass", "at": "t", "baseline_release": None}},
     "meta.json gate: unknown field 'baseline_release'"),
    (StoreState, {"active": None, "lastgood": "0001-aaaaaaaa"}, "state.json: unknown field 'lastgood'"),
    (StoreState, {"auto_rollbacks_in_row": "2"}, "state.json: field 'auto_rollbacks_in_row' is '2'; accepted: int"),
])
def test_the_reader_names_the_document_and_the_field(document, data, message):
    with pytest.raises(DocumentError) as error:
        document.from_dict(data)
    assert str(error.value).startswith(message), error.value


def test_releases_already_on_hosts_read_with_the_safe_defaults():
    """A gate config and a meta.json as the first releases wrote them (no format, fields since retired or added)."""
    old_gate = {"settings": {**SETTINGS, "engine": "builtin"},
                "expect": {**EXPECT, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3}}
    config = GateConfig.from_dict(old_gate)
    assert (config.expect.resolved, config.expect.served_name) == ({}, None)
    assert json.loads(config.dump())["format"] == 1 and "engine" not in config.dump()
    first = {key: META[key] for key in ("id", "created", "deployed_by", "git", "profile", "sglang_version", "venv",
                                        "content_hash", "exec_start", "simulated", "service", "probe_url",
                                        "start_timeout_s", "verdict", "gate")}
    meta = ReleaseMeta.from_dict(first)
    assert (meta.auth, meta.weights, meta.draft, meta.offered_drafts, meta.serves_http, meta.history) == (
        None, None, None, [], True, [])
    assert store_module.release_auth(meta) == "none"  # no --config on its command line
    gated = ReleaseMeta.from_dict({**first, "gate": {"verdict": "pass", "summary": "pass 50.0 tok/s", "at": "t",
                                                     "simulated": False}})  # the first gate wrote no baseline
    assert (gated.gate.verdict, gated.gate.baseline) == ("pass", None)
    assert StoreState.from_dict({"active": "0001-aaaaaaaa"}) == StoreState(active="0001-aaaaaaaa", last_good=None,
                                                                          auto_rollbacks_in_row=0, switching=None)


def test_a_store_names_the_file_of_a_document_it_cannot_read(tmp_path, monkeypatch):
    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    store = store_module.Store("sglang")
    directory = tmp_path / "sglang" / "releases" / "0001-aaaaaaaa"
    directory.mkdir(parents=True)
    (directory / "meta.json").write_text(json.dumps({**META, "weigths": None}))
    with pytest.raises(DocumentError, match=f"{directory}/meta.json: unknown field 'weigths'"):
        store.meta("0001-aaaaaaaa")
    (directory / "meta.json").write_text(release_meta(id="9999-ffffffff").dump())
    assert store.meta("0001-aaaaaaaa").id == "0001-aaaaaaaa"  # a release is named by its directory
    renamed = json.loads(gate_document(min_decode_tok_s=45).dump())
    renamed["settings"]["min_decode"] = renamed["settings"].pop("min_decode_tok_s")
    (directory / "gate-config.json").write_text(json.dumps(renamed))
    with pytest.raises(DocumentError, match="unknown field 'min_decode'"):
        GateConfig.load(str(directory))


def test_the_lock_refusal_is_one_sentence_for_the_switch_the_deploy_and_the_rollback(tmp_path, monkeypatch, capsys):
    """A second holder of the store's lock learns who holds it from lock.json (LockInfo), and the switch on the host
    refuses with the sentence the deploy's refusals (plan.refusals) and rollback.py use."""
    from sglang_deploy.hostside.contract.store import LockInfo

    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    store = store_module.Store("sglang")
    with store_module.Lock(store, "alice@ci (deploy)"):
        holder = store_module.lock_holder(store)
        with pytest.raises(store_module.Locked) as locked:
            with store_module.Lock(store, "bob@ci (rollback)"):
                pass
    assert locked.value.args[0] == holder and holder.owner == "alice@ci (deploy)"
    assert holder.refusal() == f"another deploy or rollback is running: alice@ci (deploy) (pid {holder.pid}, " \
                               f"since {holder.since})"
    assert store_module.lock_holder(store) is None  # released: lock.json is gone
    assert LockInfo.from_dict(holder.to_dict()) == holder  # as the controller reads it from the state command


READY = {"ready": True, "stage": "generate", "elapsed_s": 12.5, "auth": "api-key"}
GATE = {"verdict": "pass", "reasons": [], "inconclusive": [], "rows": [], "config_problems": [],
        "measurement": bench_measurement([50.0]).to_dict(), "simulated": True, "duration_s": 3.2}
OUTCOME = {"release": "0002-bbbbbbbb", "ok": True, "exit_code": 0, "finished": "2026-12-02T09:00:00+00:00",
           "previous": "0001-aaaaaaaa", "reason": "deploy", "readiness": READY, "auth": "api-key", "gate": GATE,
           "active": "0002-bbbbbbbb", "verdict": "good"}


@pytest.mark.parametrize("data, message", [
    ({**OUTCOME, "rolled_back_too": None}, "last_switch.json: unknown field 'rolled_back_too'"),
    (without(OUTCOME, "exit_code"), "last_switch.json: required field 'exit_code' is missing"),
    ({**OUTCOME, "readiness": without(READY, "stage")}, "last_switch.json readiness: required field 'stage'"),
    ({**OUTCOME, "readiness": {**READY, "elapsed": 1}}, "last_switch.json readiness: unknown field 'elapsed'"),
    ({**OUTCOME, "gate": {**GATE, "verdcit": "pass"}}, "last_switch.json gate: unknown field 'verdcit'"),
    ({**OUTCOME, "gate": without(GATE, "reasons")}, "last_switch.json gate: required field 'reasons' is missing"),
    ({**OUTCOME, "ok": "yes"}, "last_switch.json: field 'ok' is 'yes'; accepted: bool"),
])
def test_the_switch_outcome_reader_names_the_field(data, message):
    from sglang_deploy.hostside.contract.switch import SwitchOutcome

    with pytest.raises(DocumentError) as error:
        SwitchOutcome.from_dict(data)
    assert str(error.value).startswith(message), error.value


def test_the_gate_writes_exactly_the_results_fields(monkeypatch):
    """evaluate (the verdict), gate.run (the checks) and switch.run_gate (the baseline) spell the fields GateResult
    holds: a key renamed in one of them fails here (and, strict, when the gate writes it), never as a baseline
    the next gate reads as None."""
    from sglang_deploy.hostside.lib import gate
    from sglang_deploy.hostside.contract.gate import GateResult

    evaluated = gate.evaluate(bench_measurement([50.0]), GateSettings.from_dict(SETTINGS))
    added = {"measurement", "output", "config_problems", "simulated", "duration_s"}  # gate.run
    assert set(evaluated) | added | {"baseline_release", "baseline"} == GateResult.field_names()
    result = GateResult.from_dict({**evaluated, "config_problems": []})
    assert GateResult.loads(result.dump()) == result and result.passed

    def unreadable(*args, **kwargs):
        raise OSError("connection refused")

    monkeypatch.setattr(gate, "get_json", unreadable)  # gate.run's own fields, on its shortest path
    config = GateConfig.from_dict({"settings": SETTINGS, "expect": EXPECT})
    result = gate.run("http://127.0.0.1:1", "/nonexistent", None, 1, True, "", config, None, {})
    assert (result.verdict, result.config_problems) == ("fail", ["could not read /server_info: connection refused"])


def test_the_switch_writes_its_outcome_typed_and_refuses_a_misspelt_field(tmp_path, monkeypatch):
    from sglang_deploy.hostside import switch
    from sglang_deploy.hostside.contract.switch import SwitchOutcome

    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    store = store_module.Store("sglang")
    gate = switch.GateResult.from_dict(GATE)
    assert switch.finish(store, {**without(without(OUTCOME, "exit_code"), "finished"), "gate": gate}, 0) == 0
    outcome = SwitchOutcome.load(store.root)
    assert (outcome.readiness.elapsed_s, outcome.gate.measurement.to_dict(), outcome.rolled_back_to) == (
        12.5, GATE["measurement"], None)
    assert "release 0002-bbbbbbbb is active (good; ready after 12.5 s" in switch.describe(outcome)
    with pytest.raises(DocumentError, match="the switch's outcome: unknown field 'rolled_back_too'"):
        switch.finish(store, {"release": "0002-bbbbbbbb", "ok": False, "rolled_back_too": None}, 1)


# The bench's measurement as the first gate stored it (bench.py of 2026-11-30): no acceptance, no histograms.
FIRST_MEASUREMENT = {
    "url": "http://127.0.0.1:30000", "simulated": True, "sglang_version": "0.5.23",
    "config": {"samples": 2, "warmup": 1, "max_new_tokens": 256, "concurrency": 4, "aggregate_rounds": 2},
    "samples": [{"completion_tokens": 256, "e2e_s": 5.3, "ttft_s": 0.2, "decode_tok_s": 49.0, "accept_length": 3.1,
                 "server_e2e_s": 5.2, "kind": "prose"},
                {"completion_tokens": 256, "e2e_s": 5.1, "ttft_s": 0.1, "decode_tok_s": 51.0, "accept_length": None,
                 "server_e2e_s": None, "kind": "code"}],
    "decode_tok_s": {"median": 50.0, "min": 49.0, "max": 51.0, "n": 2, "values": [49.0, 51.0], "spread_pct": 4.0,
                     "cv_pct": 2.0},
    "ttft_s": {"median": 0.15, "min": 0.1, "max": 0.2, "n": 2, "values": [0.2, 0.1], "spread_pct": 66.7,
               "cv_pct": 33.3},
    "accept_length": {"median": 3.1, "min": 3.1, "max": 3.1, "n": 1, "values": [3.1], "spread_pct": 0.0,
                      "cv_pct": 0.0},
    "aggregate_tok_s": None, "errors": [], "duration_s": 14.2}


def test_gate_results_and_outcomes_already_on_hosts_read():
    """A gate-result.json as the first gate wrote it (no format, no output check, no baseline, its measurement
    without acceptance) and a refused switch's last_switch.json (no readiness): the fields added since read as their
    safe defaults. A failed run stored as its errors alone (before 2026-12-04) reads as a failed measurement."""
    from sglang_deploy.hostside.lib import gate
    from sglang_deploy.hostside.contract.gate import GateResult
    from sglang_deploy.hostside.contract.switch import SwitchOutcome

    first = {key: GATE[key] for key in ("verdict", "reasons", "inconclusive", "rows", "config_problems",
                                        "simulated", "duration_s")}
    result = GateResult.from_dict({**first, "measurement": FIRST_MEASUREMENT, "comparison": None})
    assert (result.output, result.baseline_release, result.baseline) == (None, None, None)
    measured = result.measurement
    assert (measured.decode_median, measured.acceptance, measured.samples[1].correct_drafts_histogram) == (
        50.0, None, None)
    # the next gate compares with it: the stored samples pair with a new measurement's
    compared = gate.evaluate(bench_measurement([50.0, 52.0], kinds=["prose", "code"]), GateSettings.from_dict(SETTINGS),
                             measured)
    assert compared["comparison"]["pairs"] == 2 and compared["rows"][0]["previous"] == 50.0
    failed = GateResult.from_dict({**first, "verdict": "inconclusive",
                                   "measurement": {"errors": ["the bench client exited with 1"]}}).measurement
    assert (failed.errors, failed.samples, failed.decode_median, failed.config) == (
        ["the bench client exited with 1"], [], None, None)
    assert GateResult.loads(GateResult.from_dict({**first, "measurement": failed.to_dict()}).dump()).measurement == \
        failed
    refused = SwitchOutcome.from_dict({"release": "0002-bbbbbbbb", "ok": False, "error": "3 automatic rollbacks",
                                       "exit_code": 2, "finished": "2026-11-30T10:00:00+00:00"})
    assert (refused.readiness, refused.gate) == (None, None)
    from sglang_deploy.hostside import switch
    assert switch.describe(refused) == "switch refused: 3 automatic rollbacks"


# --- the reports a release keeps: doctor.json and tune-results.json (hostside/contract/findings.py) ------

def doctor_report(tmp_path, **gate):
    """What doctor.py saves: the diagnosis of a checkpoint with a measured decode, with the collector's parts."""
    from sglang_deploy.doctor.diagnosis import diagnose, with_collection
    from sglang_deploy.hostside.safetensors_headers import summarize
    from sglang_deploy.sim.synthetic_checkpoint import write as write_qwen_like

    write_qwen_like(tmp_path)
    collected = doctor_collection(active="0001-aaaaaaaa", server_info={"tp_size": 2},
                                  gate=bench_measurement([50.0], **gate), checkpoint=summarize(tmp_path))
    result = diagnose(collected, [{"name": "NVIDIA RTX A6000", "index": 0}], None)
    return with_collection(result, collected)


def test_the_doctor_writes_exactly_the_reports_fields(tmp_path):
    """diagnose and with_collection spell the fields DoctorReport holds, roofline() those of its bound: a key renamed
    in the doctor fails here (and, strict, when doctor.py writes it), never as a bandwidth the watch reads as none."""
    from sglang_deploy.hostside.contract.findings import DoctorBound, DoctorReport

    written = doctor_report(tmp_path)
    assert set(written) == DoctorReport.field_names()
    assert set(written["roofline"]) == DoctorBound.field_names()  # a measured decode: measured_tok_s and mbu too
    report = DoctorReport.from_dict(written)
    assert DoctorReport.loads(report.dump()) == report and report.roofline.tau == written["roofline"]["tau"]
    assert report.measured_bandwidth() is None  # the datasheet's: the watch keeps its own
    measured = report.but(roofline=report.roofline.but(bandwidth_source="measured (probe, read-only reduction)"))
    assert measured.measured_bandwidth() == (768, "measured (probe, read-only reduction)")


def test_the_tune_writes_exactly_the_entries_fields():
    """tune/search.Measured is written as TuneEntry (Measured.entry) and read back from it (from_entry): one
    description of the fields. A stored entry still reads, and a field renamed in the document fails by name."""
    from sglang_deploy.hostside.contract.findings import TuneEntry
    from sglang_deploy.tune import search

    measured = search.Measured(search.BASELINE, repeats=[{"decode_tok_s": 50.0, "aggregate_tok_s": 120.0}] * 3)
    assert set(measured.to_json()) == TuneEntry.field_names()
    entry = TuneEntry.loads(json.dumps(measured.to_json()))
    assert entry == measured.entry()
    again = search.Measured.from_entry(entry)
    assert again.decode == measured.decode and again.candidate == measured.candidate and again.resumed
    stored = {"id": "nospec", "axis": "nospec", "flags": {"--speculative-algorithm": None}, "env": {},
              "valid": True, "repeats": [{"decode_tok_s": 40.0}], "duration_s": 12}  # a result saved before drafts
    assert search.Measured.from_json(stored).candidate.flag_changes == {"--speculative-algorithm": None}
    with pytest.raises(DocumentError, match="'repeat'"):
        search.Measured.from_json({**{k: v for k, v in stored.items() if k != "repeats"}, "repeat": []})


ENTRY = {"id": "original", "axis": "baseline", "flags": {}, "env": {}, "valid": True, "repeats": [], "duration_s": 0}
TUNE = {"host": "ct129", "service": "sglang", "profile": "p.yaml", "original": "0001-aaaaaaaa", "session": "s1",
        "stamp": "20261130T000000Z", "signature": "{}", "settings": {}, "elapsed_s": 1.0, "results": [ENTRY]}


@pytest.mark.parametrize("data, message", [
    ({"roofline": None, "suspects": [], "notes": [], "simulated": True, "errors": []},
     "doctor.json: required field 'release' is missing"),
    ({"roofline": {"bandwidth_gbs": 600.0, "bandwidth_source": "measured"}, "suspects": [], "notes": [],
      "simulated": True, "release": "0001-aaaaaaaa", "errors": []},
     "doctor.json roofline: required field 'verify_gb_per_gpu' is missing"),
    ({"roofline": None, "suspects": [], "notes": [], "simulated": True, "release": "r", "errors": [], "memmory": {}},
     "doctor.json: unknown field 'memmory'"),
])
def test_the_doctor_report_reader_names_the_field(data, message):
    from sglang_deploy.hostside.contract.findings import DoctorReport

    with pytest.raises(DocumentError) as error:
        DoctorReport.from_dict(data)
    assert str(error.value).startswith(message), error.value


@pytest.mark.parametrize("data, message", [
    (without(TUNE, "signature"), "tune-results.json: required field 'signature' is missing"),
    ({**TUNE, "results": [{**ENTRY, "valid": "yes"}]},
     "tune-results.json results[0]: field 'valid' is 'yes'; accepted: bool"),
    ({**TUNE, "results": [without(ENTRY, "axis")]}, "tune-results.json results[0]: required field 'axis' is missing"),
    ({**TUNE, "results": [{**ENTRY, "decode": 50.0}]}, "tune-results.json results[0]: unknown field 'decode'"),
    ({**TUNE, "results": {}}, "tune-results.json: field 'results' is {}; accepted: list[TuneEntry]"),
    # the restore is the session's TuneRestore, typed: a renamed field is named
    ({**TUNE, "restore": {"needed": True, "ready": True, "elapsed": 3.0}},
     "tune-results.json restore: unknown field 'elapsed'"),
    ({**TUNE, "restore": {"needed": True}}, "tune-results.json restore: required field 'ready' is missing"),
])
def test_the_tune_results_reader_names_the_field(data, message):
    from sglang_deploy.hostside.contract.findings import TuneResults

    with pytest.raises(DocumentError) as error:
        TuneResults.from_dict(data)
    assert str(error.value).startswith(message), error.value


def test_reports_already_on_hosts_read_with_the_safe_defaults():
    """A doctor.json from before the opportunities, the all-reduce path and the memory budget, and a tune's results
    saved after a candidate (no report yet) and from before the drafter and the classes."""
    from sglang_deploy.hostside.contract.findings import DoctorReport, TuneResults

    old = DoctorReport.from_dict({"roofline": None, "suspects": [], "notes": [], "simulated": False,
                                  "release": "0001-aaaaaaaa", "errors": []})
    assert (old.opportunities, old.allreduce, old.memory, old.measured_bandwidth()) == ([], None, None, None)
    saved = TuneResults.from_dict(TUNE)
    assert (saved.winner, saved.restore, saved.results[0].draft, saved.results[0].by_kind) == (None, None, None, {})
    assert json.loads(saved.dump())["results"][0]["id"] == "original"
    # a finished tune's restore, as the controller has written it since 2026-12-02 (TuneRestore.to_dict): the same JSON
    restore = {"needed": True, "ready": True, "stage": "generate", "detail": None, "elapsed_s": 41.5,
               "removed": ["0004-bbbbbbbb"]}
    ended = TuneResults.from_dict({**TUNE, "restore": restore})
    assert (ended.restore.ready, ended.restore.removed) == (True, ["0004-bbbbbbbb"])
    assert json.loads(ended.dump())["restore"] == restore


# --- the snapshots, the switch under way, the resolution and the profile's service --------------------------

SNAPSHOT = {"source": "hf://org/m@" + "a" * 40, "revision": "a" * 40, "manifest_sha256": "1" * 64,
            "manifest": "/m.json", "path": "/srv/models/org--m/" + "a" * 40, "bytes": 10, "files": 2}


@pytest.mark.parametrize("document, data, message", [
    (ReleaseMeta, {**META, "weights": without(SNAPSHOT, "manifest_sha256")},
     "meta.json weights: required field 'manifest_sha256' is missing"),
    (ReleaseMeta, {**META, "offered_drafts": [SNAPSHOT, {**SNAPSHOT, "pth": "/x"}]},
     "meta.json offered_drafts[1]: unknown field 'pth'"),
    (ReleaseMeta, {**META, "tune": {"session": "s1", "temporary": "yes", "candidate": "c"}},
     "meta.json tune: field 'temporary' is 'yes'; accepted: bool"),
    (StoreState, {"switching": {"to": "0002-bbbbbbbb", "since": "t"}}, "state.json switching: required field 'from'"),
    (StoreState, {"switching": {"to": "0002-bbbbbbbb", "from": None, "since": "t", "previous": None}},
     "state.json switching: unknown field 'previous'"),
])
def test_the_parts_of_meta_and_state_name_the_field(document, data, message):
    with pytest.raises(DocumentError) as error:
        document.from_dict(data)
    assert str(error.value).startswith(message), error.value


def test_a_switch_under_way_reads_and_writes_its_from_key():
    """state.json spells the release active before as "from" (switch.py since 2026-11-30): read as `previous`."""
    from sglang_deploy.hostside.contract.store import Switching

    left = {"to": "0002-bbbbbbbb", "from": "0001-aaaaaaaa", "since": "t", "reason": "deploy"}
    state = StoreState.from_dict({"active": "0001-aaaaaaaa", "switching": left})
    assert state.switching == Switching(to="0002-bbbbbbbb", previous="0001-aaaaaaaa", since="t", reason="deploy")
    assert json.loads(state.dump())["switching"] == left


def test_the_resolution_and_the_profile_snapshot_are_what_the_controller_writes(tmp_path):
    """resolved.json as sglang_deploy.validate.resolution makes it, profile.json as release_plan.profile_snapshot does, and
    the profile's service section and the host's ProfileService hold the same fields."""
    from sglang_deploy.hostside.contract.release import ProfileService, ProfileSnapshot, Resolution
    from sglang_deploy.plan import plan_for_host
    from sglang_deploy.profile.sections import ServiceSection
    from sglang_deploy.release_plan import profile_snapshot

    assert set(ServiceSection.model_fields) == ProfileService.field_names()
    plan = plan_for_host({"profile": str(PROVEN), "gpus": 2})
    resolution = Resolution.from_dict(plan.resolution)
    assert set(plan.resolution) == Resolution.field_names() and resolution.parallel_gpus() == 2
    profile = ProfileSnapshot.loads(profile_snapshot(plan))
    assert profile.service.user == plan.profile.service.user and not hasattr(profile, "model")
    with pytest.raises(DocumentError, match="profile.json service: unknown field 'usr'"):
        ProfileSnapshot.from_dict({"service": {**plan.profile.service.model_dump(mode="json"), "usr": "x"}})


# --- no string-key read of a store document comes back --------------------------------------------------------

# The host programs whose answers are typed (hostside/contract/answers.py, gate.py), as the controller runs them:
# host_program, inline_host, inline_store or a TuneHost's sh with the program (or the store's subcommand) first;
# PREFLIGHT_DIR holds the preflight's report. The bench is also run as `-m <package>.bench` (gate.measure_builtin,
# tune_runner.bench_command).
OUTPUT_PROGRAMS = {"doctor_collect", "venv_hooks", "preflight", "history", "tune_session", "bench", "weights",
                   "deploy_facts"}
OUTPUT_RUNNERS = {"host_program", "inline_host", "inline_store", "sh"}
# Calls that answer the bench's measurement, and the attributes that hold a typed answer (GateResult.measurement,
# DoctorCollection.probe): a string key read of what they give is a read of the answer by key.
MEASURED = {"measure_builtin"}
# facts: PreflightReport.facts; output: GateResult.output, the output check's (release.OutputCheck)
ANSWER_ATTRIBUTES = {"measurement", "probe", "facts", "output"}
ANSWER_MODULES = {"output_check"}  # what output_check.run and evaluate answer is typed (tests/test_output_result.py)
# A function's argument of one of these names is the bench's measurement (gate.evaluate's, tune_runner.repeat_summary's,
# router.gate_verdict's; the doctor's suspects_from and diagnose call it gate).
MEASUREMENT_ARGUMENTS = {"measurement", "gate"}


def names_output(node) -> bool:
    """node runs a host program whose answer is typed, or names the preflight's report."""
    import ast

    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and sub.args and isinstance(sub.args[0], ast.Constant) \
                and sub.args[0].value in OUTPUT_PROGRAMS and (getattr(sub.func, "id", None) in OUTPUT_RUNNERS
                                                              or getattr(sub.func, "attr", None) in OUTPUT_RUNNERS):
            return True
        if isinstance(sub, ast.Name) and sub.id == "PREFLIGHT_DIR":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and (sub.value.endswith(".bench")
                                                                             or sub.value == "probe.py"):
            return True  # [python, "-m", f"{__package__}.bench", ...]; the preflight's probe, run by path
        if isinstance(sub, ast.Call) and getattr(sub.func, "id", getattr(sub.func, "attr", None)) in (
                "bench_command", "probe_command"):  # the bench's, and the GPU probe's (doctor_collect)
            return True
    return False


def string_key_reads(source: str) -> list[str]:
    """"line: code" for each string-literal subscript or .get("...") of json.load(s) of a store document or of a
    host program's typed answer: a call whose argument names a document's file (its name, a *_FILE constant, a
    Document's FILE, the store's state_path) or runs a program of OUTPUT_PROGRAMS, directly or through a local name
    (a path, an open handle, a text read from it, a command and its output) in the same function; in a fact whose
    command runs one, its process's `output`. And of the bench's measurement: what a MEASURED call returns, a
    `.measurement` attribute (not a method called), directly, in an expression (`x.measurement or {}`), or through
    a local name, and an argument of MEASUREMENT_ARGUMENTS."""
    import ast

    from sglang_deploy.hostside.contract import answers, document, release, session, store  # noqa: F401 - they register their documents

    files = {cls.FILE for cls in document._DOCUMENTS.values() if cls.FILE} | {
        value for name, value in vars(release).items() if name.endswith("_FILE")}
    names = {name for name in vars(release) if name.endswith("_FILE")} | {"FILE", "state_path"}
    tree = ast.parse(source)

    def names_document(node, tainted):
        if names_output(node):
            return True
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and any(
                    sub.value == f or sub.value.endswith("/" + f) for f in files):
                return True
            if (isinstance(sub, ast.Name) and (sub.id in names or sub.id in tainted)) or (
                    isinstance(sub, ast.Attribute) and sub.attr in names):
                return True
        return False

    fact_outputs = {id(method) for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) and names_output(cls)
                    for method in cls.body if isinstance(method, ast.FunctionDef) and method.name == "process"}
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}

    def measured(node):
        """node is the bench's measurement: a MEASURED call's answer or a stored one's attribute."""
        if isinstance(node, ast.Call):
            return getattr(node.func, "id", getattr(node.func, "attr", None)) in MEASURED or \
                getattr(getattr(node.func, "value", None), "id", None) in ANSWER_MODULES
        return isinstance(node, ast.Attribute) and node.attr in ANSWER_ATTRIBUTES and id(node) not in called

    def loads_document(node, tainted):
        return measured(node) or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("load", "loads") and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "json" and names_document(ast.Tuple(elts=node.args), tainted))

    def around(node):
        """node and what it is made of, but not a call's parts (what a call answers is another value), except the
        subject of x.get(...) (a part of x)."""
        yield node
        if not isinstance(node, ast.Call):
            for child in ast.iter_child_nodes(node):
                yield from around(child)
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            yield from around(node.func.value)

    def of_a_document(subject, tainted):
        """subject is a loaded document: the call itself, a name it was assigned to, or an expression around one
        (`(x.measurement or {})`, `stored[i].measurement if i else None`), not a call's answer."""
        return any(loads_document(node, tainted) or (isinstance(node, ast.Name) and node.id in loaded)
                   for node in around(subject))

    found = []
    for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        tainted, loaded = ({"output"} if id(function) in fact_outputs else set()), set()
        arguments = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
        loaded |= {argument.arg for argument in arguments if argument.arg in MEASUREMENT_ARGUMENTS}
        for node in sorted((n for n in ast.walk(function) if hasattr(n, "lineno")),
                           key=lambda n: (n.lineno, n.col_offset)):
            if isinstance(node, (ast.With, ast.AsyncWith)):
                tainted |= {item.optional_vars.id for item in node.items if isinstance(item.optional_vars, ast.Name)
                            and names_document(item.context_expr, tainted)}
            elif isinstance(node, ast.Assign):  # x = ..., or ok, stdout, _ = remote.run(["cat", <document>])
                assigned = {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)
                            and not isinstance(t, (ast.Subscript, ast.Attribute))}  # x["k"] = doc: x is no doc
                if any(loads_document(n, tainted) for n in around(node.value)):
                    loaded |= assigned
                elif names_document(node.value, tainted):
                    tainted |= assigned
            subject, key = None, None
            if isinstance(node, ast.Subscript):
                subject, key = node.value, node.slice
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                  and node.args):
                subject, key = node.func.value, node.args[0]
            if subject is not None and isinstance(key, ast.Constant) and isinstance(key.value, str) and \
                    of_a_document(subject, tainted):
                found.append(f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


PLANTED = [  # each a store document read by key, as the host read them before they were typed (and the doctor's user)
    'def f(store, active):\n    with open(os.path.join(store.release_dir(active), "profile.json")) as f:\n'
    '        return json.load(f)["service"]["user"]\n',
    'def f(release_dir):\n    with open(os.path.join(release_dir, DOCTOR_FILE)) as f:\n'
    '        bound = json.load(f).get("roofline") or {}\n',
    'def f(text_of, directory):\n    text = text_of(f"{directory}/{RESOLVED_FILE}")\n'
    '    resolution = json.loads(text or "{}")\n    return resolution.get("resolved")\n',
    'def f(store):\n    state = json.loads(store.read(store.state_path))\n    return state["active"]\n',
    'def f(self):\n    ok, stdout, _ = self.remote.run(["cat", f"{root}/{DOCTOR_FILE}"])\n'
    '    doctor = json.loads(stdout) if ok else None\n    return doctor.get("suspects")\n',
    'def f(path):\n    with open(path + "/" + ReleaseMeta.FILE) as handle:\n        meta = json.load(handle)\n'
    '    return meta["weights"]\n',
    # the host programs' answers, as the controller read them before they were typed
    'def f(service):\n    ok, output = host.run_shell_command(host_program("doctor_collect", "--service", service))\n'
    '    collected = json.loads(output.stdout)\n    if not collected.get("active"):\n        raise DeployError()\n',
    'def f(service):\n    ok, output = host.run_shell_command(shlex.join(["cat", f"{PREFLIGHT_DIR}/{service}.json"]))\n'
    '    document = json.loads(output.stdout)\n    return [item["step"] for item in document["findings"]]\n',
    'class ReleaseHistory(FactBase):\n    def command(self, service):\n        return inline_store("history", service)\n'
    '    def process(self, output):\n        return json.loads("\\n".join(output))["releases"]\n',
    'class VenvState(FactBase):\n    def command(self, venv):\n        return inline_host("venv_hooks", "--venv", venv)\n'
    '    def process(self, output):\n        found = json.loads(output[-1])\n        return found.get("sglang")\n',
    # the bench's measurement, as the gate, the tune, the router, the watch and the switch read it before
    # the bench's measurement (release.Measurement)
    'def measure_builtin(probe_url):\n    command = [sys.executable, "-m", f"{__package__}.bench", "--url", probe_url]\n'
    '    result = subprocess.run(command, stdout=subprocess.PIPE)\n    return json.loads(result.stdout)["samples"]\n',
    'def f(self, done):\n    command = bench_command(url, path, settings, 0)\n    done = subprocess.run(command)\n'
    '    measurement = json.loads(done.stdout)\n    return measurement.get("decode_tok_s")\n',
    'def gate_through_router(check_url):\n    ok, output = host.run_shell_command(host_program("bench", "--url", check_url))\n'
    '    measurement = json.loads(output.stdout)\n    return (measurement.get("decode_tok_s") or {}).get("median")\n',
    'def measure(probe_url):\n    measurement = gate.measure_builtin(probe_url, "/k", samples=3)\n'
    '    return measurement.get("errors") or []\n',
    'def gate_summary(result):\n    measurement = result.measurement or {}\n    return measurement.get("decode_tok_s")\n',
    'def table(result):\n    return acceptance.lines((result.measurement or {}).get("acceptance"))\n',
    'def run_gate(stored, release):\n    baseline = stored[release].measurement if release else None\n'
    '    return baseline["samples"]\n',
    'def evaluate(measurement, settings, baseline=None):\n    decode = measurement.get("decode_tok_s") or {}\n',
    'def repeat_summary(measurement):\n    return [s.get("decode_tok_s") for s in measurement["samples"]]\n',
    'def suspects_from(server_info, gate):\n    return ((gate or {}).get("accept_length") or {}).get("median")\n',
    # the weights program's answers, as the fact and a caller read them before answers.SnapshotStatus
    'class WeightsStatus(FactBase):\n    def command(self, manifest, directory):\n'
    '        return inline_host("weights", "status", "--manifest", manifest, "--dir", directory)\n'
    '    def process(self, output):\n        status = json.loads("\\n".join(output) or "{}")\n'
    '        return {"verified": bool(status.get("verified"))}\n',
    'def f(weights):\n    ok, output = host.run_shell_command(host_program("weights", "fetch", "--dir", weights.path))\n'
    '    return json.loads(output.stdout_lines[-1])["changed"]\n',
    # the GPU probe's answer, read by key on either side before probes.GpuProbe
    'def main(python, user):\n    command = probe_command(python, user, "/var/lib/sglang", {}, False)\n'
    '    result = subprocess.run(command, capture_output=True, text=True)\n'
    '    return json.loads(result.stdout)["bandwidth"]\n',
    'def run_doctor(collected):\n    return (collected.probe or {}).get("p2p")\n',
    # the preflight probe's answer, as the runner and a reader of the report read it before probes.PreflightFacts
    'def run(args):\n    argv = [args.python, "-I", os.path.join(HERE, "probe.py")]\n    result = subprocess.run(argv)\n'
    '    facts = json.loads(result.stdout)\n    return (facts.get("torch") or {}).get("all_reduce_2p")\n',
    'def f(report):\n    return report.facts["user"]\n',
]


@pytest.mark.parametrize("source", PLANTED)
def test_the_scan_finds_a_planted_string_key_read(source):
    assert string_key_reads(source), source


def test_the_scan_leaves_json_that_is_not_a_store_document():
    """The bench's and the probe's answers are JSON over a pipe or HTTP, not release-store documents."""
    assert string_key_reads('def f(body):\n    return json.loads(body)["meta_info"]["completion_tokens"]\n') == []
    assert string_key_reads('def f(args):\n    with open(args.expected) as h:\n        return json.load(h)["x"]\n') == []
    assert string_key_reads('class VenvTorch(FactBase):\n    def command(self, python):\n        return python\n'
                            '    def process(self, output):\n        return json.loads(output[-1])["torch"]\n') == []
    # the tune's measurement settings are a method's answer, not the bench's measurement
    assert string_key_reads('def f(self):\n    return self.settings.measurement()["samples"]\n') == []


def test_no_module_reads_a_store_document_by_string_key():
    """The host's modules, the roles, the verbs and the controller read the store's documents and the host programs'
    typed answers through their classes (hostside/contract/): a module that reads one
    with json and a string key fails here."""
    from conftest import REPO

    modules = [path for path in sorted((REPO / "sglang_deploy").rglob("*.py")) + sorted((REPO / "roles").glob("*.py"))
               + sorted(REPO.glob("*.py")) if "contract" not in path.parts]
    assert len(modules) > 100
    found = {str(path.relative_to(REPO)): reads for path in modules
             if (reads := string_key_reads(path.read_text()))}
    assert found == {}


def test_every_document_compares_hashes_and_prints_as_a_generated_dataclass_would():
    """Document writes __eq__, __hash__ and __repr__ once (contract/document.py `document`); each class must behave
    as `dataclass(frozen=True)` would have made it: compared by its fields and its class, hashed by its fields (a list
    field unhashable), printed with every field, and still frozen."""
    from sglang_deploy.hostside.contract import answers, probes, session  # noqa: F401 (every class registered)
    from sglang_deploy.hostside.contract.answers import VenvHooks
    from sglang_deploy.hostside.contract.document import _DOCUMENTS
    from sglang_deploy.hostside.contract.release import GateMark

    assert len(_DOCUMENTS) > 70
    for cls in _DOCUMENTS.values():
        assert "__eq__" not in vars(cls) and "__repr__" not in vars(cls) and cls.__dataclass_params__.frozen, cls
    twin = dataclasses.make_dataclass("GateMark", [(f.name, f.type, f) for f in dataclasses.fields(GateMark)],
                                      frozen=True)
    mark = GateMark.from_dict({"verdict": "pass", "summary": "pass 50.1 tok/s", "at": "2026-12-06T00:00:00+00:00"})
    copy = GateMark.from_dict(mark.to_dict())
    assert mark == copy and hash(mark) == hash(copy) and len({mark, copy}) == 1
    assert mark != mark.but(verdict="fail") and mark != twin(**vars(mark)) and (mark == 1) is False
    assert repr(mark) == repr(twin(**vars(mark))) and "summary='pass 50.1 tok/s'" in repr(mark)
    with pytest.raises(dataclasses.FrozenInstanceError):
        mark.verdict = "fail"
    with pytest.raises(TypeError, match="unhashable"):
        hash(VenvHooks(sglang=None, site=None, problems=[]))


@pytest.mark.parametrize("module", ["answers", "files", "findings", "gate", "history", "probes", "release", "session",
                                    "store", "switch"])
def test_each_contract_module_alone_registers_every_document_its_fields_name(module):
    """A field annotated with a document's name reads as that document only if its class is registered: the module
    whose field names it must import it (contract/document.py). Each module is imported alone in a fresh interpreter,
    as a host program imports only what it needs (a no-op deploy's `deploy_facts` loads answers, release and store)."""
    script = f"""
import dataclasses, re
import sglang_deploy.hostside.contract.{module} as module
from sglang_deploy.hostside.contract.document import _DOCUMENTS, _TYPES, Document
for cls in vars(module).values():
    if isinstance(cls, type) and issubclass(cls, Document) and cls.__module__ == module.__name__:
        for f in dataclasses.fields(cls):
            for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", str(f.type)):
                assert word in _DOCUMENTS or word in _TYPES, (cls.__name__, f.name, word)
print(len(_DOCUMENTS))
"""
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout) > 0


def test_a_no_op_deploys_host_program_loads_none_of_the_gates_documents():
    """deploy_facts (every deploy's one round trip) reads the store's state and the releases' meta.json: importing
    it loads neither the gate's, the reports', the switch's nor the history's documents (about 0.4 ms a class on
    the host's python; contract/document.py)."""
    run = subprocess.run([sys.executable, "-c", "import sys, sglang_deploy.hostside.deploy_facts; print(' '.join("
                          "sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith("
                          "'sglang_deploy.hostside.contract.'))))"], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["answers", "document", "paths", "release", "store"]
