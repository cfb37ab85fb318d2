"""What host programs answer the controller (hostside/outputs.py): the writer on the host and the reader on the
controller spell each field once, and a field renamed on either side is an error naming the answer and the field,
never a value read as None."""

import json
import types

import pytest

from sglang_deploy.hostside.documents import DocumentError
from sglang_deploy.hostside.outputs import PreflightFinding, PreflightReport


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
    assert report.findings[0].step == "sandbox" and report.facts["user"] == "sglang"
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
