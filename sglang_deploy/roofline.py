"""Bandwidth roofline for speculative decode: the arithmetic lives in hostside/lib/roofline.py (standard library
only), so the perf watch on the host computes the same bound as the doctor on the controller."""

import re

from .hostside.contract.release import Roofline
from .hostside.lib.roofline import DATASHEET_GBS, datasheet_bandwidth, per_gpu_bytes, roofline  # noqa: F401


def model_gpu(environment: dict) -> str | None:
    """The GPU whose bandwidth bounds decode on a simulated host: the hardware model's (SGLANG_SIM_MACHINE,
    sim/data/); None when unknown."""
    # deferred: 4.6 ms (sim.hardware) on every deploy, for a new release's gate only
    from .sim.hardware import load_data

    name = str(environment.get("SGLANG_SIM_MACHINE", "2xa6000-pcie"))
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        return None
    try:
        return load_data(name)["gpu"]
    except (OSError, ValueError, KeyError):
        return None


def reported_gpu(gpu_facts: dict | None) -> str | None:
    """The GPU whose bandwidth bounds decode on a real host: nvidia-smi's first GPU (the GpuHost fact); None when
    unknown."""
    return ((gpu_facts or {}).get("gpus") or [{}])[0].get("name")


def release_inputs(resolved: dict, model_path: str, gpu_name: str | None) -> Roofline:
    """roofline.json, written into a release when it is staged: what the controller knows of the bound (the
    GPU and its datasheet bandwidth, TP, draft steps, the checkpoint's path). The perf watch on the host adds
    the checkpoint's bytes (safetensors headers) and its measured acceptance length, and exports
    decode / roofline; a bandwidth the doctor's GPU probe measured for the release replaces the datasheet's."""
    algorithm = resolved.get("speculative_algorithm")
    bandwidth = datasheet_bandwidth(gpu_name)
    return Roofline(gpu=gpu_name, bandwidth_gbs=bandwidth,
                    bandwidth_source=f"datasheet ({gpu_name})" if bandwidth else f"unknown GPU {gpu_name!r}",
                    tp=int(resolved.get("tp_size") or 1), algorithm=algorithm,
                    steps=int(resolved.get("speculative_num_steps") or 0) if algorithm else 0, model_path=model_path,
                    draft_path=separate_draft(resolved) if algorithm else None)


def separate_draft(info: dict) -> str | None:
    """The draft model's path when it is a model of its own; None when SGLang drafts with the target's own layers
    (EAGLE's MTP fill-in for DeepSeek-V3 and GLM-MoE sets the draft path to the model path)."""
    path = info.get("speculative_draft_model_path")
    return path if path and path != info.get("model_path") else None
