"""One validation problem: the rule that found it, the profile field it names and the message, written as
'file:line: field: message [rule]'. Every layer of validate/check.py reports in it, and so do the parts' own
rules (token_map/): it lives with the profile, below both, so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass

from ..profile import Profile, line_of


@dataclass(frozen=True)
class Problem:
    rule: str
    field: tuple  # field path inside the profile, e.g. ("sglang", "flags", "--tp-size")
    message: str

    def format(self, profile: Profile) -> str:
        line = line_of(profile.source, self.field) if profile.source else 1
        where = ".".join(str(p) for p in self.field)
        return f"{profile.source}:{line}: {where}: {self.message} [{self.rule}]"


def flag_field(name: str) -> tuple:
    """The field path of a flag in the profile."""
    return ("sglang", "flags", name)


def env_field(name: str) -> tuple:
    """The field path of an environment variable in the profile."""
    return ("environment", name)


def remove_or_waive(rule: str) -> str:
    """The fix a waivable rule names: remove the setting, or waive the rule with a reason a reviewer reads."""
    return "remove it, or waive the rule for a reviewed reason: `waivers: {%s: \"why\"}`" % rule
