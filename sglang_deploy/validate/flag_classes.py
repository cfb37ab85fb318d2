"""The reviewed classes of SGLang's fields (dests), kept beside the option table they classify.

    releases/<version>/classes.json: {"dests": {dest: [class, why]}}

Every dest of a version's option table is classified once, by reading what SGLang does with it:
``tool-owned`` (the tool sets it), ``allowed`` (a serving or tuning knob the tool understands),
``exposure`` (opens a listener, connects out, or writes request data where others read it), ``code``
(loads code or a config by name or path) and ``other-weights`` (serves weights, a tokenizer, a template or
tokens the tool did not verify). Only ``allowed`` passes without a waiver; a dest with no class, or the class
``unreviewed`` that `sglang-deploy sglang add` writes for a new or changed dest of a new release (with a suggested
class and where that release's code uses it), is refused as not reviewed, so a new release cannot widen what a profile may do
(validate.parser_checks.class_problems, resolved_problems below; docs/refusals.md).
"""

from __future__ import annotations

import json
from functools import lru_cache

from .. import releases

CLASSES = ("tool-owned", "allowed", "exposure", "code", "other-weights")
# The waivable rule each class needs (tool-owned has its own, unwaivable rule: tool-derived-flag).
CLASS_RULES = {"exposure": "flag-exposes-service", "code": "flag-runs-code", "other-weights": "flag-serves-other-weights"}
# Values that mean "not set" for a field whose default is None (SGLang's resolution turns some None into an empty
# list or object).
UNSET = (None, False, "", "[]", "{}", "null", "none")


def classes_path(version: str):
    return releases.folder(version) / "classes.json"


@lru_cache(maxsize=8)
def load(version: str) -> dict[str, tuple[str, str]]:
    """dest -> (class, why) for SGLang <version>; empty when nobody reviewed that version's dests."""
    try:
        document = json.loads(classes_path(version).read_text())
    except FileNotFoundError:
        return {}
    return {dest: (entry[0], entry[1]) for dest, entry in document["dests"].items() if entry[0] != releases.UNREVIEWED}


def not_reviewed_reason(version: str, dest: str) -> str:
    """Why <dest> has no class for <version>: no classes at all (and the command that adds the release), or marked
    unreviewed by `sglang-deploy sglang add` (with its suggestion), or absent from the file."""
    path = classes_path(version)
    where = f"releases/{version}/{path.name}"
    try:
        entry = json.loads(path.read_text())["dests"].get(dest)
    except FileNotFoundError:
        return (f"the tool has no {where} (sglang.version {version} was never added or reviewed; run "
                f"`{releases.ADD_COMMAND.format(version=version)}`, then review and commit its classes)")
    if entry and entry[0] == releases.UNREVIEWED:
        return f"{where} marks it unreviewed ({entry[1]})"
    return f"{where} does not classify it"


# A numeric flag value beyond this magnitude is a finite stand-in for the refused infinities (security review 4: a
# watchdog of 1e300 s never fires); no SGLang knob the tool allows means anything up there.
FINITE_MAX = 1e12


@lru_cache(maxsize=8)
def load_values(version: str) -> dict[str, dict]:
    """dest -> {min, max, choices, why}: allowed dests whose value changes what they are (a limit turned off, a
    finite stand-in for never, a mode that exchanges data through named shared memory)."""
    try:
        document = json.loads(classes_path(version).read_text())
    except FileNotFoundError:
        return {}
    return document.get("values", {})


def value_problem(version: str, dest: str, value) -> str | None:
    """Why an allowed dest's value is refused (None: accepted), from the classes file's `values` and FINITE_MAX."""
    items = value if isinstance(value, list) else [value]
    bound = load_values(version).get(dest)
    for item in items:
        number = None
        if not isinstance(item, bool):
            try:
                number = float(item)
            except (TypeError, ValueError):
                number = None
        if number is not None and abs(number) > FINITE_MAX:
            return (f"{item!r} is a finite stand-in for infinity (a limit or timeout that never triggers); "
                    f"accepted: a magnitude up to {FINITE_MAX:.0e}")
        if not bound:
            continue
        accepted = ", ".join(str(c) for c in bound["choices"]) if "choices" in bound else \
            f"{bound.get('min', '-inf')} to {bound.get('max', 'inf')}"
        if "choices" in bound and str(item) not in bound["choices"]:
            return f"{item!r}: {bound['why']}; accepted: {accepted}"
        if ("min" in bound or "max" in bound) and (number is None or number < bound.get("min", -FINITE_MAX)
                                                    or number > bound.get("max", FINITE_MAX)):
            return f"{item!r}: {bound['why']}; accepted: {accepted}"
    return None


def unset(value) -> bool:
    return value in UNSET or value == [] or value == {}


def resolved_problems(version: str, resolved: dict | None, flag_dests: set[str], defaults: dict) -> list[tuple]:
    """(rule, dest, message) for each exposure/code field that SGLang's resolution sets to something other than
    its default although sglang.flags does not name it: a value that came from the environment, a config file or
    SGLang's own derivation. The flags themselves are judged by validate.parser_checks.class_problems."""
    if not resolved:
        return []
    classes = load(version)
    found = []
    for dest, (kind, why) in classes.items():
        if kind not in ("exposure", "code") or dest in flag_dests or dest not in resolved:
            continue
        value, default = resolved[dest], defaults.get(dest)
        if value == default or (unset(value) and unset(default)):
            continue
        found.append((CLASS_RULES[kind], dest,
                      f"SGLang {version} resolves {dest} to {value!r} (default {default!r}) although sglang.flags "
                      f"does not set it: set through the environment or a config file; {dest} {why}"))
    return found
