"""Static readings of an SGLang release's own source, for `sglang-deploy sglang add` (validate/add.py).

Standard library only (ast, re): nothing of SGLang is imported. Three readings:
- ``env_registry``: the variables SGLang's registry declares (sglang/srt/environ.py, ``class Envs``: ``NAME =
  EnvBool(default)`` ...), each with its type, default and file:line;
- ``requires_dist``: the wheel's own requirements (its METADATA ``Requires-Dist`` lines, markers kept);
- ``dest_uses``: where the code reads a dest (``server_args.<dest>`` or ``args.<dest>``), each use labelled by what
  the lines around it do (listeners and sockets, file writes, imports and unpickling, subprocesses, outbound
  fetches, authentication), and a suggested class from those labels. A suggestion never allows by itself: the
  dest is written "unreviewed" and refused until a person commits a class.
"""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path

# What a use of a dest does, read from the lines around it (its statement and the two lines on each side).
USE_PATTERNS = {
    "listener": re.compile(r"\b(bind|listen|serve|uvicorn|socket\.socket|zmq\.(?:REP|ROUTER|PULL|PUB)|"
                           r"start_server|HTTPServer|grpc\.server|add_insecure_port|host|port)\b"),
    "file-write": re.compile(r"\b(open\([^)]*['\"][wa]b?['\"]|write_text|write_bytes|makedirs|mkdir|\.dump\(|"
                             r"save_pretrained|torch\.save|shutil\.(?:copy|move))"),
    "import": re.compile(r"\b(importlib|import_module|__import__|pickle\.loads?|dill\.loads?|torch\.load|exec\(|"
                         r"eval\(|trust_remote_code|from_pretrained|getattr\(module)"),
    "subprocess": re.compile(r"\b(subprocess|Popen|os\.system|os\.exec|multiprocessing\.Process|spawn)\b"),
    "outbound": re.compile(r"\b(requests\.(?:get|post)|aiohttp|urlopen|http://|https://|snapshot_download|"
                           r"hf_hub_download|connect\(|ClientSession|zmq\.(?:REQ|DEALER|PUSH|SUB))"),
    "auth": re.compile(r"\b(api_key|admin_api_key|secret|password|authorization|Bearer|auth_token)\b", re.IGNORECASE),
}
# The class each label suggests, strongest first (the classes of flag_classes.CLASSES).
SUGGESTION = (("import", "code"), ("subprocess", "code"), ("listener", "exposure"), ("outbound", "exposure"),
              ("auth", "exposure"), ("file-write", "exposure"))
SKIP_DIRS = ("test", "tests", "benchmark", "multimodal_gen")


def env_registry_of(sources: dict[str, list[str]], path: str = "srt/environ.py") -> dict[str, dict]:
    """name -> {"type", "default", "source": "srt/environ.py:N"} for each ``NAME = EnvX(...)`` of ``class Envs``
    (sources: the release's files under sglang/, as lines; empty when the release has no such registry)."""
    if path not in sources:
        return {}
    text = "\n".join(sources[path])
    found = {}
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ClassDef) or node.name != "Envs":
            continue
        for statement in node.body:
            if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name) and isinstance(statement.value, ast.Call)
                    and isinstance(statement.value.func, ast.Name) and statement.value.func.id.startswith("Env")):
                call = statement.value
                default = ast.unparse(call.args[0]) if call.args else None
                found[statement.targets[0].id] = {"type": call.func.id, "default": default,
                                                  "source": f"{path}:{statement.lineno}"}
    return found


def env_mentioned_of(sources: dict[str, list[str]], registry) -> list[str]:
    """The SGLANG_* names the release's modules mention outside its registry (os.environ reads of their own): a name
    in neither is one that release never reads."""
    mentioned = set()
    for lines in sources.values():
        mentioned.update(re.findall(r"\bSGLANG_[A-Z0-9_]*[A-Z0-9]\b", "\n".join(lines)))
    return sorted(mentioned - set(registry))


def env_registry(environ_py: Path, root: Path) -> dict[str, dict]:
    """env_registry_of for an installed release (root: its sglang/ directory)."""
    relative = environ_py.relative_to(root).as_posix()
    return env_registry_of({relative: environ_py.read_text().splitlines()}, relative)


def requires_dist(wheel: Path) -> list[str]:
    """The wheel's METADATA Requires-Dist lines, in order."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    header = text.split("\n\n", 1)[0]
    return [line.split(":", 1)[1].strip() for line in header.splitlines() if line.startswith("Requires-Dist:")]


def pinned(requirements: list[str]) -> dict[str, str]:
    """normalized name -> exact version, for the requirements pinned with == and no environment marker limiting
    them to another platform (an `extra ==` marker leaves it out too)."""
    pins = {}
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        if "extra ==" in marker or "platform_machine == \"aarch64\"" in marker and "!=" not in marker:
            continue
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*==\s*([^,\s]+)\s*", spec)
        if match:
            pins[normalize(match.group(1))] = match.group(2)
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dest_uses_in(sources: dict[str, list[str]], dests: set[str]) -> dict[str, list[dict]]:
    """dest -> [{"source": "srt/x.py:N", "labels": [...]}] for every ``.<dest>`` or quoted ``"<dest>"`` in the
    release's files (sources: path under sglang/ -> lines; tests and benchmarks skipped)."""
    if not dests:
        return {}
    names = "|".join(sorted(map(re.escape, dests)))
    # Any attribute read (server_args.X, get_global_server_args().X, get_spec().X, cfg.X, self.X) or quoted name
    # (["X"], get("X"), field lists): a dest's name is specific enough that each hit is worth a reviewer's look.
    pattern = re.compile(r"\.(" + names + r")\b|[\"'](" + names + r")[\"']")
    uses: dict[str, list[dict]] = {dest: [] for dest in dests}
    for relative in sorted(sources):
        if any(part in SKIP_DIRS for part in relative.split("/")[:-1]):
            continue
        lines = sources[relative]
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith("#"):
                continue
            for match in pattern.finditer(line):
                window = "\n".join(lines[max(0, number - 3):number + 2])
                labels = sorted(label for label, regex in USE_PATTERNS.items() if regex.search(window))
                dest = next(group for group in match.groups() if group)
                uses[dest].append({"source": f"{relative}:{number}", "labels": labels})
    return uses


def suggest(uses: list[dict]) -> tuple[str, list[str]]:
    """A suggested class from the labels of a dest's uses, and the labels seen (allowed when none is seen)."""
    seen = sorted({label for use in uses for label in use["labels"]})
    for label, kind in SUGGESTION:
        if label in seen:
            return kind, seen
    return "allowed", seen
