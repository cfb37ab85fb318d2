"""How noisy is the default gate, and how small a regression does it catch? (simulated CT129)

    python benchmarks/gate_noise.py [--runs 10] [--slowdowns 4,6,8,10,15]

Runs the gate's own measurement (hostside/bench.py with the default gate settings) against local
simulator processes of the proven profile, each with its own timing-noise seed, and evaluates each
run with the gate's statistics (hostside/gate.py) against a baseline run, as a deploy would.
Prints: gate duration, CV of the decode median across runs, false alarms among unchanged releases,
and the detection rate for each planted slowdown. Targets (issue 5): duration <= 60 s, CV <= 3 %,
a 10 % regression caught in >= 9 of 10 runs, 0 of 10 false alarms.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_deploy.hostside.gate import evaluate  # noqa: E402
from sglang_deploy.profile import load_profile  # noqa: E402
from sglang_deploy.sim.calibration import gate_trials  # noqa: E402

SETTINGS = load_profile(Path(__file__).resolve().parent.parent / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml").gate.model_dump()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--slowdowns", default="4,6,8,10,15")
    args = parser.parse_args()
    slowdowns = [float(s) for s in args.slowdowns.split(",") if s]

    baseline, *unchanged = gate_trials([{"SGLANG_SIM_SEED": f"base-{i}"} for i in range(args.runs + 1)])
    medians = [m["decode_tok_s"]["median"] for m in unchanged]
    durations = [m["duration_s"] for m in unchanged]
    results = [evaluate(m, SETTINGS, baseline) for m in unchanged]
    verdicts = [r["verdict"] for r in results]
    cv = statistics.pstdev(medians) / statistics.mean(medians) * 100
    print(f"gate measurement duration: median {statistics.median(durations):.1f} s (max {max(durations):.1f})")
    print(f"decode median across {len(medians)} unchanged runs: {statistics.mean(medians):.1f} tok/s, CV {cv:.2f} %")
    print(f"false alarms (unchanged release failed): {verdicts.count('fail')} of {len(verdicts)}; "
          f"inconclusive {verdicts.count('inconclusive')}")
    for result in results:
        if result["verdict"] != "pass":
            print(f"  {result['verdict']}: {'; '.join(result['reasons'] + result['inconclusive'])}")
    smallest = None
    for slowdown in slowdowns:
        runs = gate_trials([{"SGLANG_SIM_SEED": f"slow-{slowdown}-{i}", "SGLANG_SIM_SLOWDOWN_PCT": str(slowdown)}
                            for i in range(args.runs)])
        verdicts = [evaluate(m, SETTINGS, baseline) for m in runs]
        caught = [v["verdict"] == "fail" for v in verdicts]
        for v in verdicts:
            if v["verdict"] != "fail":
                print(f"  missed ({v['verdict']}): ratio {v['comparison'] and round(v['comparison']['ratio'], 3)}, "
                      f"+/-{v['comparison'] and round(v['comparison']['half_width'] * 100, 1)} %")
        ratio = statistics.median(m["decode_tok_s"]["median"] for m in runs) / baseline["decode_tok_s"]["median"]
        print(f"planted {slowdown:4.1f} % slowdown (measured ratio {ratio:.3f}): caught in {sum(caught)} of {len(caught)}")
        if smallest is None and sum(caught) >= 0.9 * len(caught):
            smallest = slowdown
    print(f"smallest regression caught in >= 90 % of runs: {smallest} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
