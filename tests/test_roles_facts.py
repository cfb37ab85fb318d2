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
import re
from pathlib import Path

import pytest
from pyinfra.api import FactBase

from roles import facts

FIXTURES = Path(__file__).parent / "fixtures" / "facts"
CASES = sorted(FIXTURES.glob("*/*.json"))
FACTS = sorted(name for name, value in vars(facts).items()
               if isinstance(value, type) and issubclass(value, FactBase) and value is not FactBase)


def as_json(value):
    """A fact's value as JSON: a typed document (hostside/contract/: the release store's state) as its fields."""
    return json.loads(json.dumps(value, default=lambda document: document.to_dict()))


def test_every_fact_has_fixtures():
    assert FACTS == sorted({path.parent.name for path in CASES})


def printed_by_program(line: str, command: str) -> bool:
    """A section DeployState's host program prints itself (hostside/deploy_facts.py): the store's, and a snapshot's
    status for each --snapshot the command passes it."""
    if "hostside.deploy_facts" not in command:
        return False
    status = re.fullmatch(r"@@([a-z]+[0-9]*)_status", line)
    return line == "@@store" or bool(status and f"--snapshot {status.group(1)} " in command)


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
                assert f"echo '{line}'" in command or printed_by_program(line, command), \
                    f"{line}: not a section this command prints"
    if "raises" in case:
        with pytest.raises(getattr(builtins, case["raises"])):
            fact.process(output, **case.get("process_arg", {}))
        return
    value = fact.process(output, **case.get("process_arg", {})) if output else fact.default()
    assert as_json(value) == case["fact"]


def test_the_deploy_state_command_fits_one_argument_and_runs_one_host_program(tmp_path):
    """The host's shell gets DeployState's command as one argument, which Linux caps at 128 KiB (MAX_ARG_STRLEN):
    with a drafter offered it once grew past that and the fact failed ("Argument list too long") before the deploy
    did anything. One host program (hostside/deploy_facts.py) answers for the store and every snapshot, carried
    once however many snapshots it checks; run here by a real shell (nothing installed: the carried program), it
    answers for each snapshot."""
    import subprocess

    from sglang_deploy.weights import manifest_from_directory, write_manifest

    snapshots = []
    for index in range(4):
        directory = tmp_path / f"snapshot{index}"
        directory.mkdir()
        (directory / "config.json").write_text(f'{{"index": {index}}}')
        manifest = tmp_path / f"snapshot{index}.json"
        write_manifest(manifest_from_directory(directory), manifest)
        snapshots.append((str(manifest), str(directory)))
    fact = facts.DeployState()
    command = fact.command(service="sglang", weights=(*snapshots[0], None), draft=(*snapshots[1], None),
                           offered=tuple(snapshots[2:]))
    assert len(command.encode()) < 128 * 1024 * 3 // 4, len(command)  # a quarter left for growth
    assert command.count(facts.inline_program("deploy_facts")) == 1
    assert facts.inline_program("weights") not in command and facts.inline_program("store") not in command
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120,
                            env={**__import__("os").environ, "SGLANG_DEPLOY_MODELS": str(tmp_path)})  # the models root
    sections = facts.split_sections(result.stdout.splitlines())
    # the program answered for each snapshot (never recorded as verified here: no fetch or push verified it)
    answers = [json.loads("\n".join(sections[f"{name}_status"]))
               for name in ("weights", "draft", "offered0", "offered1")]
    assert [answer["path"] for answer in answers] == [directory for _, directory in snapshots], \
        result.stdout[-2000:] + result.stderr[-2000:]
    value = fact.process(result.stdout.splitlines())
    assert value["weights"] == {"verified": False, "hub_client": None} and len(value["offered"]) == 2
