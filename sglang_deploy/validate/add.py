"""`sglang-deploy sglang add <version>`: a new SGLang release's folder (releases/<version>/), derived from that
release's own wheel and parser, diffed against the nearest reviewed release.

    sglang-deploy sglang add VERSION [--check] [--force] [--no-env]

Steps, each timed (the total is printed; from empty caches with a fresh SGLANG_DEPLOY_CACHE, UV_CACHE_DIR and
PIP_CACHE_DIR):
1. the wheel: ``pip download --no-deps sglang==VERSION`` (a release missing from the index stops here);
2. the dependency recipe: the nearest reviewed release's lists, each package that VERSION's own METADATA pins
   (Requires-Dist ``==``) moved to that pin (dependencies.json, with the Requires-Dist and what moved);
3. the validator environment, built from that recipe (validate/validator_env.py), and its option table exported by SGLang's
   own parser (options.json; validate/flag_table.py);
4. the dest classes: a dest whose option record (names, action, nargs, choices, type) is unchanged keeps the nearest
   reviewed release's class; a new or changed one is written "unreviewed" (refused, as a dest nobody classified)
   with a class suggested by a static reading of where VERSION's code uses it, with each use's file:line
   (validate/scan.py). The suggestion never allows by itself: a person reviews and commits the class;
5. the environment: the reviewed allow-list, less the SGLANG_* names VERSION's registry (srt/environ.py) no longer
   declares, with VERSION's registry; its new names listed for review;
6. the log lines the tool reads, found again in VERSION's code (file:line), and the hooks and hints carried over.
``--check`` writes nothing and compares with the committed folder (timings and review notes aside).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import releases
from ..hostside import venv_hooks
from . import scan as release_scan, validator_env
from .validator_env import scrubbed_environment

RECIPE_LISTS = ("parser", "torch", "full_layer", "frontend", "frontend_pins")
# The fields of an option that make it another option when they change (its default is reported, not re-reviewed).
SHAPE = ("options", "kind", "nargs", "choices", "type", "required")


class AddError(RuntimeError):
    pass


@dataclass
class Added:
    version: str
    base: str
    folder: Path
    seconds: dict[str, float] = field(default_factory=dict)
    files: dict[str, dict] = field(default_factory=dict)
    new_dests: list[str] = field(default_factory=list)
    changed_dests: list[str] = field(default_factory=list)
    removed_dests: list[str] = field(default_factory=list)
    narrowed_dests: list[str] = field(default_factory=list)
    defaults_changed: dict[str, list] = field(default_factory=dict)
    moved_pins: dict[str, list] = field(default_factory=dict)
    new_env: list[str] = field(default_factory=list)
    dropped_env: list[str] = field(default_factory=list)
    lost_log_lines: list[str] = field(default_factory=list)


# --- pure steps (tests/test_release_add.py) ----------------------------------------------------------------------

def repin(requirements, pins: dict[str, str]) -> tuple[list[str], dict[str, list]]:
    """Each requirement moved to the release's own == pin of that package, where it has one; and what moved."""
    out, moved = [], {}
    for requirement in requirements:
        name = requirement.split("[")[0]
        for separator in ("==", ">=", "<=", "<", ">", "~=", "!="):
            name = name.split(separator)[0]
        key = release_scan.normalize(name.strip())
        if key in pins and requirement != f"{name.strip()}=={pins[key]}":
            new = f"{name.strip()}=={pins[key]}"
            moved[key] = [requirement, new]
            out.append(new)
        else:
            out.append(requirement)
    return out, moved


def derive_recipe(base: dict, requires_dist: list[str]) -> tuple[dict, dict]:
    pins = release_scan.pinned(requires_dist)
    recipe, moved = {}, {}
    for name in RECIPE_LISTS:
        recipe[name], changes = repin(base[name], pins)
        moved.update(changes)
    return recipe, moved


def narrowed(old: dict, now: dict) -> bool:
    """The option accepts a subset of what the reviewed one accepts: the same action, nargs, type and requiredness,
    its spellings and choices among the reviewed ones (an older release without a --no-X form or a newer choice).
    What a profile may write with it is what the reviewed class already covers."""
    same = all(now.get(key) == old.get(key) for key in ("kind", "nargs", "type", "required"))
    options = set(now.get("options") or []) <= set(old.get("options") or [])
    choices = now.get("choices") == old.get("choices") or (
        now.get("choices") is not None and old.get("choices") is not None
        and set(now["choices"]) <= set(old["choices"]))
    return same and options and choices


