"""The simulator's HTTP API: SGLang's endpoints (http_server.py), served from the engine."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler

from .engine import DECODE_GRAPH_PHASES, SGLANG_VERSION, Engine, Request, log

# --- HTTP -----------------------------------------------------------------------------------------

OPEN_PATHS = {"/health", "/health_generate", "/ready", "/metrics"}


class StopStream:
    """A stream's last chunk before [DONE] (an in-band error or an abort)."""

    def __init__(self, chunk: dict):
        self.chunk = chunk


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
        if not self.api_key or path in OPEN_PATHS or self.auth_broken:
            return True
        if self.headers.get("Authorization", "") == f"Bearer {self.api_key}":
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
            return self.send_empty(200 if self.status["up"] else 503)
        if path in ("/health", "/health_generate"):
            # http_server.py health_generate: 503 while ServerStatus.Starting (the warmup), then a
            # one-token generation (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION defaults to true)
            if not self.status["up"]:
                return self.send_empty(503)
            request = self.engine.submit("health check", {"max_new_tokens": 1}, counted=False)
            self.wait_done(request, timeout=20)
            return self.send_empty(200)
        if path == "/metrics" and self.server_args.get("enable_metrics"):
            return self.send_metrics()
        if path in ("/server_info", "/get_server_info"):
            return self.send_json(200, self.server_info())
        if path in ("/model_info", "/get_model_info"):
            return self.send_json(200, {
                "model_path": self.server_args["model_path"], "tokenizer_path": self.server_args["model_path"],
                "is_generation": True, "served_model_name": self.served_name,
                "architectures": [self.engine.model["architecture"]]})
        if path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [
                {"id": self.served_name, "object": "model", "owned_by": "sglang", "root": self.served_name,
                 "max_model_len": self.server_args.get("context_length") or self.engine.model["context_length"]}]})
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
                self.engine.env.get("SGLANG_SIM_GENERATE_5XX") == "1":
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
        usage = self.engine.memory_usage()
        info = json.loads(json.dumps(self.server_args))
        # The decode graph batch limit the GPU-memory defaults pick on the host (memory_hook.py).
        info["cuda_graph_config"]["decode"]["max_bs"] = self.engine.eff.graph_max_bs
        # build_server_info redacts the watermark secrets (sampling/watermarking/core.py), set or not.
        info.update({"watermark_config": "<redacted>", "watermark_key": "<redacted>", "watermark_key_b": "<redacted>",
                     "admin_api_key": None})
        info.update({
            "version": SGLANG_VERSION,
            # each scheduler's resolved_server_args_dict() with its runtime state (internal_state.py); where the
            # Scheduler that replaces SGLang's under its real front end says it is simulated too
            "internal_states": [{
                **{key: value for key, value in info.items()
                   if key not in ("version", "launch_command", "custom_sigquit_handler")},
                "avg_spec_accept_length": self.engine.avg_accept_length(),
                "last_gen_throughput": self.engine.last_gen_throughput,
                "memory_usage": usage,
                "effective_max_running_requests_per_dp": self.engine.eff.max_running,
                # MODELLED: SGLang writes the mamba state cache it sized into the context after publishing (hybrid
                # models); here the smallest one that admits the running requests at its 5 slots per request
                **({"max_mamba_cache_size": self.engine.eff.max_running * 5} if self.engine.model.get("hybrid") else {}),
                # internal_state.py _add_disaggregation: the role and the decode graph sizes captured
                "disaggregation_mode": "null", "decode_cuda_graph_bs": self.engine.decode_graph_batch_sizes(),
                "decode_cuda_graph_memory_gb": round(sum(usage["graph"][phase] for phase in DECODE_GRAPH_PHASES), 3),
                **simulated_state(self.engine),
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
        request = self.engine.submit(text, body.get("sampling_params") or {})
        if body.get("stream"):
            error_after = int(self.engine.env.get("SGLANG_SIM_STREAM_ERROR_AFTER", "0"))
            abort_after = int(self.engine.env.get("SGLANG_SIM_STREAM_ABORT_AFTER", "0"))

            def chunk(ids_so_far, meta):
                if error_after and len(ids_so_far) >= error_after:  # http_server.py:957-975
                    return StopStream({"error": {"message": "SIMULATED FAULT (SGLANG_SIM_STREAM_ERROR_AFTER)",
                                                 "type": "invalid_request_error", "code": 400,
                                                 "retryable": False}})
                if abort_after and len(ids_so_far) >= abort_after:  # tokenizer_manager.py:1891-1922
                    return StopStream({"text": self.engine.text_of(ids_so_far), "output_ids": ids_so_far, "meta_info": {
                        **meta, "finish_reason": {"type": "abort", "message": "SIMULATED FAULT: aborted",
                                                  "status_code": 503}}})
                return {"text": self.engine.text_of(ids_so_far), "output_ids": ids_so_far, "meta_info": meta}
            return self.stream(request, chunk)
        meta = self.wait_done(request)
        self.send_json(200, {"text": self.engine.text_of(request.output_ids), "output_ids": request.output_ids,
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
        interval = max(1, int(self.server_args.get("stream_interval") or 1))  # SGLang's --stream-interval
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
        request = self.engine.submit(prompt, params)
        created, model_name = int(time.time()), body.get("model") or self.served_name
        object_name = "chat.completion" if chat else "text_completion"
        spec_details = bool(body.get("return_spec_tokens_details"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if body.get("stream"):
            sent = [0]

            def chunk(ids, meta):
                delta = self.engine.text_of(ids[sent[0]:])
                sent[0] = len(ids)
                done = "e2e_latency" in meta
                choice = {"index": 0, "finish_reason": meta["finish_reason"]["type"] if done else None}
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
        text = self.engine.text_of(request.output_ids)
        choice = {"index": 0, "finish_reason": meta["finish_reason"]["type"]}
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
        labels = f'model_name="{self.served_name}"'
        s = self.engine.stats
        lines = [
            "# HELP sglang:num_running_reqs The number of running requests.",
            "# TYPE sglang:num_running_reqs gauge",
            f"sglang:num_running_reqs{{{labels}}} {len(self.engine.running)}",
            "# TYPE sglang:gen_throughput gauge",
            f"sglang:gen_throughput{{{labels}}} {self.engine.last_gen_throughput}",
            "# TYPE sglang:spec_accept_length gauge",
            f"sglang:spec_accept_length{{{labels}}} {self.engine.avg_accept_length()}",
            "# TYPE sglang:is_cuda_graph gauge",
            f"sglang:is_cuda_graph{{{labels}}} {1.0 if self.engine.eff.decode_graphs else 0.0}",
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
            values = self.engine.histograms[key]
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



def handler_for(engine: Engine, server_args: dict, status: dict) -> type:
    """The request handler bound to one engine. server_args: what SGLang's /server_info serves before the runtime
    fields (resolved_dict() with the api key, and launch_command); status["up"] turns true after the warmup
    request, as ServerStatus.Up."""
    return type("BoundHandler", (Handler,), {
        "engine": engine, "server_args": server_args, "status": status, "api_key": server_args.get("api_key"),
        "auth_broken": engine.env.get("SGLANG_SIM_AUTH_BROKEN") == "1",
        "served_name": server_args.get("served_model_name") or server_args.get("model_path")})


def simulated_state(engine) -> dict:
    """How a simulated server says so in /server_info's internal state (both simulated servers)."""
    return {"simulated": True, "simulated_machine": engine.machine["name"], "simulated_model": engine.model["name"],
            "simulated_gpu": engine.machine["gpu"]}
