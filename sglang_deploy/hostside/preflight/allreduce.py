"""The preflight's two-process all-reduce: one process per GPU, as SGLang's TP ranks are (torch.distributed over
NCCL, so CUDA IPC, /dev/shm and NCCL's proxy threads are in play, which the probe's one-process
torch.cuda.nccl.all_reduce never touches), a known input, every rank's output compared with the known sum, under a
per-step timeout. A rank that does not finish in time is killed with its process group and the step says so;
wrong data names the rank and how many values differ.

    PY -I hostside/preflight/allreduce.py --rank R --world W --dir D [--standin]   (a rank; run() starts them)

SIMULATED HOST (--standin): there is no GPU and no NCCL, so the GPU stand-in models the collective: each rank
writes its contribution into the rendezvous directory and sums the others' (standard library only), and
SGLANG_SIM_ALLREDUCE_FAULT (from the release's environment file), or else the simulated host's own
/etc/sglang-sim/allreduce-fault (its "hardware", as /etc/sglang-sim/gpus.json), plants what a translating IOMMU does:
`wrong-data` (the last rank's peer writes are partly dropped: every 4th value arrives as 0) or `hang` (the last
rank never delivers; the others wait for it, as NCCL does). The rest is the same code on both: the processes,
the rendezvous, the deadlines, the kill and the comparison.

Standard library only (a rank imports torch on a real host); self-contained: the probe loads it by path.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

SIZES = (1024, 1 << 20)  # float32 elements: NCCL's low-latency protocol and its bulk one (4 MiB per rank)
STANDIN_ELEMENTS = 4096
ITERATIONS = 3
FAULTS = ("wrong-data", "hang")
HOST_FAULT_FILE = "/etc/sglang-sim/allreduce-fault"  # a simulated host's planted fault, beside its GPU facts


def planted_fault():
    """SIMULATED: the fault the stand-in plays, from the environment or the simulated host's file; None: none."""
    if os.environ.get("SGLANG_SIM_ALLREDUCE_FAULT"):
        return os.environ["SGLANG_SIM_ALLREDUCE_FAULT"]
    try:
        with open(HOST_FAULT_FILE) as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def known_input(index, rank):
    """Rank r contributes (index % 251 + 1) * (r + 1): exact in float32, different per rank and per position."""
    return float((index % 251 + 1) * (rank + 1))


