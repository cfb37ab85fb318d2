"""Runs inside a validator virtualenv that holds a pinned SGLang (no GPU dependencies).

Reads JSON lines from stdin: {"argvs": [[flag, value, ...], ...], "algorithms": [name, ...],
                               "resolve": {"argv": [...], "architectures": [...]} (optional)}
Writes JSON to stdout:
  {"sglang_version": ..., "actions": [...], "results": [{"ok": bool, "error": str|null}, ...],
   "algorithms": {name: error-or-null}, "resolution": {...} (when asked), "export": {...} (with "export": true:
   the table sglang_deploy/flag_table.py rebuilds the parser from)}

Every argv is parsed by SGLang's own ``ServerArgs.add_cli_args`` parser, so unknown, removed and
ambiguous flags fail exactly as they would at server start. Standard library + sglang only: this file
is executed by path (``python -P``: the folder of this file, which holds a ``profile.py``, must not
shadow the standard library's ``profile``), the ``sglang_deploy`` package is not installed there.

Resolution: the argv is parsed by SGLang's own ``prepare_server_args``, then SGLang's own resolution
hooks that run without a GPU and without the checkpoint are applied in the pipeline's order
(``handle_cuda_graph_config``, ``handle_speculative_decoding``), and the answer is SGLang's own
``ServerArgs.resolved_dict()`` -- the projection ``/server_info`` serves. The rest of SGLang's
``run_resolution_pipeline`` imports the GPU layer stack and reads the checkpoint: it runs only on a
GPU host; docs/conformance.md names the fields this leaves unresolved.
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


# The hooks this probe runs, in the order of run_resolution_pipeline (srt/arg_groups/pipeline.py).
RESOLUTION_HOOKS = (
    ("sglang.srt.arg_groups.cuda_graph_hook", "handle_cuda_graph_config"),
    ("sglang.srt.arg_groups.speculative_hook", "handle_speculative_decoding"),
)


class _CapturedLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def resolve(request):
    """SGLang's own parse + the GPU-free resolution hooks + resolved_dict() for one argv."""
    import importlib
    import types

    from sglang.srt.server_args import prepare_server_args

    try:
        server_args = prepare_server_args(list(request["argv"]))
    except SystemExit:  # argparse refused the argv: the parse results already say why
        return {"resolved": None, "hooks": [], "error": "SGLang's parser refuses the command line", "log": [],
                "architectures": list(request.get("architectures") or [])}
    # ``model_config_of`` (srt/arg_groups/model_override_base.py) hands back a configuration memoized on
    # the record without building one; it imports ModelConfig first, and that module pulls the GPU layer
    # stack. Only the checkpoint's architectures are read by the hooks run here (speculative_hook.py:
    # _handle_eagle_family), so the memo carries them, and the class import is satisfied without the stack.
    stub = types.ModuleType("sglang.srt.configs.model_config")
    stub.ModelConfig = type("ModelConfig", (), {})
    sys.modules.setdefault("sglang.srt.configs.model_config", stub)
    architectures = list(request.get("architectures") or ["UnknownForCausalLM"])
    server_args._model_config = types.SimpleNamespace(
        hf_config=types.SimpleNamespace(architectures=architectures), is_hybrid_swa=False)
    captured = _CapturedLog()
    logging.disable(logging.NOTSET)
    root = logging.getLogger()
    root.addHandler(captured)
    root.setLevel(logging.INFO)
    hooks, error = [], None
    try:
        for module, name in RESOLUTION_HOOKS:
            getattr(importlib.import_module(module), name)(server_args)
            hooks.append(f"{module}.{name}")
    except Exception as failure:  # noqa: BLE001 - SGLang's own refusal is the answer
        error = f"{type(failure).__name__}: {failure}"
    finally:
        root.removeHandler(captured)
        logging.disable(logging.CRITICAL)
    resolved = server_args.resolved_dict()
    for secret in ("api_key", "admin_api_key"):
        resolved.pop(secret, None)
    return {"resolved": json.loads(json.dumps(resolved, default=str)), "hooks": hooks, "error": error,
            "log": captured.lines, "architectures": architectures}


def main():
    """One JSON request per stdin line, one JSON answer per stdout line, until stdin closes."""
    logging.disable(logging.CRITICAL)
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import sglang
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        parser = ProbeParser(prog="sglang serve", add_help=False)
        ServerArgs.add_cli_args(parser)
        for line in sys.stdin:
            if line.strip():
                request = json.loads(line)
                reply = answer(request, sglang, parser, SpeculativeAlgorithm)
                if request.get("export"):
                    reply["export"] = export_table(sglang, parser, SpeculativeAlgorithm)
                if request.get("resolve"):
                    reply["resolution"] = resolve(request["resolve"])
                real_stdout.write(json.dumps(reply) + "\n")
                real_stdout.flush()


if __name__ == "__main__":
    main()
