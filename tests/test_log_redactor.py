"""The log redactor (hostside/log_redactor.py), ExecStart's first stage: what the server and its children print
reaches the journal with the secrets of its --config file replaced, and the server keeps the redactor's PID."""

import json
import os
import subprocess
import sys
from pathlib import Path

from sglang_deploy.hostside import log_redactor

REDACTOR = Path(log_redactor.__file__)
KEY = "sk-it's\\a\"key<&>%$-0123456789"  # quotes, a backslash and what Jinja's tojson escapes


def secrets_file(tmp_path, key=KEY):
    from sglang_deploy.render import render  # noqa: F401 - the template the tool writes
    import jinja2

    template = (REDACTOR.parents[1] / "templates" / "secrets.yaml.j2").read_text()
    text = jinja2.Environment().from_string(template).render(api_key=key, service={"user": "sglang"})
    path = tmp_path / "secrets.yaml"
    path.write_text(text)
    return path


def test_the_secret_is_read_back_from_the_file_the_tool_writes(tmp_path):
    assert log_redactor.secrets_of(secrets_file(tmp_path)) == [KEY]


def test_every_spelling_of_the_key_is_redacted_in_the_server_and_its_children(tmp_path):
    config = secrets_file(tmp_path)
    server = tmp_path / "server.py"
    server.write_text(
        "import json, os, subprocess, sys\n"
        f"key = {KEY!r}\n"
        "print('pid', os.getpid(), 'argv', json.dumps(sys.argv[1:]), flush=True)\n"
        "print('server_args=' + repr({'api_key': key}), file=sys.stderr, flush=True)\n"
        "print('json ' + json.dumps({'api_key': key}) + ' raw ' + key, flush=True)\n"
        "subprocess.run([sys.executable, '-c', 'import sys; print(sys.argv[1] * 3)', key])\n"
        "sys.stdout.write('no newline at the end ' + key); sys.stdout.flush()\n")
    process = subprocess.Popen([sys.executable, "-I", str(REDACTOR), sys.executable, str(server), "--flag", "1",
                                "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output, _ = process.communicate(timeout=30)
    text = output.decode()
    assert process.returncode == 0, text
    for form in (KEY, repr(KEY)[1:-1], json.dumps(KEY)[1:-1]):
        assert form not in text, text
    assert "server_args={'api_key': '<redacted>'}" in text
    assert '"api_key": "<redacted>"' in text and "raw <redacted>" in text
    assert "<redacted><redacted><redacted>" in text and text.endswith("no newline at the end <redacted>")
    # exec: the server runs as the redactor's own process, with its own argv
    first = text.splitlines()[0].split()
    assert int(first[1]) == process.pid
    assert json.loads(" ".join(first[3:])) == ["--flag", "1", "--config", str(config)]


def test_a_key_split_over_reads_of_a_long_line_is_still_redacted(tmp_path):
    config = secrets_file(tmp_path, "sk-long-line-key-0123456789")
    server = tmp_path / "server.py"
    server.write_text("import sys, time\nkey = 'sk-long-line-key-0123456789'\n"
                      "for i in range(3000):\n    sys.stdout.write('x' * 997 + key[:i % 20]); sys.stdout.flush()\n"
                      "    sys.stdout.write(key[i % 20:] + ' '); sys.stdout.flush()\n")
    result = subprocess.run([sys.executable, "-I", str(REDACTOR), sys.executable, str(server), "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    assert b"sk-long-line-key-0123456789" not in result.stdout and result.stdout.count(b"<redacted>") == 3000


def test_without_a_config_file_it_refuses_to_run(tmp_path):
    result = subprocess.run([sys.executable, str(REDACTOR), "/bin/true"], capture_output=True, text=True)
    assert result.returncode == 2 and "usage" in result.stderr


def test_the_unit_runs_the_server_behind_it_and_the_switch_sees_the_server(tmp_path):
    from conftest import PROVEN
    from sglang_deploy.hostside.lib.service import LOG_REDACTOR, cmdline_matches, server_argv
    from sglang_deploy.profile import load_profile
    from sglang_deploy.render import render

    rendered = render(load_profile(PROVEN), api_key="sk-0123456789abcdef")
    assert tuple(rendered.exec_start[:3]) == LOG_REDACTOR
    server = server_argv(rendered.exec_start)
    assert server[1:] == ["serve", *server[2:]] and server[0].endswith("/bin/sglang")
    # what /proc/<main pid>/cmdline shows after the exec: the interpreter, then the script and its arguments
    assert cmdline_matches(["/opt/venv/bin/python3", *server], rendered.exec_start)
    assert not cmdline_matches(["/usr/bin/python3", *rendered.exec_start[1:]], rendered.exec_start)
    assert os.path.basename(LOG_REDACTOR[2]) == REDACTOR.name
    unkeyed = render(load_profile(PROVEN), api_key=None)
    assert unkeyed.exec_start[0].endswith("/bin/sglang")  # nothing to redact: the server alone


def test_the_filter_outlives_a_server_that_kills_its_own_process_tree(tmp_path):
    """SGLang's kill_process_tree on a failed start kills every descendant: the filter is none, so the last lines
    (the traceback) still reach the journal."""
    config = secrets_file(tmp_path)
    server = tmp_path / "server.py"
    server.write_text(
        "import os, signal, sys, time\n"
        "for pid in os.popen(f'pgrep -P {os.getpid()}').read().split():\n"  # psutil's children(), as SGLang does
        "    try:\n"
        "        os.kill(int(pid), signal.SIGKILL)\n"
        "    except ProcessLookupError:\n"  # the shell that ran pgrep, gone already
        "        pass\n"
        "time.sleep(0.2)\n"
        "print('Scheduler hit an exception: the last words', file=sys.stderr, flush=True)\n"
        "sys.exit(1)\n")
    result = subprocess.run([sys.executable, "-I", str(REDACTOR), sys.executable, str(server), "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    assert b"Scheduler hit an exception: the last words" in result.stdout and result.returncode == 1
