"""What host programs answer the controller (hostside/contract/answers.py): the writer on the host and the reader on the
controller spell each field once, and a field renamed on either side is an error naming the answer and the field,
never a value read as None."""

import ast
import json
import os
import subprocess
import sys
import threading
import time
import types

import pytest

from conftest import REPO, bench_measurement, gate_document, release_meta
from sglang_deploy.hostside.contract import paths as host_paths
from sglang_deploy.hostside.contract.answers import VenvHooks
from sglang_deploy.hostside.contract.history import StoreHistory
from sglang_deploy.hostside.contract.probes import DoctorCollection, PreflightFinding, PreflightReport, SandboxView
from sglang_deploy.hostside.contract.document import DocumentError, line
from sglang_deploy.hostside.contract.findings import WatchEntry
from sglang_deploy.hostside.contract.gate import GateResult
from sglang_deploy.hostside import store as store_module


def renamed(data, old, new):
    return {(new if key == old else key): value for key, value in data.items()}


# --- the preflight's report -----------------------------------------------------------------------------------

def test_the_preflight_writes_its_report_through_the_class(tmp_path, monkeypatch):
    """The runner's --json on its normal path (the probe's facts judged): every field PreflightReport holds and
    findings.finding's fields are PreflightFinding's; the controller reads it back by attribute."""
    import subprocess as real

    from sglang_deploy.hostside.preflight import findings, runner
    from test_preflight_logic import FACTS, GOLDEN_UNIT

    assert set(findings.finding("sandbox", "ok", "set up")) == PreflightFinding.field_names()
    unit, env = tmp_path / "sglang.service", tmp_path / "sglang.env"
    unit.write_text(GOLDEN_UNIT)
    env.write_text("")

    def fake_run(command, **kwargs):
        if command[0] == "systemd-run" and "--pipe" in command:
            return real.CompletedProcess(command, 0, json.dumps(FACTS) + "\n", "")
        return real.CompletedProcess(command, 1, "", "")

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    runner.main(["--unit", str(unit), "--env", str(env), "--python", "/usr/bin/python3", "--gpus", "2",
                 "--json", str(tmp_path / "out.json"), "--quiet"])
    text = (tmp_path / "out.json").read_text()
    assert set(json.loads(text)) - {"format"} == PreflightReport.field_names()
    report = PreflightReport.loads(text, "out.json")
    assert report.findings[0].step == "sandbox" and report.facts.user == "sglang"
    assert report.ok == (not [item for item in report.findings if item.status == "fail"])


REPORT = {"findings": [{"step": "shm", "status": "warn", "detail": "64 MiB", "fix": "mount a larger /dev/shm"}],
          "seconds": 1.5, "facts": None, "ok": True, "host": {}, "sandbox": []}


@pytest.mark.parametrize("data, message", [
    (renamed(REPORT, "seconds", "duration_s"), "preflight/<service>.json: unknown field 'duration_s'"),
    ({**REPORT, "findings": [renamed(REPORT["findings"][0], "fix", "remedy")]},
     "preflight/<service>.json findings[0]: unknown field 'remedy'"),
    ({**REPORT, "findings": [{"step": "shm", "status": "warn", "detail": "64 MiB"}]},
     "preflight/<service>.json findings[0]: required field 'fix' is missing"),
    ({**REPORT, "ok": "yes"}, "preflight/<service>.json: field 'ok' is 'yes'; accepted: bool"),
])
def test_the_preflight_report_reader_names_the_field(data, message):
    with pytest.raises(DocumentError) as error:
        PreflightReport.from_dict(data)
    assert str(error.value).startswith(message), error.value


def test_the_deploy_reads_the_preflight_report_by_attribute(monkeypatch):
    """roles/release.py _preflight_report: the warnings and the steps; a renamed field is a DeployError naming it
    (it read the key as None, or raised a KeyError, before)."""
    from pyinfra.api.exceptions import DeployError

    from roles import release

    logged = []
    answer = types.SimpleNamespace(stdout=json.dumps(REPORT))
    monkeypatch.setattr(release, "host", types.SimpleNamespace(
        name="h", run_shell_command=lambda command, **kwargs: (True, answer), log=lambda text, *a: logged.append(text)))
    monkeypatch.setattr(release, "sudo", lambda: False)
    release._preflight_report("sglang")
    assert logged == ["preflight shm: 64 MiB (fix: mount a larger /dev/shm)", "preflight passed in 1.5 s: shm warn"]
    answer.stdout = json.dumps(renamed(REPORT, "findings", "results"))
    with pytest.raises(DeployError, match="report cannot be read: .*unknown field 'results'"):
        release._preflight_report("sglang")


# --- the doctor's collection ------------------------------------------------------------------------------------

def collector_fields() -> set:
    """The keys hostside/doctor_collect.main puts in its report (its dict literal and each report["..."] = ...)."""
    tree = ast.parse((REPO / "sglang_deploy" / "hostside" / "doctor_collect.py").read_text())
    main = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main")
    keys = set()
    for node in ast.walk(main):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "report" \
                and isinstance(node.value, ast.Dict):
            keys |= {key.value for key in node.value.keys}
        for target in getattr(node, "targets", []):
            if isinstance(target, ast.Subscript) and getattr(target.value, "id", None) == "report":
                keys.add(target.slice.value)
    return keys


def collection(**changes):
    fields = {"active": "0001-aaaaaaaa", "errors": [], "meta": None, "gate": bench_measurement([50.0]).to_dict(),
              "environ": {}, "log_findings": {}, "costly_env": [], "server_info": {"tp_size": 2},
              "checkpoint_path": "/m", "checkpoint": None, "draft_checkpoint": None, "offered_drafts": [],
              "last_tune": None, "last_ab": None, "clock_reasons": {"0": "0x0"}, "card_memory_mib": [49140],
              "sandbox": {"findings": [], "sandbox": [], "host": {}}}
    return {**fields, **changes}


