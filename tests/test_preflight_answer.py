"""The preflight probe's answer (hostside/contract/probes.py PreflightFacts): probe.py runs by path with -I and prints its
dicts itself, so the keys it writes (and allreduce.run's, and the runner's outside view) are held equal to the classes'
fields here; the runner and findings.py read it by attribute, and a renamed field is an error naming the answer and
the field, never a fact read as None."""

import ast
import copy
import json

import pytest

from conftest import REPO
from sglang_deploy.hostside.contract.probes import (PreflightAllReduce, PreflightDriver, PreflightFacts, PreflightLimit,
                                                    PreflightLimits, PreflightNode, PreflightOutside,
                                                    PreflightResolution, PreflightSandbox, PreflightToolchain,
                                                    PreflightTorch, PreflightTriton)
from sglang_deploy.hostside.contract.document import DocumentError
from test_preflight_logic import FACTS, GOLDEN_UNIT

PREFLIGHT = REPO / "sglang_deploy" / "hostside" / "preflight"
# The names a writer builds its answer in: a dict literal, `found["k"] = ...`, `found.update(k=...)`,
# `found.setdefault("k", ...)`.
BUILT_IN = {"facts", "found"}


def file_keys(cls) -> set:
    return {cls.KEYS.get(name, name) for name in cls.field_names()}


def written_keys(path, function_name=None) -> dict:
    """Each top-level function's keys (of function_name only, if given): its dict literals' constant keys and the keys
    it stores into a name of BUILT_IN."""
    tree = ast.parse(path.read_text())
    keys = {}
    for function in [node for node in tree.body if isinstance(node, ast.FunctionDef)]:
        if function_name and function.name != function_name:
            continue
        found = set()
        for node in ast.walk(function):
            if isinstance(node, ast.Dict):
                found |= {key.value for key in node.keys if isinstance(key, ast.Constant)}
            targets = []
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    targets += target.elts if isinstance(target, ast.Tuple) else [target]
            for target in targets:
                if isinstance(target, ast.Subscript) and getattr(target.value, "id", None) in BUILT_IN \
                        and isinstance(target.slice, ast.Constant):
                    found.add(target.slice.value)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and getattr(node.func.value, "id", None) in BUILT_IN:
                if node.func.attr == "update":
                    found |= {keyword.arg for keyword in node.keywords if keyword.arg}
                if node.func.attr == "setdefault" and isinstance(node.args[0], ast.Constant):
                    found.add(node.args[0].value)
        if found:
            keys[function.name] = found
    return keys


def test_the_probe_writes_exactly_the_answers_fields():
    """A key renamed in probe.py, or a field renamed in contract/probes.py, fails here; a new function of the probe that
    writes a dict must be named here too."""
    keys = written_keys(PREFLIGHT / "probe.py")
    assert set(keys) == {"node_facts", "parse_limits", "toolchain", "sandbox_facts", "resolution", "cuda_driver_facts",
                         "torch_facts", "triton_facts", "probe"}
    assert keys["node_facts"] == file_keys(PreflightNode)
    wanted = next(node for node in ast.walk(ast.parse((PREFLIGHT / "probe.py").read_text()))
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "wanted")
    assert set(ast.literal_eval(wanted.value).values()) == file_keys(PreflightLimits)
    assert keys["parse_limits"] - set(ast.literal_eval(wanted.value)) == file_keys(PreflightLimit)
    assert keys["toolchain"] == file_keys(PreflightToolchain) and "g++" in keys["toolchain"]
    assert keys["sandbox_facts"] == file_keys(PreflightSandbox)
    assert keys["resolution"] - {"argv"} == file_keys(PreflightResolution)  # {"argv": argv}: the resolver's input
    assert keys["cuda_driver_facts"] == file_keys(PreflightDriver)
    assert keys["torch_facts"] == file_keys(PreflightTorch)
    assert keys["triton_facts"] == file_keys(PreflightTriton)
    assert keys["probe"] == file_keys(PreflightFacts) - {"outside"}  # outside: the runner's


def test_the_all_reduce_and_the_runner_write_exactly_their_fields():
    assert written_keys(PREFLIGHT / "allreduce.py", "run")["run"] == file_keys(PreflightAllReduce)
    assert written_keys(PREFLIGHT / "runner.py", "outside_facts")["outside_facts"] == file_keys(PreflightOutside)


def renamed(data, old, new):
    return {(new if key == old else key): value for key, value in data.items()}


@pytest.mark.parametrize("data, message", [
    (renamed(FACTS, "shm_bytes", "shm"), "the preflight probe's answer: unknown field 'shm'"),
    ({key: value for key, value in FACTS.items() if key != "toolchain"},
     "the preflight probe's answer: required field 'toolchain' is missing"),
    ({**FACTS, "toolchain": renamed(FACTS["toolchain"], "g++", "gxx")},
     "the preflight probe's answer toolchain: unknown field 'gxx'"),
    ({**FACTS, "nodes": [renamed(FACTS["nodes"][0], "errno", "error_number")]},
     "the preflight probe's answer nodes[0]: unknown field 'error_number'"),
    ({**FACTS, "torch": renamed(FACTS["torch"], "all_reduce_ms", "all_reduce_time_ms")},
     "the preflight probe's answer torch: unknown field 'all_reduce_time_ms'"),
    ({**FACTS, "resolution": renamed(FACTS["resolution"], "resolved", "fields")},
     "the preflight probe's answer resolution: unknown field 'fields'"),
    ({**FACTS, "shm_bytes": "32G"}, "the preflight probe's answer: field 'shm_bytes' is '32G'; accepted: int"),
])
def test_the_probe_answer_reader_names_the_field(data, message):
    with pytest.raises(DocumentError) as error:
        PreflightFacts.from_dict(data)
    assert str(error.value).startswith(message), error.value


