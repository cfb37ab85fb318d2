"""Does the gate's output check catch broken releases, and pass unchanged ones? (local simulator processes)

    python benchmarks/output_check_trials.py [--trials 20] [--parallel 4] [--server model|sglang]

Each trial: a baseline server of the proven profile and a candidate server (each its own process, its own
noise seed), the gate's output check (hostside/lib/output_check.py) on the baseline, then on the candidate with the
baseline's result as the agreement reference, exactly as the gate runs it after a switch. Scenarios (the
candidate's environment):
  unchanged       the same release again: any fail or inconclusive is a false alarm
  garbage         SGLANG_SIM_FAULT_OUTPUT=garbage: `!!!!` at 15 % faster decode (sgl-project/sglang#37111)
  wrong-answers   SGLANG_SIM_FAULT_OUTPUT=wrong-answers: the right form, wrong values on 3 of 8 prompts
  diverge         SGLANG_SIM_FAULT_OUTPUT=diverge: right answers that differ from the baseline's after the answer
Prints the verdict counts per scenario and the median time the check takes (8 prompts, one at a time).
--server sglang runs SGLang's own front end with the modelled Scheduler (testbed/local_sglang.py: 20 s and 4 GB
per server; use --parallel 1).
"""

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_deploy.hostside.lib import output_check  # noqa: E402
from testbed.calibration import PROVEN  # noqa: E402
from testbed.local_sglang import LocalSGLang, model_dir  # noqa: E402
from testbed.local_sim import LocalSim  # noqa: E402

KEY = "sk-output-check-trials-0123456789"
SCENARIOS = {"unchanged": None, "garbage": "garbage", "wrong-answers": "wrong-answers", "diverge": "diverge"}
EXPECTED = {"unchanged": "pass", "garbage": "fail", "wrong-answers": "fail", "diverge": "inconclusive"}


def checked(server_class, checkpoint, work, name, fault=None, baseline=None):
    env = {"SGLANG_SIM_FAULT_OUTPUT": fault} if fault else {}
    server = server_class(PROVEN + ["--api-key", KEY, "--served-model-name", "qwen3.6-27b"], env, checkpoint)
    server.start(work / f"{name}.log").wait_ready()
    try:
        started = time.monotonic()
        result = output_check.run(server.url, KEY, "qwen3.6-27b", baseline)
        return result, time.monotonic() - started
    finally:
        server.stop()


def trial(server_class, checkpoint, work, scenario, index):
    baseline, _ = checked(server_class, checkpoint, work, f"{scenario}-{index}-baseline")
    result, seconds = checked(server_class, checkpoint, work, f"{scenario}-{index}", SCENARIOS[scenario], baseline)
    return scenario, result.verdict, seconds, (result.reasons + result.inconclusive)[:1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--server", choices=("model", "sglang"), default="model")
    args = parser.parse_args()
    server_class = LocalSim if args.server == "model" else LocalSGLang
    work = Path(tempfile.mkdtemp(prefix="output-check-trials-"))
    checkpoint = model_dir(work / "model")
    jobs = [(scenario, index) for index in range(args.trials) for scenario in SCENARIOS]
    started = time.monotonic()
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda job: trial(server_class, checkpoint, work, *job), jobs))
    print(f"output check, {args.trials} trials per scenario, {args.server} server, "
          f"{time.monotonic() - started:.0f} s in all")
    print(f"{'scenario':15} {'pass':>5} {'inconclusive':>13} {'fail':>5}  expected  check s (median)  example")
    for scenario in SCENARIOS:
        rows = [r for r in results if r[0] == scenario]
        counts = Counter(r[1] for r in rows)
        example = next((r[3][0] for r in rows if r[3]), "")[:70]
        print(f"{scenario:15} {counts['pass']:>5} {counts['inconclusive']:>13} {counts['fail']:>5}  "
              f"{EXPECTED[scenario]:12} {statistics.median(r[2] for r in rows):>6.2f}  {example}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
