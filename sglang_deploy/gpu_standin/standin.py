"""The target's GPU facts for SGLang running where there is no GPU: installed into ``torch.cuda`` before SGLang
is imported, so SGLang's own code takes the CUDA path the target host takes (is_cuda(), the platform's memory
brackets, the attention backend for the compute capability ...).

Standard library + torch only; runs inside an SGLang environment (the validator environment's probe, or the
simulated host's front end). The facts come from $SGLANG_DEPLOY_GPU_FACTS, JSON written by
sglang_deploy/gpu_facts.py: {"name", "capability": [major, minor], "total_bytes", "count", "sms",
"smi_memory_mib"}. Three patches are required (is_available, get_device_properties, current_device: dropping any
one makes resolution fail); the rest state the same facts for whoever asks. Nothing here can run GPU work.
"""

import json
import os
import types

FACTS_ENV = "SGLANG_DEPLOY_GPU_FACTS"


def facts() -> dict | None:
    text = os.environ.get(FACTS_ENV)
    return json.loads(text) if text else None


def install(gpu: dict | None = None) -> dict | None:
    gpu = gpu or facts()
    if not gpu:
        return None
    # deferred: optional, torch is in the validator's virtualenv only, not the controller's
    import torch

    capability = tuple(gpu["capability"])
    total = int(gpu["total_bytes"])
    free = total - (600 << 20)  # an idle card: the context and driver take about 600 MiB

    def properties(device=None):
        return types.SimpleNamespace(
            name=gpu["name"], major=capability[0], minor=capability[1], total_memory=total,
            multi_processor_count=int(gpu.get("sms", 84)), is_integrated=False, is_multi_gpu_board=False,
            L2_cache_size=6 << 20, warp_size=32, max_threads_per_multi_processor=1536, regs_per_multiprocessor=65536,
            shared_memory_per_block_optin=101376, uuid="GPU-00000000-0000-0000-0000-000000000000", pci_bus_id=0,
            pci_device_id=0, pci_domain_id=0, gcnArchName="", clock_rate=1800000, memory_clock_rate=8001000,
            memory_bus_width=384)

    patches = {
        "is_available": lambda: True,
        "device_count": lambda: int(gpu["count"]),
        "get_device_capability": lambda device=None: capability,
        "get_device_name": lambda device=None: gpu["name"],
        "get_device_properties": properties,
        "mem_get_info": lambda device=None: (free, total),
        "current_device": lambda: 0,
    }
    for name, fn in patches.items():
        setattr(torch.cuda, name, fn)
    return gpu
