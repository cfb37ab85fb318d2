"""SIMULATED: the one class of SGLang the simulated host replaces, ``sglang.srt.managers.scheduler.Scheduler``.

Everything around it is SGLang's own code: ``sglang serve``, the whole resolution, the HTTP server and its auth,
TokenizerManager (tokenizer, chat template, OpenAI layer, ``meta_info``), the detokenizer process, and
``run_scheduler_process`` (process title ``sglang::scheduler_TP<n>``, the pipe handshake, the exception path that
takes the whole server down). This class takes SGLang's place below that line: it reads requests from SGLang's
scheduler socket as SGLang's ``io_struct`` messages, runs them through the simulator's engine (engine.py: the
hardware model of hardware.py, continuous batching, speculative acceptance, the fault knobs) and sends
``BatchTokenIDOutput`` to SGLang's detokenizer, reports SGLang's scheduler metrics through SGLang's own
``SchedulerMetricsCollector`` and answers internal-state queries with SGLang's own helpers.

It is loaded through SGLang's plugin hook (entry point group ``sglang.srt.plugins``: ``register`` replaces the
class with HookRegistry REPLACE) in every process that loads plugins. Only TP rank 0 serves; the other ranks
exist, as the processes SGLang starts, and wait. What it models rather than runs: KV capacity, graph memory,
captured batch sizes, the model runner's start-up lines, crashes, OOM and all timing.
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import threading
import time
import types

from .engine import ANSWER_BASE, ANSWER_END, DECODE_GRAPH_PHASES, SGLANG_VERSION, WORDS, Engine, log
from .http_api import simulated_state
from .sglang_memory import sglang_capacity
from .startup import load_and_capture

# Token ids the synthetic checkpoint's tokenizer decodes as words (synthetic_checkpoint.py: 256 byte tokens, then
# one token per word of engine.WORDS).
WORD_TOKEN_BASE = 256
POLL_S = 0.002


class SimulatedFault(RuntimeError):
    """A planted fault (SGLANG_SIM_*): raised where SGLang's scheduler would raise, so SGLang's own
    run_scheduler_process logs it and takes the server down."""


def _fail(message: str) -> None:
    raise SimulatedFault(message)


class SimulatedScheduler:
    def __init__(self, server_args, port_args, *args, **kwargs):
        # deferred: optional, SGLang (zmq, transformers) is on the simulated host only
        import zmq
        from sglang.srt.observability.startup_time import build_scheduler_startup_time
        from sglang.srt.runtime_context import get_context, get_parallel
        from sglang.srt.utils.network import get_zmq_socket

        started = time.perf_counter()
        self.server_args = server_args
        self.tp_rank = get_parallel().tp_rank
        self.gracefully_exit = False
        self.async_d2h_worker = None
        self.metrics_reporter = types.SimpleNamespace(_shutdown_fpm=lambda: None)
        self.resolved = get_context().resolved_server_args_dict()
        self.env = dict(os.environ)
        self.engine = Engine(argparse.Namespace(enable_metrics=bool(server_args.enable_metrics)), self.env,
                             self.resolved)
        weights = (self.engine.model["weights_gib"] + self.engine.eff.draft_bytes / (1 << 30)) / self.engine.eff.tp
        self.engine.use_capacity(sglang_capacity(server_args, weights))
        if self.tp_rank == 0:
            log.info("SIMULATED scheduler (sglang-deploy): SGLang %s's front end, resolution and processes; the "
                     "GPU work is modelled (hardware model %s)", running_version(), self.engine.machine["name"])
            if server_args.speculative_adaptive and self.engine.model.get("hybrid"):
                _fail("RuntimeError: adaptive speculative decoding is not supported for hybrid GDN models "
                      "(illegal memory access)")
            self.usage = load_and_capture(self.engine, self.resolved, self.env, server_args.context_length, _fail)
            context = zmq.Context(2)
            self.receive = get_zmq_socket(context, zmq.PULL, port_args.scheduler_input_ipc_name, False)
            self.to_tokenizer = get_zmq_socket(context, zmq.PUSH, port_args.tokenizer_ipc_name, False)
            self.to_detokenizer = get_zmq_socket(context, zmq.PUSH, port_args.detokenizer_ipc_name, False)
        else:
            self.usage = self.engine.memory_usage()
        self.captured_bs = self._captured_decode_bs()
        self.startup_time = build_scheduler_startup_time(
            target_load_weight=0.0, draft_load_weight=0.0, kv_cache_allocation=0.0,
            scheduler_e2e=time.perf_counter() - started, target_cuda_graph=None, draft_cuda_graph=None)
        self.context_len = server_args.context_length or self.engine.model["context_length"]

    def _captured_decode_bs(self) -> list[int]:
        """The decode (with speculation: target verify) graph sizes, by SGLang's own get_batch_sizes_to_capture
        (runner/base_cuda_graph_runner.py) from the resolved decode.bs list, the request pool's size (the modelled
        effective max running requests) and the tokens per request; empty when no decode graph is captured."""
        if not self.engine.eff.decode_graphs:
            return []
        # deferred: optional, SGLang (zmq, transformers) is on the simulated host only
        from sglang.srt.model_executor.runner.base_cuda_graph_runner import get_batch_sizes_to_capture

        runner = types.SimpleNamespace(req_to_token_pool=types.SimpleNamespace(size=self.engine.eff.max_running),
                                       server_args=self.server_args)
        width = self.engine.eff.draft_tokens if self.engine.eff.spec_steps else 1
        return [int(size) for size in get_batch_sizes_to_capture(runner, width)[0]]

    def get_init_info(self):
        return {"status": "ready", "max_total_num_tokens": self.usage["token_capacity"],
                "max_req_input_len": min(self.context_len - 1, self.usage["token_capacity"] - 1) - 5, "startup_time": self.startup_time,
                "hicache_object_layout": None}

    def release_host_resources(self):
        pass

    # --- SGLang's messages ------------------------------------------------------------------------

    def _internal_state(self):
        # deferred: optional, SGLang (zmq, transformers) is on the simulated host only
        from sglang.srt.managers import io_struct as io
        from sglang.srt.managers.scheduler_components.memory_usage import build_memory_usage
        from sglang.srt.runtime_context import get_context, get_parallel
        from sglang.srt.utils.msgspec_utils import msgspec_to_builtins

        usage = self.engine.memory_usage()
        graph = usage["graph"]
        state = get_context().resolved_server_args_dict()
        state.update(
            world_size=get_parallel().tp_size, startup_time=self.startup_time,
            effective_max_running_requests_per_dp=self.engine.eff.max_running,
            # internal_state.py _add_disaggregation: the role, the decode sizes captured and their graph memory
            disaggregation_mode="null", decode_cuda_graph_bs=list(self.captured_bs),
            decode_cuda_graph_memory_gb=round(sum(graph[phase] for phase in DECODE_GRAPH_PHASES), 3),
            last_gen_throughput=self.engine.last_gen_throughput,
            avg_spec_accept_length=self.engine.avg_accept_length(), **simulated_state(self.engine),
            memory_usage=build_memory_usage(
                weight_gb=usage["weight"], kv_cache_gb=usage["kvcache"],
                startup_available_gb=usage["startup_available"], token_capacity=usage["token_capacity"],
                token_capacity_swa=None,
                target_graph_memory_usage={key: graph[key] for key in ("prefill", "decode", "target_verify")},
                draft_graph_memory_usage={key: graph[key] for key in ("draft_prefill", "draft_decode",
                                                                      "draft_extend")}))
        state.pop("custom_sigquit_handler", None)
        return io.GetInternalStateReqOutput(internal_state=msgspec_to_builtins(state))

    def run_event_loop(self):
        if self.tp_rank != 0:
            while not self.gracefully_exit:  # the other ranks exist; their parent's death ends them
                time.sleep(3600)
            return
        # deferred: optional, SGLang (zmq, transformers) is on the simulated host only
        from sglang.srt.managers import io_struct as io
        from sglang.srt.managers.io_struct import sock_recv, sock_send

        collector = self._collector()
        threading.Thread(target=self.engine.loop, daemon=True, name="engine").start()
        running: dict[str, dict] = {}
        last_stats = 0.0
        while not self.gracefully_exit:
            while self.receive.poll(0 if running else 100):
                message = sock_recv(self.receive)
                if isinstance(message, io.TokenizedGenerateReqInput):
                    running[message.rid] = self._submit(message)
                elif isinstance(message, io.GetInternalStateReq):
                    sock_send(self.to_tokenizer, self._internal_state())
                elif isinstance(message, io.AbortReq):
                    state = running.pop(message.rid, None)
                    if state is not None:
                        state["request"].max_new_tokens = len(state["request"].output_ids)  # stop generating
                elif isinstance(message, (io.FreezeGCReq, io.ConfigureLoggingReq)):
                    sock_send(self.to_detokenizer, message)  # as Scheduler.handle_freeze_gc / configure_logging
                elif isinstance(message, io.ShutdownReq):
                    self.gracefully_exit = True
                else:
                    logging.getLogger(__name__).warning("SIMULATED scheduler: %s is not modelled; ignored",
                                                        type(message).__name__)
            if running:
                output = self._drain(running)
                if output is not None:
                    sock_send(self.to_detokenizer, output)
            now = time.monotonic()
            if collector is not None and now - last_stats > 0.5:
                self._log_stats(collector, len(running))
                last_stats = now
            time.sleep(POLL_S if running else 0)

    # --- requests through the engine ----------------------------------------------------------------

    def _submit(self, message) -> dict:
        params = message.sampling_params
        text = message.input_text if isinstance(message.input_text, str) else self._decode(message.input_ids or [])
        health = str(message.rid).startswith("HEALTH_CHECK")
        request = self.engine.submit(text, {"max_new_tokens": params.max_new_tokens if params.max_new_tokens
                                            is not None else 128, "temperature": params.temperature},
                                     counted=not health)
        prompt = list(message.input_ids or [])
        surround = max(len(prompt) - 5, 0)  # INIT_INCREMENTAL_DETOKENIZATION_OFFSET
        return {"message": message, "request": request, "prompt": prompt, "surround": surround,
                "read_offset": len(prompt) - surround, "sent": 0, "done": None}

    def _decode(self, ids) -> str:
        """The prompt as text (the chat path sends only token ids), with the checkpoint's tokenizer, which SGLang's
        own scheduler loads too."""
        if getattr(self, "_tokenizer", None) is None:
            # deferred: optional, SGLang (zmq, transformers) is on the simulated host only
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.server_args.tokenizer_path or self.server_args.model_path)
        return self._tokenizer.decode(list(ids))

    def _end_token(self) -> int:
        if getattr(self, "_end", None) is None:
            self._decode([])
            self._end = self._tokenizer.convert_tokens_to_ids("<|im_end|>")
        return self._end

    def _drain(self, running: dict):
        # deferred: optional, SGLang (zmq, transformers) is on the simulated host only
        from sglang.srt.managers import io_struct as io

        rows = []
        for rid, state in list(running.items()):
            new = []
            try:
                while True:
                    kind, value = state["request"].events.get_nowait()
                    if kind == "tokens":
                        # a modelled answer's bytes are the byte-level tokenizer's byte tokens (ids 0-255)
                        new += [self._end_token() if token == ANSWER_END else token - ANSWER_BASE
                                if token >= ANSWER_BASE else WORD_TOKEN_BASE + token % len(WORDS) for token in value]
                    else:
                        state["done"] = value
            except queue.Empty:
                pass
            if new or state["done"]:
                rows.append((rid, state, new))
                if state["done"]:
                    running.pop(rid)
        if not rows:
            return None
        decode_ids, read_offsets, out_ids, finished, requests = [], [], [], [], []
        for rid, state, new in rows:
            first = state["sent"] == 0
            state["sent"] += len(new)
            decode_ids.append(state["prompt"][state["surround"]:] + new if first else new)
            read_offsets.append(state["read_offset"])
            out_ids.append(new)
            meta = state["done"]
            reason = dict(meta["finish_reason"]) if meta else None
            if reason and reason.get("type") == "stop":
                reason["matched"] = self._end_token()  # the stop token the answer ended with (trimmed by SGLang)
            finished.append(reason)
            requests.append(state)
        count = len(rows)
        empty = [[] for _ in rows]
        params = [state["message"].sampling_params for state in requests]
        return io.BatchTokenIDOutput(
            rids=[rid for rid, _, _ in rows], http_worker_ipcs=[state["message"].http_worker_ipc for state in requests],
            finished_reasons=finished, decoded_texts=[""] * count, decode_ids=decode_ids, read_offsets=read_offsets,
            output_ids=out_ids, skip_special_tokens=[p.skip_special_tokens for p in params],
            spaces_between_special_tokens=[p.spaces_between_special_tokens for p in params],
            no_stop_trim=[p.no_stop_trim for p in params], prompt_tokens=[len(state["prompt"]) for state in requests],
            reasoning_tokens=[0] * count, completion_tokens=[state["sent"] for state in requests],
            cached_tokens=[0] * count, input_token_logprobs_val=empty, input_token_logprobs_idx=empty,
            output_token_logprobs_val=empty, output_token_logprobs_idx=empty, input_top_logprobs_val=empty,
            input_top_logprobs_idx=empty, output_top_logprobs_val=empty, output_top_logprobs_idx=empty,
            input_token_ids_logprobs_val=empty, input_token_ids_logprobs_idx=empty,
            output_token_ids_logprobs_val=empty, output_token_ids_logprobs_idx=empty, output_token_entropy_val=None,
            output_token_sampling_mask=None, output_hidden_states=None, routed_experts=None, indexer_topk=None,
            placeholder_tokens_idx=None, placeholder_tokens_val=None, retraction_counts=[0] * count,
            spec_verify_ct=[state["request"].verify_ct for state in requests],
            spec_num_correct_drafts=[max(state["sent"] - state["request"].verify_ct, 0) for state in requests],
            spec_correct_drafts_histogram=[list(state["request"].correct_drafts_histogram) for state in requests],
            dp_ranks=[0] * count)

    # --- SGLang's own scheduler metrics ---------------------------------------------------------------

    def _collector(self):
        if not self.server_args.enable_metrics:
            return None
        # deferred: optional, SGLang (zmq, transformers) is on the simulated host only
        from sglang.srt.observability.metrics_collector import SchedulerMetricsCollector
        from sglang.srt.runtime_context import get_parallel

        parallel = get_parallel()
        self._graph_passes = {"graph_passes": 0, "eager_passes": 0}
        return SchedulerMetricsCollector(
            labels={"model_name": self.server_args.served_model_name, "engine_type": "unified",
                    "tp_rank": parallel.tp_rank, "pp_rank": parallel.pp_rank, "moe_ep_rank": parallel.moe_ep_rank},
            server_args=self.server_args)

    def _log_stats(self, collector, running: int) -> None:
        # deferred: optional, SGLang (zmq, transformers) is on the simulated host only
        from sglang.srt.observability.metrics_collector import QueueCount, SchedulerStats

        stats = self.engine.stats
        for key, graph in (("graph_passes", True), ("eager_passes", False)):
            for _ in range(stats[key] - self._graph_passes[key]):
                collector.increment_decode_cuda_graph_pass(graph)
            self._graph_passes[key] = stats[key]
        collector.log_stats(SchedulerStats(num_running_reqs=QueueCount(total=running),
                                           gen_throughput=self.engine.last_gen_throughput,
                                           spec_accept_length=self.engine.avg_accept_length()))


def running_version() -> str:
    """The SGLang release whose front end loaded this plugin (its own version module), else the simulator's."""
    try:
        # deferred: optional, SGLang (zmq, transformers) is on the simulated host only
        from sglang.version import __version__
    except ImportError:
        return SGLANG_VERSION
    return __version__


def register() -> None:
    """Entry point (group sglang.srt.plugins): SGLang calls it in every process that loads plugins."""
    # deferred: optional, SGLang (zmq, transformers) is on the simulated host only
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler", SimulatedScheduler, hook_type=HookType.REPLACE)
