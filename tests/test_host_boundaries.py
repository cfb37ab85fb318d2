"""What the host programs trust of the server and the host: who listens on the port (the key goes to the unit's
processes only), server text on the terminal, answer sizes, files root reads and writes (security review 2)."""

from __future__ import annotations

import http.server
import os
import threading

import pytest

from sglang_deploy.hostside.lib import client, listener

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(n, local_port, remote_port, state, inode, uid=999):
    return (f"   {n}: 0100007F:{local_port:04X} 0100007F:{remote_port:04X} {state} 00000000:00000000 00:00000000 "
            f"00000000  {uid}        0 {inode} 1\n")


def fake_proc(tmp_path, holders):
    """A /proc with pid -> [socket inodes] as fd links (readlink needs no target); every pid of this test's uid."""
    proc = tmp_path / "proc"
    for pid, inodes in holders.items():
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "comm").write_text("squatter\x1b[2J\n")
        for fd, inode in enumerate(inodes):
            os.symlink(f"socket:[{inode}]", proc / str(pid) / "fd" / str(fd + 3))
        os.symlink("/dev/null", proc / str(pid) / "fd" / "0")
    return proc


# rows of /proc/net/tcp, holders, the unit's pids -> the decision
LISTENER_CASES = {
    "nothing listens (a server still loading, or a squatter between listens)": (
        [row(0, 30000, 40000, "01", 11)], {100: ["11"]}, {100}, "nothing listens on port 30000"),
    "the unit's process listens": ([row(0, 30000, 0, "0A", 4242)], {100: ["4242"]}, {100}, None),
    "the unit listens on two addresses (one inode each)": (
        [row(0, 30000, 0, "0A", 1), row(1, 30000, 0, "0A", 2)], {100: ["1"], 101: ["2"]}, {100, 101}, None),
    "another user's process listens": ([row(0, 30000, 0, "0A", 4242)], {777: ["4242"]}, {100},
                                       "port 30000 is held by pid 777 (squatter\\x1b[2J, uid"),
    "the unit and a squatter on another address": (
        [row(0, 30000, 0, "0A", 1), row(1, 30000, 0, "0A", 2)], {100: ["1"], 777: ["2"]}, {100}, "held by pid 777"),
    "another uid's listener whose fds are not readable (the watch has no CAP_SYS_PTRACE)": (
        [row(0, 30000, 0, "0A", 4242)], {100: []}, {100}, "held by a process of uid 999 not visible here"),
    "the unit's uid owns the socket, its fds not readable": (
        [row(0, 30000, 0, "0A", 4242, uid=os.getuid())], {100: []}, {100}, None),
    "the unit is not running (no pids)": ([row(0, 30000, 0, "0A", 4242)], {100: ["4242"]}, set(), "held by pid 100"),
}


@pytest.mark.parametrize("rows, holders, pids, expected", LISTENER_CASES.values(), ids=LISTENER_CASES)
def test_the_key_goes_only_to_a_port_the_units_processes_listen_on(tmp_path, rows, holders, pids, expected):
    table = tmp_path / "tcp"
    table.write_text(HEADER + "".join(rows))
    problem = listener.foreign_listener("sglang", "http://127.0.0.1:30000", pids=pids, tables=(str(table),),
                                        proc=str(fake_proc(tmp_path, holders)))
    assert (problem is None, expected is None or expected in problem) == (expected is None, True), problem


