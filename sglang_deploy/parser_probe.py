"""Runs inside a validator virtualenv that holds a pinned SGLang (no GPU dependencies).

Reads JSON lines from stdin: {"argvs": [[flag, value, ...], ...], "algorithms": [name, ...]}
Writes JSON to stdout:
  {"sglang_version": ..., "actions": [...], "results": [{"ok": bool, "error": str|null}, ...],
   "algorithms": {name: error-or-null}}

Every argv is parsed by SGLang's own ``ServerArgs.add_cli_args`` parser, so unknown, removed and
ambiguous flags fail exactly as they would at server start. Standard library + sglang only: this file
is executed by path, the ``sglang_deploy`` package is not installed in the validator environment.
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
        "choices": [str(c) for c in action.choices] if action.choices else None,
        "type": getattr(action.type, "__name__", None) if action.type else None,
        "deprecated": "Deprecated" in type(action).__name__,
        "default": action.default if isinstance(action.default, (bool, int, float, str, type(None))) else str(action.default),
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
                real_stdout.write(json.dumps(answer(json.loads(line), sglang, parser, SpeculativeAlgorithm)) + "\n")
                real_stdout.flush()


if __name__ == "__main__":
    main()
