"""What the tool knows of each SGLang release, as data: one folder per release, ``releases/<version>/``.

    options.json       the option table, exported from that release's own parser (validate/flag_table.py)
    classes.json       every dest's class and why ({"dests": {dest: [class, why]}}; "unreviewed" is refused)
    environment.json   the variables a profile may set, with the values each accepts (validate/env_rules.py), and the names
                       that release's own registry declares (sglang/srt/environ.py) or its modules mention
    dependencies.json  the recipe of its validator and front-end environments, from its own Requires-Dist
    hooks.json         the startup hooks (.pth) its install set brings, reviewed (hostside/venv_hooks.py)
    log-lines.json     the log lines and /server_info fields the tool reads, with SGLang's file:line
    hints.json         flags removed or renamed before or in that release, with what to write instead
    release.json       where its facts came from (added by `sglang-deploy sglang add`, or by hand)

Product code names no release number (tests/test_release_data.py): it asks this module. A release is *reviewed*
when its classes name no "unreviewed" dest; the newest reviewed release is the tool's default, the simulated host's
SGLang, and the base that `sglang-deploy sglang add` diffs a new release against. Standard library only: the
simulator carries this package to the simulated host with the option tables.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

RELEASES_DIR = Path(__file__).resolve().parent
UNREVIEWED = "unreviewed"
ADD_COMMAND = "sglang-deploy sglang add {version}"


class UnknownRelease(LookupError):
    """A release the tool has no data for: the message names the profile field and the command that adds it."""


def version_key(version: str) -> tuple:
    """x.y.9 < x.y.10 < x.y.10.post1 < x.y.11 (numbers compared as numbers, a post release after its base)."""
    parts = re.findall(r"\d+|[a-z]+", version)
    return tuple((0, int(p)) if p.isdigit() else (-1 if p in ("a", "b", "rc", "dev") else 1, p) for p in parts)


def folder(version: str) -> Path:
    return RELEASES_DIR / version


def versions() -> list[str]:
    """Every release with a folder holding an option table, oldest first."""
    return sorted((p.name for p in RELEASES_DIR.iterdir() if (p / "options.json").is_file()), key=version_key)


def read(version: str, name: str) -> dict | None:
    """releases/<version>/<name> parsed, or None when that release has no such file."""
    try:
        return json.loads((folder(version) / name).read_text())
    except FileNotFoundError:
        return None


def unreviewed_dests(version: str) -> list[str]:
    document = read(version, "classes.json") or {"dests": {}}
    return sorted(dest for dest, entry in document["dests"].items() if entry[0] == UNREVIEWED)


def is_reviewed(version: str) -> bool:
    return read(version, "classes.json") is not None and not unreviewed_dests(version)


def reviewed() -> list[str]:
    return [v for v in versions() if is_reviewed(v)]


def newest_reviewed() -> str:
    """The tool's default release: the newest whose every dest somebody classified."""
    found = reviewed()
    if not found:
        raise UnknownRelease(f"no reviewed SGLang release under {RELEASES_DIR}")
    return found[-1]


def nearest_reviewed(version: str) -> str:
    """The reviewed release closest to <version> (the newest below it, else the oldest above it), itself excluded."""
    found = [v for v in reviewed() if v != version]
    if not found:
        raise UnknownRelease(f"no reviewed SGLang release under {RELEASES_DIR} to compare {version} with")
    below = [v for v in found if version_key(v) < version_key(version)]
    return below[-1] if below else found[0]


def require(version: str, name: str) -> dict:
    """read(), or UnknownRelease naming the profile field and the command that writes the file."""
    document = read(version, name)
    if document is None:
        known = ", ".join(versions()) or "none"
        raise UnknownRelease(f"sglang.version {version}: the tool has no {name} for this SGLang release "
                             f"(releases/{version}/; known: {known}); add it with `{ADD_COMMAND.format(version=version)}`")
    return document


@dataclass(frozen=True)
class Dependencies:
    """The validator env's recipe (pip requirements), its full-resolution layer and the front end's pins."""
    parser: tuple[str, ...]
    torch: tuple[str, ...]
    full_layer: tuple[str, ...]
    frontend: tuple[str, ...]
    frontend_pins: tuple[str, ...]

    @classmethod
    def of(cls, version: str) -> "Dependencies":
        document = require(version, "dependencies.json")
        return cls(*(tuple(document[field]) for field in ("parser", "torch", "full_layer", "frontend",
                                                          "frontend_pins")))


@lru_cache(maxsize=16)
def dependencies(version: str) -> Dependencies:
    return Dependencies.of(version)


@lru_cache(maxsize=16)
def allowed_env(version: str) -> dict[str, object]:
    """name -> accepted values (a tuple of strings, ("int", low, high), ("regex", pattern, words) or "path")."""
    allowed = require(version, "environment.json")["allowed"]
    return {name: value if isinstance(value, str) else tuple(value) for name, value in allowed.items()}


def env_mentioned(version: str) -> frozenset[str]:
    """The SGLANG_* names that release's modules mention outside its registry (empty when not recorded)."""
    return frozenset((read(version, "environment.json") or {}).get("mentioned") or ())


def env_registry(version: str) -> dict[str, str]:
    """name -> file:line of each variable that release's own registry declares (empty when not recorded)."""
    return dict((read(version, "environment.json") or {}).get("registry") or {})


@lru_cache(maxsize=16)
def renamed_flags(version: str) -> dict[str, str]:
    """flag -> what to write instead (empty for a release the tool has no data for: its refusal says so elsewhere)."""
    return dict((read(version, "hints.json") or {"renamed": {}})["renamed"])


@lru_cache(maxsize=16)
def allowed_pth(version: str) -> dict[str, str]:
    """.pth file name -> the distribution whose RECORD must list it (hostside/venv_hooks.py)."""
    return dict(require(version, "hooks.json")["pth"])


@lru_cache(maxsize=16)
def log_lines(version: str) -> dict[str, dict]:
    """name -> {"pattern": regex, "source": SGLang file:line} of the log lines the tool reads."""
    return dict(require(version, "log-lines.json")["log_lines"])


@lru_cache(maxsize=16)
def server_info_fields(version: str) -> dict[str, str]:
    """/server_info field -> SGLang file:line, for the fields the gate and doctor read."""
    return dict(require(version, "log-lines.json")["server_info"])