@pytest.fixture
def key_server():
    """A loopback HTTP server in this process that records the Authorization header of every request."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("unit_is_this_process", [True, False])
def test_a_real_listener_is_judged_by_the_process_that_holds_it(key_server, unit_is_this_process):
    url, _ = key_server
    pids = {os.getpid()} if unit_is_this_process else {os.getppid()}
    problem = listener.foreign_listener("sglang", url, pids=pids)
    assert (problem is None) == unit_is_this_process, problem
    assert unit_is_this_process or f"held by pid {os.getpid()}" in problem


@pytest.mark.parametrize("unit_is_this_process", [True, False])
def test_the_key_is_sent_only_over_a_connection_the_unit_accepted(key_server, monkeypatch, unit_is_this_process):
    """The connection check after connect(): a listener swapped after the port check still gets no key."""
    url, seen = key_server
    monkeypatch.setattr(client, "GUARD", None)
    monkeypatch.setattr(client, "GUARDED_OPENER", None)
    listener.guard_unit("sglang", pids={os.getpid()} if unit_is_this_process else {os.getppid()}, accept_wait_s=1)
    status, body = client.http(url + "/server_info", api_key="sk-the-key")
    unkeyed, _ = client.http(url + "/health")  # no key: no check needed
    assert (status, unkeyed) == ((200 if unit_is_this_process else None), 200), body
    assert seen == (["Bearer sk-the-key", None] if unit_is_this_process else [None])
    assert unit_is_this_process or b"the connection to port" in body


def test_the_units_processes_are_asked_once_per_interval_and_again_before_a_refusal(key_server, monkeypatch):
    """Two systemctl calls per keyed request added up on a busy host: the list is reused for UNIT_TTL_S, and a
    connection it does not cover is judged again on a fresh list (a restarted server is not refused)."""
    url, seen = key_server
    calls = []
    answers = iter([{os.getppid()}, {os.getpid()}])  # the first list is stale: the server is this process

    def unit_pids(service):
        calls.append(service)
        return next(answers, {os.getpid()})

    monkeypatch.setattr(listener, "unit_pids", unit_pids)
    monkeypatch.setattr(client, "GUARD", None)
    monkeypatch.setattr(client, "GUARDED_OPENER", None)
    listener.guard_unit("sglang", accept_wait_s=0.2)
    for _ in range(3):
        status, body = client.http(url + "/server_info", api_key="sk-the-key")
        assert status == 200, body
    assert len(calls) == 2 and seen == ["Bearer sk-the-key"] * 3


# --- the root watch's textfile directory (finding 7) ----------------------------------------------

def textfile_case(tmp_path, case):
    """The textfile directory of one case under tmp_path, and a victim file the root watch must not touch."""
    victim = tmp_path / "state.json"
    victim.write_text("{}")
    victim.chmod(0o600)
    directory = tmp_path / "textfile"
    directory.mkdir(mode=0o755)
    if case == "group-writable":
        directory.chmod(0o775)
    elif case == "world-writable-sticky":
        directory.chmod(0o1777)
    elif case == "owned-by-the-service-user":
        os.chown(directory, 1234, 1234)
    elif case == "a-symlink-to-a-root-directory":
        os.rmdir(directory)
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        directory.symlink_to(tmp_path / "elsewhere")
    elif case == "a-symlink-planted-at-the-prom-name":
        (directory / "sglang-deploy-sglang.prom").symlink_to(victim)
    elif case == "a-symlink-planted-at-the-temporary-name":
        (directory / f".sglang-deploy-sglang.prom.{os.getpid()}.tmp").symlink_to(victim)
    elif case == "an-ancestor-owned-by-another-user":
        os.chown(tmp_path, 1234, 1234)
    elif case == "missing-is-created":
        os.rmdir(directory)
    return directory, victim


# case -> the refusal's words (None: written)
TEXTFILE_CASES = {
    "root-owned-0755": None,
    "missing-is-created": None,
    "a-symlink-planted-at-the-prom-name": None,  # replaced by the rename, not followed
    "a-symlink-planted-at-the-temporary-name": None,  # removed, not followed
    "group-writable": "with mode 0775; accepted: a directory owned by root and writable by root alone",
    "world-writable-sticky": "with mode 1777",
    "owned-by-the-service-user": "is owned by uid 1234",
    "an-ancestor-owned-by-another-user": None,  # walked without following links: its owner cannot redirect
    "a-symlink-to-a-root-directory": "is a symlink or not a directory",
}


@pytest.mark.skipif(os.geteuid() != 0, reason="the watch runs as root; ownership cases need root")
@pytest.mark.parametrize("case, refusal", TEXTFILE_CASES.items(), ids=TEXTFILE_CASES)
def test_the_root_watch_writes_metrics_only_into_a_directory_root_alone_writes(tmp_path, case, refusal):
    from sglang_deploy.hostside import watch

    directory, victim = textfile_case(tmp_path, case)
    try:
        path = watch.write_textfile(str(directory), "sglang", "metric 1\n")
        problem = None
    except watch.UnsafeDirectory as error:
        path, problem = None, str(error)
    assert (victim.read_text(), victim.stat().st_mode & 0o777) == ("{}", 0o600)
    if refusal is None:
        assert problem is None and open(path).read() == "metric 1\n" and os.lstat(path).st_mode & 0o777 == 0o644
        assert sorted(os.listdir(directory)) == ["sglang-deploy-sglang.prom"]
    else:
        assert problem and refusal in problem and str(directory) in problem, problem


# --- model.path: where it may be, and what root's readers open there (finding 9) ------------------


def test_a_profile_with_weights_in_dev_shm_is_refused_naming_the_field(tmp_path):
    from conftest import proven_with

    from sglang_deploy.profile import ProfileError, load_profile

    path = proven_with(tmp_path, "  path: /srv/models/Qwen3.6-27B-FP8", "  path: /dev/shm/models/qwen")
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    assert any(f"{path}:6: model.path: " in p and "/dev/shm" in p for p in raised.value.problems), raised.value.problems


def weights_case(directory, case):
    import json
    import struct

    def shard(name, header):
        data = json.dumps(header).encode()
        (directory / name).write_bytes(struct.pack("<Q", len(data)) + data)

    shard("a.safetensors", {"model.layers.0.w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}})
    if case == "a FIFO named like a shard":
        os.mkfifo(directory / "b.safetensors")
    elif case == "a FIFO as config.json":
        os.mkfifo(directory / "config.json")
    elif case == "a symlink to a root-only file":
        secret = directory.parent / "root-only"
        secret.write_bytes(b"\x08" + b"\x00" * 7 + b"{}")
        (directory / "b.safetensors").symlink_to(secret)
    elif case == "a shape of huge numbers (root CPU)":
        shard("b.safetensors", {"x": {"dtype": "BF16", "shape": [10 ** 400] * 3, "data_offsets": [0, 0]}})


# case -> the words of the error (None: summarised)
WEIGHTS_CASES = {
    "regular shards": None,
    "a FIFO named like a shard": "not a regular file",
    "a FIFO as config.json": "not a regular file",
    "a symlink to a root-only file": "a symlink",
    "a shape of huge numbers (root CPU)": "is not a list of at most 8 sizes",
}


@pytest.mark.parametrize("case, error", WEIGHTS_CASES.items(), ids=WEIGHTS_CASES)
def test_roots_header_reader_neither_blocks_nor_follows_links(tmp_path, case, error):
    from sglang_deploy.hostside import safetensors_headers

    directory = tmp_path / "weights"
    directory.mkdir()
    weights_case(directory, case)
    outcome = {}

    def summarize():
        try:
            outcome["summary"] = safetensors_headers.summarize(str(directory))
        except (OSError, ValueError) as raised:
            outcome["error"] = str(raised)

    worker = threading.Thread(target=summarize, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "the reader blocked"
    if error is None:
        assert outcome["summary"]["bytes"]["layers"] == 32, outcome
    else:
        assert error in outcome.get("error", ""), outcome


# --- the secrets file through pyinfra -vvv --diff (finding 12) -------------------------------------

SECRET_DEPLOY = """
from roles.ops import secret_file
secret_file(name="secret", dest={dest!r}, content=open({source!r}).read(), mode=640, group="root")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the file is installed as root:root")
@pytest.mark.parametrize("step", ["create", "change", "unchanged"])
def test_the_secrets_file_is_never_printed_by_pyinfra_vvv_diff(tmp_path, step):
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    dest, source = tmp_path / "secrets.yaml", tmp_path / "new"
    old_key, new_key = "sk-OLD-0123456789abcdef", "sk-NEW-fedcba9876543210"
    if step != "create":
        dest.write_text(f'api-key: "{old_key}"\n')
    source.write_text(f'api-key: "{old_key if step == "unchanged" else new_key}"\n')
    deploy = tmp_path / "deploy_secret.py"
    deploy.write_text(SECRET_DEPLOY.format(dest=str(dest), source=str(source)))
    run = subprocess.run([sys.executable, "-m", "pyinfra", "-y", "-vvv", "--diff", "@local", str(deploy)], cwd=repo,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(repo)})
    printed = run.stdout + run.stderr
    assert run.returncode == 0, printed[-2000:]
    assert (old_key in printed, new_key in printed) == (False, False), printed
    assert (dest.read_text(), dest.stat().st_mode & 0o777) == (source.read_text(), 0o640)
    assert ("changed (secret" in printed) == (step != "unchanged"), printed[-2000:]


