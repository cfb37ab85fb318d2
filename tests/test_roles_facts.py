"""The pyinfra facts of roles/facts.py, as pyinfra tests its own: for every fixture
tests/fixtures/facts/<Fact>/<case>.json, the fact's command for the case's arguments contains the expected
command (or each of its distinctive parts), and the lines the host prints parse into the expected fact.

A fixture: {"note": why the case exists (optional), "arg": the fact's keyword arguments, "process_arg": process()'s
(optional), "command": a string or a list of strings the command must contain, "output": the host's stdout lines,
"fact": the parsed value (JSON: tuples are lists), or "raises": the exception's class name instead}. As in pyinfra,
empty output is never processed: the fact is the fact's default (None). Every `@@section` marker line in the
output is one the command prints (so a renamed section cannot leave a fixture behind), unless the case sets
"foreign_sections": true (a case about another section's answer).
"""

import builtins
import json
from pathlib import Path

import pytest
from pyinfra.api import FactBase

from roles import facts

FIXTURES = Path(__file__).parent / "fixtures" / "facts"
CASES = sorted(FIXTURES.glob("*/*.json"))
FACTS = sorted(name for name, value in vars(facts).items()
               if isinstance(value, type) and issubclass(value, FactBase) and value is not FactBase)


def as_json(value):
    """A fact's value as JSON: a typed document (hostside/documents.py: the release store's state) as its fields."""
    return json.loads(json.dumps(value, default=lambda document: document.to_dict()))


def test_every_fact_has_fixtures():
    assert FACTS == sorted({path.parent.name for path in CASES})


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_fact(path):
    case = json.loads(path.read_text())
    fact = getattr(facts, path.parent.name)()
    command = fact.command(**case["arg"])
    for part in [case["command"]] if isinstance(case["command"], str) else case["command"]:
        assert part in command
    output = case["output"]
    if not case.get("foreign_sections"):
        for line in output:
            if line.startswith("@@"):
                assert f"echo '{line}'" in command, f"{line}: not a section this command prints"
    if "raises" in case:
        with pytest.raises(getattr(builtins, case["raises"])):
            fact.process(output, **case.get("process_arg", {}))
        return
    value = fact.process(output, **case.get("process_arg", {})) if output else fact.default()
    assert as_json(value) == case["fact"]