def diff_dests(base_table: dict, table: dict) -> tuple[list[str], list[str], list[str], dict[str, list], list[str]]:
    """(new, changed, removed, defaults changed, narrowed) between two option tables, by dest. A narrowed dest
    (narrowed()) is not "changed": it keeps its class."""
    old = {action["dest"]: action for action in base_table["actions"]}
    now = {action["dest"]: action for action in table["actions"]}
    new = sorted(set(now) - set(old))
    removed = sorted(set(old) - set(now))
    differs = sorted(d for d in set(now) & set(old) if any(now[d].get(key) != old[d].get(key) for key in SHAPE))
    narrow = [d for d in differs if narrowed(old[d], now[d])]
    changed = [d for d in differs if d not in narrow]
    defaults = {d: [old[d].get("default"), now[d].get("default")] for d in sorted(set(now) & set(old))
                if now[d].get("default") != old[d].get("default")}
    return new, changed, removed, defaults, narrow


def classes_for(base_classes: dict, table: dict, new: list[str], changed: list[str], uses: dict[str, list],
                base: str, base_values: dict | None = None) -> dict:
    """classes.json of the new release: unchanged dests keep their class and their value bounds ("values"); new and
    changed ones are unreviewed, with a suggestion and the uses it was read from. Key "suggestions": the uses, for
    the reviewer."""
    dests, suggestions = {}, {}
    for action in table["actions"]:
        dest = action["dest"]
        if dest in new or dest in changed:
            kind, labels = release_scan.suggest(uses.get(dest, []))
            where = ", ".join(use["source"] for use in uses.get(dest, [])[:6]) or "no use found"
            seen = ", ".join(labels) or "no listener, write, import, subprocess, fetch or auth seen"
            state = "new since" if dest in new else "changed since"
            dests[dest] = [releases.UNREVIEWED, f"{state} {base}; suggested: {kind} ({seen}); used at {where}"]
            suggestions[dest] = {"suggested": kind, "labels": labels, "uses": uses.get(dest, [])}
        else:
            dests[dest] = list(base_classes[dest])
    values = {dest: bound for dest, bound in (base_values or {}).items()
              if dest in dests and dests[dest][0] != releases.UNREVIEWED}
    return {"dests": dests, "suggestions": suggestions, **({"values": values} if values else {})}


def environment_for(base_env: dict, registry: dict[str, dict], mentioned: list[str]) -> tuple[dict, list[str], list[str]]:
    """environment.json of the new release, the names new in its registry and the allowed SGLANG_* names it dropped."""
    allowed = {name: value for name, value in base_env["allowed"].items()
               if not (name.startswith("SGLANG_") and registry and name not in registry)}
    dropped = sorted(set(base_env["allowed"]) - set(allowed))
    new = sorted(set(registry) - set(base_env.get("registry") or {}))
    document = {"about": base_env.get("about", ""), "allowed": allowed,
                "registry": {name: entry["source"] for name, entry in sorted(registry.items())},
                "mentioned": list(mentioned),
                "new_in_registry": {name: registry[name] for name in new}}
    return document, new, dropped


def keep_reviews(classes: dict, committed: dict | None) -> list[str]:
    """Where the derivation wrote "unreviewed" and the committed folder holds a person's class for that dest, keep
    the person's (in place); the dests kept."""
    kept = []
    for dest, entry in classes["dests"].items():
        theirs = (committed or {}).get("dests", {}).get(dest)
        if entry[0] == releases.UNREVIEWED and theirs and theirs[0] != releases.UNREVIEWED:
            classes["dests"][dest] = list(theirs)
            kept.append(dest)
    return kept


def hook_problems(version: str, allowed: dict) -> list[str]:
    """The startup hooks of the release's validator environment (when built) that its reviewed list does not accept
    (hostside/venv_hooks.py's reading, with this list), as sentences; a reviewer adds a real one to "pth"."""

    if not validator_env.env_built(version):
        return []
    saved = dict(venv_hooks.ALLOWED_PTH)
    venv_hooks.ALLOWED_PTH.clear()
    venv_hooks.ALLOWED_PTH.update(allowed)
    try:
        found = [problem for site in venv_hooks.site_dirs(str(validator_env.env_dir(version)))
                 for problem in venv_hooks.hook_problems(site)]
    finally:
        venv_hooks.ALLOWED_PTH.clear()
        venv_hooks.ALLOWED_PTH.update(saved)
    root = str(validator_env.env_dir(version))
    return [problem.replace(root, "<validator env>") for problem in found]


def relocate_log_lines(base_lines: dict, sources: dict[str, list[str]]) -> tuple[dict, list[str]]:
    """log-lines.json of the new release: each needle (the source line's text) found again in the release's files."""
    document = json.loads(json.dumps(base_lines))
    lost = []
    for name, line in document["log_lines"].items():
        found = []
        for needle, source in zip(line.get("needles", []), line["source"]):
            path = source.rsplit(":", 1)[0]
            hits = [f"{path}:{n}" for n, text in enumerate(sources.get(path, []), 1) if text.strip() == needle]
            if not hits:
                hits = [f"{other}:{n}" for other, lines in sources.items() if any(needle in t for t in lines)
                        for n, text in enumerate(lines, 1) if text.strip() == needle][:1]
            if hits:
                found.append(hits[0])
            else:
                lost.append(f"{name}: {needle}")
                found.append(f"{source} (in the base release; not found in this one)")
        line["source"] = found
    return document, lost


