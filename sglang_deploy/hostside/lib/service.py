"""The systemd service and its server process as the host shows them: systemctl's status, the process's command
line and environment (/proc), and whether they are a release's (its ExecStart, its environment file).

Standard library only; it imports only the host's paths (contract/paths.py) from its package (the store, the switch, the gate and the controller read it).
"""

import os
import re
import subprocess

from ..contract.paths import HOST_LIB

# ExecStart's first stage when the server has secrets: the server's stdout and stderr through a filter that keeps
# them out of the journal (log_redactor.py); it execs the server, which keeps the main PID.
LOG_REDACTOR = ("/usr/bin/python3", "-I", f"{HOST_LIB}/hostside/log_redactor.py")


def server_argv(exec_start):
    """The server's own argv: ExecStart without the log redactor, which execs the server."""
    exec_start = list(exec_start or [])
    return exec_start[len(LOG_REDACTOR):] if tuple(exec_start[:len(LOG_REDACTOR)]) == LOG_REDACTOR else exec_start


def parse_cmdline(raw):
    """/proc/PID/cmdline as a list of strings. A process may rewrite its own argv with any bytes (the service user
    controls the server): bytes that are not UTF-8 are shown escaped, never an exception that would stop a state
    listing, a switch or a rollback."""
    return [arg.decode("utf-8", errors="backslashreplace") for arg in raw.split(b"\0") if arg]


def cmdline_matches(cmdline, exec_start) -> bool:
    """A script's process shows its interpreter first (`python3 /venv/bin/sglang serve ...`)."""
    exec_start = server_argv(exec_start)
    if not cmdline or not exec_start:
        return False
    if cmdline == exec_start:
        return True
    return os.path.basename(cmdline[0]).startswith("python") and cmdline[1:] == exec_start


def _env_value(raw):
    """One value as systemd's EnvironmentFile= reads it: double quotes with backslash escapes of the backslash,
    the quote, $ and the backtick (render.env_quote writes those), single quotes literal, else unquoted with
    backslash escapes."""
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1]
    quoted = len(raw) >= 2 and raw[0] == raw[-1] == '"'
    text, out, i = (raw[1:-1] if quoted else raw), [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and (not quoted or text[i + 1] in '"\\$`'):
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def env_file_values(text) -> dict:
    """KEY=VALUE lines of a release's environment file (comments skipped), as systemd's EnvironmentFile=
    reads the ones the renderer writes."""
    values = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        values[key] = _env_value(value)
    return values


def read_environ(pid) -> dict | None:
    """/proc/PID/environ as a dict; None when it cannot be read (no process, not allowed) or is empty (a process
    in the middle of exec, or a kernel thread, shows none)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return dict(item.decode(errors="replace").split("=", 1) for item in raw.split(b"\0") if b"=" in item) or None


def environment_drift(pid, declared) -> list | None:
    """Names (never values) of declared variables the server process lacks or has with another value; None
    when the process's environment cannot be read: nothing to compare."""
    environ = read_environ(pid)
    if environ is None:
        return None
    return [name for name, value in declared.items() if environ.get(name) != value]


def environment_drop_ins(service):
    """The unit's drop-ins that set, unset or load environment variables (a local override)."""
    show = systemctl("show", "-p", "DropInPaths", "--value", f"{service}.service").stdout.split()
    found = []
    for path in show:
        try:
            with open(path) as f:
                if re.search(r"(?m)^\s*(Environment|UnsetEnvironment|EnvironmentFile|PassEnvironment)\s*=", f.read()):
                    found.append(path)
        except OSError:
            pass
    return found

def systemctl(*args):
    return subprocess.run(["systemctl", *args], capture_output=True, text=True)


def service_status(service):
    show = systemctl("show", "-p", "ActiveState", "-p", "SubState", "-p", "Result", "-p", "MainPID",
                     "-p", "ExecMainStartTimestampMonotonic", f"{service}.service").stdout
    props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    pid = int(props.get("MainPID") or 0)
    cmdline = None
    if pid:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = parse_cmdline(f.read())
        except OSError:  # the process went away
            pass
    return {"active_state": props.get("ActiveState"), "sub_state": props.get("SubState"),
            "result": props.get("Result"), "main_pid": pid, "cmdline": cmdline,
            "started_monotonic_us": props.get("ExecMainStartTimestampMonotonic")}
