"""What debugging switches cost a decode step, measured on a GPU host (needs PyTorch with CUDA; 2 GPUs for
the NCCL part). Prints JSON; the simulator's cost model (sim/data/*.json "env_costs") comes from it.

    python benchmarks/env_cost_probe.py [--layers 64] [--hidden 5120] [--steps 200]

Decode stand-in: per layer two bf16 GEMVs over a hidden x hidden weight (weight-read bound, as decode is)
plus small elementwise kernels, and a CPU-side step of ~0.5 ms (scheduling, sampling) that normally
overlaps the GPU. Timed eagerly and as one CUDA graph replay per step, each in a fresh process with and
without CUDA_LAUNCH_BLOCKING=1. NCCL: all-reduce latency of decode-sized tensors (16 KiB, 1 MiB) over 2
GPUs with NCCL_DEBUG unset and at INFO. Medians of repeated timings.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def decode_worker(args):
    import torch

    torch.manual_seed(0)
    weights = [torch.randn(args.hidden, args.hidden, device="cuda", dtype=torch.bfloat16) / 64
               for _ in range(2 * args.layers)]
    x = torch.randn(1, args.hidden, device="cuda", dtype=torch.bfloat16)

    def forward(h):
        for i in range(args.layers):
            h = torch.nn.functional.silu(h @ weights[2 * i]) * 0.5
            h = (h @ weights[2 * i + 1]) + h
        return h

    def cpu_side():  # the scheduler's own per-step work, which the GPU normally hides
        end = time.perf_counter() + args.cpu_ms / 1e3
        while time.perf_counter() < end:
            pass

    out = {}
    for mode in ("eager", "graph"):
        if mode == "graph":
            static = x.clone()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    forward(static)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                result = forward(static)

            def step():
                graph.replay()
                cpu_side()
                return result
        else:
            def step():
                h = forward(x)
                cpu_side()
                return h
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(args.steps):
                h = step()
            h.sum().item()  # one sync per block, as a decode loop syncs for the sampled token
            times.append((time.perf_counter() - start) / args.steps * 1e3)
        out[mode] = statistics.median(times)
    print(json.dumps(out))


def nccl_worker(rank, world, port, results):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    latency = {}
    for size in (16 * 1024, 1024 * 1024):
        tensor = torch.ones(size // 2, device="cuda", dtype=torch.bfloat16)
        for _ in range(20):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(200):
                dist.all_reduce(tensor)
            torch.cuda.synchronize()
            runs.append((time.perf_counter() - start) / 200 * 1e6)
        latency[f"{size // 1024}KiB"] = statistics.median(runs)
    if rank == 0:
        results.put(latency)
    dist.destroy_process_group()


def nccl(debug, port):
    import torch.multiprocessing as mp

    if debug:
        os.environ["NCCL_DEBUG"] = debug
    else:
        os.environ.pop("NCCL_DEBUG", None)
    context = mp.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=nccl_worker, args=(r, 2, port, results)) for r in range(2)]
    for p in processes:
        p.start()
    latency = results.get(timeout=300)
    for p in processes:
        p.join()
    return latency


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=5120)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--cpu-ms", type=float, default=0.5)
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    if args.worker:
        return decode_worker(args)
    import torch

    report = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "layers": args.layers,
              "hidden": args.hidden, "cpu_ms": args.cpu_ms, "decode_step_ms": {}}
    for blocking in ("0", "1"):
        env = {**os.environ, "CUDA_LAUNCH_BLOCKING": blocking}
        result = subprocess.run([sys.executable, __file__, "--worker", "--layers", str(args.layers), "--hidden",
                                 str(args.hidden), "--steps", str(args.steps), "--cpu-ms", str(args.cpu_ms)],
                                env=env, capture_output=True, text=True, check=True)
        report["decode_step_ms"][f"CUDA_LAUNCH_BLOCKING={blocking}"] = json.loads(result.stdout.splitlines()[-1])
    if torch.cuda.device_count() >= 2:
        report["allreduce_us"] = {"NCCL_DEBUG unset": nccl(None, 29511), "NCCL_DEBUG=INFO": nccl("INFO", 29512)}
    steps = report["decode_step_ms"]
    report["ratios"] = {mode: steps["CUDA_LAUNCH_BLOCKING=1"][mode] / steps["CUDA_LAUNCH_BLOCKING=0"][mode]
                        for mode in ("eager", "graph")}
    if "allreduce_us" in report:
        ar = report["allreduce_us"]
        report["ratios"]["nccl_debug_info"] = {k: ar["NCCL_DEBUG=INFO"][k] / ar["NCCL_DEBUG unset"][k]
                                               for k in ar["NCCL_DEBUG unset"]}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