def test_the_doctor_collector_writes_exactly_the_collections_fields():
    """A key renamed in doctor_collect.main fails here (and, strict, when the collector prints it)."""
    assert collector_fields() == DoctorCollection.field_names()
    assert set(collection()) == DoctorCollection.field_names() - {"gate_source", "probe"}  # only when so


@pytest.mark.parametrize("data, message", [
    (renamed(collection(), "active", "active_release"), "hostside.doctor_collect's output: unknown field "
                                                        "'active_release'"),
    ({key: value for key, value in collection().items() if key != "server_info"},
     "hostside.doctor_collect's output: required field 'server_info' is missing"),
    (collection(sandbox={"findings": [{"step": "shm", "status": "fail", "detail": "x", "fixx": None}]}),
     "hostside.doctor_collect's output sandbox findings[0]: unknown field 'fixx'"),
    (collection(gate=renamed(bench_measurement([50.0]).to_dict(), "ttft_s", "ttft")),
     "hostside.doctor_collect's output gate: unknown field 'ttft'"),
    # the active release's meta and its last tune are the release's own documents, typed
    (collection(meta=renamed(release_meta().to_dict(), "venv", "venv_path")), "hostside.doctor_collect's output meta: unknown "
                                                                       "field 'venv_path'"),
    (collection(last_tune={"stamp": "s", "original": "0001-aaaaaaaa", "results": []}),
     "hostside.doctor_collect's output last_tune: required field"),
    (renamed(collection(), "last_tune", "last_tunes"), "hostside.doctor_collect's output: unknown field 'last_tunes'"),
    (collection(last_ab={"kind": "ab", "stamp": "s", "original": "0001-aaaaaaaa", "results": [
        {"id": "nospec", "axis": "nospec", "flags": {}, "env": {}, "valid": True, "repeat": [], "duration_s": 1}]}),
     "hostside.doctor_collect's output last_ab results[0]: unknown field 'repeat'"),
])
def test_the_doctor_collection_reader_names_the_field(data, message):
    with pytest.raises(DocumentError) as error:
        DoctorCollection.loads(json.dumps(data))
    assert str(error.value).startswith(message), error.value


def test_the_doctor_reads_the_collection_by_attribute():
    """with_collection (doctor/diagnosis.py) takes the release, the errors, the probe and the sandbox view from the
    typed collection; the sandbox section of the report reads the view through SandboxView."""
    from sglang_deploy.doctor.diagnosis import sandbox_lines, with_collection

    collected = DoctorCollection.loads(json.dumps(collection(errors=["x"], sandbox={"error": "no view: y"})))
    result = with_collection({"suspects": []}, collected)
    assert (result["release"], result["errors"], result["probe"]) == ("0001-aaaaaaaa", ["x"], None)
    assert sandbox_lines(result["sandbox"]) == ["sandbox: no view: y"]
    with pytest.raises(DocumentError, match="doctor.json sandbox: unknown field 'sandbx'"):
        sandbox_lines({"sandbx": []})
    assert SandboxView.from_dict({"error": "e"}).findings == []


def collection_reads(*files) -> dict:
    """`collected.<field>` read in these files (the doctor reads the typed collection by attribute): field -> where."""
    reads = {}
    for name in files:
        path = REPO / name
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "collected" \
                    and node.attr not in ("but", "to_dict"):
                reads.setdefault(node.attr, f"{name}:{node.lineno}")
    return reads


def test_the_doctor_reads_only_fields_the_collection_has():
    """diagnose, with_collection and doctor.py's stage read DoctorCollection's attributes: a field renamed in the
    class (or misspelt in a read) is named here with the line that reads it, not met as an AttributeError on a host."""
    reads = collection_reads("sglang_deploy/doctor/diagnosis.py", "roles/doctor_stages.py")
    assert {"server_info", "gate", "probe", "checkpoint", "last_tune", "last_ab", "active"} <= set(reads)
    unknown = {field: where for field, where in reads.items() if field not in DoctorCollection.field_names()}
    assert not unknown, f"read but not a DoctorCollection field: {unknown}"


# --- the store's history ----------------------------------------------------------------------------------------

def test_the_store_writes_its_history_through_the_class(tmp_path, monkeypatch, capsys):
    """hostside.store history on a store with a gated, watched release: StoreHistory reads it by attribute."""
    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    directory = tmp_path / "sglang" / "releases" / "0001-aaaaaaaa"
    directory.mkdir(parents=True)
    (directory / "gate-config.json").write_text(gate_document(min_decode_tok_s=45).dump())
    (directory / "gate-result.json").write_text(GateResult.from_dict({
        "verdict": "pass", "reasons": [], "inconclusive": [], "rows": [], "config_problems": [],
        "measurement": bench_measurement([50.0], [3.1], ttft_s=None).to_dict()}).dump())
    (directory / "sglang.env").write_text("SGLANG_API_KEY=sk-secret\nNCCL_ALGO=Ring\n")
    (directory / WatchEntry.FILE).write_text(WatchEntry(status="busy", at="2026-11-01T01:00:00+00:00", unix=1.0,
                                                        release="0001-aaaaaaaa", running=3).line())
    (directory / "meta.json").write_text(release_meta(gate={"verdict": "pass", "summary": "pass", "at": "t"}).dump())
    assert store_module.main(["history", "--service", "sglang"]) == 0
    history = StoreHistory.loads(capsys.readouterr().out)
    release = history.release("0001-aaaaaaaa")
    assert (release.gate.decode_tok_s, release.gate.accept_length, release.gate.ttft_s, release.gate.at) == (
        50.0, 3.1, None, "t")
    assert release.floors.decode_tok_s == 45 and release.watch[0].running == 3
    assert release.environment == {"SGLANG_API_KEY": "(masked)", "NCCL_ALGO": "Ring"}


