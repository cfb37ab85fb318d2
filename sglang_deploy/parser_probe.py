"""Runs inside a validator virtualenv that holds a pinned SGLang (no GPU dependencies).

Reads JSON lines from stdin: {"argvs": [[flag, value, ...], ...], "algorithms": [name, ...],
                               "resolve": {"argv": [...], "model_config": {...}, "gpu_facts": "..."} (optional)}
Writes JSON to stdout:
  {"sglang_version": ..., "actions": [...], "results": [{"ok": bool, "error": str|null}, ...],
   "algorithms": {name: error-or-null}, "resolution": {...} (when asked), "export": {...} (with "export": true:
   the table sglang_deploy/flag_table.py rebuilds the parser from)}

Every argv is parsed by SGLang's own ``ServerArgs.add_cli_args`` parser, so unknown, removed and
ambiguous flags fail exactly as they would at server start. Standard library + sglang only: this file
is executed by path (``python -P``: the folder of this file, which holds a ``profile.py``, must not
shadow the standard library's ``profile``), the ``sglang_deploy`` package is not installed there.

Resolution: the argv is parsed by SGLang's own ``prepare_server_args`` and resolved by SGLang's own
``ServerArgs.resolve_once()``, every step of ``run_resolution_pipeline``, with the checkpoint's ``config.json``
in a directory standing in for the model path, and under the target's GPU facts: the process is started with
the GPU stand-in (gpu_standin/: torch.cuda facts installed before SGLang is imported, a stub libcuda.so.1 so that
SGLang's kernel package imports, an nvidia-smi that answers from the facts). The answer is SGLang's own
``ServerArgs.resolved_dict()`` -- the projection ``/server_info`` serves -- or the step that refused and its
message.
"""

import argparse
import contextlib
import io
import json
import logging
import sys


class ParseFailure(Exception):
    pass


class ProbeParser(argparse.ArgumentParser):
    def error(self, message):  # argparse calls this instead of exiting when parsing fails
        raise ParseFailure(message)


def describe(action):
    kind = {
        "_StoreTrueAction": "store_true",
        "_StoreFalseAction": "store_false",
        "DeprecatedStoreTrueAction": "store_true",
    }.get(type(action).__name__, "store")
    if action.nargs == 0 and kind == "store":
        kind = "store_true"
    return {
        "options": list(action.option_strings),
        "dest": action.dest,
        "kind": kind,
        "nargs": action.nargs if isinstance(action.nargs, (int, str, type(None))) else str(action.nargs),
        "choices": ([str(c) for c in (sorted(action.choices, key=str) if isinstance(action.choices, (set, frozenset))
                                       else action.choices)] if action.choices else None),
        "type": getattr(action.type, "__name__", None) if action.type else None,
        "deprecated": "Deprecated" in type(action).__name__,
        "default": action.default if isinstance(action.default, (bool, int, float, str, type(None))) else str(action.default),
        "required": bool(action.required),
    }


def export_table(sglang, parser, SpeculativeAlgorithm):
    """What the light check (sglang_deploy/flag_table.py) needs to rebuild this parser without SGLang: the
    option table, the speculative algorithm names from_string accepts, and the data SGLang's own argparse
    type functions check against."""
    from sglang.srt.model_executor import cuda_graph_config
    from sglang.srt.speculative import spec_info

    names = [member.name for member in SpeculativeAlgorithm] + sorted(getattr(spec_info, "_RESERVED_ALIASES", ()))
    accepted = []
    for name in names:
        try:
            SpeculativeAlgorithm.from_string(name)
            accepted.append(name)
        except Exception:  # noqa: BLE001
            pass
    return {
        "sglang_version": getattr(sglang, "__version__", None),
        "actions": [describe(a) for a in parser._actions if a.option_strings],
        "speculative_algorithms": sorted(set(accepted)),
        "cuda_graph_config": {"phases": list(cuda_graph_config.Phase.ALL),
                              "allowed_keys": {k: list(v) for k, v in cuda_graph_config.ALLOWED_KEYS_PER_PHASE.items()}},
    }


def answer(request, sglang, parser, SpeculativeAlgorithm):

    results = []
    for argv in request.get("argvs", []):
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                parser.parse_args(argv)
            results.append({"ok": True, "error": None})
        except ParseFailure as failure:
            results.append({"ok": False, "error": str(failure)})

    algorithms = {}
    for name in request.get("algorithms", []):
        try:
            SpeculativeAlgorithm.from_string(name)
            algorithms[name] = None
        except Exception as error:  # noqa: BLE001 - the message is the answer
            algorithms[name] = str(error)

    return {
        "sglang_version": getattr(sglang, "__version__", None),
        "actions": [describe(a) for a in parser._actions if a.option_strings],
        "results": results,
        "algorithms": algorithms,
    }


def _resolution_module():
    """hostside/sglang_resolution.py, by path: the one home of the resolution, shared with the host's preflight."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostside", "sglang_resolution.py")
    spec = importlib.util.spec_from_file_location("sglang_deploy_resolution", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install_gpu_standin():
    """The target's GPU facts, before SGLang is imported (it caches what it reads of the platform)."""
    import os
    import runpy

    path = os.environ.get("SGLANG_DEPLOY_GPU_STANDIN")
    if not path:
        return None
    return runpy.run_path(path)["install"]()


def main():
    """One JSON request per stdin line, one JSON answer per stdout line, until stdin closes."""
    logging.disable(logging.CRITICAL)
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        gpu = install_gpu_standin()
        import sglang
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        if gpu is not None:
            # flashinfer is a pinned dependency of every sglang install (flashinfer_python==0.7.2); the validator
            # env leaves out its 600 MB and states the fact SGLang derives from it (runtime_context.py).
            from sglang.srt.runtime_context import override_platform

            override_platform(has_flashinfer=True).install()
        parser = ProbeParser(prog="sglang serve", add_help=False)
        ServerArgs.add_cli_args(parser)
        for line in sys.stdin:
            if line.strip():
                request = json.loads(line)
                reply = answer(request, sglang, parser, SpeculativeAlgorithm)
                if request.get("export"):
                    reply["export"] = export_table(sglang, parser, SpeculativeAlgorithm)
                if request.get("resolve"):
                    if gpu is None:
                        raise SystemExit("a resolution needs the GPU stand-in (SGLANG_DEPLOY_GPU_FACTS)")
                    reply["resolution"] = _resolution_module().resolve(request["resolve"])
                real_stdout.write(json.dumps(reply) + "\n")
                real_stdout.flush()


if __name__ == "__main__":
    main()
