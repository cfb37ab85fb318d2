"""docs/layout.md's tree is the repository: one line per file git tracks (test data and pictures aside),
no line for a file that is gone."""

import re
import subprocess

from conftest import REPO

UNLISTED = ("tests/fixtures/", "tests/golden/", "docs/history-sim")  # test data and a picture, not code


def tree_paths(readme: str) -> list[str]:
    block = readme.split("<!-- layout:begin -->\n```\n", 1)[1].split("```\n<!-- layout:end -->", 1)[0]
    paths, stack = [], []
    for line in block.splitlines():
        indent = (len(line) - len(line.lstrip(" "))) // 2
        name = re.split(r"\s{2,}| (?=\S)", line.strip(), maxsplit=1)[0]
        stack = stack[:indent]
        if name.endswith("/"):
            stack.append(name)
        else:
            paths.append("".join(stack) + name)
    return paths


def test_the_readme_tree_has_one_line_per_file():
    listed = tree_paths((REPO / "docs" / "layout.md").read_text())
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    tracked = sorted(f for f in tracked if not f.startswith(UNLISTED) and (REPO / f).exists())
    assert [p for p in listed if listed.count(p) > 1] == []
    assert sorted(set(tracked) - set(listed)) == [], "files missing from docs/layout.md"
    assert sorted(set(listed) - set(tracked)) == [], "docs/layout.md names files that do not exist"


def test_every_line_says_what_the_file_is():
    block = (REPO / "docs" / "layout.md").read_text().split("<!-- layout:begin -->\n```\n", 1)[1].split("```", 1)[0]
    bare = [line for line in block.splitlines() if not line.strip().endswith("/") and len(line.split()) < 2]
    assert bare == []


def test_every_test_the_docs_name_exists():
    """The reference pages cite tests as evidence (`test_module::test_name`): a renamed or removed test must not stay
    cited (docs/conformance.md cited a name that no longer existed)."""
    import ast
    import re

    cited = {(page.name, module, name) for page in (REPO / "docs").glob("*.md")
             for module, name in re.findall(r"\b(test_\w+)::(test_\w+)", page.read_text())}
    assert cited, "no citation found: the pattern is wrong"
    missing = []
    for page, module, name in sorted(cited):
        path = REPO / "tests" / f"{module}.py"
        names = {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)} \
            if path.exists() else set()
        if name not in names:
            missing.append(f"docs/{page}: {module}::{name}")
    assert missing == []


# Issue 40: no flat prefix family of more than two modules in a package directory; a third member means a
# sub-package (as tune/, validate/, doctor/, token_map/, hostside's weights/ and preflight/ are).
FAMILY_ROOTS = ("sglang_deploy", "roles", "testbed")
MAX_FAMILY = 2


def prefix_families(names) -> dict[str, list[str]]:
    """Members of one package directory grouped by the first word before `_`: `x.py`, `x_*.py` and a sub-package
    `x/` are family x. `__init__.py`, `__main__.py` and non-Python files belong to none."""
    families: dict[str, list[str]] = {}
    for name in names:
        stem = name[:-1] if name.endswith("/") else name[:-3] if name.endswith(".py") else None
        if not stem or stem.startswith("__"):
            continue
        families.setdefault(stem.split("_", 1)[0], []).append(name)
    return families


def package_directories(root):
    """The project's package directories under root: the roots themselves and every directory with __init__.py."""
    roots = [root / name for name in FAMILY_ROOTS if (root / name).is_dir()]
    return sorted(set(roots) | {p.parent for directory in roots for p in directory.rglob("__init__.py")})


def crowded_families(root) -> dict[str, list[str]]:
    """'package/dir: family' -> its members, for every family of more than MAX_FAMILY members."""
    found = {}
    for directory in package_directories(root):
        names = [p.name for p in directory.glob("*.py")] + [
            p.name + "/" for p in directory.iterdir()
            if p.is_dir() and p.name != "__pycache__" and any(p.rglob("*.py"))]
        for family, members in prefix_families(names).items():
            if len(members) > MAX_FAMILY:
                found[f"{directory.relative_to(root)}: {family}"] = sorted(members)
    return found


def test_no_package_holds_a_prefix_family_of_more_than_two_modules():
    walked = package_directories(REPO)
    assert {REPO / name for name in FAMILY_ROOTS} <= set(walked)
    assert REPO / "sglang_deploy" / "hostside" / "preflight" in walked and REPO / "sglang_deploy" / "sim" in walked
    assert crowded_families(REPO) == {}, "make the family a sub-package (as tune/ and validate/ are)"


def test_a_third_family_member_is_found(tmp_path):
    assert prefix_families(["doctor.py", "doctor_ab.py", "doctor_levers.py", "gate.py", "__init__.py"]) == {
        "doctor": ["doctor.py", "doctor_ab.py", "doctor_levers.py"], "gate": ["gate.py"]}
    package = tmp_path / "sglang_deploy" / "hostside"
    for name in ("__init__.py", "router_check.py", "router_launch.py", "store.py"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("")
    (tmp_path / "sglang_deploy" / "__init__.py").write_text("")
    assert crowded_families(tmp_path) == {}  # two members are fine
    (package / "router").mkdir()
    (package / "router" / "__init__.py").write_text("")  # a sub-package x/ is a member of family x
    assert crowded_families(tmp_path) == {
        "sglang_deploy/hostside: router": ["router/", "router_check.py", "router_launch.py"]}
