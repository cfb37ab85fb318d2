"""The simulator's calibration table (../shared/notes/perf-model.md), measured with the gate's client.

Each configuration runs as its own local simulator process (all at once, distinct ports), everything
else as the proven profile. A fixed seed makes the comparison between rows paired: the same timing
noise, so ratios reflect the hardware model rather than luck.
"""

import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .local_sim import LocalSim, stub_model_dir

PROVEN = ["--tp-size", "2", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.88",
          "--max-running-requests", "16", "--cuda-graph-max-bs-decode", "16", "--enable-metrics"]


def without_spec(flags):
    out, skip = [], False
    for arg in flags:
        if skip:
            skip = False
            continue
        if arg.startswith("--speculative"):
            skip = True
            continue
        out.append(arg)
    return out


def replace(flags, name, value):
    out = list(flags)
    out[out.index(name) + 1] = value
    return out


# name, flags, env, band description, check(tok_s, tau, proven_tok_s)
ROWS = [
    ("proven (NEXTN 3 steps, graphs, custom AR)", PROVEN, {}, "47-57 tok/s, tau 3.0-3.5",
     lambda t, tau, p: 47 <= t <= 57 and 3.0 <= tau <= 3.5),
    ("incident: 1 step, 2 draft tokens", replace(replace(PROVEN, "--speculative-num-steps", "1"),
                                                 "--speculative-num-draft-tokens", "2"), {},
     "38-42 tok/s, tau ~1.75", lambda t, tau, p: 38 <= t <= 42 and 1.6 <= tau <= 1.9),
    ("no speculation", without_spec(PROVEN), {}, "~30 tok/s (27-33), tau 1.0",
     lambda t, tau, p: 27 <= t <= 33 and tau in (None, 1.0)),
    ("decode CUDA graphs disabled", PROVEN + ["--disable-cuda-graph"], {}, ">= 25 % slower than proven",
     lambda t, tau, p: t <= 0.75 * p),
    ("custom all-reduce disabled", PROVEN + ["--disable-custom-all-reduce"], {}, "3-8 % slower than proven",
     lambda t, tau, p: 0.92 * p <= t <= 0.97 * p),
    ("NCCL P2P disabled (+ custom AR off)", PROVEN + ["--disable-custom-all-reduce"], {"NCCL_P2P_DISABLE": "1"},
     "10-20 % slower than proven", lambda t, tau, p: 0.80 * p <= t <= 0.90 * p),
    # Where public sweeps put the optimum (data/qwen3.6-27b-fp8.json "speculation._sources"): one step more than
    # the proven profile gains a little; a topk-2 tree accepts more but costs more than it gains here.
    ("4 steps, 5 draft tokens (the model's optimum)", replace(replace(PROVEN, "--speculative-num-steps", "4"),
                                                             "--speculative-num-draft-tokens", "5"), {},
     "0-6 % faster than proven, tau 3.5-4.1", lambda t, tau, p: p <= t <= 1.06 * p and 3.5 <= tau <= 4.1),
    # topk > 1 needs page size 1 in SGLang 0.5.23's resolution unless the attention backend is known to be tree-capable.
    ("topk 2 tree: 3 steps, 7 draft tokens", replace(replace(PROVEN, "--speculative-eagle-topk", "2"),
                                                      "--speculative-num-draft-tokens", "7") + ["--page-size", "1"], {},
     "tau above proven's, tok/s 3-12 % below", lambda t, tau, p: 0.88 * p <= t <= 0.97 * p and tau >= 3.2),
]


def measure(samples: int, max_new_tokens: int, seed: str = "7") -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        model = stub_model_dir(Path(tmp) / "model")
        sims = [LocalSim(flags, {**env, "SGLANG_SIM_SEED": seed}, model).start(Path(tmp) / f"sim{i}.log")
                for i, (_, flags, env, _, _) in enumerate(ROWS)]
        try:
            for sim in sims:
                sim.wait_ready()
            args = ["--samples", str(samples), "--warmup", "1", "--max-new-tokens", str(max_new_tokens),
                    "--concurrency", "1"]
            with ThreadPoolExecutor(len(sims)) as pool:
                results = list(pool.map(lambda sim: sim.bench(*args), sims))
        finally:
            for sim in sims:
                sim.stop()
    proven = results[0]["decode_tok_s"]["median"]
    table = []
    for (name, _, _, band, check), result in zip(ROWS, results):
        tok_s = result["decode_tok_s"]["median"]
        tau = result["accept_length"]["median"] if result["accept_length"] else None
        table.append({"name": name, "tok_s": tok_s, "tau": tau, "vs_proven": tok_s / proven, "band": band,
                      "cv_pct": result["decode_tok_s"]["cv_pct"], "in_band": bool(check(tok_s, tau, proven))})
    return table




DEFAULT_GATE = {"samples": 5, "warmup": 1, "max_new_tokens": 256, "concurrency": 4}


def gate_trials(env_list: list[dict], settings: dict = DEFAULT_GATE) -> list[dict]:
    """Run the gate's measurement (bench.py, default settings) against one local proven-profile
    simulator per entry of env_list, all at once; returns the measurements in order."""
    with tempfile.TemporaryDirectory() as tmp:
        model = stub_model_dir(Path(tmp) / "model")
        sims = [LocalSim(PROVEN, env, model).start(Path(tmp) / f"sim{i}.log") for i, env in enumerate(env_list)]
        try:
            for sim in sims:
                sim.wait_ready()
            args = [item for key, value in settings.items() for item in (f"--{key.replace('_', '-')}", str(value))]
            with ThreadPoolExecutor(len(sims)) as pool:
                return list(pool.map(lambda sim: sim.bench(*args), sims))
        finally:
            for sim in sims:
                sim.stop()
