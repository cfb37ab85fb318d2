"""A simulated SGLang server: SGLang 0.5.23's command line and HTTP API, with the speed of a modelled GPU host.

It stands in for the GPU server only, and says so everywhere: its logs, ``/server_info``
(``"simulated": true``) and ``/model_info``. Tokens are emitted in real time at the rate the hardware
model gives, so clients measure wall-clock time exactly as against a real server.

Standard library only (it runs with the simulated host's system python3).

Environment knobs (all optional; faults are planted by a test profile's ``environment:``):
  SGLANG_SIM_MACHINE / SGLANG_SIM_MODEL   data files under data/ (default 2xa6000-pcie, qwen3.6-27b-fp8)
  SGLANG_SIM_START_SECONDS                weight loading + graph capture time (default 3)
  SGLANG_SIM_SEED                         timing-noise seed (default: random per process)
  SGLANG_SIM_P2P=0                        the board has no working GPU peer-to-peer
  SGLANG_SIM_CRASH_AT_START=1             the scheduler dies while loading weights (SIGKILL, as 0.5.23)
  SGLANG_SIM_HANG_AT_START=1              never become healthy
  SGLANG_SIM_DIE_AFTER_REQUESTS=N         the scheduler dies after N generation requests (SIGKILL)
  SGLANG_SIM_SLOWDOWN_PCT=X               every cycle X % slower (a regression only a benchmark sees)
  SGLANG_SIM_GENERATE_5XX=1               generation endpoints answer 500
  SGLANG_SIM_ACCEPT_COLLAPSE=1            speculative acceptance collapses (tau ~1.2)
  SGLANG_SIM_ACCEPT_COLLAPSE_AFTER=N      ... after N generation requests of this process (decay over uptime;
                                          a restart brings acceptance back)
  SGLANG_SIM_STREAM_ERROR_AFTER=N         a /generate stream ends with SGLang's in-band error chunk after N tokens
  SGLANG_SIM_STREAM_ABORT_AFTER=N         a /generate stream's last chunk is an abort after N tokens
  SGLANG_SIM_GRAPH_CAPTURE_FAIL=1         decode CUDA graph capture fails: the server dies, as 0.5.23 does
  SGLANG_SIM_AUTH_BROKEN=1                the API key is configured but not enforced (any request is served)
  SGLANG_SIM_RESOLVED=FILE                SGLang's resolution of this command line (resolution.py); by
                                          default the release's resolved.json whose argv matches

What /server_info reports is SGLang's own resolution of the command line (``resolved.json``, computed by
the pinned SGLang's parser and resolution hooks and shipped with the release), plus what only the
running process knows (internal_states, the runtime graph batch limit): the simulator keeps no copy
of SGLang's defaults.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import random
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from . import hardware

SGLANG_VERSION = "0.5.23"
FLAG_TABLE = Path(__file__).resolve().parent / f"sglang-{SGLANG_VERSION}-flags.json"
DECODE_LOG_INTERVAL = 40  # cycles between "Decode batch" log lines, as SGLang's --decode-log-interval
WORDS = ("the", "model", "server", "token", "decode", "graph", "memory", "bandwidth", "cache", "layer",
         "request", "batch", "kernel", "stream", "value", "return", "def", "for", "in", "data", "result",
         "system", "time", "speed", "and", "of", "to", "a", "is", "with")

log = logging.getLogger("sglang.sim")


# --- command line ---------------------------------------------------------------------------------

def _human_readable_int(text: str) -> int:
    units = {"k": 1_000, "K": 1_024, "m": 1_000_000, "M": 1_048_576}
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)


TYPES = {"int": int, "float": float, "human_readable_int": _human_readable_int}


def build_parser() -> argparse.ArgumentParser:
    """SGLang's own option table (exported from the real parser) rebuilt with argparse."""
    table = json.loads(FLAG_TABLE.read_text())
    parser = argparse.ArgumentParser(prog="sglang serve", add_help=False)
    for action in table["actions"]:
        kwargs = {"dest": action["dest"], "default": action["default"]}
        if action["kind"] == "store_true":
            kwargs["action"] = "store_true"
        elif action["kind"] == "store_false":
            kwargs["action"] = "store_false"
        else:
            if action["nargs"] is not None:
                kwargs["nargs"] = action["nargs"]
            if action["choices"]:
                kwargs["choices"] = action["choices"]
            else:
                kwargs["type"] = TYPES.get(action["type"], str)
        parser.add_argument(*action["options"], **kwargs)
    return parser


