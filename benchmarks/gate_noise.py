"""How often does the gate decide wrongly? (simulated CT129, local simulator processes)

    python benchmarks/gate_noise.py [--trials 20] [--parallel 10] [--seed run1] [--no-issue-case] [--samples N]

Every trial is a deploy's comparison in miniature: a baseline measurement of the proven profile and a
candidate measurement, each against its own simulator process (sglang_deploy/sim, real-time timing
with its own noise seed), measured with the gate's own client (hostside/bench.py) at the proven
profile's gate settings (samples, warmup, max_new_tokens, concurrency) and judged by the gate's own
evaluate() with the profile's floors and tolerance. Each trial has its own baseline, so the trials of a
scenario are independent. The simulators run the profile's flags and environment.

Scenarios (each --trials times; the candidate's decode rate relative to the baseline's):
  unchanged      the same release again: any fail is a false alarm; inconclusive rolls back too
  10 % slower    SGLANG_SIM_SLOWDOWN_PCT=11.1 (every cycle 1/0.9 as long): must fail
  10 % faster    SGLANG_SIM_SLOWDOWN_PCT=-9.1 (every cycle 1/1.1 as long): must pass, never roll back
  issue 12       the proven profile against a 1-step (incident) baseline, as if that had passed: ~30 % faster
                 with acceptance that differs by prompt; must pass (--no-issue-case skips it)

Targets (issue 12): false alarms <= 1 of 20, the 10 % slowdown caught >= 19 of 20, a release >= 10 %
faster rolled back 0 of 20; inconclusive verdicts are counted and shown. A profile's on_inconclusive
decides what an inconclusive verdict does; with the default (rollback) it is counted as rolled back.
Jobs run --parallel at a time in a shuffled order, so every scenario sees the same machine load. With
the defaults: 100 measurements of about 38 s, 10 at a time, about 7.5 minutes (0.2 CPU cores).
"""

import argparse
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from sglang_deploy.flags import flag_args  # noqa: E402
from sglang_deploy.hostside.contract.gate import GateSettings, Measurement  # noqa: E402
from sglang_deploy.hostside.lib.gate import evaluate  # noqa: E402
from sglang_deploy.profile import load_profile  # noqa: E402
from testbed.local_sim import LocalSim, stub_model_dir  # noqa: E402

