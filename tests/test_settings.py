"""Every host setting once: each key the code reads from host data has its default, with a comment, in
group_data/all.py, and docs/settings.md names it. (pyinfra's own connector keys are pyinfra's.)"""

import ast
import re

from conftest import REPO

GROUP_DATA = REPO / "group_data" / "all.py"
# pyinfra's connector and sudo settings: documented by pyinfra, set in inventories.
PYINFRA_KEYS = {"ssh_hostname", "ssh_user", "ssh_port", "ssh_key", "_sudo"}
CODE = [*REPO.glob("*.py"), *(REPO / "roles").glob("*.py"), *(REPO / "sglang_deploy").glob("*.py")]


def _is_host_data(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.value, ast.Name)
            and node.value.id == "host") or (isinstance(node, ast.Name) and node.id in ("data", "host_data"))


def keys_read() -> dict[str, str]:
    """key -> the first file:line that reads it from host data."""
    found = {}
    for path in CODE:
        for node in ast.walk(ast.parse(path.read_text())):
            key = None
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr == "get" and _is_host_data(func.value):
                    key = node.args[0]
                elif (isinstance(func, ast.Name) and func.id in ("host_flag", "get", "_get", "_int", "_number", "_int_list", "origin")
                      and len(node.args) > 1 and _is_host_data(node.args[0])):
                    key = node.args[1]
            elif isinstance(node, ast.Subscript) and _is_host_data(node.value):
                key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.setdefault(key.value, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def defaults() -> dict[str, int]:
    """group_data/all.py: key -> line of its assignment, each with a comment on it or just above it."""
    lines = GROUP_DATA.read_text().splitlines()
    out = {}
    for node in ast.parse(GROUP_DATA.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.lineno
    return {key: line for key, line in out.items()
            if not ("#" in lines[line - 1] or any(lines[i].startswith("#") for i in range(max(0, line - 4), line - 1)))}, out


def test_every_key_the_code_reads_has_its_default_in_group_data():
    undocumented, every = defaults()
    missing = {key: where for key, where in keys_read().items() if key not in every and key not in PYINFRA_KEYS}
    assert missing == {}, f"read from host data but not set in group_data/all.py: {missing}"
    assert undocumented == {}, f"group_data/all.py settings without a comment: {undocumented}"


def test_the_readme_names_every_setting():
    readme = (REPO / "docs" / "settings.md").read_text()
    _, every = defaults()
    named = set(re.findall(r"`(?:--data )?([a-z_]+)(?:=[^`]*)?`", readme)) | set(re.findall(r'"([a-z_]+)":', readme))
    assert sorted(set(every) - named) == []


def test_the_scan_finds_what_it_should():
    """The scan itself: it sees the settings deploy.py is known to read (a broken scan passes nothing)."""
    read = keys_read()
    assert {"skip_gate", "max_auto_rollbacks", "keep_releases", "profile"} <= set(read)


def settings_table() -> str:
    """docs/settings.md's table of host settings, from group_data/all.py: key, default, the comment that explains it."""
    lines = GROUP_DATA.read_text().splitlines()
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for node in ast.parse(GROUP_DATA.read_text()).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        line = lines[node.lineno - 1]
        comment = line.split("  # ", 1)[1] if "  # " in line else ""
        above = []
        for previous in reversed(lines[:node.lineno - 1]):
            if not previous.startswith("# ") or previous.startswith("# ---"):
                break
            above.insert(0, previous[2:])
        meaning = " ".join(above + ([comment] if comment else [])).replace("|", "\\|")
        rows.append(f"| `{node.targets[0].id}` | `{ast.get_source_segment(GROUP_DATA.read_text(), node.value)}` | {meaning} |")
    return "\n".join(rows)


def test_the_readme_table_of_settings_is_group_data():
    """docs/settings.md quotes every setting with its default as group_data/all.py has it (regenerate the table between
    the markers with: python -c 'import sys; sys.path[:0]=["tests"]; import test_settings as t; print(t.settings_table())')."""
    readme = (REPO / "docs" / "settings.md").read_text()
    table = readme.split("<!-- settings:begin -->\n", 1)[1].split("\n<!-- settings:end -->", 1)[0]
    assert table == settings_table()