def merge_config(argv: list[str]) -> list[str]:
    """--config FILE: YAML 'flag-name: value' lines become flags in front of the command line."""
    if "--config" not in argv:
        return argv
    position = argv.index("--config")
    path = argv[position + 1]
    config_args = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        value = json.loads(value) if value.startswith('"') else value
        if value in ("true", True):
            config_args.append(f"--{key.replace('_', '-')}")
        elif value not in ("false", False):
            config_args += [f"--{key.replace('_', '-')}", str(value)]
    return config_args + argv[:position] + argv[position + 2:]


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
        self.created = time.monotonic()
        self.first_token_at: float | None = None
        self.accept_probabilities: list[float] = []
        self.slowness = 1.0


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
        self.eff = hardware.resolve(resolved, env, self.machine)
        self.seed = env.get("SGLANG_SIM_SEED") or str(random.SystemRandom().random())
        self.slowdown = 1 + float(env.get("SGLANG_SIM_SLOWDOWN_PCT", "0")) / 100
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
        if counted and self.die_after and index > self.die_after:
            die_like_a_failed_scheduler(f"RuntimeError: SIMULATED FAULT: dying after {self.die_after} requests "
                                        "(SGLANG_SIM_DIE_AFTER_REQUESTS)")
        # Greedy decoding is deterministic: the same prompt gives the same tokens and acceptance pattern,
        # as on a real server. Only sampled requests and timing depend on the process's seed.
        greedy = float(params.get("temperature", 1.0)) == 0.0
        rng = hardware.SeededRandom(f"greedy:{prompt}" if greedy else f"{self.seed}:{index}:{prompt}")
        request = Request(prompt, params, rng)
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
            "id": request.rid, "finish_reason": {"type": "length", "length": completion},
            "prompt_tokens": request.prompt_tokens, "completion_tokens": completion,
            "cached_tokens": 0, "e2e_latency": e2e,
        }
        if self.eff.spec_steps:
            meta["spec_verify_ct"] = request.verify_ct
            meta["spec_accept_length"] = completion / request.verify_ct if request.verify_ct else 1.0
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
        return "".join(" " + WORDS[i % len(WORDS)] for i in ids)

    def memory_usage(self) -> dict:
        """SGLang 0.5.23's schema: GB per GPU, graph memory per capture phase (0 = not captured)."""
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
        return {"weight": round(weights, 3), "kvcache": round(kv, 3),
                "startup_available": self.machine["gpu_memory_gib"], "token_capacity": int(kv * 40000),
                "token_capacity_swa": None, "graph": phases}

    def decode_graph_gb(self) -> float:
        graph = self.memory_usage()["graph"]
        return graph["decode"] + graph["target_verify"] + graph["draft_decode"] + graph["draft_extend"]


# --- HTTP -----------------------------------------------------------------------------------------

OPEN_PATHS = {"/health", "/health_generate", "/ready", "/metrics"}


class StopStream:
    """A stream's last chunk before [DONE] (an in-band error or an abort)."""

    def __init__(self, chunk: dict):
        self.chunk = chunk


