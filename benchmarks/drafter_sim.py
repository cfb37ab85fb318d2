"""A DFlash drafter against the proven 3-step MTP on the simulated CT129, side by side, per content class.

    python benchmarks/drafter_sim.py [--samples 12] [--max-new-tokens 256]

Each configuration runs as its own local simulator process (all at once, one seed: paired noise), resolved by
SGLang 0.5.23's own code with the draft's config.json (DFLASH reads its block size there); measured with the gate's
client (hostside/bench.py, the shipped prose/code/chat mix, temperature 0). SIMULATED: the figures are the hardware
model's (sim/data/qwen3.6-27b-fp8.json `drafters`, docs/drafters.md), not a GPU's.
"""

import argparse
import json
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from sglang_deploy.sim.synthetic_checkpoint import write_draft  # noqa: E402
from testbed.calibration import PROVEN, without_spec  # noqa: E402
from testbed.local_sim import LocalSim, stub_model_dir  # noqa: E402

CONFIG = json.loads((REPO / "manifests" / "local--qwen3.6-27b-dflash.config.reconstructed.json").read_text())
KINDS = ("prose", "code", "chat")


def rows(tmp: Path):
    out = [("MTP 3 steps (proven)", PROVEN, None, None)]
    for block in (16, 8):
        directory = tmp / f"dflash-b{block}"
        config = {**CONFIG, "block_size": block}
        write_draft(str(directory), config, header_only=True)
        flags = without_spec(PROVEN) + ["--speculative-algorithm", "DFLASH",
                                        "--speculative-draft-model-path", str(directory)]
        out.append((f"DFLASH block {block} (3.46 GB drafter)", flags, directory, config))
    return out


def by_kind(result):
    values = {}
    for sample in result.get("samples") or []:
        if sample.get("kind") and sample.get("decode_tok_s"):
            values.setdefault(sample["kind"], []).append(sample["decode_tok_s"])
    return {kind: statistics.median(v) for kind, v in values.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = stub_model_dir(Path(tmp) / "model")
        table = rows(Path(tmp))
        sims = [LocalSim(flags, {"SGLANG_SIM_SEED": "7"}, model, draft_config=config).start(Path(tmp) / f"sim{i}.log")
                for i, (_, flags, _, config) in enumerate(table)]
        try:
            for sim in sims:
                sim.wait_ready()
            single = ["--samples", str(args.samples), "--warmup", "1", "--max-new-tokens", str(args.max_new_tokens),
                      "--concurrency", "1"]
            batched = ["--samples", "4", "--warmup", "1", "--max-new-tokens", str(args.max_new_tokens),
                       "--concurrency", "4"]
            with ThreadPoolExecutor(len(sims)) as pool:
                results = list(pool.map(lambda sim: sim.bench(*single), sims))
                aggregates = list(pool.map(lambda sim: sim.bench(*batched), sims))
        finally:
            for sim in sims:
                sim.stop()
    base, base_kinds = results[0]["decode_tok_s"]["median"], by_kind(results[0])
    base_aggregate = (aggregates[0].get("aggregate_tok_s") or {}).get("median")
    print("SIMULATED (the hardware model's drafter figures, not a GPU's); single stream unless marked")
    print(f"{'configuration':36} {'tok/s':>7} {'tau':>5} " + " ".join(f"{k:>7}" for k in KINDS)
          + f" {'vs MTP':>7} {'aggr@4':>7} {'vs MTP':>7}")
    for (name, *_), result, aggregate in zip(table, results, aggregates):
        kinds = by_kind(result)
        tok_s, tau = result["decode_tok_s"]["median"], (result.get("accept_length") or {}).get("median") or 0
        aggr = (aggregate.get("aggregate_tok_s") or {}).get("median") or 0
        print(f"{name:36} {tok_s:7.1f} {tau:5.2f} " + " ".join(f"{kinds.get(k, 0):7.1f}" for k in KINDS)
              + f" {tok_s / base - 1:+7.1%} {aggr:7.1f} {(aggr / base_aggregate - 1) if base_aggregate else 0:+7.1%}")
        if name != table[0][0]:
            print(" " * 37 + "per class vs MTP: " + ", ".join(
                f"{k} {kinds[k] / base_kinds[k] - 1:+.0%}" for k in KINDS if kinds.get(k) and base_kinds.get(k)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
