"""Is the process on the other end of the port the unit's own? Checked before the API key is sent.

SGLang binds its port only after minutes of loading, and a server that crashed leaves it free: a local user
who binds it first would receive the API key (and could fake readiness, the gate or the watch). Two checks:

- `foreign_listener`: every socket listening on the port belongs to the unit's processes (its cgroup), and
  one does; "nothing listens" is not a pass (readiness waits, the others fail).
- `Guard`, installed with `guard_unit(service)` by every program that sends the key (switch, watch, doctor,
  tune, bench): after each keyed connection is made, and before a byte is sent, the server-side end of that
  very connection must be held by the unit's processes. No listener swapped between a check and the
  connect can receive the key: the connection is tied to the process that accepted it.

Who holds a socket is read from /proc/PID/fd. A root program without CAP_SYS_PTRACE (the sandboxed watch)
cannot read the fds of another user's processes: a socket no visible process holds passes only when the
kernel's owner uid of the socket (/proc/net/tcp) is the uid of the unit's processes, so another local
user's listener never passes. The /proc readers take their roots as arguments so that the tests can hand
them fixtures.
"""

import http.client
import os
import time
import urllib.request

from . import client
from .service import service_status, systemctl

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
LISTEN, ESTABLISHED = "0A", "01"


def table_rows(tables=TABLES):
    """(state, local port, remote port, owner uid, inode) of every TCP socket in the tables (IPv4 and IPv6)."""
    rows = []
    for table in tables:
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9:
                rows.append((fields[3], int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16),
                             int(fields[7]), fields[9]))
    return rows


def listening_inodes(port, tables=TABLES):
    """inode -> owner uid of the sockets in LISTEN state on the port (any local address)."""
    return {inode: uid for state, local, _, uid, inode in table_rows(tables) if state == LISTEN and local == port}


def accepted_inodes(server_port, client_port, tables=TABLES):
    """inode -> owner uid of the server-side ends of a connection from client_port to server_port, once accepted
    (until then the inode is 0)."""
    return {inode: uid for state, local, remote, uid, inode in table_rows(tables)
            if state == ESTABLISHED and local == server_port and remote == client_port and inode != "0"}


def socket_owners(inodes, pids=None, proc="/proc"):
    """inode -> pids holding it open, looking at `pids` only or (None) at every process /proc shows."""
    owners = {}
    for entry in (map(str, pids) if pids is not None else os.listdir(proc)):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"{proc}/{entry}/fd")
        except OSError:  # gone, or not ours to see
            continue
        for fd in fds:
            try:  # one fd closed meanwhile (the listing's own, in this process) skips that fd, not the process
                target = os.readlink(f"{proc}/{entry}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                owners.setdefault(target[8:-1], set()).add(int(entry))
    return owners


def unit_pids(service, cgroup_root="/sys/fs/cgroup"):
    """Every process of the unit's cgroup (SGLang's schedulers and detokenizer included), and its MainPID."""
    group = systemctl("show", "-p", "ControlGroup", "--value", f"{service}.service").stdout.strip()
    pids = set()
    if group:
        for directory, _, files in os.walk(cgroup_root + group):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(directory, "cgroup.procs")) as f:
                        pids.update(int(line) for line in f if line.strip())
                except OSError:
                    pass
    main_pid = service_status(service)["main_pid"]
    return pids | ({main_pid} if main_pid else set())


def process_uids(pids, proc="/proc"):
    uids = set()
    for pid in pids:
        try:
            uids.add(os.stat(f"{proc}/{pid}").st_uid)
        except OSError:
            pass
    return uids


def process_label(pid, proc="/proc"):
    try:
        with open(f"{proc}/{pid}/comm") as f:
            comm = f.read().strip()
        uid = os.stat(f"{proc}/{pid}").st_uid
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} ({client.printable(comm)}, uid {uid})"


