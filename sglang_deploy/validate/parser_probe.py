"""Runs inside a validator virtualenv that holds a pinned SGLang (no GPU dependencies).

A server on a Unix socket (serve(): started and shared by the controller's processes, validate/validator_env.py). Each
connection sends one JSON line: {"argvs": [[flag, value, ...], ...], "algorithms": [name, ...],
                                 "resolve": {"argv": [...], "model_config": {...}, "gpu_facts": "..."} (optional)}
and reads one JSON line back:
  {"sglang_version": ..., "actions": [...], "results": [{"ok": bool, "error": str|null}, ...],
   "algorithms": {name: error-or-null}, "resolution": {...} (when asked), "export": {...} (with "export": true:
   the table sglang_deploy/validate/flag_table.py rebuilds the parser from)}

Every argv is parsed by SGLang's own ``ServerArgs.add_cli_args`` parser, so unknown, removed and
ambiguous flags fail exactly as they would at server start. Standard library + sglang only: this file
is executed by path (``python -P``: the folder of this file, which holds a ``profile`` package, must not
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
import importlib.util
import io
import json
import logging
import os
import runpy
import signal
import socket
import sys
import traceback


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
    """What the light check (sglang_deploy/validate/flag_table.py) needs to rebuild this parser without SGLang: the
    option table, the speculative algorithm names from_string accepts, and the data SGLang's own argparse
    type functions check against."""
    # deferred: optional, SGLang is in the validator's virtualenv only
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
    """hostside/lib/sglang_resolution.py, by path: the one home of the resolution, shared with the host's preflight."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # sglang_deploy/
    path = os.path.join(package, "hostside", "lib", "sglang_resolution.py")
    spec = importlib.util.spec_from_file_location("sglang_deploy_resolution", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install_gpu_standin():
    """The target's GPU facts, before SGLang is imported (it caches what it reads of the platform)."""
    path = os.environ.get("SGLANG_DEPLOY_GPU_STANDIN")
    if not path:
        return None
    return runpy.run_path(path)["install"]()


def load():
    """SGLang's parser, once per process: the GPU facts are installed before SGLang is imported (it caches what it
    reads of the platform). Returns what reply() needs."""
    gpu = install_gpu_standin()
    # deferred: optional, SGLang is in the validator's virtualenv only
    import sglang
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    if gpu is not None:
        # flashinfer is a pinned dependency of every sglang install (flashinfer_python==0.7.2): the layer installs
        # it (without its CUDA dependencies) so that the hooks that import its modules (mamba_hook.py) find them
        # as on the host, and the fact SGLang derives from it on a GPU is stated (runtime_context.py).
        # deferred: optional, SGLang is in the validator's virtualenv only
        from sglang.srt.runtime_context import override_platform

        override_platform(has_flashinfer=True).install()
    parser = ProbeParser(prog="sglang serve", add_help=False)
    ServerArgs.add_cli_args(parser)
    return {"gpu": gpu, "sglang": sglang, "parser": parser, "algorithm": SpeculativeAlgorithm}


def reply(request, loaded):
    answer_ = answer(request, loaded["sglang"], loaded["parser"], loaded["algorithm"])
    if request.get("export"):
        answer_["export"] = export_table(loaded["sglang"], loaded["parser"], loaded["algorithm"])
    if request.get("resolve"):
        if loaded["gpu"] is None:
            raise SystemExit("a resolution needs the GPU stand-in (SGLANG_DEPLOY_GPU_FACTS)")
        answer_["resolution"] = _resolution_module().resolve(request["resolve"])
    return answer_


def _answer_connection(connection, loaded):
    """In a fork of the server: one request line in, one answer line out. A failure of the probe itself is
    answered as {"probe_error": traceback}, so that the client reports it instead of asking again."""
    with connection, connection.makefile("rw", encoding="utf-8") as stream:
        line = stream.readline()
        try:
            out = reply(json.loads(line), loaded)
        except BaseException:  # noqa: BLE001 - the traceback is the answer
            out = {"probe_error": traceback.format_exc()[-4000:]}
        stream.write(json.dumps(out) + "\n")
        stream.flush()


def serve(path, idle_s):
    """The shared server (validator_env's client starts it, one per SGLang version and GPU facts): SGLang is
    imported once, a warm-up request (one line on stdin, from the client that started it) is resolved once so that
    the modules SGLang imports on its first resolution are loaded, and then every connection to the Unix socket at
    `path` is answered in a fork of this process, so no request sees another's state. Exits after idle_s seconds
    without a connection, or on SIGTERM; the socket is removed either way (if it is still this server's)."""
    logging.disable(logging.CRITICAL)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        loaded = load()
        warm = sys.stdin.readline().strip()
        if warm:
            try:
                reply(json.loads(warm), loaded)
            except BaseException:  # noqa: BLE001 - the real request will report it
                pass
    sys.stdin.close()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener.bind(path)
    os.chmod(path, 0o600)
    inode = os.stat(path).st_ino
    listener.listen(64)
    listener.settimeout(idle_s)

    def leave(*_):
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        os._exit(0)

    signal.signal(signal.SIGTERM, leave)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the kernel
    while True:
        try:
            connection, _ = listener.accept()
        except socket.timeout:
            leave()
        except InterruptedError:
            continue
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    _answer_connection(connection, loaded)
            finally:
                os._exit(0)
        connection.close()


def main():
    """`validate/parser_probe.py PATH IDLE_S`: the shared server above."""
    serve(sys.argv[1], float(sys.argv[2]))


if __name__ == "__main__":
    main()
