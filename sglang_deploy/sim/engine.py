"""The simulator's engine: requests, continuous batching and speculative decoding at the speed the
hardware model gives (hardware.py); tokens are emitted in real time. Standard library only."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import queue
import random
import signal
import threading
import time
import uuid
from pathlib import Path


from . import hardware

SGLANG_VERSION = hardware.served_version()  # the release the simulator's option table and /server_info are of
DECODE_LOG_INTERVAL = 40
EOS_TOKEN = 248046  # <|im_end|>, what a finished chat answer matched  # cycles between "Decode batch" log lines, as SGLang's --decode-log-interval
WORDS = ("the", "model", "server", "token", "decode", "graph", "memory", "bandwidth", "cache", "layer",
         "request", "batch", "kernel", "stream", "value", "return", "def", "for", "in", "data", "result",
         "system", "time", "speed", "and", "of", "to", "a", "is", "with")

log = logging.getLogger("sglang.sim")
# Token ids from here up carry one byte of a modelled answer each (below: the synthetic vocabulary's word ids);
# ANSWER_END is the end-of-turn token a finished answer ends with (SGLang trims the matched stop token).
ANSWER_BASE = 1_000_000
ANSWER_END = ANSWER_BASE + 256
ANSWER_BOOK = json.loads((Path(__file__).with_name("data") / "answers.json").read_text())
# SGLANG_SIM_FAULT_OUTPUT: garbage (every answer `!!!!...` to the last token, and decode 15 % faster: the
# signature of sgl-project/sglang#37111), wrong-answers (the right form, wrong values on 3 of the output check's 8
# prompts), diverge (right answers, then words that differ from one server start to the next).
OUTPUT_FAULTS = ("garbage", "wrong-answers", "diverge")
GARBAGE_SPEEDUP = 0.85
# SGLANG_SIM_FAULT_SLOW_RESOLVED=<dest>=<JSON value> (the planted upgrade regression): every cycle SLOW_RESOLVED_PCT %
# slower where the release's own resolution holds that value for that field; planted in both releases of an upgrade,
# it costs speed only in the release whose changed default resolves to it (e.g. enable_fused_qk_norm_rope=null: a
# tri-state default left to SGLang's own choice in one release, False in the one before).
SLOW_RESOLVED_PCT = 25


def slow_resolved(value: str | None, resolved: dict) -> bool:
    """Whether the planted fault applies: the named resolved field holds the named value (JSON; a word that is not
    JSON is a string). A field the resolution lacks never matches."""
    if not value or "=" not in value:
        return False
    dest, _, raw = value.partition("=")
    try:
        wanted = json.loads(raw)
    except ValueError:
        wanted = raw
    return dest.strip() in resolved and resolved[dest.strip()] == wanted


# The graph phases SGLang counts as decode-side (internal_state.py _DECODE_GRAPH_PHASES)
DECODE_GRAPH_PHASES = ("decode", "target_verify", "draft_decode", "draft_extend")


def modelled_answer(prompt: str, max_new_tokens: int, fault: str | None, start: str = "") -> tuple[str, bool] | None:
    """(text, ends) the modelled model answers with, None for word salad. A prompt of the gate's output check
    gets its answer (data/answers.json); the output faults break it (OUTPUT_FAULTS)."""
    if fault == "garbage":
        return "!" * max_new_tokens, False
    for question, answer in ANSWER_BOOK["answers"].items():
        if question in prompt:
            if fault == "wrong-answers" and question in ANSWER_BOOK["wrong"]:
                return ANSWER_BOOK["wrong"][question], True
            if fault == "diverge":
                return f"{answer}\n(checked {start})", True
            return answer, True
    return None


# --- the engine -----------------------------------------------------------------------------------

class Request:
    def __init__(self, prompt: str, params: dict, rng: random.Random):
        self.rid = uuid.uuid4().hex
        self.prompt_tokens = max(1, len(prompt.split()) * 4 // 3)
        self.max_new_tokens = int(params.get("max_new_tokens", 128))
        self.kind = classify_prompt(prompt)
        self.rng = rng
        self.events: queue.Queue = queue.Queue()  # ("tokens", ids) ... ("done", meta)
        self.output_ids: list[int] = []
        self.verify_ct = 0
        self.correct_drafts_histogram: list[int] = []  # SGLang's: verify steps by accepted drafts (bonus excluded)
        self.created = time.monotonic()
        self.first_token_at: float | None = None
        self.accept_probabilities: list[float] = []
        self.slowness = 1.0
        self.answer_ids: list[int] | None = None  # a modelled answer's bytes (ANSWER_BASE + byte)
        self.ends = False  # the answer ends before max_new_tokens (finish reason stop, not length)


def classify_prompt(prompt: str) -> str:
    lowered = prompt.lower()
    if any(marker in prompt for marker in ("def ", "```", "{", "();", "import ")) or "code" in lowered:
        return "code"
    if lowered.startswith(("user:", "hi", "hello", "can you", "what", "how", "why")) or "?" in prompt:
        return "chat"
    return "prose"


class Engine:
    """Continuous batching in real time: one thread runs decode cycles for every running request."""

    def __init__(self, args: argparse.Namespace, env: dict, resolved: dict):
        self.args = vars(args)
        self.resolved = resolved
        self.env = env
        self.machine = hardware.load_data(env.get("SGLANG_SIM_MACHINE", "2xa6000-pcie"))
        if env.get("SGLANG_SIM_P2P") == "0":
            self.machine = {**self.machine, "p2p": False}
        self.model = hardware.load_data(env.get("SGLANG_SIM_MODEL", "qwen3.6-27b-fp8"))
        self.eff = hardware.resolve(resolved, env, self.machine, self.model)
        self.capacity: dict | None = None  # SGLang's own pool sizing, where SGLang runs (use_capacity)
        self.seed = env.get("SGLANG_SIM_SEED") or str(random.SystemRandom().random())
        self.slowdown = 1 + float(env.get("SGLANG_SIM_SLOWDOWN_PCT", "0")) / 100
        fault = env.get("SGLANG_SIM_FAULT_OUTPUT") or None
        # SGLANG_SIM_FAULT_OUTPUT_AT_STEPS=N: the fault only where the release runs N draft steps (one tune candidate)
        at_steps = env.get("SGLANG_SIM_FAULT_OUTPUT_AT_STEPS")
        if at_steps and str(resolved.get("speculative_num_steps")) != at_steps.strip():
            fault = None
        # SGLANG_SIM_FAULT_OUTPUT_AT_ATTENTION=B: only where the release runs attention backend B (a planted trap)
        at_attention = env.get("SGLANG_SIM_FAULT_OUTPUT_AT_ATTENTION")
        if at_attention and (resolved.get("attention_backend") or "flashinfer") != at_attention.strip():
            fault = None
        self.output_fault = fault if fault in OUTPUT_FAULTS else None
        if slow_resolved(env.get("SGLANG_SIM_FAULT_SLOW_RESOLVED"), resolved):
            self.slowdown *= 1 + SLOW_RESOLVED_PCT / 100
            log.info("SIMULATED FAULT: %s: every cycle %d %% slower", env["SGLANG_SIM_FAULT_SLOW_RESOLVED"],
                     SLOW_RESOLVED_PCT)
        if self.output_fault == "garbage":
            self.slowdown *= GARBAGE_SPEEDUP
        self.collapse = env.get("SGLANG_SIM_ACCEPT_COLLAPSE") == "1"
        self.die_after = int(env.get("SGLANG_SIM_DIE_AFTER_REQUESTS", "0"))
        self.collapse_after = int(env.get("SGLANG_SIM_ACCEPT_COLLAPSE_AFTER", "0"))
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.lock = threading.Condition()
        self.request_count = 0
        self.cycles = 0
        self.stats = {"generation_tokens": 0, "prompt_tokens": 0, "verify_calls": 0, "requests": 0,
                      "graph_passes": 0, "eager_passes": 0, "accepted_total": 0, "cycles_spec": 0}
        self.last_gen_throughput = 0.0
        self.histograms = {name: [] for name in ("ttft", "itl", "e2e")}
        self.rng = random.Random(f"{self.seed}:engine")

    # requests
    def submit(self, prompt: str, params: dict, counted: bool = True) -> Request:
        """counted=False: the server's own requests (warmup, /health) do not count for the fault knobs."""
        with self.lock:
            self.request_count += counted
            index = self.request_count
        exit0_after = int(self.env.get("SGLANG_SIM_EXIT0_AFTER_REQUESTS", "0"))
        if counted and exit0_after and index > exit0_after:
            log.error("SIMULATED FAULT: CUDA error: an illegal memory access was encountered; exiting with status 0 "
                      "(SGLANG_SIM_EXIT0_AFTER_REQUESTS, as vllm-project/vllm#53726)")
            logging.shutdown()
            os._exit(0)
        if counted and self.die_after and index > self.die_after:
            die_like_a_failed_scheduler(f"RuntimeError: SIMULATED FAULT: dying after {self.die_after} requests "
                                        "(SGLANG_SIM_DIE_AFTER_REQUESTS)")
        # Greedy decoding is deterministic: the same prompt gives the same tokens and acceptance pattern,
        # as on a real server. Only sampled requests and timing depend on the process's seed.
        greedy = float(params.get("temperature", 1.0)) == 0.0
        rng = hardware.SeededRandom(f"greedy:{prompt}" if greedy else f"{self.seed}:{index}:{prompt}")
        request = Request(prompt, params, rng)
        answer = modelled_answer(prompt, request.max_new_tokens, self.output_fault, self.seed[-6:])
        if answer is not None:
            text, ends = answer
            request.answer_ids = [ANSWER_BASE + byte for byte in text.encode()]
            request.ends = ends and len(request.answer_ids) < request.max_new_tokens
            if request.ends:
                request.answer_ids.append(ANSWER_END)
            request.max_new_tokens = min(request.max_new_tokens, len(request.answer_ids))
        request.slowness = hardware.jitter(self.rng, self.machine["noise_request_sigma"])
        collapsed = self.collapse or bool(self.collapse_after and index > self.collapse_after)
        request.accept_probabilities = hardware.accept_probabilities(self.eff, self.model, request.kind, collapsed)
        with self.lock:
            self.waiting.append(request)
            self.lock.notify()
        return request

    def loop(self) -> None:
        window_tokens, window_start = 0, time.monotonic()
        while True:
            with self.lock:
                while not self.waiting and not self.running:
                    self.lock.wait()
                admitted = []
                while self.waiting and len(self.running) + len(admitted) < self.eff.max_running:
                    admitted.append(self.waiting.pop(0))
            if admitted:  # prefill batch: new requests get their first token
                prompt_tokens = sum(r.prompt_tokens for r in admitted)
                time.sleep(hardware.prefill_ms(prompt_tokens, self.machine) / 1e3 * self.slowdown)
                for request in admitted:
                    self.stats["prompt_tokens"] += request.prompt_tokens
                    request.first_token_at = time.monotonic()
                    self._emit(request, 1)
                with self.lock:
                    self.running += [r for r in admitted if not self._finished(r)]
                    for request in admitted:
                        if self._finished(request):
                            self._finish(request)
                continue
            batch = list(self.running)
            cycle = hardware.cycle_ms(self.eff, self.machine, self.model, len(batch))
            slowness = sum(r.slowness for r in batch) / len(batch)
            cycle *= hardware.jitter(self.rng, self.machine["noise_cycle_sigma"]) * slowness * self.slowdown
            time.sleep(cycle / 1e3)
            graphs = self.eff.decode_graphs and len(batch) <= self.eff.graph_max_bs
            self.stats["graph_passes" if graphs else "eager_passes"] += 1
            emitted = 0
            for request in batch:
                tokens = hardware.draw_accepted(request.accept_probabilities, request.rng, len(request.output_ids))
                if self.eff.spec_steps:
                    request.verify_ct += 1
                    hardware.count_correct_drafts(request.correct_drafts_histogram, tokens - 1)
                    self.stats["verify_calls"] += 1
                    self.stats["accepted_total"] += tokens
                emitted += self._emit(request, tokens)
            self.cycles += 1
            window_tokens += emitted
            if self.cycles % DECODE_LOG_INTERVAL == 0:
                now = time.monotonic()
                self.last_gen_throughput = window_tokens / (now - window_start)
                self._log_decode_batch(len(batch), graphs)
                window_tokens, window_start = 0, now
            with self.lock:
                for request in [r for r in self.running if self._finished(r)]:
                    self.running.remove(request)
                    self._finish(request)

    def _finished(self, request: Request) -> bool:
        return len(request.output_ids) >= request.max_new_tokens

    def _emit(self, request: Request, count: int) -> int:
        count = min(count, request.max_new_tokens - len(request.output_ids))
        if request.answer_ids is not None:
            ids = request.answer_ids[len(request.output_ids):len(request.output_ids) + count]
        else:
            ids = [request.rng.randrange(1000, 150000) for _ in range(count)]
        request.output_ids += ids
        self.stats["generation_tokens"] += count
        request.events.put(("tokens", ids))
        return count

    def _finish(self, request: Request) -> None:
        now = time.monotonic()
        completion = len(request.output_ids)
        ttft = request.first_token_at - request.created
        e2e = now - request.created
        self.stats["requests"] += 1
        self.histograms["ttft"].append(ttft)
        self.histograms["e2e"].append(e2e)
        if completion > 1:
            self.histograms["itl"].append((e2e - ttft) / (completion - 1))
        meta = {
            "id": request.rid, "finish_reason": ({"type": "stop", "matched": EOS_TOKEN} if request.ends
                                                 else {"type": "length", "length": completion}),
            "prompt_tokens": request.prompt_tokens, "completion_tokens": completion,
            "cached_tokens": 0, "e2e_latency": e2e,
        }
        if self.eff.spec_steps:
            meta["spec_verify_ct"] = request.verify_ct
            meta["spec_accept_length"] = completion / request.verify_ct if request.verify_ct else 1.0
            if request.correct_drafts_histogram:  # SGLang includes it only when non-empty (tokenizer_manager.py)
                meta["spec_correct_drafts_histogram"] = list(request.correct_drafts_histogram)
        if self.args.get("enable_metrics"):
            meta["first_token_latency"] = ttft
            meta["decode_throughput"] = (completion - 1) / (e2e - ttft) if completion > 1 and e2e > ttft else 0.0
        request.events.put(("done", meta))

    def _log_decode_batch(self, batch: int, graphs: bool) -> None:
        accept = (f"accept len: {self.avg_accept_length():.2f}, " if self.eff.spec_steps else "")
        log.info("Decode batch, #running-req: %d, #token: %d, token usage: 0.01, %scuda graph: %s, "
                 "gen throughput (token/s): %.2f, #queue-req: %d",
                 batch, sum(len(r.output_ids) for r in self.running), accept, graphs,
                 self.last_gen_throughput, len(self.waiting))

    def avg_accept_length(self) -> float:
        if not self.stats["verify_calls"]:
            return 0.0
        return self.stats["accepted_total"] / self.stats["verify_calls"]

    def text_of(self, ids: list[int]) -> str:
        """Words for the synthetic vocabulary's ids, the bytes of a modelled answer for ANSWER_BASE + byte."""
        out, answer = [], bytearray()
        for i in ids:
            if i == ANSWER_END:
                continue  # the end-of-turn token: not part of the text
            if i >= ANSWER_BASE:
                answer.append(i - ANSWER_BASE)
                continue
            if answer:
                out.append(answer.decode("utf-8", "replace"))
                answer = bytearray()
            out.append(" " + WORDS[i % len(WORDS)])
        if answer:
            out.append(answer.decode("utf-8", "replace"))
        return "".join(out)

    def memory_usage(self) -> dict:
        """SGLang's schema: GB per GPU, graph memory per capture phase (0 = not captured)."""
        weights = self.model["weights_gib"] / self.eff.tp
        phases = dict.fromkeys(("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend"), 0.0)
        if self.eff.decode_graphs:
            if self.eff.spec_steps:
                phases.update(target_verify=0.41, draft_decode=0.14, draft_extend=0.07)
            else:
                phases["decode"] = 0.45
            if ((self.resolved.get("cuda_graph_config") or {}).get("prefill") or {}).get("backend") != "disabled":
                phases["prefill"] = 0.31
        fraction = self.resolved.get("mem_fraction_static") or 0.85
        kv = max(0.0, fraction * self.machine["gpu_memory_gib"] - weights - sum(phases.values()))
        tokens = int(kv * 40000)
        if self.capacity:  # SGLang's own arithmetic (sglang_memory.py), under SGLang's front end
            kv, tokens = self.capacity["kv_budget_gib"], self.capacity["max_total_num_tokens"]
        if self.env.get("SGLANG_SIM_GRAPH_MEMORY_ZERO") == "1":
            # captured, but into blocks the prefill graph freed in the shared pool: the deltas read 0 (a real card can)
            phases.update({key: 0.0 for key in ("decode", "target_verify", "draft_decode", "draft_extend")})
        # startup_available: what is still free once the server has started (SGLang measures it at the end of the
        # scheduler's init): here the part of the card outside the static pool
        return {"weight": round(weights, 3), "kvcache": round(kv, 3),
                "startup_available": round((1 - fraction) * self.machine["gpu_memory_gib"], 3),
                "token_capacity": tokens, "token_capacity_swa": None, "graph": phases}

    def use_capacity(self, capacity: dict) -> None:
        """SGLang's own pool sizing (sim/sglang_memory.py): the KV tokens and the cap on running requests (the mamba
        state cache's among them) replace the model's."""
        self.capacity = capacity
        self.eff = dataclasses.replace(self.eff, max_running=min(self.eff.max_running,
                                                                 capacity["max_running_requests"]))

    def decode_graph_batch_sizes(self) -> list[int]:
        """MODELLED (the model-only server; under SGLang's front end, sglang_scheduler.py asks SGLang's own
        get_batch_sizes_to_capture): the resolved decode.bs list clamped to the request pool's size, as
        base_cuda_graph_runner.py does at alignment 1; empty when no decode graph is captured."""
        if not self.eff.decode_graphs:
            return []
        sizes = list((((self.resolved.get("cuda_graph_config") or {}).get("decode") or {}).get("bs")) or [])
        limit = self.eff.max_running
        if not sizes or max(sizes) > limit:
            sizes.append(limit)
        return sorted({size for size in sizes if 0 < size <= limit})

    def decode_graph_gb(self) -> float:
        graph = self.memory_usage()["graph"]
        return graph["decode"] + graph["target_verify"] + graph["draft_decode"] + graph["draft_extend"]


def die_like_a_failed_scheduler(message: str) -> None:
    """managers/scheduler.py run_scheduler_process: the scheduler logs its exception and sends SIGQUIT;
    entrypoints/engine.py launch_phase_sigquit_handler logs and kills the whole process tree (SIGKILL)."""
    log.error("Scheduler hit an exception: Traceback (most recent call last):\n  (SIMULATED)\n%s", message)
    log.error("Received sigquit from a child process. It usually means the child failed.")
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGKILL)
