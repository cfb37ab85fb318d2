"""tune.py on the simulated CT129 from the incident's 1-step release: the table and the time it took
(scripts/simhost up first; SGLANG_DEPLOY_SIMHOST_DIR / SGLANG_DEPLOY_SIM_PORT as for inventory/sim.py).

    python benchmarks/tune_sim.py [--budget 1800] [--space spec] [--samples 6] [--max-new-tokens 128]
                                  [--topk 1,2,4] [--repeats 3]

Deploys profiles/qwen3.6-27b-mtp1-2xa6000.yaml (skip_gate: the gate refuses it), runs the tune with
tune_resume=false, prints the tune's own table, the controller's wall time and the tune's elapsed time,
the winner and where the simulator's hardware model puts each measured candidate (its noiseless
single-stream rate), then puts the original release back as it was. Every number comes from the
simulator's hardware model of 2x RTX A6000, not from a GPU.
"""

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
from testbed.simhost import pyinfra_timed  # noqa: E402

INCIDENT = REPO / "profiles" / "qwen3.6-27b-mtp1-2xa6000.yaml"


def pyinfra(*args):
    return pyinfra_timed(*args)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=int, default=1800)
    parser.add_argument("--space", default="spec")
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--topk", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from test_tune_logic import PROVEN, flags_of, model_tok_s  # the simulator's own model, noiseless

    pyinfra("deploy.py", "--data", f"profile={INCIDENT}", "--data", "skip_gate=true", "--data",
            "max_auto_rollbacks=100")
    wall, output = pyinfra("tune.py", "--data", f"profile={INCIDENT}", "--data", f"tune_space={args.space}",
                           "--data", f"tune_budget_s={args.budget}", "--data", f"tune_samples={args.samples}",
                           "--data", f"tune_max_new_tokens={args.max_new_tokens}", "--data", f"tune_topk={args.topk}",
                           "--data", f"tune_repeats={args.repeats}", "--data", "tune_resume=false")
    results = sorted((REPO / "results" / "ct129-sim").glob("tune-*.json"), key=lambda p: p.stat().st_mtime)
    document = json.loads(results[-1].read_text())
    print(document["table"])
    print(f"\ncontroller wall time {wall:.0f} s; tune elapsed {document['elapsed_s']:.0f} s of a {args.budget} s budget; "
          f"{len(document['results'])} candidates ({sum(1 for r in document['results'] if not r['valid'])} invalid); "
          f"settings {document['settings']}")
    original = flags_of(INCIDENT)
    print(f"winner: {document['winner']}; the simulator's model (noiseless tok/s): proven "
          f"{model_tok_s(flags_of(PROVEN))[0]:.1f}")
    for entry in document["results"]:
        flags = {k: v for k, v in {**original, **entry["flags"]}.items() if v is not None}
        print(f"  {entry['id']:40} model {model_tok_s(flags)[0]:5.1f}  measured "
              + (f"{entry['decode_score']:.1f}" if entry.get("decode_score") else "-"))
    tuned = INCIDENT.with_name(INCIDENT.name.removesuffix(".yaml") + ".tuned.yaml")
    if tuned.exists():
        print(f"\n{tuned} (not part of the repository; remove it or deploy it):")
        print("\n".join(line for line in tuned.read_text().splitlines() if "# tuned:" in line))


if __name__ == "__main__":
    main()
