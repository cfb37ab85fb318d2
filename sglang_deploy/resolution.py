"""What SGLang itself resolves for the exact command line a release ships: one document, two readers.

The simulator serves it as ``/server_info`` (shipped with the release as ``resolved.json``) and the
gate's expectations are read from it, so the two cannot drift from each other or from SGLang: the
values come from the pinned SGLang's own parser, its GPU-free resolution hooks and its
``ServerArgs.resolved_dict()`` (see parser_probe.py), run in the validator environment and cached by
content (validator_env.probe_cached).

Fields SGLang resolves only on a GPU host (the rest of ``run_resolution_pipeline``) are listed with
their source lines in docs/conformance.md; the gate never compares them.
"""

from __future__ import annotations

from . import validator_env

# /server_info fields the gate compares with the running server, besides the decode graph backend.
# Each is produced by SGLang's parser or by a hook this project runs (parser_probe.RESOLUTION_HOOKS).
COMPARED_FIELDS = ("tp_size", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                   "speculative_num_draft_tokens", "max_running_requests", "disable_custom_all_reduce")


def request(argv: list[str], architectures: list[str] | None) -> dict:
    return {"argv": list(argv), "architectures": list(architectures or [])}


def document(version: str, argv: list[str], answer: dict) -> dict:
    """{sglang_version, argv, architectures, resolved, hooks, log, error} from a probe answer."""
    return {"sglang_version": version, "argv": list(argv), **answer["resolution"]}


def resolve_argv(version: str, argv: list[str], architectures: list[str] | None = None) -> dict:
    answer = validator_env.probe_cached(version, [argv], [], resolve=request(argv, architectures))
    return document(version, argv, answer)


def decode_backend(resolved: dict) -> str | None:
    """The decode CUDA graph backend after SGLang's folding of every graph flag (cuda_graph_hook.py)."""
    return ((resolved.get("cuda_graph_config") or {}).get("decode") or {}).get("backend")