def make_handler(engine: Engine, server_args: dict, status: dict):
    """server_args: what SGLang's /server_info serves before the runtime fields (resolved_dict() with the
    api key, and launch_command); status["up"] turns true after the warmup request, as ServerStatus.Up."""
    api_key = server_args.get("api_key")
    auth_broken = engine.env.get("SGLANG_SIM_AUTH_BROKEN") == "1"
    served_name = server_args.get("served_model_name") or server_args.get("model_path")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = f"sglang-sim/{SGLANG_VERSION}"

        def log_message(self, fmt, *args):  # uvicorn-like access log
            log.debug("%s - %s", self.address_string(), fmt % args)

        # helpers
        def send_json(self, status: int, body) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def read_json(self) -> dict:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                return json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError as error:
                raise ValueError(f"invalid JSON body: {error}") from None

        def authorized(self, path: str) -> bool:
            if not api_key or path in OPEN_PATHS or auth_broken:
                return True
            if self.headers.get("Authorization", "") == f"Bearer {api_key}":
                return True
            self.send_json(401, {"error": "Unauthorized"})
            return False

        def send_empty(self, status_code: int) -> None:
            self.send_response(status_code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        # routes
        def do_GET(self):
            path = self.path.split("?")[0]
            if not self.authorized(path):
                return
            if path == "/ready":  # http_server.py: an empty body, 200 once up
                return self.send_empty(200 if status["up"] else 503)
            if path in ("/health", "/health_generate"):
                # http_server.py health_generate: 503 while ServerStatus.Starting (the warmup), then a
                # one-token generation (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION defaults to true)
                if not status["up"]:
                    return self.send_empty(503)
                request = engine.submit("health check", {"max_new_tokens": 1}, counted=False)
                self.wait_done(request, timeout=20)
                return self.send_empty(200)
            if path == "/metrics" and server_args.get("enable_metrics"):
                return self.send_metrics()
            if path in ("/server_info", "/get_server_info"):
                return self.send_json(200, self.server_info())
            if path in ("/model_info", "/get_model_info"):
                return self.send_json(200, {
                    "model_path": server_args["model_path"], "tokenizer_path": server_args["model_path"],
                    "is_generation": True, "served_model_name": served_name, "simulated": True,
                    "architectures": [engine.model["architecture"]]})
            if path == "/v1/models":
                return self.send_json(200, {"object": "list", "data": [
                    {"id": served_name, "object": "model", "owned_by": "sglang", "root": served_name,
                     "max_model_len": server_args.get("context_length") or engine.model["context_length"]}]})
            self.send_json(404, {"detail": "Not Found"})

        def do_POST(self):
            path = self.path.split("?")[0]
            if not self.authorized(path):
                return
            try:
                body = self.read_json()
            except ValueError as error:
                return self.send_json(400, {"error": str(error)})
            if path in ("/generate", "/v1/completions", "/v1/chat/completions") and \
                    engine.env.get("SGLANG_SIM_GENERATE_5XX") == "1":
                return self.send_json(500, {"error": "SIMULATED FAULT: internal server error (SGLANG_SIM_GENERATE_5XX)"})
            if path == "/generate":
                return self.generate(body)
            if path == "/v1/completions":
                return self.openai(body, chat=False)
            if path == "/v1/chat/completions":
                return self.openai(body, chat=True)
            self.send_json(404, {"detail": "Not Found"})

        def server_info(self) -> dict:
            """http_server.py server_info -> utils/common.py build_server_info: resolved_dict(), the launch
            command, then the scheduler's internal_states. Like SGLang, it carries the API key."""
            usage = engine.memory_usage()
            info = json.loads(json.dumps(server_args))
            # The decode graph batch limit the GPU-memory defaults pick on the host (memory_hook.py).
            info["cuda_graph_config"]["decode"]["max_bs"] = engine.eff.graph_max_bs
            info.update({
                "version": SGLANG_VERSION, "simulated": True,
                "simulated_machine": engine.machine["name"], "simulated_model": engine.model["name"],
                "simulated_gpu": engine.machine["gpu"],
                "internal_states": [{
                    "avg_spec_accept_length": engine.avg_accept_length(),
                    "last_gen_throughput": engine.last_gen_throughput,
                    "memory_usage": usage,
                    "effective_max_running_requests_per_dp": engine.eff.max_running,
                }],
            })
            return info

        def wait_done(self, request: Request, timeout: float = 600):
            while True:
                kind, payload = request.events.get(timeout=timeout)
                if kind == "done":
                    return payload

        def generate(self, body: dict):
            text = body.get("text")
            if not isinstance(text, str):
                return self.send_json(400, {"error": "'text' (a string) is required"})
            request = engine.submit(text, body.get("sampling_params") or {})
            if body.get("stream"):
                error_after = int(engine.env.get("SGLANG_SIM_STREAM_ERROR_AFTER", "0"))
                abort_after = int(engine.env.get("SGLANG_SIM_STREAM_ABORT_AFTER", "0"))

                def chunk(ids_so_far, meta):
                    if error_after and len(ids_so_far) >= error_after:  # http_server.py:957-975
                        return StopStream({"error": {"message": "SIMULATED FAULT (SGLANG_SIM_STREAM_ERROR_AFTER)",
                                                     "type": "invalid_request_error", "code": 400,
                                                     "retryable": False}})
                    if abort_after and len(ids_so_far) >= abort_after:  # tokenizer_manager.py:1891-1922
                        return StopStream({"text": engine.text_of(ids_so_far), "output_ids": ids_so_far, "meta_info": {
                            **meta, "finish_reason": {"type": "abort", "message": "SIMULATED FAULT: aborted",
                                                      "status_code": 503}}})
                    return {"text": engine.text_of(ids_so_far), "output_ids": ids_so_far, "meta_info": meta}
                return self.stream(request, chunk)
            meta = self.wait_done(request)
            self.send_json(200, {"text": engine.text_of(request.output_ids), "output_ids": request.output_ids,
                                 "meta_info": meta})

        def stream(self, request: Request, chunk):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            ids_so_far: list[int] = []
            sent = 0
            interval = max(1, int(server_args.get("stream_interval") or 1))  # SGLang's --stream-interval
            while True:
                kind, payload = request.events.get(timeout=600)
                if kind == "tokens":
                    ids_so_far += payload
                    if len(ids_so_far) - sent < interval:
                        continue
                    sent = len(ids_so_far)
                    meta = {"id": request.rid, "prompt_tokens": request.prompt_tokens,
                            "completion_tokens": len(ids_so_far)}
                    data = chunk(list(ids_so_far), meta)
                else:
                    data = chunk(list(ids_so_far), payload)
                stop = isinstance(data, StopStream)
                for item in [data.chunk] if stop else data if isinstance(data, list) else [data]:
                    self.wfile.write(f"data: {json.dumps(item)}\n\n".encode())
                    self.wfile.flush()
                if kind == "done" or stop:
                    break
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def openai(self, body: dict, chat: bool):
            if chat:
                messages = body.get("messages") or []
                prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            else:
                prompt = body.get("prompt") or ""
                prompt = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
            if not prompt:
                return self.send_json(400, {"error": {"message": "messages or prompt is required"}})
            params = {"max_new_tokens": body.get("max_tokens") or body.get("max_completion_tokens") or 128}
            request = engine.submit(prompt, params)
            created, model_name = int(time.time()), body.get("model") or served_name
            object_name = "chat.completion" if chat else "text_completion"
            spec_details = bool(body.get("return_spec_tokens_details"))
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            if body.get("stream"):
                sent = [0]

                def chunk(ids, meta):
                    delta = engine.text_of(ids[sent[0]:])
                    sent[0] = len(ids)
                    done = "e2e_latency" in meta
                    choice = {"index": 0, "finish_reason": "length" if done else None}
                    choice.update({"delta": {"content": delta}} if chat else {"text": delta})
                    head = {"id": request.rid, "object": object_name + ".chunk", "created": created,
                            "model": model_name}
                    chunks = [{**head, "choices": [choice]}]
                    if done and include_usage:  # serving_chat.py / serving_completions.py: an extra usage chunk
                        chunks.append({**head, "choices": [], "usage": {
                            "prompt_tokens": meta["prompt_tokens"], "completion_tokens": meta["completion_tokens"],
                            "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"]}})
                    return chunks
                return self.stream(request, chunk)
            meta = self.wait_done(request)
            text = engine.text_of(request.output_ids)
            choice = {"index": 0, "finish_reason": "length"}
            choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            usage = {"prompt_tokens": meta["prompt_tokens"], "completion_tokens": meta["completion_tokens"],
                     "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"]}
            response = {"id": request.rid, "object": object_name, "created": created, "model": model_name,
                        "choices": [choice], "usage": usage}
            if spec_details and "spec_verify_ct" in meta:
                response["sglext"] = {"spec_verify_ct": meta["spec_verify_ct"],
                                      "spec_accept_length": meta["spec_accept_length"]}
            self.send_json(200, response)

        def send_metrics(self):
            labels = f'model_name="{served_name}"'
            s = engine.stats
            lines = [
                "# HELP sglang:num_running_reqs The number of running requests.",
                "# TYPE sglang:num_running_reqs gauge",
                f"sglang:num_running_reqs{{{labels}}} {len(engine.running)}",
                "# TYPE sglang:gen_throughput gauge",
                f"sglang:gen_throughput{{{labels}}} {engine.last_gen_throughput}",
                "# TYPE sglang:spec_accept_length gauge",
                f"sglang:spec_accept_length{{{labels}}} {engine.avg_accept_length()}",
                "# TYPE sglang:is_cuda_graph gauge",
                f"sglang:is_cuda_graph{{{labels}}} {1.0 if engine.eff.decode_graphs else 0.0}",
                "# TYPE sglang:generation_tokens_total counter",
                f"sglang:generation_tokens_total{{{labels}}} {s['generation_tokens']}",
                "# TYPE sglang:prompt_tokens_total counter",
                f"sglang:prompt_tokens_total{{{labels}}} {s['prompt_tokens']}",
                "# TYPE sglang:spec_verify_calls_total counter",
                f"sglang:spec_verify_calls_total{{{labels}}} {s['verify_calls']}",
                "# TYPE sglang:cuda_graph_passes_total counter",
                f'sglang:cuda_graph_passes_total{{{labels},mode="decode_cuda_graph"}} {s["graph_passes"]}',
                f'sglang:cuda_graph_passes_total{{{labels},mode="decode_none"}} {s["eager_passes"]}',
            ]
            for name, key in (("time_to_first_token_seconds", "ttft"), ("inter_token_latency_seconds", "itl"),
                              ("e2e_request_latency_seconds", "e2e")):
                values = engine.histograms[key]
                lines.append(f"# TYPE sglang:{name} histogram")
                for bound in (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60):
                    lines.append(f'sglang:{name}_bucket{{{labels},le="{bound}"}} {sum(v <= bound for v in values)}')
                lines.append(f'sglang:{name}_bucket{{{labels},le="+Inf"}} {len(values)}')
                lines.append(f"sglang:{name}_sum{{{labels}}} {sum(values)}")
                lines.append(f"sglang:{name}_count{{{labels}}} {len(values)}")
            data = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


