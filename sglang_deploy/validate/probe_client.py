"""The controller's side of the shared parser probe (validate/parser_probe.py serve()).

Importing SGLang costs seconds of CPU, so one probe server per SGLang version and GPU facts is shared by every
controller process of this user and cache (pyinfra runs, the CLI, test workers): the first one to ask starts it,
under a lock, and the others connect to its Unix socket. Each request is answered in a fork of the server, so no
request sees another's state. The server exits after IDLE_S seconds without a request; `stop_all` ends them
sooner. Nothing secret reaches it: its environment is a few names of the controller's (validator_env.probe_environment)
and requests carry command lines, configs and the unit's environment (no secret: profile/load.py refuses them there).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

IDLE_S = 300
# Names the run that starts a server (a test session sets it), so that its end stops its own servers only, not those
# another run (another session, the operator's pyinfra) is using or starting.
OWNER_VARIABLE = "SGLANG_DEPLOY_PROBE_OWNER"
STARTUP_S = 900  # an import of SGLang under a loaded machine, empty page cache included


class ProbeServerError(RuntimeError):
    pass


class ProbeServerStopped(ProbeServerError):
    """The server was ended (SIGTERM) before it answered: asked again once, by a server started anew."""


def socket_dir() -> Path:
    """A directory of this user's only (like ssh-agent's and tmux's): the sockets' path must stay short."""
    path = Path(tempfile.gettempdir()) / f"sglang-deploy-{os.getuid()}"
    if len(str(path)) > 80:  # a socket's path has at most 107 bytes; the names below take 27
        raise ProbeServerError(f"{path} is too long for the parser probe's sockets: set TMPDIR to a shorter directory")
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ProbeServerError(f"{path} must be a directory of user {os.getuid()} with mode 0700 "
                               f"(it holds the parser probe's sockets); remove it to have it made again")
    return path


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def socket_path(cache_dir: Path, identity: list) -> Path:
    """One server per cache directory and identity (SGLang's version, the GPU facts, the probe's sources...)."""
    return socket_dir() / f"{_digest(str(cache_dir))[:8]}-{_digest(json.dumps(identity))[:12]}.sock"


def ask(path: Path, request: dict) -> str | None:
    """The server's answer line, or None when no server answers there (none started, or it just left)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(str(path))
            with connection.makefile("rw", encoding="utf-8") as stream:
                stream.write(json.dumps(request) + "\n")
                stream.flush()
                line = stream.readline()
    except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
        return None
    return line or None


def _log_tail(path: Path) -> str:
    try:
        return path.with_suffix(".log").read_text(errors="replace")[-2000:]
    except FileNotFoundError:
        return ""


def _start_and_ask(path: Path, command: Callable[[], tuple[list[str], dict]], request: dict) -> str:
    argv, env = command()
    log = path.with_suffix(".log")
    with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as err:
        process = subprocess.Popen([*argv, str(path), str(IDLE_S)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=err, env=env, text=True, start_new_session=True)
    path.with_suffix(".pid").write_text(f"{process.pid}\n")
    path.with_suffix(".owner").write_text(os.environ.get(OWNER_VARIABLE, "") + "\n")
    process.stdin.write(json.dumps(request) + "\n")  # the warm-up: SGLang's lazy imports of a first resolution
    process.stdin.close()
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if path.exists():
            line = ask(path, request)
            if line is not None:
                return line
        if process.poll() is not None:
            if process.returncode == -signal.SIGTERM:  # stop_all of another run (a test session's end), mid-start
                raise ProbeServerStopped(f"the parser probe was stopped while it started\n{_log_tail(path)}")
            raise ProbeServerError(_log_tail(path))
        time.sleep(0.05)
    process.kill()
    raise ProbeServerError(f"no answer within {STARTUP_S} s\n{_log_tail(path)}")


def answer(path: Path, command: Callable[[], tuple[list[str], dict]], request: dict) -> dict:
    """The answer of the server at `path`, started with command() -> (argv, env) when none answers there."""
    line = ask(path, request)
    if line is None:  # none started, or one that reached its idle exit as the request came: start one
        with open(os.open(path.with_suffix(".lock"), os.O_WRONLY | os.O_CREAT, 0o600)) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one start at a time; the others then find it answering
            try:
                line = ask(path, request) or _start_and_ask(path, command, request)
            except ProbeServerStopped:
                line = ask(path, request) or _start_and_ask(path, command, request)
    reply = json.loads(line)
    if "probe_error" in reply:
        raise ProbeServerError(reply["probe_error"])
    return reply


def _is_server(pid: int, path: Path) -> bool:
    try:
        return str(path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _owner(path: Path) -> str:
    try:
        return path.with_suffix(".owner").read_text().strip()
    except OSError:
        return ""


def stop_all(cache_dir: Path, owner: str | None = None) -> int:
    """End the servers of one cache directory (SIGTERM: each removes its socket), only those started under `owner`
    (OWNER_VARIABLE) when one is given. Returns how many were running."""
    stopped = 0
    for pid_file in socket_dir().glob(f"{_digest(str(cache_dir))[:8]}-*.pid"):
        path = pid_file.with_suffix(".sock")
        if owner is not None and _owner(path) != owner:
            continue
        with contextlib.suppress(ValueError, OSError):
            pid = int(pid_file.read_text())
            if _is_server(pid, path):
                os.kill(pid, signal.SIGTERM)
                stopped += 1
        pid_file.unlink(missing_ok=True)
    return stopped