HISTORY_RELEASE = {"id": "0001-aaaaaaaa", "created": "t", "history": [], "verdict": None, "exec_start": [],
                   "environment": {}, "floors": {"decode_tok_s": None, "accept_length": None},
                   "gate": {"verdict": "pass", "at": None, "decode_tok_s": 1.0, "accept_length": None, "ttft_s": None},
                   "watch": []}


@pytest.mark.parametrize("release, service, message", [
    (renamed(HISTORY_RELEASE, "floors", "floor"), "sglang", "releases[0]: unknown field 'floor'"),
    ({**HISTORY_RELEASE, "gate": renamed(HISTORY_RELEASE["gate"], "decode_tok_s", "decode")}, "sglang",
     "releases[0] gate: unknown field 'decode'"),
    ({**HISTORY_RELEASE, "watch": [{"status": "ok", "at": "t", "unix": 1, "release": "r", "tok_s": 1.0}]}, "sglang",
     "releases[0] watch[0]: unknown field 'tok_s'"),
    (HISTORY_RELEASE, None, ": required field 'service' is missing"),
])
def test_the_history_reader_names_the_field(release, service, message):
    assert StoreHistory.from_dict({"service": "sglang", "state": {}, "releases": [HISTORY_RELEASE]})
    data = {**({"service": service} if service else {}), "state": {}, "releases": [release]}
    with pytest.raises(DocumentError) as error:
        StoreHistory.loads(json.dumps(data))
    assert str(error.value).startswith("hostside.store history's output" + (" " if message[0] != ":" else "")
                                       + message), error.value


# --- the tune session's answers ---------------------------------------------------------------------------------

def measure_item_fields() -> set:
    """The keys tune_runner.Session.measure_item puts in its result: its dict literal, result["..."] = ... and
    result.update(...)'s keywords."""
    tree = ast.parse((REPO / "sglang_deploy" / "hostside" / "lib" / "tune_runner.py").read_text())
    method = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "measure_item")
    keys = set()
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "result" \
                and isinstance(node.value, ast.Dict):
            keys |= {key.value for key in node.value.keys}
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript) \
                and getattr(node.targets[0].value, "id", None) == "result":
            keys.add(node.targets[0].slice.value)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "update" \
                and getattr(node.func.value, "id", None) == "result":
            keys |= {keyword.arg for keyword in node.keywords}
    return keys


def test_the_tune_runner_writes_exactly_the_item_results_fields():
    """A key renamed in measure_item fails here (and, strict, when the session writes the result)."""
    from sglang_deploy.hostside.contract.session import TuneItemResult

    assert measure_item_fields() == TuneItemResult.field_names()


def test_poll_answers_through_the_class(tmp_path, monkeypatch, capsys):
    """tune_session poll: the status, the log and the results, read back by the controller's TunePoll."""
    from sglang_deploy.hostside.lib import tune_runner
    from sglang_deploy.hostside import tune_session
    from sglang_deploy.hostside.contract.session import TunePoll

    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    paths = tune_runner.Paths("sglang", "s1")
    os.makedirs(paths.results)
    tune_runner.write_json(os.path.join(paths.results, "0003.json"), {
        "seq": 3, "id": "steps-1", "release_id": "0002-bbbbbbbb", "ok": True, "at": "t", "duration_s": 9.5,
        "repeats": [{"decode_tok_s": 50.0}]})
    with open(paths.log, "w") as log:
        log.write("candidate steps-1: ready after 3 s\n")
    args = types.SimpleNamespace(service="sglang", session="s1", log_offset=0, results_from=0, wait_s=0.0)
    assert tune_session.cmd_poll(args) == 0
    poll = TunePoll.loads(capsys.readouterr().out)
    assert (poll.status.state, poll.log_offset, poll.result(3).repeats, poll.result(4)) == (
        "missing", len("candidate steps-1: ready after 3 s\n"), [{"decode_tok_s": 50.0}], None)
    tune_runner.write_json(os.path.join(paths.results, "0004.json"), {"seq": 4, "id": "x", "okay": True})
    assert tune_session.cmd_poll(args) == 0
    assert "0004.json: unknown field 'okay'" in TunePoll.loads(capsys.readouterr().out).unreadable[0]
    # the switch's readiness is typed (Readiness): read by attribute, a renamed field named
    result = {"seq": 5, "id": "y", "release_id": "0003-cccccccc", "ok": False, "at": "t", "duration_s": 1.0,
              "readiness": {"ready": False, "stage": "health", "detail": "timeout", "elapsed_s": 60.0}}
    tune_runner.write_json(os.path.join(paths.results, "0005.json"), result)
    tune_runner.write_json(os.path.join(paths.results, "0006.json"), {**result, "seq": 6, "readiness": renamed(
        result["readiness"], "elapsed_s", "elapsed")})
    assert tune_session.cmd_poll(args) == 0
    poll = TunePoll.loads(capsys.readouterr().out)
    assert (poll.result(5).readiness.stage, poll.result(5).readiness.elapsed_s) == ("health", 60.0)
    assert any("0006.json readiness: unknown field 'elapsed'" in line for line in poll.unreadable), poll.unreadable