def wheel_sources(wheel: Path) -> dict[str, list[str]]:
    """The wheel's sglang/**/*.py, by path under sglang/, as lines."""
    out = {}
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("sglang/") and name.endswith(".py"):
                out[name[len("sglang/"):]] = archive.read(name).decode("utf-8", "replace").splitlines()
    return out


# --- the command --------------------------------------------------------------------------------------------------

def download(version: str, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    existing = sorted(into.glob(f"sglang-{version}-*.whl"))
    if existing:
        return existing[0]

    result = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                             "-d", str(into), f"sglang=={version}"], capture_output=True, text=True,
                            env=scrubbed_environment())
    wheels = sorted(into.glob(f"sglang-{version}-*.whl"))
    if result.returncode != 0 or not wheels:
        raise AddError(f"sglang.version {version}: SGLang {version} is not on the package index (pip download "
                       f"--no-deps sglang=={version} failed: {result.stderr.strip()[-400:]}); `pip index versions "
                       "sglang` lists the releases there")
    return wheels[0]


def _write(folder: Path, name: str, document: dict) -> None:
    (folder / name).write_text(json.dumps(document, indent=1) + "\n")


def add(version: str, check: bool = False, force: bool = False, build_env: bool = True, log=print) -> Added:
    """Write (or, with check, compare) releases/<version>/; see the module's docstring."""

    target = releases.folder(version)
    if (target / "options.json").exists() and not (check or force):  # a folder an interrupted add left: go on
        raise AddError(f"releases/{version}/ exists; --check compares it with what this command derives, --force "
                       "writes it again (the classes a person wrote are kept)")
    if releases.read(version, "options.json") is None and check:
        raise AddError(f"releases/{version}/ has nothing to compare with: run `sglang-deploy sglang add {version}`")
    started = time.monotonic()
    base = releases.nearest_reviewed(version)
    work = Path(tempfile.mkdtemp(prefix=f"sglang-add-{version}-"))
    result = Added(version, base, target)
    try:
        def step(name, since):
            result.seconds[name] = round(time.monotonic() - since, 1)
            log(f"[sglang add {version}] {name}: {result.seconds[name]} s")
            return time.monotonic()

        now = time.monotonic()
        wheel = download(version, validator_env.CACHE_DIR / "wheels")
        sources = wheel_sources(wheel)
        now = step("wheel", now)

        requires = release_scan.requires_dist(wheel)
        recipe, result.moved_pins = derive_recipe(releases.require(base, "dependencies.json"), requires)
        dependencies = {"about": releases.require(base, "dependencies.json").get("about", ""), **recipe,
                        "requires_dist": requires,
                        "moved_from_base": {k: v for k, v in sorted(result.moved_pins.items())}}
        staged = work / version
        staged.mkdir()
        _write(staged, "dependencies.json", dependencies)
        now = step("recipe", now)

        if build_env:
            if not check:  # the environment is built from the folder's recipe: write it first
                target.mkdir(parents=True, exist_ok=True)
                _write(target, "dependencies.json", dependencies)
            releases.dependencies.cache_clear()
            validator_env.ensure_env(version)
            now = step("validator env", now)
            table = validator_env.export_table(version)
            now = step("option table", now)
        else:
            table = releases.require(version, "options.json")
        staged_table = json.dumps(table, indent=0, sort_keys=True) + "\n"
        (staged / "options.json").write_text(staged_table)

        base_table = releases.require(base, "options.json")
        new, changed, removed, defaults, narrow = diff_dests(base_table, table)
        result.new_dests, result.changed_dests, result.removed_dests = new, changed, removed
        result.narrowed_dests = narrow
        result.defaults_changed = defaults
        dests = {a["dest"] for a in table["actions"] if a["dest"] in set(new) | set(changed)}
        uses = release_scan.dest_uses_in(sources, dests)
        base_classes = releases.require(base, "classes.json")
        classes = classes_for(base_classes["dests"], table, new, changed, uses, base, base_classes.get("values"))
        committed = releases.read(version, "classes.json") if not check else None
        kept = keep_reviews(classes, committed)  # --force keeps what a person classified
        _write(staged, "classes.json", classes)
        now = step("dest diff", now)

        registry = release_scan.env_registry_of(sources)
        environment, result.new_env, result.dropped_env = environment_for(
            releases.require(base, "environment.json"), registry, release_scan.env_mentioned_of(sources, registry))
        _write(staged, "environment.json", environment)
        log_lines, result.lost_log_lines = relocate_log_lines(releases.require(base, "log-lines.json"), sources)
        _write(staged, "log-lines.json", log_lines)
        _write(staged, "hints.json", releases.require(base, "hints.json"))
        hooks = dict(releases.require(base, "hooks.json"))
        hooks["unreviewed_in_validator_env"] = hook_problems(version, hooks["pth"])
        _write(staged, "hooks.json", hooks)
        record = {"version": version, "added": "sglang-deploy sglang add (validate/add.py)", "base": base,
                  "wheel": wheel.name, "new_dests": new, "changed_dests": changed, "removed_dests": removed,
                  "narrowed_dests": narrow, "defaults_changed": defaults,
                  "review": "each unreviewed dest in classes.json: read its uses, write its class and why, commit"}
        previous = releases.read(version, "release.json") if not check else None
        if kept and previous and previous.get("reviewed_by_hand"):
            record["reviewed_by_hand"] = {d: note for d, note in previous["reviewed_by_hand"].items() if d in kept}
        _write(staged, "release.json", record)
        step("environment and log lines", now)
        result.seconds["total"] = round(time.monotonic() - started, 1)

        if check:
            result.files = compare(staged, target)
        else:
            target.mkdir(parents=True, exist_ok=True)
            for path in staged.iterdir():
                shutil.copy(path, target / path.name)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(staged: Path, committed: Path) -> dict[str, dict]:
    """file -> {"same": bool, "differs": [...]} between a derived folder and the committed one. The classes compare
    by dest: a reviewed class where the derivation wrote "unreviewed" is a review, not a difference."""
    out = {}
    for path in sorted(staged.iterdir()):
        theirs = committed / path.name
        if not theirs.exists():
            out[path.name] = {"same": False, "differs": ["not committed"]}
            continue
        mine, committed_doc = json.loads(path.read_text()), json.loads(theirs.read_text())
        if path.name == "classes.json":
            differs = [d for d, entry in mine["dests"].items()
                       if entry[0] != releases.UNREVIEWED and committed_doc["dests"].get(d) != entry]
            differs += [d for d, entry in mine["dests"].items()
                        if entry[0] == releases.UNREVIEWED and d not in committed_doc["dests"]]
            differs += sorted(set(committed_doc["dests"]) - set(mine["dests"]))
        elif path.name == "release.json":
            differs = [k for k in ("version", "base", "new_dests", "changed_dests", "removed_dests")
                       if mine.get(k) != committed_doc.get(k)]
        else:
            differs = [k for k in sorted(set(mine) | set(committed_doc)) if mine.get(k) != committed_doc.get(k)]
        out[path.name] = {"same": not differs, "differs": differs[:20]}
    return out


