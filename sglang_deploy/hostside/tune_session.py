#!/usr/bin/env python3
"""A tune session on the host: temporary releases measured one after the other, the original always restored.

    python3 tune_session.py open  --service S --session ID [--heartbeat-s 30] [--owner WHO]
    python3 tune_session.py poll  --service S --session ID [--log-offset N] [--results-from SEQ] [--wait-s W]
    python3 tune_session.py close --service S --session ID [--abort] [--wait-s 1800]
    python3 tune_session.py run   ...   (started by `open` through systemd-run; not by hand)

`open` starts `run` as a transient systemd unit (<service>-tune-<ID>), detached from the SSH session.
`run` holds the release store's lock for the whole session (a deploy, rollback or watch run waits or
fails fast, naming the tune as the holder), then executes the candidates the controller drops into
<store>/tune/<ID>/queue/: each is staged as a temporary release (never marked good, never recorded as
active: state.json keeps the original as active and names the candidate under "switching", so an
interrupted session leaves a host that the next deploy sees as inconsistent and converges), switched to
through the switch's own install/restart/readiness (activate), checked against SGLang's
resolution of its command line (the gate's config_problems) and measured with the gate's client
(bench.py), `repeats` times. Results go to <store>/tune/<ID>/results/.

The original release comes back, host side and under the lock:
  - at the end (`close`), and on any failure of the session itself;
  - on `close --abort` (the controller's SIGINT), on SIGTERM/SIGINT (systemctl stop);
  - when the controller stops polling for --heartbeat-s seconds (a dropped SSH connection, a killed
    controller): every `poll` touches the heartbeat file, a watchdog thread interrupts the session when
    it goes stale.
Temporary releases the session staged are removed afterwards (retained releases it reused are kept).
This module is the command line (open, poll, close); `run` is tune_runner.Session. Standard library only.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

from .contract.document import DocumentError, line
from .contract.session import TuneClose, TuneItemResult, TunePoll, TuneSession, TuneStatus
from .lib.listener import guard_unit
from .store import atomic_write, lock_holder, now, service_name
from .lib.tune_runner import EXIT_LOCKED, PACKAGE_PARENT, Paths, Session, read_json, read_status

SESSION_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,39}\Z")
POLL_WAIT_STEP_S = 0.2  # how often a waiting poll looks for news (a stat or two; the answer's latency)
POLL_WAIT_MAX_S = 10.0  # --wait-s is at most this


# --- commands -------------------------------------------------------------------------------------

def cmd_open(args):
    paths = Paths(args.service, args.session)
    holder = lock_holder(paths.store)
    if holder:
        print(line(TuneSession(state="failed", status=None, message=f"the release store is locked by {holder.owner} "
                                                                     f"(pid {holder.pid}, since {holder.since})")))
        return EXIT_LOCKED
    parent = os.path.dirname(paths.root)
    for name in os.listdir(parent) if os.path.isdir(parent) else []:  # finished sessions of earlier tunes
        other = os.path.join(parent, name)
        ended = read_status(os.path.join(other, TuneStatus.FILE))
        if SESSION_ID.fullmatch(name) and ended is not None and ended.ended:
            shutil.rmtree(other, ignore_errors=True)
    if os.path.isdir(paths.root):
        shutil.rmtree(paths.root)
    os.makedirs(paths.root, mode=0o700)
    with open(paths.heartbeat, "w"):
        pass
    unit = f"{args.service}-tune-{args.session}"
    command = ["systemd-run", f"--unit={unit}", "--collect", "--quiet", "--property=KillMode=mixed",
               "--property=TimeoutStopSec=1900", f"--working-directory={PACKAGE_PARENT}",
               sys.executable, "-m", f"{__package__}.tune_session", "run",
               "--service", args.service, "--session", args.session, "--heartbeat-s", str(args.heartbeat_s),
               "--owner", args.owner]
    started = subprocess.run(command, capture_output=True, text=True)
    if started.returncode != 0:
        print(line(TuneSession(state="failed", status=None, message=f"systemd-run failed: {started.stderr.strip()}")))
        return 1
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = read_status(paths.status)
        if status and status.state != "starting":
            print(line(answer(status, unit=unit)))
            return 0 if status.state == "ready" else (EXIT_LOCKED if "locked" in (status.message or "") else 2)
        time.sleep(0.2)
    print(line(TuneSession(state="failed", status=None,
                           message=f"the session did not start within 30 s (journalctl -u {unit})")))
    return 1


def cmd_poll(args):
    """The session's news: its results from --results-from on, its log from --log-offset on, its status. With
    --wait-s the answer waits up to W seconds for a result or the session's end; the log lines written meanwhile
    come with it (a candidate logs about 6, so answering at each line made about one poll a second). The heartbeat
    is touched once, as the poll starts, so a poll that outlives its controller (a dropped connection) keeps the
    session no longer than W; the controller keeps W well under the session's heartbeat (tune/host.py)."""
    paths = Paths(args.service, args.session)
    os.utime(paths.heartbeat) if os.path.exists(paths.heartbeat) else None
    deadline = time.monotonic() + args.wait_s
    while True:
        results, unreadable = poll_results(paths, args.results_from)
        status = read_status(paths.status)
        if results or unreadable or status is None or status.ended or time.monotonic() >= deadline:
            break
        time.sleep(POLL_WAIT_STEP_S)
    log_text, offset = "", args.log_offset
    try:
        with open(paths.log) as f:
            f.seek(args.log_offset)
            log_text = f.read()
            offset = f.tell()
    except FileNotFoundError:
        pass
    print(line(TunePoll(status=answer(status), results=results, log=log_text, log_offset=offset,
                        unreadable=unreadable)))
    return 0


