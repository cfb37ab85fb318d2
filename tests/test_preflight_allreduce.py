"""The preflight's two-process all-reduce (hostside/preflight/allreduce.py): its ranks started, waited for under
the per-step timeout and killed, run for real with the GPU stand-in's model and its planted faults (wrong data; a
hang); the finding and the fix each outcome names; the runner and the deploy's command around it. No host."""

import json
import os
import sys
import types

import pytest

from roles.release import preflight_command
from sglang_deploy.hostside.preflight import allreduce as preflight_allreduce, findings as preflight_findings
from sglang_deploy.hostside.preflight import probe as preflight_probe, runner as preflight
from test_preflight_logic import FACTS, GOLDEN_UNIT, facts_with, failures


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:  # a zombie not reaped yet is dead too
        return handle.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def spawned(monkeypatch):
    """The pids of the ranks run() starts, to check none is left behind."""
    pids, real = [], preflight_allreduce.subprocess.Popen

    def popen(*args, **kwargs):
        process = real(*args, **kwargs)
        pids.append(process.pid)
        return process

    monkeypatch.setattr(preflight_allreduce.subprocess, "Popen", popen)
    return pids


@pytest.mark.parametrize("fault, ok, wrong, timed_out", [
    (None, True, {}, False),
    ("wrong-data", False, {"0": "1024 of 4096"}, False),  # rank 1's writes partly dropped: rank 0's sum is off
    ("hang", False, {}, True),  # rank 1 never delivers, rank 0 waits for it
])
def test_the_standins_ranks_run_with_planted_faults_and_none_is_left_behind(fault, ok, wrong, timed_out, spawned,
                                                                            monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    if fault:
        monkeypatch.setenv("SGLANG_SIM_ALLREDUCE_FAULT", fault)
    found = preflight_allreduce.run(2, step_timeout=2, standin=True)
    assert (found["ok"], found["wrong"], found["timed_out"], found["fault"]) == (ok, wrong, timed_out, fault)
    assert found["waiting"] == ([0, 1] if timed_out else []) and found["killed"] == found["waiting"]
    assert len(spawned) == 2 and not any(alive(pid) for pid in spawned)
    assert list(tmp_path.iterdir()) == []  # the rendezvous directory is gone
    if timed_out:
        assert 2 <= found["seconds"] < 15


def test_the_simulated_hosts_own_fault_file_plants_it_too(monkeypatch, tmp_path):
    monkeypatch.delenv("SGLANG_SIM_ALLREDUCE_FAULT", raising=False)
    monkeypatch.setattr(preflight_allreduce, "HOST_FAULT_FILE", str(tmp_path / "allreduce-fault"))
    assert preflight_allreduce.planted_fault() is None
    (tmp_path / "allreduce-fault").write_text("wrong-data\n")
    assert preflight_allreduce.planted_fault() == "wrong-data"
    monkeypatch.setenv("SGLANG_SIM_ALLREDUCE_FAULT", "hang")  # the release's environment first
    assert preflight_allreduce.planted_fault() == "hang"


def test_a_rank_that_dies_is_an_error_not_a_hang(spawned, tmp_path):
    script = tmp_path / "die.sh"
    script.write_text("#!/bin/sh\necho 'NCCL WARN Cuda failure: peer access is not supported' >&2\nexit 3\n")
    script.chmod(0o755)
    found = preflight_allreduce.run(2, step_timeout=30, standin=True, python=str(script), start_timeout=30)
    assert not found["ok"] and not found["timed_out"] and found["seconds"] < 10 and not found["waiting"]
    assert found["errors"]["0"].startswith("exited 3: NCCL WARN Cuda failure")
    [fail] = failures(preflight_findings.diagnose(facts_with(torch={**FACTS["torch"], "all_reduce_2p": found}), gpus=2))
    assert "rank 0: exited 3" in fail["detail"] and "NCCL_DEBUG=INFO" in fail["fix"]


def result(**changes):
    return {"world": 2, "ok": True, "timed_out": False, "waiting": [], "wrong": {}, "errors": {},
            "ms": {"4096": 0.05, "4194304": 1.9}, "stopped": [], "killed": [], "standin": False, "step_timeout": 120, "fault": None,
            "seconds": 6.1, **changes}


@pytest.mark.parametrize("found, status, detail", [
    (result(), "ok", "the all-reduce over 2 processes, one per GPU as SGLang's TP ranks matched the known sum "
                     "(4 KiB 0.05 ms, 4096 KiB 1.9 ms)"),
    (result(ok=False, wrong={"0": "1024 of 1052672"}), "fail", "returned wrong data: rank 0: 1024 of 1052672 values "
                                                                "differ from the known sum"),
    (result(ok=False, timed_out=True, waiting=[0, 1], killed=[0, 1]), "fail",
     "did not finish in 120 s: rank(s) 0, 1 still waiting, as a collective hangs when peer writes are dropped; its "
     "processes were killed"),
])
def test_the_two_process_all_reduce_is_judged_with_the_iommu_fix_and_its_cost(found, status, detail):
    findings = preflight_findings.diagnose(facts_with(torch={**FACTS["torch"], "all_reduce_2p": found}), gpus=2)
    [two] = [f for f in findings if f["step"] == "p2p" and "processes" in f["detail"]]
    assert two["status"] == status and detail in two["detail"]
    if status == "fail":
        assert failures(findings) == [two]
        assert "`iommu=pt`" in two["fix"] and "--disable-custom-all-reduce" in two["fix"]
        assert "+3-8 % decode time" in two["fix"] and "NCCL_P2P_DISABLE" in two["fix"]


def test_on_a_simulated_host_the_standins_result_is_judged_and_says_what_it_is():
    planted = result(ok=False, wrong={"0": "1024 of 4096"}, standin=True, fault="wrong-data", ms={})
    torch = {"error": None, "count": 2, "torch": "2.14.1", "all_reduce_2p": planted}
    findings = preflight_findings.diagnose(facts_with(torch=torch, triton=None), gpus=2, simulated=True)
    [fail] = failures(findings)
    assert "(simulated: the GPU stand-in's model of it, planted fault wrong-data)" in fail["detail"]
    healthy = {**torch, "all_reduce_2p": result(standin=True, ms={})}
    findings = preflight_findings.diagnose(facts_with(torch=healthy, triton=None), gpus=2, simulated=True)
    assert not failures(findings) and "matched the known sum" in " ".join(f["detail"] for f in findings)


def test_the_probe_runs_the_standins_all_reduce_on_a_simulated_host(monkeypatch, capsys, tmp_path):
    """torch_facts on a simulated host with the stand-in's torch (2 GPUs): the step runs, a hang is cut at the
    step timeout, and stderr names the step for the runner."""
    fake = types.ModuleType("torch")
    fake.__version__ = "2.14.1"
    fake.cuda = types.SimpleNamespace(device_count=lambda: 2)
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("SGLANG_SIM_ALLREDUCE_FAULT", "hang")
    found = preflight_probe.torch_facts(2, simulated=True, step_timeout=1)
    assert found["all_reduce_2p"]["timed_out"] and found["all_reduce_2p"]["standin"]
    from sglang_deploy.hostside.contract.probes import PreflightTorch

    assert PreflightTorch.from_dict(found).all_reduce_2p.timed_out  # the writer's answer reads through its class
    assert "step all-reduce" in capsys.readouterr().err
    assert "all_reduce_2p" not in preflight_probe.torch_facts(1, simulated=True)  # one GPU: no peer


def test_the_runner_passes_the_step_timeout_and_stops_the_unit_after_a_timed_out_step(tmp_path, monkeypatch):
    import subprocess as real

    unit, env = tmp_path / "sglang.service", tmp_path / "sglang.env"
    unit.write_text(GOLDEN_UNIT)
    env.write_text("")
    hung = result(ok=False, timed_out=True, waiting=[0, 1], killed=[0, 1])
    facts = facts_with(torch={**FACTS["torch"], "all_reduce_2p": hung})
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        if command[0] == "systemd-run" and "--pipe" in command:
            return real.CompletedProcess(command, 0, json.dumps(facts) + "\n", "step all-reduce\n")
        return real.CompletedProcess(command, 1, "", "")

    monkeypatch.setattr(preflight.subprocess, "run", fake_run)
    rc = preflight.main(["--unit", str(unit), "--env", str(env), "--python", "/usr/bin/python3", "--gpus", "2",
                         "--json", str(tmp_path / "out.json"), "--step-timeout", "45"])
    probe = next(c for c in calls if c[0] == "systemd-run" and "--pipe" in c)
    assert rc == 1 and probe[probe.index("--step-timeout") + 1] == "45.0"
    assert ["systemctl", "stop", f"{probe[5].removeprefix('--unit=')}.service"] in calls
    document = json.loads((tmp_path / "out.json").read_text())
    assert any("did not finish in 120 s" in f["detail"] for f in document["findings"] if f["status"] == "fail")


def test_a_probe_hung_in_the_all_reduce_names_the_iommu_fix():
    found = preflight_findings.timed_out("sglang-deploy-preflight-9", 600, "step torch\nstep p2p\nstep nccl\n"
                                                                          "step all-reduce\n")
    assert "hung at step all-reduce" in found["detail"] and "iommu=pt" in found["fix"]


def test_a_simulated_host_gets_a_short_step_timeout_a_real_one_the_default():
    from roles.target import RealGpuHost, SimulatedHost

    assert "--step-timeout 10" in preflight_command("sglang", "0003-abc", "/p", 2, SimulatedHost().preflight_args(True))
    assert "--step-timeout" not in preflight_command("sglang", "0003-abc", "/p", 2, RealGpuHost().preflight_args(True))