# --- server text on the operator's terminal, answer sizes, the results path (findings 16, 19) ------

PRINTABLE_CASES = {  # server text -> what may reach the terminal
    "plain text": ("release OK, 50.1 tok/s", "release OK, 50.1 tok/s"),
    "line erase and cursor up": ("\x1b[2K\x1b[1Arelease OK", "\\x1b[2K\\x1b[1Arelease OK"),
    "terminal title (OSC 0)": ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
    "clipboard (OSC 52)": ("\x1b]52;c;Y3VybCBldmls\x07", "\\x1b]52;c;Y3VybCBldmls\\x07"),
    "a forged line": ("500\nGATE PASS", "500\\nGATE PASS"),
    "carriage return": ("FAILED\rpass  ", "FAILED\\rpass  "),
    "bidi override": ("abc\u202edcba", "abc\\u202edcba"),
    "C1 control (CSI)": ("\x9b31m", "\\x9b31m"),
    "bytes, not UTF-8": (b"\xff\x1b[31m", "\ufffd\\x1b[31m"),
    "other scripts stay": ("Grüße, 你好", "Grüße, 你好"),
}


@pytest.mark.parametrize("text, shown", PRINTABLE_CASES.values(), ids=PRINTABLE_CASES)
def test_server_text_reaches_the_terminal_escaped(text, shown):
    assert client.printable(text) == shown