# --- start-up -------------------------------------------------------------------------------------

def fail(message: str) -> int:
    log.error(message)
    return 1


# What SGLang 0.5.23 appends to a failed decode graph capture (model_executor/runner_backend_utils).
CUDA_GRAPH_CAPTURE_FAILED_MSG = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
STORE_ROOT = os.environ.get("SGLANG_DEPLOY_STORE", "/var/lib/sglang-deploy")


def without_config(argv: list[str]) -> list[str]:
    if "--config" not in argv:
        return list(argv)
    position = argv.index("--config")
    return argv[:position] + argv[position + 2:]


def load_resolution(argv: list[str], env: dict) -> tuple[dict | None, str]:
    """SGLang's resolution of this command line: SGLANG_SIM_RESOLVED, else the resolved.json of a staged
    release whose argv is this one (the unit's argv without --config)."""
    if env.get("SGLANG_SIM_RESOLVED"):
        path = env["SGLANG_SIM_RESOLVED"]
        return json.loads(Path(path).read_text()), path
    wanted = without_config(argv)
    for path in sorted(Path(STORE_ROOT).glob("*/releases/*/resolved.json"), reverse=True):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if document.get("argv") == wanted:
            return document, str(path)
    return None, f"{STORE_ROOT}/*/releases/*/resolved.json"


