"""The GPU facts SGLang's resolution reads, for the platform stand-in (gpu_standin/standin.py).

SGLang resolves several fields from the GPU it runs on (the attention backend from the compute capability, the
chunked-prefill size and graph batch sizes from the memory bracket, ...). Where the tool runs SGLang's resolution
without that GPU (the controller, CI), it states the target's facts: from a host's nvidia-smi facts on a deploy,
from `--gpu-model` (default: the reference target's RTX A6000) on a `check`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GpuModel:
    key: str
    name: str  # as nvidia-smi and torch name it
    capability: tuple[int, int]
    total_bytes: int  # torch.cuda.get_device_properties().total_memory
    smi_memory_mib: int  # nvidia-smi --query-gpu=memory.total (MiB)
    sms: int


# Figures as the cards report them (torch's total_memory is below nvidia-smi's memory.total by the driver's
# reservation). Only these decide resolution: name, capability and the memory bracket.
KNOWN = {
    "a6000": GpuModel("a6000", "NVIDIA RTX A6000", (8, 6), 51_041_271_808, 49_140, 84),
    "a100-80g": GpuModel("a100-80g", "NVIDIA A100-SXM4-80GB", (8, 0), 84_974_239_744, 81_920, 108),
    "l40s": GpuModel("l40s", "NVIDIA L40S", (8, 9), 47_697_362_944, 46_068, 142),
    "h100": GpuModel("h100", "NVIDIA H100 80GB HBM3", (9, 0), 85_017_755_648, 81_559, 132),
    "h200": GpuModel("h200", "NVIDIA H200", (9, 0), 150_754_820_096, 143_771, 132),
}
DEFAULT_MODEL = "a6000"  # CT129's cards


class GpuFactsError(ValueError):
    pass


def model(key: str) -> GpuModel:
    try:
        return KNOWN[key]
    except KeyError:
        raise GpuFactsError(f"unknown GPU model {key!r}; known: {', '.join(KNOWN)}") from None


def from_host_gpus(gpus: list[dict]) -> GpuModel | None:
    """The model of a host's GPUs from its nvidia-smi facts (hostfacts.parse_gpus); None when none is visible.
    A card this table does not know is an error naming it (its resolution facts would be guesses)."""
    names = {gpu.get("name") for gpu in gpus or [] if gpu.get("name")}
    if not names:
        return None
    if len(names) > 1:
        raise GpuFactsError(f"the host has mixed GPU models ({', '.join(sorted(map(str, names)))}); "
                            "SGLang's resolution needs one model per server")
    name = names.pop()
    for known in KNOWN.values():
        if known.name == name:
            return known
    raise GpuFactsError(f"the host's GPU {name!r} is not in the resolution stand-in's table "
                        f"(sglang_deploy/validate/gpu_facts.py; known: {', '.join(k.name for k in KNOWN.values())})")


def facts_json(gpu: GpuModel, count: int) -> str:
    """$SGLANG_DEPLOY_GPU_FACTS for the stand-in: `count` cards of this model."""
    facts = {**asdict(gpu), "capability": list(gpu.capability), "count": int(count)}
    return json.dumps(facts, sort_keys=True)