def test_the_gate_table_escapes_what_the_server_said():
    from sglang_deploy.hostside.lib import gate
    from sglang_deploy.hostside.contract.gate import GateResult

    table = gate.table(GateResult(verdict="inconclusive", rows=[], reasons=[], config_problems=[],
                                  inconclusive=["sample 1: HTTP Error 500: \x1b[31mfake\x1b[0m\nGATE PASS"]))
    assert "\x1b" not in table and table.splitlines()[-1].startswith("GATE INCONCLUSIVE"), table


class Body:
    def __init__(self, size):
        self.left = size

    def read(self, n=-1):
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return b"x" * n


@pytest.mark.parametrize("size, ok", [(1 << 10, True), (client.MAX_BODY_BYTES, True), (client.MAX_BODY_BYTES + 1, False)])
def test_server_answers_are_read_up_to_a_bound(size, ok):
    try:
        read = len(client.read_bounded(Body(size)))
    except client.TooLarge as error:
        read = str(error)
    assert read == size if ok else "larger than 16 MiB" in read


@pytest.mark.parametrize("release, name", [("0007-0123abcd", "0007-0123abcd"), ("../../../.ssh/authorized_keys", "unknown"),
                                           ("0001-aaaaaaaa/../../x", "unknown"), (None, "unknown")])
def test_the_results_path_takes_only_a_release_id_from_the_host(tmp_path, release, name):
    from sglang_deploy.results import save_result

    path = save_result("ct129", {"release": release}, results_dir=tmp_path)
    assert (path.parent, path.name.startswith(f"{name}-switch-")) == (tmp_path / "ct129", True), path
