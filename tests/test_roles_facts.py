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


def test_the_carried_program_is_kept_under_the_host_packages_digest(tmp_path, monkeypatch):
    """inline_program keeps what it built under the host package's digest and roles/facts.py's own source (a no-op
    deploy reads it back instead of walking the imports and compressing): a kept program of another digest is
    rebuilt and replaced, one of this digest is what the fact sends."""
    import hashlib

    from sglang_deploy.layout import host_package

    monkeypatch.setattr(facts, "INLINE_CACHE", tmp_path)
    built = facts.inline_program("deploy_facts")
    kept = tmp_path / "deploy_facts.b64"
    digest = kept.read_text().split("\n", 1)[0]
    assert digest == hashlib.sha256(host_package().digest.encode() + Path(facts.__file__).read_bytes()).hexdigest()
    assert kept.read_text() == f"{digest}\n{built}"
    kept.write_text(f"{digest}\nKEPT")
    assert facts.inline_program("deploy_facts") == "KEPT"
    kept.write_text(f"{host_package().digest}\nSTALE")  # the host package alone: another roles/facts.py's program
    assert facts.inline_program("deploy_facts") == built
    assert kept.read_text() == f"{digest}\n{built}"
    monkeypatch.setattr(facts, "INLINE_CACHE", tmp_path / "file" / "below")
    (tmp_path / "file").write_text("not a directory")  # no cache to be had: built every time, no error
    assert facts.inline_program("deploy_facts") == built


def test_the_files_modes_and_hashes_read_by_a_real_shell(tmp_path):
    """DeployState's files (one stat and one sha256sum for all of them), run by a real shell: a directory has its
    mode, owner and group; a regular file those and its content's sha256; a missing path nothing; a name with a
    space is one path; a FIFO is not read (sha256sum would wait on it forever)."""
    import grp
    import hashlib
    import os
    import pwd
    import subprocess

    directory, regular, spaced = tmp_path / "config", tmp_path / "unit.service", tmp_path / "a name.json"
    directory.mkdir(mode=0o750)
    regular.write_text("[Unit]\n")
    regular.chmod(0o644)
    spaced.write_text("{}")
    spaced.chmod(0o600)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    paths = tuple(str(p) for p in (directory, regular, tmp_path / "missing", spaced, fifo))
    command = facts.DeployState().command(service="sglang", files=paths)
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120)
    owner = [pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name]
    found = facts._files(facts.split_sections(result.stdout.splitlines()))
    assert found == {
        str(directory): ["750", *owner],
        str(regular): ["644", *owner, hashlib.sha256(b"[Unit]\n").hexdigest()],
        str(tmp_path / "missing"): [],
        str(spaced): ["600", *owner, hashlib.sha256(b"{}").hexdigest()],
        str(fifo): [oct(fifo.stat().st_mode & 0o777)[2:], *owner],
    }, result.stdout[-3000:] + result.stderr[-2000:]