PROVEN = load_profile(ROOT / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml")
INCIDENT = load_profile(ROOT / "profiles" / "qwen3.6-27b-mtp1-2xa6000.yaml")
SETTINGS = PROVEN.gate.model_dump()

# SGLANG_SIM_SLOWDOWN_PCT scales every cycle; the decode rate scales by its inverse.
SLOWER_10 = f"{(1 / 0.90 - 1) * 100:.2f}"   # rate x 0.9
FASTER_10 = f"{(1 / 1.10 - 1) * 100:.2f}"   # rate x 1.1


def sim_for(profile, env):
    return ["--served-model-name", profile.model.served_name, *flag_args(profile.sglang.flags)], \
        {**profile.environment, **env}


def bench_args():
    return [item for key in ("samples", "warmup", "max_new_tokens", "concurrency")
            for item in (f"--{key.replace('_', '-')}", str(SETTINGS[key]))]


def measure(job, model, tmp):
    """One gate measurement against its own simulator process."""
    flags, env = sim_for(job["profile"], job["env"])
    sim = LocalSim(flags, env, model).start(Path(tmp) / f"{job['name']}.log")
    try:
        sim.wait_ready()
        return job["name"], sim.bench(*bench_args())
    finally:
        sim.stop()


def rolled_back(verdict):
    return verdict == "fail" or (verdict == "inconclusive" and SETTINGS["on_inconclusive"] == "rollback")


def describe(result):
    comparison = result.get("comparison")
    text = "; ".join(result["reasons"] + result["inconclusive"]) or "pass"
    if comparison and not (result["reasons"] or result["inconclusive"]):
        text = comparison["message"]
    return text


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=10, help="simulator processes at a time")
    parser.add_argument("--seed", default="gate-noise", help="prefix of the simulators' timing-noise seeds")
    parser.add_argument("--no-issue-case", action="store_true", help="skip the proven-after-1-step scenario")
    parser.add_argument("--samples", type=int, help="override the profile's gate.samples (to explore; default: "
                                                    f"the profile's {SETTINGS['samples']})")
    args = parser.parse_args()
    if args.samples:
        SETTINGS["samples"] = args.samples

    scenarios = [("unchanged", {}), ("10 % slower", {"SGLANG_SIM_SLOWDOWN_PCT": SLOWER_10}),
                 ("10 % faster", {"SGLANG_SIM_SLOWDOWN_PCT": FASTER_10})]
    jobs = []
    for i in range(args.trials):
        jobs.append({"name": f"base-{i}", "profile": PROVEN, "env": {"SGLANG_SIM_SEED": f"{args.seed}-base-{i}"}})
        for s, (name, env) in enumerate(scenarios):
            jobs.append({"name": f"s{s}-{i}", "profile": PROVEN, "env": {**env, "SGLANG_SIM_SEED": f"{args.seed}-s{s}-{i}"}})
        if not args.no_issue_case:
            jobs.append({"name": f"incident-{i}", "profile": INCIDENT,
                         "env": {"SGLANG_SIM_SEED": f"{args.seed}-incident-{i}"}})
    random.Random(args.seed).shuffle(jobs)
    print(f"{len(jobs)} gate measurements ({args.trials} trials), {args.parallel} at a time; gate settings "
          f"{ {k: SETTINGS[k] for k in ('samples', 'warmup', 'max_new_tokens', 'concurrency')} }, floors "
          f"{SETTINGS['min_decode_tok_s']} tok/s, tau {SETTINGS['min_accept_length']}, tolerance "
          f"{SETTINGS['max_regression_pct']} %", flush=True)

    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        model = stub_model_dir(Path(tmp) / "model")
        with ThreadPoolExecutor(args.parallel) as pool:
            measured = dict(pool.map(lambda job: measure(job, model, tmp), jobs))
    wall = time.monotonic() - started

    durations = [m["duration_s"] for m in measured.values()]
    base_medians = [measured[f"base-{i}"]["decode_tok_s"]["median"] for i in range(args.trials)]
    cv = statistics.pstdev(base_medians) / statistics.mean(base_medians) * 100
    print(f"wall time {wall / 60:.1f} min; one gate measurement takes median {statistics.median(durations):.1f} s "
          f"(max {max(durations):.1f} s)")
    print(f"proven profile's decode median over {args.trials} baselines: {statistics.mean(base_medians):.1f} tok/s, "
          f"CV {cv:.2f} %")

    figures = {}
    rows = [(name, s, f"s{s}") for s, (name, _) in enumerate(scenarios)]
    if not args.no_issue_case:
        rows.append(("issue 12: proven after a passed 1-step baseline", 0, "incident"))
    for name, s, key in rows:
        if key == "incident":  # the candidate is the unchanged proven run; the baseline is the 1-step run
            pairs = [(measured[f"s0-{i}"], measured[f"incident-{i}"]) for i in range(args.trials)]
        else:
            pairs = [(measured[f"{key}-{i}"], measured[f"base-{i}"]) for i in range(args.trials)]
        settings = GateSettings.from_dict(SETTINGS)
        results = [evaluate(Measurement.from_dict(candidate), settings, Measurement.from_dict(baseline))
                   for candidate, baseline in pairs]
        verdicts = [r["verdict"] for r in results]
        ratios = [r["comparison"]["ratio"] for r in results if r["comparison"]]
        widths = [(r["comparison"]["high"] - r["comparison"]["low"]) / 2 * 100 for r in results if r["comparison"]]
        by_comparison = sum(1 for r in results if r["verdict"] == "fail"
                            and any("than the baseline" in reason for reason in r["reasons"]))
        counts = {v: verdicts.count(v) for v in ("pass", "fail", "inconclusive")}
        figures[name] = counts
        print(f"\n{name}: measured ratio median {statistics.median(ratios):.3f}, 90 % interval half-width median "
              f"{statistics.median(widths):.1f} % (max {max(widths):.1f} %)")
        print(f"  pass {counts['pass']}, fail {counts['fail']} (by the comparison: {by_comparison}), "
              f"inconclusive {counts['inconclusive']}; rolled back {sum(map(rolled_back, verdicts))} of {len(verdicts)}")
        for result in results:
            if (result["verdict"] != "pass") != (name == "10 % slower"):
                print(f"    {result['verdict']}: {describe(result)}")

    n = args.trials
    unchanged, slower, faster = figures["unchanged"], figures["10 % slower"], figures["10 % faster"]
    print("\nsummary")
    print(f"  false alarms (unchanged release failed): {unchanged['fail']} of {n}; "
          f"inconclusive {unchanged['inconclusive']} of {n}")
    print(f"  10 % slowdown caught: {slower['fail']} of {n}; inconclusive {slower['inconclusive']}, "
          f"passed {slower['pass']}")
    print(f"  10 % faster rolled back: {faster['fail'] + (faster['inconclusive'] if SETTINGS['on_inconclusive'] == 'rollback' else 0)} "
          f"of {n} (fail {faster['fail']}, inconclusive {faster['inconclusive']})")
    if not args.no_issue_case:
        issue = figures["issue 12: proven after a passed 1-step baseline"]
        print(f"  issue 12 case (~30 % faster, per-prompt spread) rolled back: "
              f"{issue['fail'] + issue['inconclusive']} of {n}")
    print(f"  gate measurement: median {statistics.median(durations):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
