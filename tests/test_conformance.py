"""The conformance table (docs/conformance.md) lists every /server_info field the code reads.

/server_info-shaped dictionaries are named `server_info` (what a server returned) or `resolved` (SGLang's
resolution of a command line, which the simulator serves); every constant key read from one of them, in
any module of the project, must be a row of the table's /server_info section.
"""

import ast
import re
import subprocess

from conftest import REPO

from sglang_deploy.validate.resolution import COMPARED_FIELDS

DOC = REPO / "docs" / "conformance.md"
SHAPED = {"server_info", "resolved"}
# The project's own code: tracked Python files outside tests/ (not .venv, not a simulated host's rootfs).
SOURCES = [REPO / name for name in subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True,
                                                  text=True, check=True).stdout.split()
           if not name.startswith("tests/") and (REPO / name).exists()]


def documented_fields() -> set[str]:
    text = DOC.read_text()
    section = text.split("## `/server_info` fields read by the tool", 1)[1].split("\n## ", 1)[0]
    fields = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            cell = line.split("|")[1]
            fields |= {name.split(".")[0].split("[")[0] for name in re.findall(r"`([^`]+)`", cell)}
    return fields


def documented_paths() -> list[str]:
    """Every path of the table's first column, in full: `internal_states[0].memory_usage.graph` with the phases it
    names in parentheses (`.decode` ...), `.kvcache` beside the path before it; one entry per path."""
    text = DOC.read_text()
    section = text.split("## `/server_info` fields read by the tool", 1)[1].split("\n## ", 1)[0]
    found = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        firsts = []
        for token in re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cell)):
            firsts.append(firsts[0].rsplit(".", 1)[0] + token if token.startswith(".") and firsts else token)
        found += firsts
        if firsts:
            found += [f"{firsts[0]}.{token}" for token in re.findall(r"`([^`]+)`", " ".join(re.findall(r"\(([^)]*)\)", cell)))]
    return list(dict.fromkeys(found))


def lookup(document, path: str):
    """The value at a documented path (`a.b[0].c`), or KeyError naming the part that is missing."""
    value = document
    for part in path.replace("[0]", ".0").split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise KeyError(f"{path}: no {part!r}")
    return value


def _shaped(node) -> bool:
    if isinstance(node, ast.Name):
        return node.id in SHAPED
    return (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and node.slice.value in SHAPED)


def fields_read(tree) -> set[str]:
    read = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and _shaped(node.func.value) and node.args and isinstance(node.args[0], ast.Constant):
            read.add(node.args[0].value)
        elif isinstance(node, ast.Subscript) and _shaped(node.value) and isinstance(node.slice, ast.Constant):
            read.add(node.slice.value)
    return read


def test_the_scan_sees_reads():
    code = 'a = server_info.get("x"); b = report["server_info"]["y"]; c = resolved["z"]; d = other.get("w")'
    assert fields_read(ast.parse(code)) == {"x", "y", "z"}


def test_every_server_info_field_the_code_reads_is_in_the_table():
    documented = documented_fields()
    assert {"speculative_algorithm", "cuda_graph_config", "internal_states"} <= documented  # the parse works
    missing = {}
    for path in SOURCES:
        for field in fields_read(ast.parse(path.read_text())) - documented:
            missing.setdefault(field, []).append(str(path.relative_to(REPO)))
    for field in COMPARED_FIELDS:  # read through a loop over this tuple (hostside/lib/gate.py config_problems)
        if field not in documented:
            missing.setdefault(field, []).append("sglang_deploy/validate/resolution.py COMPARED_FIELDS")
    assert not missing, f"read from /server_info but not in docs/conformance.md: {missing}"
