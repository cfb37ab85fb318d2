"""The suite's scheduling tables in tests/conftest.py name modules and tests that exist: a renamed test would
otherwise fall silently to the end of the order (LONGEST_FIRST) or out of its worker group."""

import ast

import pytest

import conftest
from conftest import REPO


def functions_of(module: str) -> set[str]:
    tree = ast.parse((REPO / "tests" / module).read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


@pytest.mark.parametrize("entry", conftest.LONGEST_FIRST)
def test_each_longest_first_entry_names_a_module_or_a_test(entry):
    module, _, name = entry.partition("::")
    assert (REPO / "tests" / module).is_file(), f"{module} is not a test module"
    assert not name or name in functions_of(module), f"{module} has no test {name}"


def test_the_worker_groups_name_modules():
    groups = (conftest.INDEPENDENT_TESTS | conftest.LOCAL_FRONTEND_MODULES | conftest.TIMING_SENSITIVE
              | conftest.SGLANG_FRONTEND_MODULES)
    assert [module for module in sorted(groups) if not (REPO / "tests" / module).is_file()] == []
