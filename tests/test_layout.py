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