def test_a_waiting_poll_answers_at_the_first_news_or_at_its_deadline(tmp_path, monkeypatch, capsys):
    """tune_session poll --wait-s: no news (a running session, no new result) waits out W, and the log lines written
    meanwhile come with the answer; a result or the session's end answers at once; the heartbeat is touched as the
    poll starts."""
    from sglang_deploy.hostside import tune_session
    from sglang_deploy.hostside.contract.session import TunePoll, TuneStatus
    from sglang_deploy.hostside.lib import tune_runner

    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    paths = tune_runner.Paths("sglang", "s1")
    os.makedirs(paths.results)
    running = TuneStatus(session="s1", service="sglang", state="running", pid=1, started="t")
    tune_runner.atomic_write(paths.status, running.dump(), 0o600)
    with open(paths.log, "w") as log:
        log.write("candidate a: switching\n")
    with open(paths.heartbeat, "w"):
        pass
    os.utime(paths.heartbeat, (0, 0))
    offset = os.path.getsize(paths.log)

    def poll(wait_s, results_from=1):
        started = time.monotonic()
        args = types.SimpleNamespace(service="sglang", session="s1", log_offset=offset, results_from=results_from,
                                     wait_s=wait_s)
        assert tune_session.cmd_poll(args) == 0
        return TunePoll.loads(capsys.readouterr().out), time.monotonic() - started

    answer, took = poll(0.6)
    assert 0.6 <= took < 1.5 and answer.log == "" and answer.results == [] and answer.status.state == "running"
    assert os.path.getmtime(paths.heartbeat) > 1000  # touched
    line = threading.Timer(0.2, lambda: open(paths.log, "a").write("candidate a: ready after 1 s\n"))
    line.start()
    answer, took = poll(1.0)
    line.join()
    assert 1.0 <= took < 2.0 and answer.log == "candidate a: ready after 1 s\n" and not answer.results, (took, answer)
    offset = answer.log_offset
    result = threading.Timer(0.3, lambda: tune_runner.write_json(os.path.join(paths.results, "0001.json"), {
        "seq": 1, "id": "a", "release_id": "0002-bbbbbbbb", "ok": True, "at": "t", "duration_s": 1.0}))
    result.start()
    answer, took = poll(5.0)
    result.join()
    assert took < 2.5 and answer.result(1).ok, (took, answer)
    tune_runner.atomic_write(paths.status, running.but(state="aborted").dump(), 0o600)
    answer, took = poll(5.0, results_from=2)
    assert took < 1.0 and answer.status.state == "aborted"
    with pytest.raises(SystemExit):
        monkeypatch.setattr(sys, "argv", ["tune_session.py", "poll", "--service", "sglang", "--session", "s1",
                                          "--wait-s", "60"])
        tune_session.main()
    assert "not a wait of 0 to 10 s: '60'" in capsys.readouterr().err


def test_the_controller_waits_on_the_host_well_within_the_heartbeat():
    """A poll touches the heartbeat only as it starts: its wait is at most a quarter of the session's heartbeat."""
    from sglang_deploy.tune.host import POLL_WAIT_S, HostSession

    session = HostSession("h", {}, Answers(""), lambda line: None)
    for heartbeat_s, wait_s in ((30.0, POLL_WAIT_S), (4.0, 1.0), (90.0, POLL_WAIT_S)):
        session.settings = types.SimpleNamespace(heartbeat_s=heartbeat_s)
        assert session.poll_wait_s() == wait_s
    assert POLL_WAIT_S <= 10  # tune_session.py's POLL_WAIT_MAX_S


class Answers:
    """A remote whose tune_session commands answer `text`."""

    def __init__(self, text):
        self.text = text

    def run(self, command):
        return True, self.text, ""


@pytest.mark.parametrize("text, outcome", [
    ("", None),  # no answer: polled again
    ('{"status": {"state": "missing", "message": null, "status": null}, "log": "", "log_offset": 0, "results": '
     '[], "unread": []}', "tune_session poll's answer: unknown field 'unread'"),
    ('{"status": {"state": "missing", "message": null, "status": null}, "log": "", "results": []}',
     "tune_session poll's answer: required field 'log_offset' is missing"),
])
def test_the_controller_reads_poll_by_attribute_and_names_a_renamed_field(text, outcome):
    from sglang_deploy.tune.host import HostSession, TuneError

    session = HostSession("h", {}, Answers(text), lambda line: None)
    session.service, session.session = "sglang", "s1"
    if outcome is None:
        assert session.session_cmd("poll") is None
        return
    with pytest.raises(TuneError) as error:
        session.session_cmd("poll")
    assert str(error.value).startswith(outcome), error.value


def test_close_reads_its_answer_by_attribute_and_says_a_renamed_field():
    """close never raises (it runs in the session's finally): an answer it cannot read is state "unreadable",
    whose message names the field; a readable one gives the restore."""
    from sglang_deploy.tune.host import HostSession

    said = []
    session = HostSession("h", {}, Answers('{"state": "closed", "message": null, "status": null, "unt": null}'),
                          said.append)
    session.service, session.session, session.active = "sglang", "s1", "0001-aaaaaaaa"
    closed = session.close(abort=False)
    assert closed.state == "unreadable" and closed.restore is None
    assert any("unknown field 'unt'" in line for line in said), said
    session.remote = Answers('{"state": "closed", "message": null, "status": {"session": "s1", "service": "sglang", '
                             '"state": "closed", "pid": 1, "started": "t", "restore": {"needed": true, "ready": true, '
                             '"elapsed_s": 12.0}}}')
    closed = session.close(abort=False)
    assert closed.restore.elapsed_s == 12.0 and "original release 0001-aaaaaaaa running again after 12.0 s" in said


# --- the venv's hooks -------------------------------------------------------------------------------------------

