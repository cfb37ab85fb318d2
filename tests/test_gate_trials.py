"""The default gate on the proven profile: 10 runs out of 10 pass (local simulator processes)."""

from conftest import PROVEN
from sglang_deploy.hostside.gate import evaluate
from sglang_deploy.profile import load_profile
from sglang_deploy.sim.calibration import gate_trials


def test_proven_profile_passes_the_default_gate_ten_times_out_of_ten():
    settings = load_profile(PROVEN).gate.model_dump()
    baseline, *runs = gate_trials([{"SGLANG_SIM_SEED": f"trial-{i}"} for i in range(11)])
    verdicts = [evaluate(run, settings, baseline) for run in runs]
    failures = [v for v in verdicts if v["verdict"] != "pass"]
    assert not failures, [(v["verdict"], v["reasons"], v["inconclusive"]) for v in failures]
    assert all(run["duration_s"] <= 60 for run in runs)
