#!/usr/bin/env python3
"""GPU probe for the perf doctor: memory bandwidth, peer-to-peer, NCCL all-reduce latency.

Runs on the GPU host in the service's virtualenv (needs torch), while the service is stopped:

    python gpu_probe.py [--gib 2] [--allreduce-env '{"NCCL_PROTO": "LL128"}'] [--force]

Prints one JSON document. Method (../shared/notes/perf-model.md): bandwidth from copy, triad and a
read-only reduction over buffers far larger than L2, timed with CUDA events; P2P from
can_device_access_peer plus a timed device-to-device copy; all-reduce GPU time with one process per
GPU, each collective queued behind a short GPU sleep so the figure is GPU time, not launch overhead.
"""

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys

ALLREDUCE_BYTES = [10 * 1024, 40 * 1024, 160 * 1024, 1024 * 1024]
BATCH = 20  # collectives per timed batch


def timed(torch, fn, iterations=10):
    """Median milliseconds of fn() measured with CUDA events (after one warmup)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bandwidth(torch, device, gib):
    n = int(gib * 2**30) // 4
    with torch.cuda.device(device):
        a = torch.empty(n, dtype=torch.float32, device=device)
        b = torch.rand(n, dtype=torch.float32, device=device)
        c = torch.rand(n, dtype=torch.float32, device=device)
        size = n * 4
        copy_ms = timed(torch, lambda: a.copy_(b))
        triad_ms = timed(torch, lambda: torch.add(b, c, alpha=2.0, out=a))
        read_ms = timed(torch, lambda: b.sum())
        del a, b, c
        torch.cuda.empty_cache()
    return {"copy_gbs": 2 * size / copy_ms / 1e6, "triad_gbs": 3 * size / triad_ms / 1e6,
            "read_gbs": size / read_ms / 1e6, "buffer_gib": gib}


def p2p(torch, gib):
    count = torch.cuda.device_count()
    if count < 2:
        return None
    result = {"can_access_0_1": torch.cuda.can_device_access_peer(0, 1),
              "can_access_1_0": torch.cuda.can_device_access_peer(1, 0)}
    n = int(gib * 2**30)
    src = torch.empty(n, dtype=torch.uint8, device="cuda:0")
    dst = torch.empty(n, dtype=torch.uint8, device="cuda:1")
    with torch.cuda.device(0):
        ms = timed(torch, lambda: dst.copy_(src, non_blocking=True), iterations=5)
    result["copy_0_to_1_gbs"] = n / ms / 1e6
    del src, dst
    torch.cuda.empty_cache()
    return result


def allreduce_worker(rank, world, port, sizes, queue):
    # deferred: optional, torch is in the release's virtualenv only (the tests import this module without it)
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    out = {}
    for size in sizes:
        tensor = torch.ones(size // 2, dtype=torch.bfloat16, device=f"cuda:{rank}")
        for _ in range(20):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            dist.barrier()
            # Queue a batch of collectives behind GPU work, so the events time the GPU, not the launches;
            # the first collective of a batch also absorbs the skew between the two ranks' sleeps.
            torch.cuda._sleep(2_000_000)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(BATCH):
                dist.all_reduce(tensor)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000 / BATCH)
        out[size] = statistics.median(times)
    if rank == 0:
        queue.put(out)
    dist.barrier()
    dist.destroy_process_group()


def allreduce(torch, extra_env):
    world = torch.cuda.device_count()
    if world < 2:
        return None
    saved = {k: os.environ.get(k) for k in extra_env}
    os.environ.update(extra_env)
    try:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=allreduce_worker, args=(r, world, port, ALLREDUCE_BYTES, queue)) for r in range(world)]
        for proc in procs:
            proc.start()
        result = queue.get(timeout=300)
        for proc in procs:
            proc.join(60)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {"world_size": world, "env": extra_env,
            "latency_us": {f"{size // 1024}KiB": round(us, 2) for size, us in result.items()}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=2.0, help="buffer size per bandwidth test")
    parser.add_argument("--allreduce-env", default="{}", help="JSON of NCCL variables for a second all-reduce run")
    parser.add_argument("--force", action="store_true", help="run although GPU memory is in use")
    args = parser.parse_args()
    # deferred: optional, torch is in the release's virtualenv only (the tests import this module without it)
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch.cuda is not available"}))
        return 1
    devices = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        devices.append({"index": index, "name": torch.cuda.get_device_name(index),
                        "used_gib": round((total - free) / 2**30, 2), "total_gib": round(total / 2**30, 1)})
    busy = [d for d in devices if d["used_gib"] > 2.0]
    if busy and not args.force:
        print(json.dumps({"error": f"GPU memory in use on {[d['index'] for d in busy]} (the service is running?); "
                                   "stop it or pass --force", "devices": devices}))
        return 2
    report = {"torch": torch.__version__, "cuda": torch.version.cuda,
              "nccl": ".".join(map(str, torch.cuda.nccl.version())), "devices": devices,
              "bandwidth": [bandwidth(torch, d["index"], args.gib) for d in devices],
              "p2p": p2p(torch, min(args.gib, 1.0)),
              "allreduce_default": allreduce(torch, {})}
    extra = json.loads(args.allreduce_env)
    if extra:
        report["allreduce_profile"] = allreduce(torch, extra)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