def test_the_venv_hooks_answer_has_the_readers_fields(tmp_path):
    """venv_hooks prints read()'s dict itself (it also runs alone, `python3 -I -c <its source>`): its keys are
    VenvHooks', and the fact (roles/facts.VenvState) reads a renamed one as unreadable, naming it, never as a venv
    without SGLang (which the install would remove)."""
    from roles.facts import VenvState
    from sglang_deploy.hostside import venv_hooks

    assert set(venv_hooks.read(str(tmp_path))) == VenvHooks.field_names()
    answer = json.dumps({"sglang": "0.5.23", "site": "/v/lib/python3.11/site-packages", "problems": []})
    assert VenvState().process(["", answer]) == {"sglang": "0.5.23", "problems": []}
    state = VenvState().process([json.dumps({"version": "0.5.23", "site": None, "problems": []})])
    assert state["sglang"] is None and "unknown field 'version'" in state["unreadable"]
    assert VenvState().process(["Traceback (most recent call last):"])["unreadable"].startswith("Traceback")


def test_a_fact_program_still_runs_alone():
    """provision.hooks_command runs venv_hooks.py without its package: it must not need outputs.py to answer."""
    from sglang_deploy.provision import HOOKS_PROGRAM

    result = subprocess.run(["python3", "-I", "-c", HOOKS_PROGRAM.read_text(), "--venv", "/nonexistent"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and VenvHooks.loads(result.stdout).problems == [], result.stderr


# --- the weights' error line ------------------------------------------------------------------------------------

def test_the_weights_error_line_is_read_by_attribute(monkeypatch, capsys):
    """hostside.weights prints WeightsFailure when it refuses; _fetch_live reads its error, a renamed field named,
    and a last line that is no error line (progress) falls back to stderr as before."""
    from pyinfra.api.exceptions import OperationError

    from roles import weights as weights_role
    from sglang_deploy.hostside.contract.answers import WeightsFailure
    from sglang_deploy.hostside.weights import __main__ as weights_main
    from sglang_deploy.hostside.weights.manifest import MODELS_ROOT

    # status reads only (no lock, nothing written): a manifest that is not there is its refusal
    assert weights_main.main(["status", "--manifest", "/nonexistent.json", "--dir", f"{MODELS_ROOT}/o--m/x"]) != 0
    failure = WeightsFailure.loads(capsys.readouterr().out.splitlines()[-1])
    assert failure.ok is False and failure.error
    for stdout, reason in ((['{"ok": false, "error": "not enough disk"}'], "weights: not enough disk"),
                           (['{"ok": false, "eror": "x"}'],
                            "weights: hostside.weights' error line: unknown field 'eror'"),
                           (["fetched 3 of 9 files"], "weights: disk full")):
        answer = types.SimpleNamespace(stdout_lines=stdout, stderr_lines=["disk full"])
        monkeypatch.setattr(weights_role, "host",
                            types.SimpleNamespace(run_shell_command=lambda *a, answer=answer, **k: (False, answer)))
        monkeypatch.setattr(weights_role, "sudo", lambda: False)
        with pytest.raises(OperationError) as error:
            weights_role._fetch_live("true")
        assert str(error.value).startswith(reason), error.value


# --- the bench's measurement ------------------------------------------------------------------------------------

class Stream:
    """A streaming /generate answer: server-sent events, one readline each."""

    def __init__(self, events):
        self.lines = [f"data: {json.dumps(event)}\n".encode() for event in events] + [b"data: [DONE]\n"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def readline(self, limit=-1):
        return self.lines.pop(0) if self.lines else b""


def test_the_bench_writes_its_measurement_through_the_class(monkeypatch, capsys):
    """bench.main on its normal path (a server streaming two chunks per request): every field Measurement, Sample,
    Summary and BenchConfig hold is written, and the gate's reader reads it back by attribute."""
    from sglang_deploy.hostside import bench
    from sglang_deploy.hostside.contract.gate import BenchConfig, Measurement, Sample, Summary

    def stream(request, timeout):
        return Stream([{"meta_info": {"completion_tokens": 1}},
                       {"meta_info": {"completion_tokens": 32, "finish_reason": {"type": "length"},
                                      "spec_accept_length": 3.1, "spec_correct_drafts_histogram": [1, 2, 3, 4],
                                      "e2e_latency": 0.5}}])

    monkeypatch.setattr(bench, "urlopen", stream)
    monkeypatch.setattr(bench.Client, "get_json", lambda self, path: {"version": "0.5.23"})
    monkeypatch.setattr("sys.argv", ["bench", "--url", "http://127.0.0.1:30000", "--samples", "3", "--warmup", "1",
                                     "--max-new-tokens", "32", "--concurrency", "2", "--aggregate-rounds", "1"])
    assert bench.main() == 0
    text = capsys.readouterr().out
    data = json.loads(text)
    assert set(data) - {"format"} == Measurement.field_names()
    assert set(data["samples"][0]) == Sample.field_names() and set(data["config"]) == BenchConfig.field_names()
    assert set(data["decode_tok_s"]) == set(data["aggregate_tok_s"]) == Summary.field_names()
    measured = Measurement.loads(text)
    assert (measured.samples[0].kind, measured.samples[1].kind, measured.tau_median, measured.concurrency,
            measured.errors, measured.simulated) == ("prose", "code", 3.1, 2, [], False)
    assert measured.decode_median > 0 and measured.aggregate_median > 0 and measured.acceptance["all"]["histogram"]


def measured(**changes):
    """The bench's answer as JSON fields (two samples, an aggregate round), `changes` made."""
    return {**bench_measurement([50.0, 52.0], aggregates=[150.0]).to_dict(), **changes}


@pytest.mark.parametrize("data, message", [
    (renamed(measured(), "decode_tok_s", "decode"), "hostside.bench's measurement: unknown field 'decode'"),
    ({key: value for key, value in measured().items() if key != "duration_s"},
     "hostside.bench's measurement: required field 'duration_s' is missing"),
    (measured(decode_tok_s=renamed(measured()["decode_tok_s"], "median", "p50")),
     "hostside.bench's measurement decode_tok_s: unknown field 'p50'"),
    (measured(samples=[renamed(measured()["samples"][0], "kind", "class")]),
     "hostside.bench's measurement samples[0]: unknown field 'class'"),
    (measured(config=renamed(measured()["config"], "concurrency", "streams")),
     "hostside.bench's measurement config: unknown field 'streams'"),
    (measured(errors=None), "hostside.bench's measurement: field 'errors' is None; accepted: list"),
    ({"errors": "timed out"}, "hostside.bench's measurement: required field 'url' is missing"),  # no failed run's
])
def test_the_measurement_reader_names_the_field(data, message):
    from sglang_deploy.hostside.contract.gate import Measurement

    with pytest.raises(DocumentError) as error:
        Measurement.loads(json.dumps(data))
    assert str(error.value).startswith(message), error.value


def test_a_stored_measurement_with_a_renamed_field_is_no_baseline():
    """gate-result.json keeps the measurement the next gate compares with: a renamed field there is a DocumentError
    naming the file and the field (switch.run_gate then says the release is no baseline), never a baseline whose
    median reads as None."""
    result = {"verdict": "pass", "reasons": [], "inconclusive": [], "rows": [], "config_problems": []}
    assert GateResult.from_dict({**result, "measurement": measured()}).measurement.decode_median == 51.0
    with pytest.raises(DocumentError, match="gate-result.json measurement: unknown field 'accept'"):
        GateResult.loads(json.dumps({**result, "measurement": renamed(measured(), "accept_length", "accept")}))


def test_the_gate_reads_the_bench_through_the_class(monkeypatch):
    """measure_builtin: the bench's answer by attribute; a renamed field, an exit status or a timeout is a failed
    measurement naming why, and the gate is inconclusive saying so (a renamed field read as no sample before)."""
    from sglang_deploy.hostside.lib import gate
    from sglang_deploy.hostside.contract.gate import GateSettings

    answers = []
    monkeypatch.setattr(gate.subprocess, "run", lambda command, **kwargs: answers.pop(0))
    answers.append(subprocess.CompletedProcess([], 0, json.dumps(measured()), None))
    assert gate.measure_builtin("http://127.0.0.1:30000", "/k", 2, 1, 256, 4).decode_median == 51.0
    answers.append(subprocess.CompletedProcess([], 0, json.dumps(renamed(measured(), "samples", "sample")), None))
    failed = gate.measure_builtin("http://127.0.0.1:30000", "/k", 2, 1, 256, 4)
    assert failed.errors == ["the bench client's answer cannot be read: hostside.bench's measurement: unknown field "
                             "'sample' (Measurement has: " + ", ".join(sorted(failed.field_names())) + ")"]
    settings = GateSettings(min_decode_tok_s=45, min_accept_length=2.8, max_regression_pct=10, samples=2, warmup=1,
                            max_new_tokens=256, concurrency=4, on_inconclusive="rollback")
    verdict = gate.evaluate(failed, settings)
    assert verdict["verdict"] == "fail" and "unknown field 'sample'" in verdict["inconclusive"][0]
    answers.append(subprocess.CompletedProcess([], 2, "", None))
    exited = gate.measure_builtin("http://127.0.0.1:30000", "/k", 2, 1, 256, 4)
    assert (exited.errors, exited.url, exited.config.samples) == (["the bench client exited with 2"],
                                                                  "http://127.0.0.1:30000", 2)
    assert GateResult.loads(GateResult(verdict="inconclusive", reasons=[], inconclusive=[], rows=[], config_problems=[],
                                       measurement=exited).dump()).measurement == exited


def test_the_watch_and_the_switch_read_the_measurement_by_attribute(monkeypatch):
    from sglang_deploy.hostside import switch, watch

    monkeypatch.setattr(watch.gate, "measure_builtin", lambda *args, **kwargs: bench_measurement([50.0, 52.0]))
    assert watch.measure("http://127.0.0.1:30000", "/k", 256, 2) == {
        "samples": 2, "decode_tok_s": 51.0, "accept_length": 3.2, "ttft_s": 0.1, "status": "ok"}
    failed = bench_measurement([]).failed(["sample 1: timed out"])
    monkeypatch.setattr(watch.gate, "measure_builtin", lambda *args, **kwargs: failed)
    assert watch.measure("http://127.0.0.1:30000", "/k", 256, 2) == {
        "samples": 0, "decode_tok_s": None, "accept_length": None, "ttft_s": None, "status": "error",
        "errors": ["sample 1: timed out"]}
    result = GateResult(verdict="pass", reasons=[], inconclusive=[], rows=[], config_problems=[],
                        measurement=bench_measurement([50.0, 52.0]))
    assert switch.gate_summary(result) == "pass 51.0 tok/s tau 3.20"
    assert switch.gate_summary(result.but(verdict="fail", measurement=None)) == "fail"


def test_the_router_gate_reads_the_bench_by_attribute_and_names_a_renamed_field(monkeypatch):
    from pyinfra.api.exceptions import OperationError

    from roles import router as router_role
    from sglang_deploy.profile.sections import GateSection

    answer = types.SimpleNamespace(stdout=json.dumps(renamed(measured(), "errors", "failures")), stderr="")
    monkeypatch.setattr(router_role, "host", types.SimpleNamespace(name="r", run_shell_command=lambda *a, **k: (
        True, answer)))
    monkeypatch.setattr(router_role, "sudo", lambda: False)
    with pytest.raises(OperationError, match="answered unreadably: hostside.bench's measurement: unknown field "
                                             "'failures'"):
        router_role.gate_through_router("http://127.0.0.1:30000", ["http://w1"], GateSection(min_decode_tok_s=45,
                                                                                            min_accept_length=2.8))


# --- the weights' answers ---------------------------------------------------------------------------------------

def test_the_weights_status_is_written_through_its_class(tmp_path, capsys):
    """`weights status` and deploy_facts (one section per snapshot) write SnapshotStatus: its fields exactly, read
    back by the fact (roles/facts.WeightsStatus) by attribute."""
    from roles.facts import WeightsStatus
    from sglang_deploy.hostside import deploy_facts
    from sglang_deploy.hostside.weights import __main__ as weights_main
    from sglang_deploy.hostside.weights.manifest import MODELS_ROOT
    from sglang_deploy.hostside.contract.answers import SnapshotStatus
    from sglang_deploy.weights import manifest_from_directory

    (tmp_path / "config.json").write_text("{}")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(manifest_from_directory(tmp_path)))
    directory = f"{MODELS_ROOT}/o--m/0123abcd"
    assert weights_main.main(["status", "--manifest", str(manifest), "--dir", directory]) == 0
    answer = capsys.readouterr().out.strip()
    assert set(json.loads(answer)) - {"format"} == SnapshotStatus.field_names()
    assert WeightsStatus().process(["@@weights_status", answer]) == {"verified": False, "hub_client": None}
    for status in (deploy_facts.snapshot_status(str(manifest), directory),
                   deploy_facts.snapshot_status(str(tmp_path / "none.json"), directory),
                   deploy_facts.snapshot_status(str(tmp_path / "config.json"), directory)):
        assert SnapshotStatus.loads(line(status)) == status and status.verified is False
    assert deploy_facts.snapshot_status(str(tmp_path / "config.json"), directory).error


@pytest.mark.parametrize("lines, value", [
    (['{"verified": true, "path": "/d"}'], {"verified": True, "hub_client": None}),
    (['{"format": 1, "verified": true, "path": "/d", "error": null}', "@@weights_hub", "1.33.0"],
     {"verified": True, "hub_client": "1.33.0"}),
    # the program refuses an unreadable manifest: not verified, and why (the deploy uploads it again)
    (['{"ok": false, "error": "/m.json: not a manifest"}'],
     {"verified": False, "hub_client": None, "error": "/m.json: not a manifest"}),
    # a renamed field on either side: said, never "not verified" (it read as not verified before)
    (['{"verifed": true, "path": "/d"}'], {"verified": False, "hub_client": None, "unreadable": (
        "weights: hostside.weights status's answer: unknown field 'verifed' (SnapshotStatus has: error, path, "
        "verified)")}),
    (['{"verified": "yes", "path": "/d"}'], {"verified": False, "hub_client": None, "unreadable": (
        "weights: hostside.weights status's answer: field 'verified' is 'yes'; accepted: bool")}),
    ([], {"verified": False, "hub_client": None, "unreadable": "weights: hostside.weights status's answer: no answer"}),
])
def test_the_weights_status_fact_reads_by_attribute_and_names_a_renamed_field(lines, value):
    from roles.facts import WeightsStatus

    assert WeightsStatus().process(["@@weights_status", *lines]) == value


def test_an_unreadable_weights_status_stops_the_deploy_before_any_change(monkeypatch):
    """plan.refusals: a snapshot's status the fact could not read is a refusal naming it (nothing changed)."""
    from roles.facts import WeightsStatus
    from sglang_deploy import plan as plan_module

    unreadable = WeightsStatus().process(["@@draft_status", '{"verified": true, "pth": "/d"}'], section="draft")
    facts = {"account": None, "units": None, "simulated": False, "store": None, "weights": None, "draft": unreadable,
             "offered": []}
    monkeypatch.setattr(plan_module, "host_problems", lambda *args, **kwargs: [])
    monkeypatch.setattr(plan_module, "lock_refusal", lambda store: [])
    settings = types.SimpleNamespace(ssh_user="root", hub_wheelhouse=None)
    assert plan_module.refusals(types.SimpleNamespace(simulated=False), facts, settings) == [
        "the weights' status cannot be read: draft: hostside.weights status's answer: unknown field 'pth' "
        "(SnapshotStatus has: error, path, verified)"]


@pytest.mark.parametrize("answer, message", [
    ({"ok": True, "changed": True, "path": "/d", "hashed_files": 3, "hashed_bytes": 9, "files": 3}, None),
    ({"ok": True, "changed": False, "path": "/d"}, None),
    ({"ok": True, "changd": True, "path": "/d"}, "unknown field 'changd'"),
    ({"ok": True, "path": "/d"}, "required field 'changed' is missing"),
])
def test_the_weights_verify_placed_and_pruned_answers_name_the_field(answer, message, monkeypatch):
    """fetch|promote's answer: _fetch_live reads it by attribute on success; a renamed field fails the operation,
    naming it. verify's and prune's answers are written through WeightsVerified and WeightsPruned."""
    from pyinfra.api.exceptions import OperationError

    from roles import weights as weights_role
    from sglang_deploy.hostside.contract.answers import WeightsPlaced, WeightsPruned, WeightsVerified

    logged = []
    output = types.SimpleNamespace(stdout_lines=["fetched 3 of 3 files", json.dumps(answer)], stderr_lines=[])
    monkeypatch.setattr(weights_role, "host", types.SimpleNamespace(
        run_shell_command=lambda *a, **k: (True, output), log=lambda text, *a: logged.append(text)))
    monkeypatch.setattr(weights_role, "sudo", lambda: False)
    if message is None:
        weights_role._fetch_live("true")
        assert logged == ["weights: /d verified" + (" and in place" if answer["changed"] else ", unchanged")]
        assert WeightsPlaced.from_dict(answer).path == "/d"
    else:
        with pytest.raises(OperationError) as error:
            weights_role._fetch_live("true")
        assert str(error.value).startswith("weights: fetched, but the answer cannot be read: hostside.weights "
                                           f"fetch|promote's answer: {message}"), error.value
    assert WeightsVerified(ok=True, problems=[], seconds=0.1, hashed_files=0, hashed_bytes=0, files=3).files == 3
    with pytest.raises(DocumentError, match="prune's answer: unknown field 'deleted'"):
        WeightsPruned.from_dict({"ok": True, "deleted": [], "kept": []})


def test_the_weights_verify_answer_has_the_readers_fields(tmp_path):
    """`weights verify` answers WeightsVerified(ok, problems, seconds, **manifest.verify's stats): the stats' keys are
    its remaining fields (a renamed stat fails at the write)."""
    from sglang_deploy.hostside.contract.answers import WeightsVerified
    from sglang_deploy.hostside.weights import manifest as host_manifest
    from sglang_deploy.weights import manifest_from_directory

    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(manifest_from_directory(checkpoint)))
    problems, stats = host_manifest.verify(str(checkpoint), json.loads(manifest.read_text()))
    assert problems == [] and set(stats) | {"ok", "problems", "seconds"} == WeightsVerified.field_names()


# --- the GPU probe's answer -------------------------------------------------------------------------------------

def probe_keys() -> dict:
    """The keys hostside/gpu_probe.py writes (it runs alone, -I, and prints its dicts itself): each function's
    returned dict literals and its `<name>["..."] = ...` stores, and main's report and error answers."""
    tree = ast.parse((REPO / "sglang_deploy" / "hostside" / "gpu_probe.py").read_text())
    keys = {}
    for function in [node for node in tree.body if isinstance(node, ast.FunctionDef)]:
        found = keys.setdefault(function.name, set())
        for node in ast.walk(function):
            if isinstance(node, ast.Dict) and all(isinstance(key, ast.Constant) for key in node.keys):
                found.add(frozenset(key.value for key in node.keys))
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript) \
                    and isinstance(node.targets[0].slice, ast.Constant):
                found.add(frozenset({node.targets[0].slice.value}))
    return keys


