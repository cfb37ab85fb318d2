"""The sequential gate against the fixed one: identical releases rolled back, 10 % slower ones passed (issue 50).

    python benchmarks/gate_sequential.py [--trials 20] [--parallel 12] [--seed seq1]

Every trial is a deploy's comparison in miniature, as in benchmarks/gate_noise.py: a baseline measurement of the
proven profile and a candidate, each against its own simulator process (sglang_deploy/sim, real-time timing with its
own noise seed), measured with the gate's own client (hostside/bench.py) at the proven profile's gate settings. The
candidate is measured as the sequential gate would measure it at most: the first round (the gate's settings), then
max_rounds - 1 further rounds of the same prompts (no warmup, no aggregate), in the same simulator process, one
after the other. Both rules are then judged on the same measurements:
  before  the fixed gate: evaluate() on the first round, one look at 5 % (max_rounds 1);
  after   the sequential gate: gate.sequential() over the rounds in the order measured, with its time budget
          counted in the rounds' own durations; it stops at the first look that decides.
So the comparison is paired: the rules differ only where the first round straddles.

Scenarios (each --trials times): unchanged (the same release again: any rollback is a false one; inconclusive rolls
back with the default on_inconclusive) and 10 % slower (SGLANG_SIM_SLOWDOWN_PCT=11.1: must not pass). Jobs run
--parallel at a time in a shuffled order on this loaded machine, so both scenarios see the same load.
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
from sglang_deploy.hostside.lib.gate import evaluate, sequential  # noqa: E402
from sglang_deploy.profile import load_profile  # noqa: E402
from testbed.local_sim import LocalSim, stub_model_dir  # noqa: E402

PROVEN = load_profile(ROOT / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml")
SETTINGS = GateSettings.from_dict(PROVEN.gate.model_dump(mode="json"))
SLOWER_10 = f"{(1 / 0.90 - 1) * 100:.2f}"  # SGLANG_SIM_SLOWDOWN_PCT: every cycle 1/0.9 as long, rate x 0.9


def bench_args(first):
    s = SETTINGS
    return ["--samples", str(s.samples), "--warmup", str(s.warmup if first else 0), "--max-new-tokens",
            str(s.max_new_tokens), "--concurrency", str(s.concurrency if first else 1)]


def measure(job, model, tmp):
    """The job's rounds against its own simulator process: [Measurement, ...]."""
    flags = ["--served-model-name", PROVEN.model.served_name, *flag_args(PROVEN.sglang.flags)]
    sim = LocalSim(flags, {**PROVEN.environment, **job["env"]}, model).start(Path(tmp) / f"{job['name']}.log")
    try:
        sim.wait_ready()
        return job["name"], [Measurement.from_dict(sim.bench(*bench_args(r == 0))) for r in range(job["rounds"])]
    finally:
        sim.stop()


def judge(rounds, baseline):
    """(fixed verdict, sequential verdict, samples the sequential decision needed, its looks)."""
    fixed = evaluate(rounds[0], SETTINGS.but(max_rounds=1), baseline)["verdict"]
    spent = [0.0]
    queue = list(rounds[1:])

    def measure_round():
        more = queue.pop(0)
        spent[0] += more.duration_s
        return more

    result, measured = sequential(rounds[0], SETTINGS, baseline, measure_round, clock=lambda: spent[0])
    looks = (result["comparison"] or {}).get("looks") or []
    return fixed, result["verdict"], len(measured.samples), looks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=12, help="simulator processes at a time")
    parser.add_argument("--seed", default="gate-seq", help="prefix of the simulators' timing-noise seeds")
    args = parser.parse_args()
    scenarios = [("unchanged", {}), ("10 % slower", {"SGLANG_SIM_SLOWDOWN_PCT": SLOWER_10})]
    jobs = []
    for i in range(args.trials):
        jobs.append({"name": f"base-{i}", "rounds": 1, "env": {"SGLANG_SIM_SEED": f"{args.seed}-base-{i}"}})
        for s, (_, env) in enumerate(scenarios):
            jobs.append({"name": f"s{s}-{i}", "rounds": SETTINGS.max_rounds,
                         "env": {**env, "SGLANG_SIM_SEED": f"{args.seed}-s{s}-{i}"}})
    random.Random(args.seed).shuffle(jobs)
    jobs.sort(key=lambda job: -job["rounds"])  # the long jobs first, shuffled among themselves
    print(f"{len(jobs)} simulator processes ({args.trials} trials), {args.parallel} at a time; gate settings samples "
          f"{SETTINGS.samples}, max_new_tokens {SETTINGS.max_new_tokens}, max_rounds {SETTINGS.max_rounds}, "
          f"rounds_budget_s {SETTINGS.rounds_budget_s}, tolerance {SETTINGS.max_regression_pct} %", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        model = stub_model_dir(Path(tmp) / "model")
        with ThreadPoolExecutor(args.parallel) as pool:
            measured = dict(pool.map(lambda job: measure(job, model, tmp), jobs))
    print(f"wall time {(time.monotonic() - started) / 60:.1f} min; first round median "
          f"{statistics.median(m[0].duration_s for m in measured.values()):.1f} s, a further round median "
          f"{statistics.median(r.duration_s for m in measured.values() for r in m[1:]):.1f} s")
    print(f"\n| scenario ({args.trials} trials) | before: fixed gate (pass / fail / inconclusive) | after: sequential "
          f"(pass / fail / inconclusive) | samples per decision after: median (max) |\n|---|---|---|---|")
    for s, (name, _) in enumerate(scenarios):
        outcomes = [judge(measured[f"s{s}-{i}"], measured[f"base-{i}"][0]) for i in range(args.trials)]
        before = [o[0] for o in outcomes]
        after = [o[1] for o in outcomes]
        samples = [o[2] for o in outcomes]
        counts = lambda verdicts: " / ".join(str(verdicts.count(v)) for v in ("pass", "fail", "inconclusive"))
        print(f"| {name} | {counts(before)} | {counts(after)} | {statistics.median(samples):.0f} ({max(samples)}) |")
        for i, (b, a, n, looks) in enumerate(outcomes):
            if b != a or len(looks) > 1:
                print(f"    trial {i}: before {b}, after {a} after {n} samples; looks " + "; ".join(
                    f"{look['ratio']:.3f} [{look['low']:.3f}, {look['high']:.3f}] {look['verdict']}" for look in looks),
                    file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
