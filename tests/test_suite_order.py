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


PLUGIN = '''
def pytest_collection_finish(session):
    with open(OUT, "w") as out:
        for item in session.items:
            out.write(f"{item.nodeid} {int('local_frontend' in item.fixturenames)}\\n")
'''


def test_the_local_front_ends_users_run_in_one_row(tmp_path):
    """conftest.py stops the local front end after the last test in a row that uses it, and the next user starts it
    again (about 40 s of CPU): in the suite's order its users, over all of LOCAL_FRONTEND_MODULES, are one row."""
    import subprocess
    import sys

    out = tmp_path / "order.txt"
    (tmp_path / "order_plugin.py").write_text(f"OUT = {str(out)!r}\n" + PLUGIN)
    modules = [f"tests/{module}" for module in sorted(conftest.LOCAL_FRONTEND_MODULES)]
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "order_plugin",
                             "-p", "no:cacheprovider", *modules], cwd=REPO, capture_output=True, text=True,
                            env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)}, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    uses = "".join(line.rsplit(" ", 1)[1] for line in out.read_text().splitlines())
    assert "1" in uses and "0" not in uses.strip("0"), out.read_text()


@pytest.mark.parametrize("value", ["-5", "nice", "10x"])
def test_a_bad_hostless_worker_niceness_is_named(value):
    """SGLANG_DEPLOY_TEST_HOSTLESS_WORKER takes a niceness: anything else stops the run naming the variable and what is
    accepted, before any test runs."""
    import os
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "--collect-only",
                             "tests/test_layout.py"], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "SGLANG_DEPLOY_TEST_HOSTLESS_WORKER": value})
    assert result.returncode != 0
    assert f"SGLANG_DEPLOY_TEST_HOSTLESS_WORKER={value!r}: accepted is a niceness" in result.stdout + result.stderr


def test_more_workers_than_the_port_plan_fits_are_refused_by_name():
    """Each worker has its own SSH and service ports below the fleet's: -n beyond MAX_WORKERS stops the run naming the
    limit, before any worker starts."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", str(conftest.MAX_WORKERS + 1),
                             "--collect-only", "tests/test_layout.py"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert f"-n {conftest.MAX_WORKERS + 1}: at most {conftest.MAX_WORKERS} workers" in result.stdout + result.stderr