def poll_results(paths, results_from):
    """The session's results from sequence number results_from on, and the reasons of those it cannot read."""
    results, unreadable = [], []
    if os.path.isdir(paths.results):
        for name in sorted(os.listdir(paths.results)):
            if name.endswith(".json") and int(name[:-5]) >= results_from:
                path = os.path.join(paths.results, name)
                try:
                    results.append(TuneItemResult.from_dict(read_json(path), path))
                except DocumentError as error:  # the session wrote it through the class: said, never skipped
                    unreadable.append(str(error))
    return results, unreadable


def cmd_close(args):
    paths = Paths(args.service, args.session)
    if not os.path.isdir(paths.root):
        print(line(answer(None)))
        return 0
    atomic_write(paths.close, TuneClose(abort=args.abort, why=args.why, at=now()).dump(), 0o600)
    deadline = time.monotonic() + args.wait_s
    while time.monotonic() < deadline:
        os.utime(paths.heartbeat) if os.path.exists(paths.heartbeat) else None
        status = read_status(paths.status)
        if status is not None and status.ended:
            print(line(answer(status)))
            return 0 if status.restore is None or status.restore.ready else 3
        time.sleep(0.3)
    print(line(answer(read_status(paths.status))))
    return 1


def answer(status, unit=None):
    """open's and close's answer (session.TuneSession) for a session's status; None: no session (missing)."""
    if status is None:
        return TuneSession(state="missing", message="no session.json", status=None, unit=unit)
    return TuneSession(state=status.state, message=status.message, status=status, unit=unit)


def wait_seconds(value):
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= POLL_WAIT_MAX_S:
        raise argparse.ArgumentTypeError(f"not a wait of 0 to {POLL_WAIT_MAX_S:.0f} s: {value!r}")
    return seconds


def session_id(value):
    if not SESSION_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(f"not a session id: {value!r}")
    return value


def main():
    parser = argparse.ArgumentParser(prog="tune_session.py")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("open", "run", "poll", "close"):
        command = sub.add_parser(name)
        command.add_argument("--service", required=True, type=service_name)
        command.add_argument("--session", required=True, type=session_id)
        if name in ("open", "run"):
            command.add_argument("--heartbeat-s", type=float, default=30.0)
            command.add_argument("--owner", default="sglang-deploy tune")
        if name == "poll":
            command.add_argument("--log-offset", type=int, default=0)
            command.add_argument("--results-from", type=int, default=0)
            command.add_argument("--wait-s", type=wait_seconds, default=0.0)
        if name == "close":
            command.add_argument("--abort", action="store_true")
            command.add_argument("--why", default=None)
            command.add_argument("--wait-s", type=float, default=1900)
    args = parser.parse_args()
    guard_unit(args.service)  # every keyed request: only to the unit's own processes
    if args.command == "run":
        return Session(args).run()
    return {"open": cmd_open, "poll": cmd_poll, "close": cmd_close}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