def test_the_gpu_probe_writes_exactly_the_answers_fields():
    """A key renamed in gpu_probe.py fails here; the answer recorded on 2x H200 reads through GpuProbe (test
    _doctor_logic), and the error answers are GpuProbe's error (with the devices when they are busy)."""
    from sglang_deploy.hostside.contract.probes import GpuProbe, ProbeAllreduce, ProbeBandwidth, ProbeDevice, ProbeP2P

    keys = probe_keys()
    assert keys["bandwidth"] == {frozenset(ProbeBandwidth.field_names())}
    assert set().union(*keys["p2p"]) == ProbeP2P.field_names()
    assert keys["allreduce"] == {frozenset(ProbeAllreduce.field_names())}
    main = set(keys["main"])
    measured = set().union(*[key for key in main if "error" not in key])  # the report, and each of its devices
    assert measured == GpuProbe.field_names() - {"error"} | ProbeDevice.field_names()
    assert {key for key in main if "error" in key} == {frozenset({"error"}), frozenset({"error", "devices"})}
    assert GpuProbe.from_dict({"error": "torch.cuda is not available"}).bandwidth == []


PROBE = json.loads((REPO / "tests" / "fixtures" / "h200x2-gpu-probe.json").read_text())


@pytest.mark.parametrize("data, message", [
    ({key: value for key, value in PROBE.items() if key != "p2p"}, "the GPU probe's answer: required field 'p2p'"),
    ({**PROBE, "bandwidth": [renamed(PROBE["bandwidth"][0], "read_gbs", "read")]},
     "the GPU probe's answer bandwidth[0]: unknown field 'read'"),
    ({**PROBE, "allreduce_default": renamed(PROBE["allreduce_default"], "latency_us", "latency")},
     "the GPU probe's answer allreduce_default: unknown field 'latency'"),
])
def test_the_gpu_probe_reader_names_the_field(data, message):
    from sglang_deploy.hostside.contract.probes import GpuProbe

    with pytest.raises(DocumentError) as error:
        GpuProbe.from_dict(data)
    assert str(error.value).startswith(message), error.value


