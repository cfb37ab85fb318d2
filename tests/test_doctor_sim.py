"""The perf doctor on the simulated CT129: each planted defect is the top suspect; the proven profile has none."""

import json
import re
import time

import pytest

from conftest import INCIDENT, PROVEN, REPO, proven_with, write_profile

pytestmark = pytest.mark.simhost
STORE = "/var/lib/sglang-deploy/sglang"


def doctor(simhost) -> str:
    result = simhost.pyinfra("doctor.py")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    print(output)
    return output


def top_suspect(output: str) -> str | None:
    for line in output.splitlines():
        if line.strip().startswith("1. ["):
            return line.split("[", 1)[1].split("]", 1)[0]
    return None


def short_session(simhost, *data, timeout):
    """doctor.py's measuring sessions (bisect=, ab=) at the smallest sizes: the verdict's path, not its statistics."""
    result = simhost.pyinfra("doctor.py", "--data", f"profile={PROVEN}", *data, "--data", "tune_samples=1",
                             "--data", "tune_max_new_tokens=16", "--data", "tune_heartbeat_s=90", timeout=timeout)
    return result, result.stdout + result.stderr


def deploy(simhost, profile):
    result = simhost.deploy(profile=profile)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]


def test_proven_profile_no_false_suspect_and_roofline(simhost):
    deploy(simhost, PROVEN)
    output = doctor(simhost)
    assert "suspects: none found" in output and top_suspect(output) is None
    assert "roofline: 1" in output and "datasheet (NVIDIA RTX A6000)" in output and "SIMULATED" in output
    active = json.loads(simhost.sh("cat /var/lib/sglang-deploy/sglang/state.json"))["active"]
    saved = json.loads(simhost.sh(f"cat /var/lib/sglang-deploy/sglang/releases/{active}/doctor.json"))
    assert saved["suspects"] == [] and saved["roofline"]["verify_gb_per_gpu"] == pytest.approx(13.5, abs=0.1)


@pytest.mark.parametrize("change, expected", [
    (("    --enable-metrics: true ", "    --enable-metrics: true\n    --disable-cuda-graph: true ",
      "waivers:\n  cuda-graphs-on: doctor test\n"), "cuda-graphs"),
    (("    --enable-metrics: true ", "    --enable-metrics: true\n    --disable-custom-all-reduce: true ", ""),
     "custom-all-reduce"),
    (("environment:\n", 'environment:\n  NCCL_P2P_DISABLE: {value: "1", reason: doctor test}\n', ""), "p2p-unavailable"),
])
def test_planted_defects_are_the_top_suspect(simhost, tmp_path, change, expected):
    old, new, extra = change
    deploy(simhost, write_profile(tmp_path, proven_with(tmp_path, old, new).read_text() + extra, "defect.yaml"))
    assert top_suspect(doctor(simhost)) == expected


def test_one_step_speculation_is_the_top_suspect_and_the_bisect_names_it(simhost):
    """The seed incident: the doctor names the 1-step release's weak speculation; then, the proven release back,
    `doctor.py --data bisect=<the 1-step release>` finds by measurement that the speculative counts cost the speed.
    (The A/B on request, which needs only the proven release, is a test of its own: handed out apart, the two
    shorter units pack better on the suite's workers than one chain of 120-180 s.)"""
    deploy(simhost, INCIDENT)
    assert top_suspect(doctor(simhost)) == "weak-speculation"
    incident = json.loads(simhost.sh(f"cat {STORE}/state.json"))["active"]
    deploy(simhost, PROVEN)
    proven = json.loads(simhost.sh(f"cat {STORE}/state.json"))["active"]
    before = sorted(simhost.sh(f"ls {STORE}/releases").split())
    started = time.monotonic()
    result, output = short_session(simhost, "--data", f"bisect={incident}", timeout=400)
    print(output, f"bisect: {time.monotonic() - started:.0f} s")
    assert result.returncode == 0, output[-3000:]
    assert re.search(r"VERDICT: the change that costs the speed: speculation \(--speculative-num-draft-tokens: 4 -> 2, "
                     r"--speculative-num-steps: 3 -> 1\): alone it runs [0-9.]+ tok/s against [0-9.]+ \(-[0-9.]+ %\)",
                     output), output[-3000:]
    assert "alone: --speculative-num-draft-tokens: 4 -> 2, --speculative-num-steps: 3 -> 1" in output
    assert output.count("COSTS THE SPEED") == 1 and "SIMULATED HOST" in output
    [saved] = [json.loads(path.read_text()) for path in sorted((REPO / "results" / "ct129-sim").glob(
        f"{incident}-bisect-*.json")) if json.loads(path.read_text()).get("good") == proven][-1:]
    [culprit] = saved["verdict"]["culprits"]
    assert culprit["difference"] == "speculation" and culprit["change_pct"] < -10 and saved["verdict"]["reproduced"]
    # the host as before: the proven release active and running, nobody holding the lock, the temporary one gone
    state = json.loads(simhost.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))
    assert state["state"]["active"] == proven and state["consistent"] and not state["lock"]
    assert sorted(simhost.sh(f"ls {STORE}/releases").split()) == before