def startup_errors(args: argparse.Namespace, engine: Engine) -> str | None:
    """The checks real SGLang makes before serving, with its kind of messages."""
    model_dir = Path(args.model_path)
    if not (model_dir / "config.json").exists():
        return f"OSError: {args.model_path} does not appear to have a file named config.json"
    if (args.tp_size or 1) > engine.machine["gpu_count"]:
        return (f"RuntimeError: tp_size={args.tp_size} but only {engine.machine['gpu_count']} GPUs are visible "
                "(CUDA error: invalid device ordinal)")
    if args.speculative_adaptive and engine.model.get("hybrid"):
        return "RuntimeError: adaptive speculative decoding is not supported for hybrid GDN models (illegal memory access)"
    return None


def die_like_a_failed_scheduler(message: str) -> None:
    """managers/scheduler.py run_scheduler_process: the scheduler logs its exception and sends SIGQUIT;
    entrypoints/engine.py launch_phase_sigquit_handler logs and kills the whole process tree (SIGKILL)."""
    log.error("Scheduler hit an exception: Traceback (most recent call last):\n  (SIMULATED)\n%s", message)
    log.error("Received sigquit from a child process. It usually means the child failed.")
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":
        argv = argv[1:]
    if argv[:1] == ["version"]:
        print(f"sglang version: {SGLANG_VERSION} (SIMULATED by sglang-deploy)")
        return 0
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    parser = build_parser()
    try:
        merged = merge_config(argv)
    except (OSError, IndexError, ValueError) as error:
        print(f"sglang serve: error: --config: {error}", file=sys.stderr)
        return 2
    args = parser.parse_args(merged)  # unknown, removed or ambiguous flags exit 2, as in SGLang
    env = dict(os.environ)
    log.info("SIMULATED SGLang %s (sglang-deploy simulator, no GPU is used)", SGLANG_VERSION)
    resolution, where = load_resolution(argv, env)
    if resolution is None:
        return fail(f"SIMULATED: no SGLang resolution for this command line in {where}; the simulator serves only "
                    "what the pinned SGLang's own code resolved (sglang_deploy.resolution)")
    for line in resolution.get("log") or []:  # what SGLang's resolution logged at launch
        log.warning(line)
    if resolution.get("error"):  # SGLang's resolution raised: the launcher dies with it
        return fail(resolution["error"])
    resolved = dict(resolution["resolved"])
    # build_server_info: resolved_dict() carries the key; launch_command is the argv after the --config merge.
    served = {**resolved, "api_key": args.api_key, "launch_command": " ".join(merged)}
    log.info("server_args=%s", served)  # engine.py logs resolved_dict() at start, key included
    engine = Engine(args, env, resolved)
    error = startup_errors(args, engine)
    if error:
        return fail(error)
    signal.signal(signal.SIGTERM, lambda *_: (log.info("Received SIGTERM, shutting down"), os._exit(0)))

    start_seconds = float(env.get("SGLANG_SIM_START_SECONDS", "3"))
    log.info("Load weight begin. avail mem=%.2f GB (simulated %s x%d)", engine.machine["gpu_memory_gib"],
             engine.machine["gpu"], engine.eff.tp)
    time.sleep(start_seconds * 0.5)
    if env.get("SGLANG_SIM_CRASH_AT_START") == "1":
        die_like_a_failed_scheduler("RuntimeError: CUDA error: an illegal memory access was encountered "
                                    "(SIMULATED FAULT: SGLANG_SIM_CRASH_AT_START)")
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
        die_like_a_failed_scheduler(
            "Exception: Capture cuda graph failed: CUDA error: out of memory (SIMULATED FAULT: "
            f"SGLANG_SIM_GRAPH_CAPTURE_FAIL)\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}")
    if env.get("SGLANG_SIM_HANG_AT_START") == "1":
        log.error("SIMULATED FAULT: hanging during CUDA graph capture (SGLANG_SIM_HANG_AT_START)")
        threading.Event().wait()
    if engine.eff.decode_graphs:
        log.info("Capture cuda graph end. mem usage=%.2f GB.", engine.decode_graph_gb())
    log.info("max_total_num_tokens=%d, max_running_requests=%d, context_len=%s",
             usage["token_capacity"], engine.eff.max_running, args.context_length or engine.model["context_length"])
    # http_server.py: uvicorn starts only once the schedulers are ready (connections are refused until
    # then); /health answers 503 during the warmup request, then the server is up.
    status = {"up": False}
    httpd = ThreadingHTTPServer((args.host, args.port), make_handler(engine, served, status))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True, name="http").start()
    threading.Thread(target=engine.loop, daemon=True, name="engine").start()
    warmup = engine.submit("The capital city of France is", {"max_new_tokens": 1, "temperature": 0}, counted=False)
    while warmup.events.get(timeout=600)[0] != "done":
        pass
    time.sleep(start_seconds * 0.1)
    status["up"] = True
    log.info("The server is fired up and ready to roll! (SIMULATED)")
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
