"""The server's first stage in ExecStart: keeps the API key out of the journal (standard library only).

SGLang logs its resolved arguments at every start (`server_args={...}`, entrypoints/engine.py:1185),
the API key it read from the --config file included, to stderr, and systemd puts stderr in the journal. This
program reads the secrets from the --config file of the command it is given, puts a pipe in place of its stdout
and stderr, forks a filter that copies what comes through the pipe to the journal with every secret replaced by
`<redacted>`, and then execs the command: the server keeps this process's PID (systemd's main PID), its own argv
and its environment, and its children (schedulers, detokenizer) inherit the pipe. The filter is no descendant of
the server (SGLang kills its own process tree when a scheduler fails), ignores SIGTERM and SIGINT and leaves when
the last writer closes the pipe, so the server's last words, a failing start's traceback included, pass through. It works the same on every systemd version (LogFilterPatterns=, systemd 253+, could only drop whole lines).

    python3 -I log_redactor.py PROGRAM ARG... --config SECRETS.yaml
"""

import json
import os
import signal
import sys

REDACTED = b"<redacted>"
SECRET_KEYS = ("api-key", "api_key", "admin-api-key", "admin_api_key")
MAX_LINE = 1 << 20  # a line longer than this is passed on in pieces (a secret is never split: see _filter)


def secrets_of(config_path):
    """Every secret value of the secrets file (secrets.yaml.j2 writes `key: "<JSON string>"` lines)."""
    values = []
    with open(config_path, encoding="utf-8") as handle:
        for line in handle:
            key, sep, value = line.partition(":")
            if sep and key.strip() in SECRET_KEYS:
                value = value.strip()
                try:
                    value = json.loads(value) if value.startswith('"') else value
                except ValueError:
                    pass
                if isinstance(value, str) and value:
                    values.append(value)
    return values


def spellings(secret):
    """The secret as it may be printed: raw, in a Python repr and in JSON (escapes differ)."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]}
    return sorted((form.encode("utf-8", "surrogateescape") for form in forms if form), key=len, reverse=True)


def redact(data, forms):
    for form in forms:
        data = data.replace(form, REDACTED)
    return data


def _filter(read_fd, out_fd, forms):
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    keep = max((len(form) for form in forms), default=1) - 1
    pending = b""
    while True:
        try:
            chunk = os.read(read_fd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        pending += chunk
        cut = pending.rfind(b"\n") + 1  # secrets hold no whitespace: a line is redacted whole
        if cut:
            _write(out_fd, redact(pending[:cut], forms))
            pending = pending[cut:]
        elif len(pending) > MAX_LINE:  # no newline for 1 MiB: pass it on, holding back what could start a secret
            pending = redact(pending, forms)
            _write(out_fd, pending[:len(pending) - keep])
            pending = pending[len(pending) - keep:]
    if pending:
        _write(out_fd, redact(pending, forms))


def _write(fd, data):
    while data:
        try:
            data = data[os.write(fd, data):]
        except InterruptedError:
            continue
        except OSError:
            return  # the journal's stream is gone; nothing more can be said


def main(argv):
    command = argv[1:]
    if not command or "--config" not in command[:-1]:
        print("log_redactor: usage: log_redactor.py PROGRAM ARG... --config SECRETS.yaml", file=sys.stderr)
        return 2
    config = command[command.index("--config") + 1]
    try:
        forms = [form for secret in secrets_of(config) for form in spellings(secret)]
    except OSError as error:
        forms = []
        print(f"log_redactor: cannot read {config}: {error.strerror}; the server will refuse it too", file=sys.stderr)
    read_fd, write_fd = os.pipe()
    out_fd = os.dup(2)
    # The filter is a grandchild, handed to init (or the service manager) at once: no descendant of the server,
    # so SGLang's kill_process_tree on a failing start (entrypoints/engine.py) does not kill it before the
    # traceback it is passing on reaches the journal.
    child = os.fork()
    if child == 0:
        if os.fork() == 0:
            os.close(write_fd)
            os.setsid()  # nor in the server's process group
            try:
                _filter(read_fd, out_fd, forms)
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(child, 0)
    os.close(read_fd)
    os.close(out_fd)
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    try:
        os.execv(command[0], command)
    except OSError as error:
        os.write(2, f"log_redactor: cannot run {command[0]}: {error.strerror}\n".encode())
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