def test_the_ab_on_request_finds_that_the_proven_speculation_pays(simhost):
    """`doctor.py --data ab=nospec` at the bisect's sample sizes: the proven MTP 3 against itself without speculation
    (a temporary release under the lock), and the host as before again (about 45 s)."""
    deploy(simhost, PROVEN)
    proven = json.loads(simhost.sh(f"cat {STORE}/state.json"))["active"]
    before = sorted(simhost.sh(f"ls {STORE}/releases").split())
    started = time.monotonic()
    result, output = short_session(simhost, "--data", "ab=nospec", timeout=300)
    print(output, f"A/B: {time.monotonic() - started:.0f} s")
    assert result.returncode == 0, output[-3000:]
    assert re.search(r"VERDICT: speculation pays: [0-9.]+ tok/s \(spread [0-9.]+ %, tau [0-9.]+\) with speculation, "
                     r"[0-9.]+ \(spread [0-9.]+ %\) without \(-[0-9.]+ %\)", output), output[-3000:]
    assert "speculation-slower-than-none" not in output
    kept = json.loads(simhost.sh(f"cat {STORE}/releases/{proven}/ab-results.json"))  # a later doctor reads it
    assert [entry["id"] for entry in kept["results"]] == ["original", "nospec"] and kept["original"] == proven
    state = json.loads(simhost.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))
    assert state["state"]["active"] == proven and state["consistent"] and not state["lock"]
    assert sorted(simhost.sh(f"ls {STORE}/releases").split()) == before


def test_ll128_forced_by_a_local_override_is_the_top_suspect(simhost):
    """LL128 cannot pass validation on PCIe; a local systemd drop-in is how it sneaks in."""
    deploy(simhost, PROVEN)
    simhost.sh("mkdir -p /etc/systemd/system/sglang.service.d && printf '[Service]\\nEnvironment=NCCL_PROTO=LL128\\n'"
               " > /etc/systemd/system/sglang.service.d/tuning.conf && systemctl daemon-reload && systemctl restart sglang"
               " && sleep 4")
    try:
        output = doctor(simhost)
        assert top_suspect(output) == "nccl-ll128-forced" and "(CORRECTNESS)" in output
    finally:
        simhost.sh("rm -rf /etc/systemd/system/sglang.service.d && systemctl daemon-reload && systemctl restart sglang")


def test_no_p2p_fallback_is_found_in_the_journal(simhost, tmp_path):
    """SGLang keeps disable_custom_all_reduce false when it drops custom all-reduce for lack of P2P."""
    deploy(simhost, proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_SIM_P2P: "0"\n'))
    output = doctor(simhost)
    assert top_suspect(output) == "custom-all-reduce" and "fell back to NCCL at runtime" in output


def test_debugging_switches_from_a_drop_in_are_named_with_the_file(simhost):
    deploy(simhost, PROVEN)
    simhost.sh("mkdir -p /etc/systemd/system/sglang.service.d && printf '[Service]\\nEnvironment=CUDA_LAUNCH_BLOCKING=1 "
               "NCCL_DEBUG=INFO\\n' > /etc/systemd/system/sglang.service.d/debug.conf && systemctl daemon-reload "
               "&& systemctl restart sglang && sleep 4")
    try:
        output = doctor(simhost)
        assert top_suspect(output) == "costly-environment"
        assert "CUDA_LAUNCH_BLOCKING=1 is set on the server process but not declared" in output
        assert "NCCL_DEBUG=INFO is set on the server process but not declared" in output
        assert "/etc/systemd/system/sglang.service.d/debug.conf" in output
    finally:
        simhost.sh("rm -rf /etc/systemd/system/sglang.service.d && systemctl daemon-reload && systemctl restart sglang")
