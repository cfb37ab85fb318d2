"""An upgrade is a release like any other: what changes when only sglang.version does.

``resolved_diff`` compares one profile resolved by two SGLang releases, each side by its own release's resolution
(its own validator environment, parser and defaults): the values that change without the user writing anything.
``--dry --diff`` prints it beside the unit diff when the profile's release differs from the active one
(roles/stages.announce).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import flag_table, gpu_facts
from .check import check_profile

MISSING = "<absent>"  # a field one release does not have
SECRET_DESTS = ("api_key", "admin_api_key")  # never printed, whatever they hold


@dataclass(frozen=True)
class Change:
    dest: str
    old: object
    new: object


def resolved_diff(old: dict, new: dict) -> list[Change]:
    """Each field whose resolved value differs between two releases' resolutions (secrets masked)."""
    changes = []
    for dest in sorted(set(old) | set(new)):
        before, after = old.get(dest, MISSING), new.get(dest, MISSING)
        if before != after:
            if dest in SECRET_DESTS:
                before, after = "<masked>", "<masked>"
            changes.append(Change(dest, before, after))
    return changes


def describe(old_version: str, new_version: str, changes: list[Change], flags: set[str]) -> list[str]:
    """The diff as lines: first the fields the profile does not set (SGLang's defaults and derivations changed
    under it), then those it sets."""
    if not changes:
        return [f"Diff: resolved arguments, SGLang {old_version} -> {new_version}: none differ for this profile"]
    lines = [f"Diff: resolved arguments, SGLang {old_version} -> {new_version} (each side by its own release's "
             f"resolution): {len(changes)} differ"]
    unset = [c for c in changes if c.dest not in flags]
    for title, group in (("not set by the profile (changed defaults)", unset),
                         ("set by the profile", [c for c in changes if c.dest in flags])):
        if group:
            lines.append(f"  {title}:")
            lines += [f"    {c.dest}: {c.old!r} -> {c.new!r}" for c in group]
    return lines


def profile_dests(profile, actions) -> set[str]:
    """The dests of the flags the profile writes (its sglang.flags, by the table's options)."""
    options = {opt: action["dest"] for action in actions for opt in action["options"]}
    return {options[name] for name in profile.sglang.flags if name in options}


def for_profile(profile, old_version: str, resolution: dict, port=None, node=None) -> list[str]:
    """The profile resolved by `old_version` (its own validator env, built once) against `resolution`, the plan's
    resolution by the profile's own release; as describe() lines."""
    # Here, not at the top: the check and what it reads cost about 200 ms of import (measured: 25 ms -> 230 ms for
    # this module), paid only for a --diff; bisect_release imports this module for SECRET_DESTS alone.
    gpu = next((model for model in gpu_facts.KNOWN.values() if model.name == resolution["gpu"]["model"]), None)
    old_profile = profile.model_copy(update={"sglang": profile.sglang.model_copy(update={"version": old_version})})
    report = check_profile(old_profile, gpus=resolution["gpu"]["count"], port=port, node=node, gpu=gpu, path="full")
    old = (report.resolution or {}).get("resolved") or {}
    table = flag_table.load(profile.sglang.version) or {"actions": []}
    lines = describe(old_version, profile.sglang.version, resolved_diff(old, resolution.get("resolved") or {}),
                     profile_dests(profile, table["actions"]))
    if not old:
        lines.append(f"  (SGLang {old_version} did not resolve this profile: "
                     f"{(report.resolution or {}).get('error') or 'no resolution'})")
    return lines