def test_the_collector_reads_the_probe_through_its_class():
    """doctor_collect.probe_answer: the probe's answer as a GpuProbe, or an error naming why (a renamed field,
    no JSON: its stderr, no python); the doctor's collection reads it by attribute."""
    from sglang_deploy.hostside.doctor_collect import probe_answer

    def ran(stdout, stderr=""):
        return subprocess.CompletedProcess([], 0, stdout, stderr)

    assert probe_answer(ran(json.dumps(PROBE)), "/v/bin/python").read_bandwidth() == min(
        entry["read_gbs"] for entry in PROBE["bandwidth"])
    renamed_probe = probe_answer(ran(json.dumps(renamed(PROBE, "nccl", "nccl_version"))), "/v/bin/python")
    assert renamed_probe.error.startswith("the GPU probe's answer: unknown field 'nccl_version'")
    assert probe_answer(ran("", "Traceback: no torch"), "/v/bin/python").error == "Traceback: no torch"
    assert probe_answer(None, "/v/bin/python").error == "/v/bin/python not found"
    answer = probe_answer(ran(json.dumps(PROBE)), "/p")
    collected = DoctorCollection.loads(json.dumps(collection(probe=answer.to_dict())))
    assert collected.probe.p2p.can_access_0_1 is True
    with pytest.raises(DocumentError, match="output probe p2p: unknown field 'can_access'"):
        DoctorCollection.loads(json.dumps(collection(probe={**PROBE, "p2p": renamed(PROBE["p2p"], "can_access_0_1",
                                                                                      "can_access")})))
