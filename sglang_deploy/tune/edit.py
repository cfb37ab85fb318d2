"""Tune's edit of the profile file: a candidate's flags, variables and drafter written into the profile's YAML text,
its comments kept (the tuned profile, and each candidate's profile, are the user's file with a few lines changed).
"""

from __future__ import annotations

import json
import re

from .search import Candidate

SAFE_SCALAR = re.compile(r"[A-Za-z0-9_./@+:-]+")
YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}


def yaml_scalar(value) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    if SAFE_SCALAR.fullmatch(text) and text.lower() not in YAML_WORDS and not re.fullmatch(r"[-+0-9.eE]+", text):
        return text
    return json.dumps(text)


def env_scalar(value) -> str:
    if isinstance(value, dict):
        return "{value: " + json.dumps(str(value["value"])) + ", reason: " + json.dumps(str(value["reason"])) + "}"
    return json.dumps(str(value))


def _block(lines: list[str], header: re.Pattern, parent_indent: int | None = None) -> tuple[int, int, int] | None:
    """(header line, first line after the block, indentation of the block's entries) of a mapping block."""
    for index, line in enumerate(lines):
        match = header.match(line)
        if not match:
            continue
        indent = len(match.group(1))
        if parent_indent is not None and indent <= parent_indent:
            continue
        end, entry_indent = index + 1, None
        while end < len(lines):
            stripped = lines[end].strip()
            current = len(lines[end]) - len(lines[end].lstrip())
            if stripped and not stripped.startswith("#"):
                if current <= indent:
                    break
                entry_indent = entry_indent if entry_indent is not None else current
            end += 1
        while end > index + 1 and not lines[end - 1].strip():
            end -= 1
        return index, end, entry_indent if entry_indent is not None else indent + 2
    return None


def _set_entries(lines: list[str], block, changes: dict, render, comments: dict) -> list[str]:
    start, end, indent = block
    entry = re.compile(r"^(\s*)([^\s:#][^:#]*?):(\s*)(.*?)(\s+#.*)?$")
    out = lines[:start + 1]
    seen = set()
    last_entry = start
    body = lines[start + 1:end]
    for offset, line in enumerate(body):
        match = entry.match(line)
        if match and len(match.group(1)) == indent and match.group(2) in changes:
            name = match.group(2)
            seen.add(name)
            value = changes[name]
            if value is None:
                continue
            comment = f"  # {comments[name]}" if name in comments else (match.group(5) or "")
            out.append(f"{match.group(1)}{name}: {render(value)}{comment}")
        else:
            out.append(line)
        if line.strip() and not line.strip().startswith("#"):
            last_entry = len(out) - 1
    added = [f"{' ' * indent}{name}: {render(value)}" + (f"  # {comments[name]}" if name in comments else "")
             for name, value in changes.items() if name not in seen and value is not None]
    out = out[:last_entry + 1] + added + out[last_entry + 1:]
    return out + lines[end:]


def _set_draft(lines: list[str], draft: dict) -> list[str]:
    """speculative.draft set to the candidate's drafter (a `speculative:` section replaced, or added before
    `sglang:`)."""
    block = [f"    {key}: {yaml_scalar(draft[key])}" for key in ("source", "manifest", "config") if draft.get(key)]
    section = ["speculative:", "  draft:"] + block
    found = _block(lines, re.compile(r"^()speculative:\s*(#.*)?$"))
    if found:
        start, end, _ = found
        return lines[:start] + section + lines[end:]
    sglang = _block(lines, re.compile(r"^()sglang:\s*(#.*)?$"))
    at = sglang[0] if sglang else len(lines)
    return lines[:at] + section + [""] + lines[at:]


def apply_changes(text: str, candidate: Candidate, comments: dict | None = None, description: str | None = None) -> str:
    """The profile's YAML text with the candidate's flags and variables set (comments kept, or replaced where
    `comments` names the key). Raises ValueError when the sections cannot be found."""
    comments = comments or {}
    lines = text.splitlines()
    if candidate.flags:
        sglang = _block(lines, re.compile(r"^()sglang:\s*(#.*)?$"))
        if not sglang:
            raise ValueError("no top-level `sglang:` section")
        flags = _block(lines, re.compile(r"^(\s+)flags:\s*(#.*)?$"), parent_indent=0)
        if not flags:
            raise ValueError("no `sglang.flags:` mapping")
        lines = _set_entries(lines, flags, candidate.flag_changes, yaml_scalar, comments)
    if candidate.env:
        environment = _block(lines, re.compile(r"^()environment:\s*(#.*)?$"))
        if environment is None:
            lines += ["environment:"]
            environment = (len(lines) - 1, len(lines), 2)
        lines = _set_entries(lines, environment, candidate.env_changes, env_scalar, comments)
    if candidate.draft:
        lines = _set_draft(lines, dict(candidate.draft))
    elif "--speculative-algorithm" in candidate.flag_changes and candidate.flag_changes["--speculative-algorithm"] is None:
        found = _block(lines, re.compile(r"^()speculative:\s*(#.*)?$"))  # no speculation: no draft model either
        if found:
            lines = lines[:found[0]] + lines[found[1]:]
    if description is not None:
        for index, line in enumerate(lines):
            if re.match(r"^description:\s*\S", line):
                lines[index] = f"description: {json.dumps(description)}"
                break
    return "\n".join(lines) + "\n"