def known_sum(index, world):
    return float((index % 251 + 1) * world * (world + 1) // 2)


def _write_json(path, document):
    with open(path + ".tmp", "w") as handle:
        json.dump(document, handle)
    os.replace(path + ".tmp", path)


def _touch(path):
    with open(path, "w"):
        pass


# --- a rank ----------------------------------------------------------------------------------------------------

def rank_nccl(rank, world, directory):
    """A real rank: torch.distributed with NCCL on GPU `rank`; every size ITERATIONS times, the last one timed."""
    # deferred: optional, torch is in the release's virtualenv only; the stand-in rank runs without it
    import torch
    import torch.distributed as dist

    _touch(os.path.join(directory, f"ready.{rank}"))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{os.path.join(directory, 'rendezvous')}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=3600))  # the parent's deadline rules
    found = {"rank": rank, "mismatches": 0, "elements": 0, "ms": {}}
    for size in SIZES:
        index = torch.arange(size, dtype=torch.int64, device="cuda")
        base = (index % 251 + 1).to(torch.float32)
        expected = base * float(world * (world + 1) // 2)
        for _ in range(ITERATIONS):
            tensor = base * float(rank + 1)
            torch.cuda.synchronize()
            started = time.perf_counter()
            dist.all_reduce(tensor)
            torch.cuda.synchronize()
            elapsed = (time.perf_counter() - started) * 1000
            wrong = int((tensor != expected).sum().item())
        found["mismatches"] += wrong
        found["elements"] += size
        found["ms"][str(size * 4)] = round(elapsed, 3)
    dist.destroy_process_group()
    return found


def rank_standin(rank, world, directory, fault):
    """SIMULATED: the GPU stand-in's collective (see the module docstring); `fault` is planted on the last rank."""
    _touch(os.path.join(directory, f"ready.{rank}"))
    last = rank == world - 1
    if fault == "hang" and last:
        time.sleep(24 * 3600)  # never delivers; the parent's deadline kills it
    part = [known_input(i, rank) for i in range(STANDIN_ELEMENTS)]
    if fault == "wrong-data" and last:
        part = [0.0 if i % 4 == 0 else value for i, value in enumerate(part)]  # what arrives at the peers
    _write_json(os.path.join(directory, f"part.{rank}.json"), part)
    total = [known_input(i, rank) for i in range(STANDIN_ELEMENTS)]
    for other in range(world):
        if other == rank:
            continue
        path = os.path.join(directory, f"part.{other}.json")
        while not os.path.exists(path):  # as NCCL, a rank waits for its peers without a limit of its own
            time.sleep(0.02)
        with open(path) as handle:
            total = [a + b for a, b in zip(total, json.load(handle))]
    wrong = sum(1 for i, value in enumerate(total) if value != known_sum(i, world))
    return {"rank": rank, "mismatches": wrong, "elements": STANDIN_ELEMENTS, "ms": {}}


def rank_main(argv=None):
    parser = argparse.ArgumentParser(prog="hostside/preflight/allreduce.py")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--standin", action="store_true")
    args = parser.parse_args(argv)
    fault = planted_fault() if args.standin else None
    try:
        found = (rank_standin(args.rank, args.world, args.dir, fault) if args.standin
                 else rank_nccl(args.rank, args.world, args.dir))
    except Exception as error:  # noqa: BLE001 - the message is the finding
        found = {"rank": args.rank, "error": f"{type(error).__name__}: {str(error)[:400]}"}
    _write_json(os.path.join(args.dir, f"result.{args.rank}.json"), found)
    return 0


# --- the step: start the ranks, wait under the deadlines, kill what is left, compare ----------------------------

def run(world, step_timeout=120.0, standin=False, start_timeout=300.0, python=None):
    """Start `world` ranks; `start_timeout` for them to come up (torch's import), then `step_timeout` for the
    all-reduce itself. Returns {"world", "ok", "timed_out", "waiting" (ranks still running at the deadline),
    "stopped" (ranks still running after another exited), "wrong", "errors", "ms", "seconds", "killed", "standin",
    "fault"}."""
    started = time.perf_counter()
    directory = tempfile.mkdtemp(prefix="sglang-deploy-allreduce-")
    processes, logs = [], []
    found = {"world": world, "ok": False, "timed_out": False, "waiting": [], "wrong": {}, "errors": {}, "ms": {},
             "stopped": [], "killed": [], "standin": standin, "step_timeout": step_timeout,
             "fault": planted_fault() if standin else None}
    try:
        for rank in range(world):
            log = open(os.path.join(directory, f"rank.{rank}.log"), "w")
            logs.append(log)
            try:
                processes.append(subprocess.Popen(
                    [python or sys.executable, "-I", os.path.abspath(__file__), "--rank", str(rank), "--world",
                     str(world), "--dir", directory] + ["--standin"] * standin,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            except OSError as error:  # a sandbox that refuses the fork or the new session
                found["errors"][str(rank)] = f"could not start: {error}"
                break

        def present(prefix):
            return [r for r in range(world) if os.path.exists(os.path.join(directory, f"{prefix}.{r}"
                                                                            + (".json" if prefix == "result" else "")))]

        def wait(prefix, seconds):
            """"all" (every rank got there), "gone" (a rank exited without a result) or "timeout"."""
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                if len(present(prefix)) == world:
                    return "all"
                if [r for r, p in enumerate(processes) if p.poll() is not None and r not in present("result")]:
                    return "gone"
                time.sleep(0.05)
            return "timeout"

        if len(processes) < world:
            return found
        state = wait("ready", start_timeout)
        if state == "all":
            state = wait("result", step_timeout)
        results = {}
        for rank in present("result"):
            with open(os.path.join(directory, f"result.{rank}.json")) as handle:
                results[rank] = json.load(handle)
        for rank, process in enumerate(processes):
            if rank in results:
                continue
            if process.poll() is None:  # past the deadline: waiting; else behind a rank that exited
                found["waiting" if state == "timeout" else "stopped"].append(rank)
            else:
                tail = open(os.path.join(directory, f"rank.{rank}.log")).read().strip().splitlines()[-3:]
                found["errors"][str(rank)] = f"exited {process.returncode}: " + " | ".join(tail)
        found["timed_out"] = bool(found["waiting"])
        for rank, result in sorted(results.items()):
            if result.get("error"):
                found["errors"][str(rank)] = result["error"]
            elif result.get("mismatches"):
                found["wrong"][str(rank)] = f"{result['mismatches']} of {result['elements']}"
            found["ms"].update({size: max(ms, found["ms"].get(size, 0)) for size, ms in (result.get("ms") or {}).items()})
        found["ok"] = len(results) == world and not (found["wrong"] or found["errors"] or found["timed_out"])
    finally:
        grace = time.monotonic() + 10  # a rank that answered is tearing NCCL down: it exits by itself
        for rank, process in enumerate(processes):
            if rank not in found["waiting"] + found["stopped"]:
                try:
                    process.wait(timeout=max(0.0, grace - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except OSError:
                    pass
                found["killed"].append(rank)
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:  # stuck in the driver: the unit's stop takes it with the cgroup
                found.setdefault("unkillable", []).append(process.pid)
        for log in logs:
            log.close()
        shutil.rmtree(directory, ignore_errors=True)
        found["seconds"] = round(time.perf_counter() - started, 2)
    return found


if __name__ == "__main__":
    sys.exit(rank_main())