def report(result: Added) -> str:
    lines = [f"SGLang {result.version}: {result.folder} against {result.base} (the nearest reviewed)",
             f"  recipe: {len(result.moved_pins)} pins moved to the release's own: "
             + (", ".join(f"{old} -> {new.split('==')[1]}" for old, new in result.moved_pins.values()) or "none"),
             f"  dests: {len(result.new_dests)} new, {len(result.changed_dests)} changed (unreviewed: refused until "
             f"classified), {len(result.narrowed_dests)} narrowed (fewer spellings or choices: class kept), "
             f"{len(result.removed_dests)} removed, {len(result.defaults_changed)} defaults changed"]
    for dest in result.new_dests + result.changed_dests:
        lines.append(f"    unreviewed {dest}")
    if result.removed_dests:
        lines.append(f"    removed: {', '.join(result.removed_dests)}")
    lines.append(f"  environment: {len(result.new_env)} names new in SGLang's registry (srt/environ.py), "
                 f"{len(result.dropped_env)} allowed names it no longer declares"
                 + (f" ({', '.join(result.dropped_env)})" if result.dropped_env else ""))
    if result.lost_log_lines:
        lines.append(f"  log lines not found in this release: {'; '.join(result.lost_log_lines)}")
    for name, state in result.files.items():
        lines.append(f"  {name}: {'same as committed' if state['same'] else 'differs: ' + ', '.join(state['differs'])}")
    timing = ", ".join(f"{k} {v} s" for k, v in result.seconds.items() if k != "total")
    lines.append(f"  time: {result.seconds.get('total')} s ({timing})")
    return "\n".join(lines)


def main(args) -> int:
    try:
        result = add(args.version, check=args.check, force=args.force, build_env=not args.no_env,
                     log=lambda text: print(text, file=sys.stderr, flush=True))
    except (AddError, releases.UnknownRelease) as error:
        print(f"sglang add: {error}", file=sys.stderr)
        return 2
    print(report(result))
    return 1 if args.check and not all(state["same"] for state in result.files.values()) else 0
