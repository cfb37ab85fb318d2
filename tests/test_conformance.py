"""The conformance table (docs/conformance.md) lists every /server_info field the code reads.

/server_info-shaped dictionaries are named `server_info` (what a server returned) or `resolved` (SGLang's
resolution of a command line, which the simulator serves); every constant key read from one of them, in
any module of the project, must be a row of the table's /server_info section.
"""

import ast
import re

from conftest import REPO

from sglang_deploy.resolution import COMPARED_FIELDS

DOC = REPO / "docs" / "conformance.md"
SHAPED = {"server_info", "resolved"}
SOURCES = [p for p in REPO.rglob("*.py") if not any(part in (".venv", ".simhost", "tests", ".git", "results") for part in
                                                     p.relative_to(REPO).parts)]


def documented_fields() -> set[str]:
    text = DOC.read_text()
    section = text.split("## `/server_info` fields read by the tool", 1)[1].split("\n## ", 1)[0]
    fields = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            cell = line.split("|")[1]
            fields |= {name.split(".")[0].split("[")[0] for name in re.findall(r"`([^`]+)`", cell)}
    return fields


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
    for field in COMPARED_FIELDS:  # read through a loop over this tuple (hostside/gate.py config_problems)
        if field not in documented:
            missing.setdefault(field, []).append("sglang_deploy/resolution.py COMPARED_FIELDS")
    assert not missing, f"read from /server_info but not in docs/conformance.md: {missing}"
