"""SGLang's option table, exported once per version from its own parser, and its parser rebuilt from it.

    python -m sglang_deploy.validate.flag_table export VERSION     (re)writes releases/VERSION/options.json

The export runs SGLang's own ``ServerArgs.add_cli_args`` in the validator environment (validate/parser_probe.py)
and records every option (names, action, nargs, choices, type, default), the speculative algorithm names
``SpeculativeAlgorithm.from_string`` accepts, and the data SGLang's own argparse type functions check
against. The table is kept in the repository and reviewed like code; tests/test_flag_table.py re-exports
it from the real parser and compares, and checks that the rebuilt parser gives the real parser's verdict
on the suite's command lines.

Two users, standard library only: ``sglang-deploy check`` without the heavy validator environment (the
light path: no torch, no SGLang), and the simulator, which parses its command line as SGLang does.
The type functions below reproduce SGLang's (file:line in each, of the newest reviewed release); unknown type names fall back to
str and are reported by ``unchecked_types``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

from .. import releases

TABLE_DIR = releases.RELEASES_DIR


def table_path(version: str) -> Path:
    return releases.folder(version) / "options.json"


def load(version: str) -> dict | None:
    """The exported table of SGLang <version>, or None when this checkout has none."""
    try:
        return json.loads(table_path(version).read_text())
    except FileNotFoundError:
        return None


# --- SGLang's argparse type functions (named as SGLang names them: argparse's messages use the name) ----

def nullable_str(val: str):  # srt/utils/common.py:3388
    if not val or val == "None":
        return None
    return val


def human_readable_int(value: str) -> int:  # srt/utils/common.py:3394: SI k M G T (decimals), IEC Ki Mi Gi Ti
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. Use an integer IEC value such as "
                    f"'{int(Decimal(number))}{suffix}', or an SI value such as '{number}{suffix[0]}'.")
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid integer value: '{value}'. Use a plain integer, SI suffixes (1k, 1M), "
                                         "or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive.") from None


def loads(value: str):  # json.loads as an argparse type
    return json.loads(value)


def json_list_type(value: str):  # srt/utils/common.py:4818 (orjson.loads)
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"Invalid JSON list: {value}. Please provide a valid JSON list.") from None


def _graph_types(table: dict):
    """parse_cuda_graph_backend_arg and parse_cuda_graph_config_arg (model_executor/cuda_graph_config.py:237-285),
    checking against the phases and keys the table recorded from SGLang's module."""
    graph = table.get("cuda_graph_config") or {}
    phases, allowed = tuple(graph.get("phases") or ()), graph.get("allowed_keys") or {}

    def parse_cuda_graph_backend_arg(raw: str) -> str:
        if raw == "tc_piecewise":
            raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
        return raw

    def parse_cuda_graph_config_arg(raw: str) -> dict:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as error:
            raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {error}") from None
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError(f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}")
        result = {}
        for phase, settings in parsed.items():
            phase = str(phase)
            if phase not in phases:
                raise argparse.ArgumentTypeError(f"--cuda-graph-config: unknown phase '{phase}', expected one of {phases}")
            if not isinstance(settings, dict):
                raise argparse.ArgumentTypeError(f"--cuda-graph-config['{phase}'] must be a JSON object, got "
                                                 f"{type(settings).__name__}")
            if "backend" in settings:
                parse_cuda_graph_backend_arg(settings["backend"])
            result[phase] = {}
            for key, value in settings.items():
                if key not in allowed.get(phase, ()):
                    raise argparse.ArgumentTypeError(f"--cuda-graph-config['{phase}']: unknown key '{key}', expected "
                                                     f"one of {tuple(allowed.get(phase, ()))}")
                result[phase][key] = value
        return result

    return {"parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
            "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg}


def types(table: dict) -> dict:
    return {"int": int, "float": float, "str": str, "nullable_str": nullable_str,
            "human_readable_int": human_readable_int, "loads": loads, "json_list_type": json_list_type,
            **_graph_types(table)}


def unchecked_types(table: dict) -> list[str]:
    """Type names in the table this module cannot reproduce (their values are taken as strings)."""
    known = types(table)
    return sorted({a["type"] for a in table["actions"] if a.get("type") and a["type"] not in known})


# --- the rebuilt parser ------------------------------------------------------------------------------

class ParseFailure(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse calls this instead of exiting
        raise ParseFailure(message)


def build_parser(table: dict, parser_class=_Parser) -> argparse.ArgumentParser:
    """argparse, rebuilt from the table: the same options, actions, nargs, choices and types."""
    known = types(table)
    parser = parser_class(prog="sglang serve", add_help=False)
    for action in table["actions"]:
        kwargs = {"dest": action["dest"], "default": action["default"], "required": action.get("required", False)}
        if action["kind"] in ("store_true", "store_false"):
            kwargs["action"] = action["kind"]
        else:
            if action["nargs"] is not None:
                kwargs["nargs"] = action["nargs"]
            convert = known.get(action["type"], str) if action["type"] else None
            if convert:
                kwargs["type"] = convert
            if action["choices"]:
                kwargs["choices"] = [_converted(convert, c) for c in action["choices"]]
        parser.add_argument(*action["options"], **kwargs)
    return parser


def _converted(convert, choice: str):
    """The table stores choices as strings; argparse compares them with converted values."""
    try:
        return convert(choice) if convert else choice
    except (ValueError, TypeError, argparse.ArgumentTypeError, InvalidOperation):
        return choice


def parse_error(table: dict, argv: list[str]) -> str | None:
    """None when the rebuilt parser accepts argv, else argparse's message (as SGLang's parser words it)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            build_parser(table).parse_args(argv)
    except ParseFailure as failure:
        return str(failure)
    return None


def algorithm_error(table: dict, name: str) -> str | None:
    """None when SpeculativeAlgorithm.from_string accepts the name (it upper-cases it), else why not."""
    accepted = table.get("speculative_algorithms") or []
    return None if name.upper() in accepted else f"unknown speculative algorithm {name!r}"


def export(version: str) -> Path:
    """Re-export the table from SGLang <version>'s own parser (builds the validator environment once)."""
    # deferred: optional, validator_env is not shipped beside the simulator (roles/simulator.py SIM_SHIPS)
    from . import validator_env

    table = validator_env.export_table(version)
    path = table_path(version)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=0, sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "export":
        sys.exit("usage: python -m sglang_deploy.validate.flag_table export VERSION")
    print(export(sys.argv[2]))
