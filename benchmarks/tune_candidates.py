"""How many kv / attention / draft-attention candidates the tune offers on the simulated CT129 (2x RTX A6000, sm_86),
without and with the start-feasibility filter (sglang_deploy/validate/start_feasibility.py), by SGLang 0.5.23's own
resolution under the A6000's facts, as the tune's controller asks it (tune/levers.asker, tune_attention=all).

    python benchmarks/tune_candidates.py [--profile profiles/qwen3.6-27b-mtp-2xa6000.yaml]
"""

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglang_deploy.plan import plan_for_host  # noqa: E402
from sglang_deploy.tune import axes  # noqa: E402
from sglang_deploy.tune.levers import asker, starter  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default=str(REPO / "profiles/qwen3.6-27b-mtp-2xa6000.yaml"))
    args = parser.parse_args()
    data = {"profile": args.profile, "gpus": 2, "gpu_topology": "pcie", "simulated": True}
    plan = plan_for_host(data, need_key=False)
    ask, choices = asker(plan, data)
    start = starter(plan, data)
    totals = {"before": 0, "after": 0}
    for flag in ("--kv-cache-dtype", "--attention-backend", "--speculative-draft-attention-backend"):
        before = axes.accepted_values(flag, choices(flag), ask)
        after = axes.accepted_values(flag, choices(flag), ask, start=start)
        if flag != "--kv-cache-dtype":
            totals["before"] += len(before.values)
            totals["after"] += len(after.values)
        print(f"{flag}: {len(before.values)} -> {len(after.values)} candidates: {', '.join(after.values)}")
        for value, why in after.same_as.items():
            print(f"    same configuration: {value} = {why}")
        for value, why in after.dropped.items():
            print(f"    dropped {value}: {why[:160]}")
    print(f"attention axis (target + draft): {totals['before']} -> {totals['after']} candidates")


if __name__ == "__main__":
    main()
