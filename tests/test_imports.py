"""No import loop among the repository's modules (controller, roles, host package, testbed): a module's own
imports, at its top level, under `if __name__ == "__main__"` or inside a function, never lead back to it. A loop
hidden by a function-level import is a loop (layout review 4); only imports for type checking are left out."""

import ast
from pathlib import Path

from conftest import REPO

PACKAGES = ("sglang_deploy", "roles", "testbed")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: Path, name: str, modules, text: str | None = None) -> set[str]:
    """The repository's modules `path` imports, wherever the import statement is (not for typing)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()

    def visit(node):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return visit_all(node.orelse)
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            found.update([base] + [f"{base}.{alias.name}" for alias in node.names])
        visit_all(ast.iter_child_nodes(node))

    def visit_all(nodes):
        for node in nodes:
            visit(node)

    visit(ast.parse(text if text is not None else path.read_text()))
    return {m for m in found if m in modules and m != name}


def import_loops(graph) -> list[list[str]]:
    loops, state = [], {}

    def walk(name, path):
        state[name] = "open"
        for other in sorted(graph[name]):
            if state.get(other) == "open":
                loops.append(path[path.index(other):] + [other])
            elif other not in state:
                walk(other, path + [other])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    return loops


def test_no_module_imports_itself_round_a_loop():
    paths = {module_name(p): p for package in PACKAGES for p in (REPO / package).rglob("*.py")}
    graph = {name: module_imports(path, name, paths) for name, path in paths.items()}
    assert "sglang_deploy.hostside.contract.release" in graph["sglang_deploy.hostside.store"]  # the walk sees imports
    assert import_loops(graph) == []


def test_a_loop_is_found():
    assert import_loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_an_import_inside_a_function_counts():
    """A planted module whose only import of the other is inside a function: the walk sees it, so a loop that a
    local import hides is found."""
    modules = {"pkg.a": None, "pkg.b": None}
    text = "import os\n\ndef later():\n    from .b import thing\n    return thing\n"
    typing = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import Thing\n"
    assert module_imports(Path("pkg/a.py"), "pkg.a", modules, text) == {"pkg.b"}
    assert module_imports(Path("pkg/a.py"), "pkg.a", modules, typing) == set()
    graph = {"pkg.a": module_imports(Path("pkg/a.py"), "pkg.a", modules, text), "pkg.b": {"pkg.a"}}
    assert import_loops(graph) == [["pkg.a", "pkg.b", "pkg.a"]]
