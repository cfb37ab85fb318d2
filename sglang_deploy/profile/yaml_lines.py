"""A profile's YAML with file:line origins: the loader that refuses duplicate keys, each field path's line, and
every structure problem as 'file:line: field: message' (control characters, pydantic's errors)."""

from __future__ import annotations

import re

import yaml
from pydantic import ValidationError

from .. import safety

# Fields a profile no longer has, with where their value belongs now.
REMOVED_FIELDS = {
    ("model", "mirror"): "not a profile field: the Hub endpoint is the host's, host data `hf_endpoint` (a profile "
                         "could send the host's Hugging Face token anywhere); remove it",
}


def line_index(node: yaml.Node, path: tuple = (), index: dict | None = None) -> dict[tuple, int]:
    """Map each field path (keys and list indices) to the 1-based line where it appears."""
    index = {} if index is None else index
    index.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            index[path + (key,)] = key_node.start_mark.line + 1
            line_index(value_node, path + (key,), index)
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            index[path + (position,)] = item.start_mark.line + 1
            line_index(item, path + (position,), index)
    return index


# YAML 1.1 number forms a reader takes for something else: 1:30 is 90 (base 60), 017 is 15 (octal), and hex, binary
# and `_` separators; a profile writes numbers in decimal.
YAML11_NUMBER = re.compile(r"[-+]?(?:[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?|0[0-7_]+|0x[0-9a-fA-F_]+|0b[01_]+"
                           r"|[0-9.]*_[0-9_.eE+-]*)")


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one, and the YAML 1.1 number
    forms (sexagesimal, octal, hex, binary, `_`) whose value is not what a reviewer reads."""

    def construct_yaml_number(self, node):
        if YAML11_NUMBER.fullmatch(node.value):
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} is a YAML 1.1 number form (1:30 reads as 90, base 60; 017 as 15, octal); "
                "accepted: the number in plain decimal, or a quoted string where text is meant", node.start_mark)
        constructor = yaml.SafeLoader.construct_yaml_int if node.tag.endswith(":int") else \
            yaml.SafeLoader.construct_yaml_float
        return constructor(self, node)

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):  # `? [a, b]` or `? {a: 1}`: unhashable, and no field name
                raise yaml.constructor.ConstructorError(
                    None, None, "a key must be a plain name, not a list or mapping", key_node.start_mark)
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` would copy keys in that a reader does not see
                raise yaml.constructor.ConstructorError(
                    None, None, "a YAML merge key (<<) is not accepted in a profile; write the keys out where they "
                    "are used", key_node.start_mark)
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", UniqueKeyLoader.construct_yaml_number)
UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", UniqueKeyLoader.construct_yaml_number)


def format_location(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _clean_loc(loc: tuple) -> tuple:
    # pydantic adds union-member names such as 'str' or 'EnvSetting' to the location; drop them.
    noise = {"str", "int", "float", "bool", "list[union[int,float,str]]", "EnvSetting",
             "function-after[identifier(), str]", "function-after[absolute(), str]", "function-after[pinned(), str]"}
    return tuple(p for p in loc if not (isinstance(p, str) and (p in noise or p.startswith(("list[", "function-")))))


def pydantic_problems(source: str, error: ValidationError, lines: dict[tuple, int]) -> list[str]:
    problems, seen = [], set()
    for item in error.errors():
        loc = _clean_loc(item["loc"])
        field = format_location(loc)
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = REMOVED_FIELDS.get(loc, "unknown key (not part of the profile format; see docs/profile.md)")
        elif item["type"] == "missing":
            message = "required field is missing"
        key = (field, message)
        if key in seen:
            continue  # union members repeat the same complaint
        seen.add(key)
        probe = loc
        while probe and probe not in lines:
            probe = probe[:-1]
        problems.append(f"{source}:{lines.get(probe, 1)}: {field}: {message}")
    return problems


MAX_VALUE_BYTES = 64 * 1024  # systemd refuses a whole unit over a line of 1 MiB; no profile value needs 64 KiB


def unit_text_message(value: str) -> str | None:
    """A value that may be printed into a unit: no trailing backslash (systemd and the tool's unit reader would
    disagree on whether the next line continues it) and at most 64 KiB."""
    if value.endswith("\\"):
        return "ends with a backslash, which a unit file reads as a line continuation; accepted: a value that does " \
               "not end in '\\'"
    if len(value.encode()) > MAX_VALUE_BYTES:
        return f"is {len(value.encode())} bytes long; accepted: at most {MAX_VALUE_BYTES} bytes (64 KiB)"
    return None


# Free text that reaches no unit, shell, path or URL: a YAML block scalar may make it span lines.
_FREE_TEXT = {("description",), ("environment", "*", "reason")}


def control_problems(source: str, data, lines: dict[tuple, int], path: tuple = ()) -> list[str]:
    """Every key and string value with a control character, named by file, line and field path."""
    problems = []
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = list(enumerate(data))
    else:
        if isinstance(data, str):
            free = any(len(pattern) == len(path) and all(p in ("*", q) for p, q in zip(pattern, path))
                       for pattern in _FREE_TEXT)
            message = safety.control_message(data, safety.TEXT_ALLOWED if free else set()) or unit_text_message(data)
            if message:
                problems.append(f"{source}:{lines.get(path, 1)}: {format_location(path)}: {message}")
        return problems
    for key, value in items:
        if isinstance(key, str) and safety.control_message(key):
            problems.append(f"{source}:{lines.get(path + (key,), 1)}: {format_location(path + (key,))}: "
                            f"the key {safety.control_message(key)}")
            continue
        problems += control_problems(source, value, lines, path + (key,))
    return problems
