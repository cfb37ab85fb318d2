"""The modelled start of a GPU server's scheduler: weight loading, CUDA graph capture, KV allocation, with
SGLang's log lines and the start-up fault knobs. One model for both simulated servers: the model-only simulator
(server.py) and the Scheduler that replaces SGLang's own under its real front end (sglang_scheduler.py)."""

from __future__ import annotations

import threading
import time

from .engine import log
from .hardware import start_problem

# What SGLang appends to a failed decode graph capture (model_executor/runner_backend_utils).
CUDA_GRAPH_CAPTURE_FAILED_MSG = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)


def load_and_capture(engine, resolved: dict, env: dict, context_length, fail) -> dict:
    """Sleep through the modelled start, logging what SGLang logs; `fail(message)` is how this server dies
    (it does not return). Returns the memory usage (engine.memory_usage())."""
    start_seconds = float(env.get("SGLANG_SIM_START_SECONDS", "3"))
    log.info("Load weight begin. avail mem=%.2f GB (simulated %s x%d)", engine.machine["gpu_memory_gib"],
             engine.machine["gpu"], engine.eff.tp)
    time.sleep(start_seconds * 0.5)
    if env.get("SGLANG_SIM_CRASH_AT_START") == "1":
        fail("RuntimeError: CUDA error: an illegal memory access was encountered "
             "(SIMULATED FAULT: SGLANG_SIM_CRASH_AT_START)")
    problem = start_problem(engine.eff, engine.machine)
    if problem:
        fail(problem)
    usage = engine.memory_usage()
    log.info("Load weight end. type=%s, dtype=fp8, mem usage=%.2f GB.", engine.model["architecture"], usage["weight"])
    for note in engine.eff.notes:
        log.warning(note)
    if engine.eff.decode_graphs:
        # cuda_graph_setup.py: "Capture {target|draft} {decode|verify} CUDA graph begin. backend=..."
        backend = resolved["cuda_graph_config"]["decode"]["backend"]
        if engine.eff.spec_steps:
            log.info("Capture target verify CUDA graph begin. backend=%s, num_tokens_per_req=%d, avail mem=%.2f GB",
                     backend, engine.eff.draft_tokens, engine.machine["gpu_memory_gib"] - usage["weight"])
            log.info("Capture draft decode CUDA graph begin. backend=%s, num_tokens_per_req=%d, avail mem=%.2f GB",
                     backend, engine.eff.spec_topk, engine.machine["gpu_memory_gib"] - usage["weight"])
        else:
            log.info("Capture target decode CUDA graph begin. backend=%s, num_tokens_per_req=1, avail mem=%.2f GB",
                     backend, engine.machine["gpu_memory_gib"] - usage["weight"])
    time.sleep(start_seconds * 0.4)
    if env.get("SGLANG_SIM_GRAPH_CAPTURE_FAIL") == "1" and engine.eff.decode_graphs:
        fail("Exception: Capture cuda graph failed: CUDA error: out of memory (SIMULATED FAULT: "
             f"SGLANG_SIM_GRAPH_CAPTURE_FAIL)\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}")
    if env.get("SGLANG_SIM_HANG_AT_START") == "1":
        log.error("SIMULATED FAULT: hanging during CUDA graph capture (SGLANG_SIM_HANG_AT_START)")
        threading.Event().wait()
    if engine.eff.decode_graphs:
        # cuda_graph_setup.py:786-792: "Capture {target|draft} {decode|verify} CUDA graph end. bs=[...], ..."
        log.info("Capture target %s CUDA graph end. bs=%s, elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB.",
                 "verify" if engine.eff.spec_steps else "decode", engine.decode_graph_batch_sizes(),
                 start_seconds * 0.4, engine.decode_graph_gb(), usage["startup_available"])
    # scheduler.py:1267-1276
    log.info("max_total_num_tokens=%d, chunked_prefill_size=%s, max_prefill_tokens=%s, max_running_requests=%d, "
             "context_len=%s, available_gpu_mem=%.2f GB", usage["token_capacity"],
             resolved.get("chunked_prefill_size"), resolved.get("max_prefill_tokens"), engine.eff.max_running,
             context_length or engine.model["context_length"], usage["startup_available"])
    return usage