def test_the_judgement_reads_the_facts_by_attribute():
    facts = PreflightFacts.from_dict(FACTS)
    assert facts.toolchain.gxx == "/usr/bin/g++" and facts.to_dict()["toolchain"]["g++"] == "/usr/bin/g++"
    assert PreflightFacts.from_dict(facts.to_dict()) == facts
    from sglang_deploy.hostside.preflight.findings import diagnose

    assert diagnose(facts, gpus=2) == diagnose(FACTS, gpus=2)  # a dict is read through the class
    with pytest.raises(DocumentError, match="probe's answer sandbox: required field 'seccomp' is missing"):
        diagnose({**FACTS, "sandbox": {k: v for k, v in FACTS["sandbox"].items() if k != "seccomp"}}, gpus=2)


def test_the_runner_names_a_renamed_field_in_the_report(tmp_path, monkeypatch):
    """A probe whose answer the runner cannot read (a field renamed on one side) is a failed finding naming the field,
    and the report is written (facts None); before, a missing key read as None ("no GPU to judge")."""
    import subprocess as real

    from sglang_deploy.hostside.contract.probes import PreflightReport
    from sglang_deploy.hostside.preflight import runner

    unit, env = tmp_path / "sglang.service", tmp_path / "sglang.env"
    unit.write_text(GOLDEN_UNIT)
    env.write_text("")
    answer = copy.deepcopy(FACTS)
    del answer["outside"]
    answer["torch"] = renamed(answer["torch"], "count", "device_count")

    def fake_run(command, **kwargs):
        if command[0] == "systemd-run" and "--pipe" in command:
            return real.CompletedProcess(command, 0, json.dumps(answer) + "\n", "")
        return real.CompletedProcess(command, 1, "", "")

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    rc = runner.main(["--unit", str(unit), "--env", str(env), "--python", "/usr/bin/python3", "--gpus", "2",
                      "--json", str(tmp_path / "out.json"), "--quiet"])
    report = PreflightReport.loads((tmp_path / "out.json").read_text(), "out.json")
    assert rc == 1 and report.facts is None and not report.ok
    [fail] = [item for item in report.findings if item.status == "fail"]
    assert fail.step == "probe" and "torch: unknown field 'device_count'" in fail.detail
    answer["torch"] = FACTS["torch"]
    rc = runner.main(["--unit", str(unit), "--env", str(env), "--python", "/usr/bin/python3", "--gpus", "2",
                      "--json", str(tmp_path / "out.json"), "--quiet"])
    report = PreflightReport.loads((tmp_path / "out.json").read_text(), "out.json")
    assert isinstance(report.facts, PreflightFacts) and report.facts.outside.listening is False
    assert report.facts.torch.count == 2


# --- the judgement reads no field of the answer by string key --------------------------------------------------

# Keys that are also a finding's (findings.finding) or the runner's host facts' (PreflightReport.host: a dict).
NOT_THE_ANSWERS = {"step", "status", "detail", "fix", "error", "uid_map", "unprivileged", "nesting"}


def answer_key_reads(source: str) -> list:
    """"line: code" for each `x["k"]` or `x.get("k")` whose k is a field of the probe's answer (any class of
    contract/probes.py's Preflight* but the report and its findings), but for NOT_THE_ANSWERS."""
    from sglang_deploy.hostside.contract import probes

    fields = set().union(*(file_keys(cls) for name, cls in vars(probes).items()
                           if name.startswith("Preflight") and name not in ("PreflightReport", "PreflightFinding"))) \
        - NOT_THE_ANSWERS
    found = []
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args:
            key = node.args[0]
        if isinstance(key, ast.Constant) and key.value in fields:
            found.append(f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


@pytest.mark.parametrize("source", [  # as findings.py and the runner read the answer before it was typed
    'def diagnose(facts, gpus):\n    numbered = [n for n in facts["nodes"] if n["path"]]\n',
    'def _torch_findings(found, triton):\n    return found.get("count", 0)\n',
    'def run(result):\n    facts = json.loads(result.stdout)\n    return (facts.get("torch") or {}).get("all_reduce_2p")\n',
])
def test_the_key_scan_finds_a_planted_read(source):
    assert answer_key_reads(source), source


def test_the_judgement_and_the_runner_read_no_answer_field_by_key():
    found = {name: reads for name in ("findings.py", "runner.py")
             if (reads := answer_key_reads((PREFLIGHT / name).read_text()))}
    assert found == {}
