"""The shared parser probe (sglang_deploy/validate/probe_client.py, validate/parser_probe.py serve()), fast: validate/parser_probe.py's own
server loop, run with a stand-in for SGLang's import and answer (its `load` and `reply`); the real SGLang answers
through it in test_resolution.py."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from sglang_deploy.validate import probe_client, validator_env

# validate/parser_probe.py's serve(), with load() and reply() standing in for SGLang: every answer says which server
# process and which fork gave it, and how many requests that process's state has seen (the warm-up is one).
STAND_IN = f"""
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("probe", {str(validator_env.PROBE_SCRIPT)!r})
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
seen = []

def reply(request, loaded):
    if request.get("fail"):
        raise ValueError("the stand-in refuses")
    seen.append(request.get("n"))
    return {{"sglang_version": "0.5.23", "server": loaded["server"], "fork": os.getpid(), "seen": list(seen)}}

probe.load = lambda: {{"server": os.getpid()}}
probe.reply = reply
probe.serve(sys.argv[1], float(sys.argv[2]))
"""


class Starts:
    """The command a client starts the server with, counting the starts."""

    def __init__(self, tmp_path, source=STAND_IN):
        self.script = tmp_path / "stand_in.py"
        self.script.write_text(source)
        self.count = 0

    def __call__(self):
        self.count += 1
        return [sys.executable, str(self.script)], dict(os.environ)


def wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_one_server_answers_every_client_each_request_in_a_fork_of_its_own(probe_sockets, tmp_path):
    path = probe_client.socket_path(Path("/cache-a"), ["0.5.23", None])
    starts = Starts(tmp_path)
    answers = []

    def client(n):
        answers.append(probe_client.answer(path, starts, {"n": n}))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert starts.count == 1, "a second server was started"
    assert len({a["server"] for a in answers}) == 1
    forks = {a["fork"] for a in answers}
    assert len(forks) == 8 and not forks & {a["server"] for a in answers}
    # the warm-up (the starting client's request) and the fork's own request: no request sees another's
    warm = answers[0]["seen"][0]
    assert sorted(a["seen"][1] for a in answers) == list(range(8))
    assert all(len(a["seen"]) == 2 and a["seen"][0] == warm for a in answers)
    assert (path.stat().st_mode & 0o777) == 0o600 and (probe_sockets / f"sglang-deploy-{os.getuid()}").stat().st_mode & 0o777 == 0o700


def test_a_failure_inside_the_probe_is_reported_with_its_traceback(probe_sockets, tmp_path):
    path = probe_client.socket_path(Path("/cache-a"), ["0.5.23", None])
    starts = Starts(tmp_path)
    probe_client.answer(path, starts, {"n": 1})
    with pytest.raises(probe_client.ProbeServerError, match="ValueError: the stand-in refuses"):
        probe_client.answer(path, starts, {"fail": True})
    assert probe_client.answer(path, starts, {"n": 2})["seen"][-1] == 2 and starts.count == 1


def test_a_server_that_cannot_start_is_reported_with_what_it_wrote(probe_sockets, tmp_path):
    path = probe_client.socket_path(Path("/cache-a"), ["0.5.23", None])
    starts = Starts(tmp_path, "import sys\nsys.stderr.write('No module named sglang')\nsys.exit(3)\n")
    with pytest.raises(probe_client.ProbeServerError, match="No module named sglang"):
        probe_client.answer(path, starts, {"n": 1})


def test_an_idle_server_leaves_and_the_next_request_starts_another(probe_sockets, tmp_path, monkeypatch):
    monkeypatch.setattr(probe_client, "IDLE_S", 0.5)
    path = probe_client.socket_path(Path("/cache-a"), ["0.5.23", None])
    starts = Starts(tmp_path)
    first = probe_client.answer(path, starts, {"n": 1})["server"]
    assert wait_for(lambda: not path.exists()), "the idle server kept its socket"
    assert probe_client.answer(path, starts, {"n": 2})["server"] != first and starts.count == 2


def test_a_killed_servers_socket_is_taken_over_by_a_new_server(probe_sockets, tmp_path):
    path = probe_client.socket_path(Path("/cache-a"), ["0.5.23", None])
    starts = Starts(tmp_path)
    first = probe_client.answer(path, starts, {"n": 1})["server"]
    os.kill(first, signal.SIGKILL)
    assert wait_for(lambda: probe_client.ask(path, {"n": 0}) is None)
    assert path.exists()  # left behind: nothing removed it
    assert probe_client.answer(path, starts, {"n": 2})["server"] != first and starts.count == 2


def test_stop_all_ends_the_servers_of_one_cache_only(probe_sockets, tmp_path):
    a = probe_client.socket_path(Path("/cache-a"), ["0.5.23", None])
    b = probe_client.socket_path(Path("/cache-b"), ["0.5.23", None])
    starts = Starts(tmp_path)
    probe_client.answer(a, starts, {"n": 1})
    probe_client.answer(b, starts, {"n": 1})
    assert probe_client.stop_all(Path("/cache-a")) == 1
    assert wait_for(lambda: not a.exists())
    assert probe_client.ask(b, {"n": 2}) is not None and starts.count == 2


def test_a_run_stops_only_the_servers_it_started(probe_sockets, tmp_path, monkeypatch):
    """A test session's end must not stop a server another run is using or starting (it would fail that run's
    request); a server stopped while it starts is started again once."""
    mine = probe_client.socket_path(Path("/cache-a"), ["0.5.23", "mine"])
    theirs = probe_client.socket_path(Path("/cache-a"), ["0.5.23", "theirs"])
    starts = Starts(tmp_path)
    monkeypatch.setenv(probe_client.OWNER_VARIABLE, "run-1")
    probe_client.answer(mine, starts, {"n": 1})
    monkeypatch.setenv(probe_client.OWNER_VARIABLE, "run-2")
    probe_client.answer(theirs, starts, {"n": 1})
    assert probe_client.stop_all(Path("/cache-a"), owner="run-1") == 1
    assert wait_for(lambda: not mine.exists())
    assert probe_client.ask(theirs, {"n": 2}) is not None and starts.count == 2
    # stopped (SIGTERM) before it answered, as by another run's stop_all: asked again of a new server
    first = tmp_path / "first-start"
    stopped = Starts(tmp_path, f"import os, pathlib, signal\nif not pathlib.Path({str(first)!r}).exists():\n"
                               f"    pathlib.Path({str(first)!r}).touch(); os.kill(os.getpid(), signal.SIGTERM)\n"
                               + STAND_IN)
    assert probe_client.answer(mine, stopped, {"n": 3})["seen"] == [3, 3] and stopped.count == 2


def test_the_socket_directory_must_be_this_users_alone(probe_sockets):
    directory = probe_sockets / f"sglang-deploy-{os.getuid()}"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    with pytest.raises(probe_client.ProbeServerError, match="mode 0700"):
        probe_client.socket_dir()


def test_a_socket_directory_too_long_for_a_socket_path_is_refused_with_the_fix(monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", "/tmp/" + "d" * 80)
    with pytest.raises(probe_client.ProbeServerError, match="set TMPDIR to a shorter directory"):
        probe_client.socket_dir()
