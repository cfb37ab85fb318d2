"""SGLang's own memory arithmetic for the modelled Scheduler (sglang_scheduler.py), in SGLang's scheduler
process: the KV pool, the mamba state cache and its per-draft-token intermediate SSM scratch, and the cap on running
requests, computed by SGLang's ``KVCacheConfigurator`` (mem_cache/kv_cache_configurator.py) and its pool
configurator from the checkpoint's ``config.json`` (SGLang's ``ModelConfig``), the resolved server args (the
published runtime context) and the speculative aux config SGLang derives (``resolve_spec_aux_hidden_state_config``).

What is modelled, and only that: the memory the card reports free once the weights are loaded
(``get_available_gpu_memory``, here what the platform reports free before the load, ``torch.cuda.mem_get_info``
answered by the GPU stand-in from the host's GPU facts, less the weights' bytes per GPU, target and draft); no KV
tensor is allocated (the pools are not initialised: ``configure`` would), and the multi-GPU world group is a
placeholder (the size is read per rank, as SGLang does with TP; nothing is reduced across ranks).
"""

from __future__ import annotations

import dataclasses
import inspect
import types

GIB = 1 << 30


def sglang_capacity(server_args, weights_gib: float) -> dict:
    """{max_total_num_tokens, max_running_requests, max_mamba_cache_size, mamba_ratio, kv_budget_gib} as SGLang's
    ``_resolve_memory_pool_config`` derives them before it allocates; max_mamba_cache_size is also written where
    SGLang writes it (the runtime context's post-publish override, which internal_states then serves)."""
    # deferred: optional, SGLang and torch are on the simulated host only
    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.mem_cache import kv_cache_configurator as kcc
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.runtime_context import get_context, get_parallel, get_schedule
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    resolved = get_context().resolved_server_args_dict()
    model_config = ModelConfig.from_server_args(server_args)
    algorithm = SpeculativeAlgorithm.from_string(resolved.get("speculative_algorithm"))
    aux = resolve_spec_aux_hidden_state_config(server_args=server_args, model_config=model_config,
                                               spec_algorithm=algorithm, is_draft_worker=False)
    kv_dtype = resolved.get("kv_cache_dtype")
    free_gib = torch.cuda.mem_get_info()[0] / GIB  # before the weights load: SGLang's pre_model_load_memory
    layers = model_config.num_hidden_layers
    real_available = kcc.get_available_gpu_memory
    kcc.get_available_gpu_memory = lambda *args, **kwargs: free_gib - weights_gib  # MODELLED: after weight load
    try:
        with get_parallel().override(world_group=types.SimpleNamespace(cpu_group=None)):
            arguments = dict(
                device="cuda", gpu_id=0, attn_dp_size=get_parallel().attn_dp_size, pp_size=1, pp_group=None,
                model=None, model_config=model_config, server_args=server_args,
                kv_cache_dtype=model_config.dtype if kv_dtype in (None, "auto") else _kv_dtype(torch, kv_dtype),
                kv_cache_dtype_str=kv_dtype, model_dtype=model_config.dtype,
                page_size=resolved.get("page_size") or 1, sliding_window_size=None, spec_algorithm=algorithm,
                is_draft_worker=False, post_capture_kv_active=False, spec_aux_config=aux,
                draft_parallel_layout=None, is_hybrid_swa=False, is_hybrid_swa_compress=False,
                use_mla_backend=False,
                layer_info=types.SimpleNamespace(start_layer=0, end_layer=layers, num_effective_layers=layers,
                                                 is_hybrid_swa_mtp_draft=False, swa_attention_layer_ids=[]),
                forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None,
                memory_pool_config=None)
            # The release's own configurator takes the arguments it declares: an older release lacks a newer
            # field (draft_parallel_layout); a field it requires and this list lacks still fails here.
            configurator = kcc.KVCacheConfigurator(**_accepted(kcc.KVCacheConfigurator, arguments))
            budget = configurator._profile_available_bytes(free_gib)
            config = configurator.config_from_budget(budget)
            running = configurator.resolve_max_num_reqs(config.max_total_num_tokens)
            ratio = configurator._calculate_mamba_ratio() if configurator.mambaish_config is not None else None
    finally:
        kcc.get_available_gpu_memory = real_available
    return {"max_total_num_tokens": int(config.max_total_num_tokens), "max_running_requests": int(running),
            "max_mamba_cache_size": get_schedule().max_mamba_cache_size, "mamba_ratio": ratio,
            "kv_budget_gib": round(budget / GIB, 3), "free_before_load_gib": round(free_gib, 3)}


def _accepted(cls, arguments: dict) -> dict:
    """The arguments `cls` (a dataclass, else any callable) declares."""
    names = ({f.name for f in dataclasses.fields(cls) if f.init} if dataclasses.is_dataclass(cls)
             else set(inspect.signature(cls).parameters))
    return {name: value for name, value in arguments.items() if name in names}


def _kv_dtype(torch, name: str):
    return {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2, "bf16": torch.bfloat16,
            "bfloat16": torch.bfloat16, "float16": torch.float16}.get(name, torch.bfloat16)
