"""What SGLang itself resolves for the exact command line a release ships: one document, several readers.

The release ships it as ``resolved.json``, the gate's expectations are read from it, and the rules read it: the
values come from the pinned SGLang's own parser and its whole resolution (``ServerArgs.resolve_once()``, every
step of ``run_resolution_pipeline``) with the checkpoint's ``config.json`` and the target's GPU facts, run in
the validator environment (validate/parser_probe.py) and cached by content (validator_env.probe_cached).

What SGLang decides only after resolution, on the GPU (KV capacity, captured graph sizes, the custom all-reduce
choice), is not in it; docs/conformance.md lists those fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .. import drafter
from ..profile.problem import Problem
from . import gpu_facts, validator_env

# /server_info fields the gate compares with the running server, besides the decode graph backend.
COMPARED_FIELDS = ("tp_size", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                   "speculative_num_draft_tokens", "speculative_draft_model_path", "max_running_requests",
                   "disable_custom_all_reduce")
REPO_ROOT = Path(__file__).resolve().parents[2]


class ModelConfigError(ValueError):
    pass


def config_path(value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else REPO_ROOT / path


def load_model_config(value: str) -> dict:
    """The checkpoint's config.json named by model.config (relative to the repository, or absolute)."""
    path = config_path(value)
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelConfigError(f"{value} does not exist (expected the checkpoint's config.json; "
                               "`sglang-deploy manifest` writes it beside the weights manifest)") from None
    except ValueError as error:
        raise ModelConfigError(f"{value} is not JSON: {error}") from None
    if not isinstance(config, dict) or not isinstance(config.get("architectures"), list):
        raise ModelConfigError(f"{value} has no `architectures` list: not a checkpoint's config.json")
    return config


def model_config_problems(profile) -> tuple[list[Problem], dict | None]:
    """The checkpoint's config.json, which SGLang's resolution reads (ModelConfig), and its agreement with
    model.architecture."""
    if profile.model.config is None:
        return [Problem("model-config", ("model",),
                        "model.config is required for SGLang's resolution, which reads the checkpoint's config.json "
                        "(ModelConfig: architecture, layers, quantization); write `config: <path of the "
                        "checkpoint's config.json>` (`sglang-deploy manifest` writes it beside the manifest)")], None
    try:
        config = load_model_config(profile.model.config)
    except ModelConfigError as error:
        return [Problem("model-config", ("model", "config"), str(error))], None
    declared, found = profile.model.architecture, (config["architectures"] or [None])[0]
    if declared is not None and declared != found:
        return [Problem("model-config", ("model", "architecture"),
                        f"model.architecture is {declared} but {profile.model.config} says {found}; "
                        "accepted: the config's architectures[0], or leave model.architecture out")], config
    return [], config


# What the tool sets in every unit (render.base_environment) that is not a path on the host: an input of the
# resolution like the profile's environment. The paths (HOME, PATH, CUDA_HOME, the cache directories) stay the
# validator's own: they name directories of the host, not settings SGLang's resolution decides by.
TOOL_RESOLUTION_ENV = {"HF_HUB_OFFLINE": "1"}


def resolution_environment(profile_env: dict[str, str], node_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment SGLang's resolution runs under: the tool's settings, a node's, then the profile's (the unit's
    order: render.render). The controller's own environment is never part of it (sglang_resolution.MACHINERY)."""
    return {**TOOL_RESOLUTION_ENV, **(node_env or {}), **{str(k): str(v) for k, v in profile_env.items()}}


def request(argv: list[str], model_config: dict, gpu: gpu_facts.GpuModel, count: int,
            draft_config: dict | None = None, environment: dict[str, str] | None = None) -> dict:
    """A draft model's config.json (DFLASH reads its block size there) is an input like the target's, and so is the
    unit's environment (SGLang's hooks read SGLANG_* variables while resolving): both are part of the answer's
    cache key, since the request is."""
    out = {"argv": list(argv), "model_config": model_config, "gpu_facts": gpu_facts.facts_json(gpu, count),
           "environment": resolution_environment(environment or {})}
    if draft_config is not None:
        out["draft_config"] = draft_config
    return out


def document(version: str, argv: list[str], answer: dict) -> dict:
    """{sglang_version, argv, resolved, steps, step, log, error, gpu} from a probe answer."""
    resolution = dict(answer["resolution"])
    return {"sglang_version": version, "argv": list(argv), **resolution}


def resolve_argv(version: str, argv: list[str], model_config: dict, gpu: gpu_facts.GpuModel, count: int,
                 draft_config: dict | None = None, environment: dict[str, str] | None = None) -> dict:
    answer = validator_env.probe_cached(version, [argv], [],
                                        resolve=request(argv, model_config, gpu, count, draft_config, environment))
    return document(version, argv, answer)



@dataclass
class Answer:
    """SGLang's answer for a profile's command line on the full path (check_profile's stage): its parser's (the
    probe's option table, verdict on the command line and on the speculative algorithm), the resolution document,
    and the checkpoint's config.json it read, with the problems of reading it."""
    parser: dict
    document: dict
    config: dict | None
    problems: list[Problem]


def answer(profile, argv: list[str], algorithms: list[str], gpu: gpu_facts.GpuModel, count: int,
           environment: dict[str, str]) -> Answer:
    """The parser and, where the checkpoint's config.json reads, SGLang's whole resolution for `argv` under `count`
    of `gpu` and the unit's `environment` (the profile's env_values), answered by the validator environment of the
    profile's SGLang version (validator_env.probe_cached: cached by content). Without a config no resolution runs:
    the document says nothing resolved and no error."""
    version = profile.sglang.version
    problems, config = model_config_problems(profile)
    if config is None:
        return Answer(validator_env.probe_cached(version, [argv], algorithms), {"resolved": None, "error": None},
                      None, problems)
    probe = validator_env.probe_cached(version, [argv], algorithms,
                                       resolve=request(argv, config, gpu, count, drafter.resolution_config(profile),
                                                       environment))
    found = {**document(version, argv, probe), "gpu": {"model": gpu.name, "count": count},
             "model_config": profile.model.config}
    return Answer(probe, found, config, problems)