def judge(what, sockets, owners, pids, unit_uids, unit, label=process_label):
    """The decision (pure): None when there are sockets (inode -> owner uid) and each is held by the unit's
    processes, or, held by no process visible here, owned by the unit's uid; else why not."""
    if not sockets:
        return f"nothing listens on {what}"
    strangers = sorted({pid for held in owners.values() for pid in held if pid not in pids})
    unseen = sorted({uid for inode, uid in sockets.items() if not owners.get(inode) and uid not in unit_uids})
    if strangers or unseen:
        who = ", ".join([label(pid) for pid in strangers] + [f"a process of uid {uid} not visible here" for uid in unseen])
        return f"{what} is held by {who}, not by {unit}: the API key is not sent (another process bound the port)"
    return None


def foreign_listener(service, probe_url, pids=None, tables=TABLES, proc="/proc"):
    """None when every socket listening on the probe's port belongs to the unit's processes; else why not
    (also when nothing listens: callers that wait, wait; the others fail)."""
    port = int(client.LOOPBACK_URL.fullmatch(probe_url).group(2))
    sockets = listening_inodes(port, tables)
    pids = unit_pids(service) if pids is None else pids
    return judge(f"port {port}", sockets, socket_owners(sockets, proc=proc), pids, process_uids(pids, proc),
                 f"{service}.service", lambda pid: process_label(pid, proc))


class Guard:
    """The connection check: `pids` (a set, or a callable giving it) are the unit's processes."""

    UNIT_TTL_S = 2.0  # the unit's processes, asked of systemd at most this often (two systemctl calls each time)

    def __init__(self, service, pids=None, accept_wait_s=5.0, tables=TABLES, proc="/proc"):
        self.service, self.pids, self.accept_wait_s = service, pids, accept_wait_s
        self.tables, self.proc = tables, proc
        self._unit = None  # (monotonic time, pids) of the last unit_pids()

    def unit(self, fresh=False):
        if self.pids is None:
            now = time.monotonic()
            if fresh or self._unit is None or now - self._unit[0] > self.UNIT_TTL_S:
                self._unit = (now, unit_pids(self.service))
            return self._unit[1]
        return self.pids() if callable(self.pids) else self.pids

    def connection_problem(self, sock):
        """None when the unit's processes hold the server-side end of this connected socket, else why not. The
        unit's process list is reused for UNIT_TTL_S; a connection it does not cover is judged on a fresh one."""
        problem = self._connection_problem(sock, self.unit())
        if problem and self.pids is None:
            problem = self._connection_problem(sock, self.unit(fresh=True))
        return problem

    def _connection_problem(self, sock, pids):
        server_port, client_port = sock.getpeername()[1], sock.getsockname()[1]
        what = f"the connection to port {server_port}"
        deadline = time.monotonic() + self.accept_wait_s
        uids = process_uids(pids, self.proc)
        while True:  # until accept() the server-side end has inode 0, and its fd comes a moment after the inode
            sockets = accepted_inodes(server_port, client_port, self.tables)
            owners = socket_owners(sockets, pids, self.proc)
            if sockets and all(owners.get(inode) for inode in sockets):
                return None  # the fast path: found among the unit's own fds
            if time.monotonic() > deadline or sockets and not any(owners.values()):
                return judge(what, sockets, socket_owners(sockets, proc=self.proc), pids, uids,
                             f"{self.service}.service", lambda pid: process_label(pid, self.proc))
            time.sleep(0.01)


class ForeignListener(OSError):
    pass


class GuardedConnection(http.client.HTTPConnection):
    guard = None

    def connect(self):
        super().connect()
        problem = self.guard.connection_problem(self.sock)
        if problem:
            self.sock.close()
            self.sock = None
            raise ForeignListener(problem)


def opener(guard):
    class Handler(urllib.request.HTTPHandler):
        def http_open(self, request):
            return self.do_open(type("Connection", (GuardedConnection,), {"guard": guard}), request)

    return urllib.request.build_opener(Handler)


def guard_unit(service, **options):
    """From now on, this process's keyed requests (client.urlopen) go only to the unit's processes."""
    client.GUARD = Guard(service, **options)
    client.GUARDED_OPENER = opener(client.GUARD)
    return client.GUARD
