"""The release store on a deployed host: its paths, its files, its lock, and the commands that read it.

Layout (``/var/lib/sglang-deploy/<service>/``):
  releases/<id>/      sglang.service, sglang.env (0600), profile.json, meta.json (written last = complete)
  state.json          contract/store.StoreState: active, last good, automatic rollbacks in a row, a switch under way
  lock                flock held by whoever changes the service (switch, prune, the perf watch);
                      lock.json says who holds it

    python3 -m hostside.store state   --service S     releases, active/last good, lock holder, installed vs running
    python3 -m hostside.store history --service S     every release's switches, gate medians and watch.jsonl
    python3 -m hostside.store prune   --service S --keep N [--prune-venvs]
                                                      drop old releases (never the active or last good one)
                                                      and virtualenvs no retained release points at

Every command prints JSON on stdout. Standard library only; it imports only service.py and the contract of its
package (the controller's facts send them inline to a host that has nothing installed yet: roles/facts.py
inline_host), and the controller imports its pure helpers. The paths are contract/paths.py's, one table for both
sides.
"""

import argparse
import datetime
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys

from .contract import paths
from .contract.answers import ServiceRun, StoreReport
from .contract.document import DocumentError
from .contract.release import ReleaseMeta
from .contract.store import LockInfo, StoreState
from .lib.service import cmdline_matches, env_file_values, environment_drift, environment_drop_ins, service_status

RELEASE_ID = re.compile(r"(\d{4,})-([0-9a-f]{8})\Z")
SERVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}")


# --- pure helpers (imported by the controller) ----------------------------------------------------

def content_hash(unit: str, env: str) -> str:
    """A release is defined by its unit and its environment file (the secrets file is not part of it)."""
    return hashlib.sha256(unit.encode() + b"\0" + env.encode()).hexdigest()


def next_release_id(existing_ids, digest: str) -> str:
    sequence = max((int(RELEASE_ID.match(i).group(1)) for i in existing_ids if RELEASE_ID.match(i)), default=0)
    return f"{sequence + 1:04d}-{digest[:8]}"


def last_used(meta: ReleaseMeta) -> str:
    """When a release last became active (a redeploy reuses an old release), else when it was created."""
    activations = [e.at for e in meta.history if e.event.startswith("activated")]
    return max(activations + [meta.created])


def releases_to_prune(ids_least_recent_first, keep: int, protected) -> list:
    """Everything but the `keep` most recently used, except protected ids (active, last good)."""
    keep_ids = set(ids_least_recent_first[-keep:]) if keep > 0 else set()
    return [i for i in ids_least_recent_first if i not in keep_ids and i not in protected]



def release_auth(meta: ReleaseMeta) -> str:
    """api-key or none; releases from before the field existed: from their command line (--config carries the key)."""
    if meta.auth in ("api-key", "none"):
        return meta.auth
    return "api-key" if "--config" in (meta.exec_start or []) else "none"


def auth_change(from_meta, to_meta):
    """A sentence when switching between the two releases (ReleaseMeta, or None) changes whether the server requires
    the API key."""
    if not from_meta or not to_meta:
        return None
    before, after = release_auth(from_meta), release_auth(to_meta)
    if before == after:
        return None
    if after == "none":
        return (f"AUTHENTICATION CHANGES: release {to_meta.id} runs WITHOUT an API key (auth none); the "
                f"release it replaces required one")
    return (f"authentication changes: release {to_meta.id} requires the API key (auth api-key); the "
            f"release it replaces ran without one")


def flag_differences(argv, reference) -> list:
    """'--flag: reference -> argv' for every flag whose value differs (launcher excluded)."""
    def flags(args):
        out, current = {}, None
        for arg in args:
            if arg.startswith("--"):
                current = arg
                out[current] = []
            elif current:
                out[current].append(arg)
        return {k: " ".join(v) or "on" for k, v in out.items()}

    mine, theirs = flags(argv or []), flags(reference or [])
    return [f"{name}: {theirs.get(name, '(absent)')} -> {mine.get(name, '(absent)')}"
            for name in sorted(set(mine) | set(theirs)) if mine.get(name) != theirs.get(name)]


# Variable names that hold secrets by convention (HF_TOKEN, SGLANG_API_KEY, ..._PASSWORD); not, say,
# SGLANG_MAX_NEW_TOKENS_LIMIT or HF_TOKEN_PATH (a path). Profiles refuse them; the history masks their values.
SECRET_NAME = re.compile(r"(^|_)(TOKEN|SECRET|SECRET_KEY|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)$")
NOT_SECRET = frozenset({"HF_HUB_DISABLE_IMPLICIT_TOKEN"})  # a switch, not a token


def secret_name(name) -> bool:
    return bool(SECRET_NAME.search(name)) and name not in NOT_SECRET


def environment_differences(environment, reference) -> list:
    """'env NAME: reference -> environment' for every variable of a release's environment file that differs."""
    return [f"env {name}: {reference.get(name, '(absent)')} -> {environment.get(name, '(absent)')}"
            for name in sorted(set(environment) | set(reference)) if environment.get(name) != reference.get(name)]


# --- store ----------------------------------------------------------------------------------------

class Store:
    def __init__(self, service):
        self.service = service
        self.paths = paths.ServicePaths(service)  # the host's paths (contract/paths.py)
        self.root = self.paths.root
        self.releases_dir = self.paths.releases_dir
        self.state_path = os.path.join(self.root, StoreState.FILE)
        self.unit_path = self.paths.unit_path
        self.env_path = self.paths.env_path
        self.secrets_path = self.paths.secrets_path
        self.problems = []  # files found corrupted and set aside, for the controller to show

    def release_dir(self, release_id):
        return self.paths.release_dir(release_id)

    def set_aside(self, path, error):
        """A corrupted store file must not wedge deploys, rollbacks and listings: rename it, say so."""
        aside = f"{path}.corrupt-{datetime.datetime.now().strftime('%Y%m%dT%H%M%S')}"
        try:
            os.replace(path, aside)
        except OSError:
            aside = "(could not be renamed)"
        message = f"{path} is corrupted ({type(error).__name__}: {error}); set aside as {aside}"
        self.problems.append(message)
        log(message)

    def ids(self):
        """Complete releases (a readable meta.json present), oldest first; a corrupted meta.json is set aside."""
        if not os.path.isdir(self.releases_dir):
            return []
        ids = []
        for i in os.listdir(self.releases_dir):
            path = os.path.join(self.releases_dir, i, ReleaseMeta.FILE)
            if not RELEASE_ID.match(i) or not os.path.exists(path):
                continue
            try:
                with open(path) as f:
                    if not isinstance(json.load(f), dict):
                        raise ValueError("not a JSON object")
            except (ValueError, UnicodeDecodeError) as error:
                self.set_aside(path, error)
                continue
            ids.append(i)
        return sorted(ids, key=lambda i: int(RELEASE_ID.match(i).group(1)))

    def meta(self, release_id) -> ReleaseMeta:
        """The release's meta.json (its id is its directory's name); a DocumentError names the file and field."""
        return ReleaseMeta.load(self.release_dir(release_id)).but(id=release_id)

    def write_meta(self, release_id, meta: ReleaseMeta):
        atomic_write(os.path.join(self.release_dir(release_id), ReleaseMeta.FILE), meta.dump(), 0o644)

    def state(self) -> StoreState:
        try:
            with open(self.state_path) as f:
                text = f.read()
            return StoreState.loads(text, self.state_path)
        except FileNotFoundError:
            return StoreState()
        except (ValueError, UnicodeDecodeError) as error:  # DocumentError included
            # The next deploy converges: the host is inconsistent with "no active release".
            self.set_aside(self.state_path, error)
            return StoreState()

    def save_state(self, state: StoreState):
        os.makedirs(self.root, exist_ok=True)
        atomic_write(self.state_path, state.dump(), 0o644)

    def read(self, path):
        try:
            with open(path) as f:
                return f.read()
        except FileNotFoundError:
            return None


def atomic_write(path, content, mode):
    """Write, fsync, rename, then fsync the directory: the rename survives a power loss."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as error:  # a write or flush names no file: name the one being written (disk full, read-only)
        if error.filename is None:
            raise OSError(error.errno, error.strerror, path) from error
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def log(message):
    try:
        print(f"[sglang-deploy] {message}", file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError):
        pass  # the controller went away; carry on


def emit(document):
    try:
        print(json.dumps(document, indent=1), flush=True)
    except (BrokenPipeError, OSError):
        pass


# --- the lock: one change to the service at a time -------------------------------------------------

class Locked(Exception):
    pass


class Lock:
    def __init__(self, store, owner):
        self.path = os.path.join(store.root, "lock")
        self.info_path = os.path.join(store.root, LockInfo.FILE)
        self.owner = owner
        self.handle = None

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.handle = open(self.path, "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Locked(holder(self.info_path)) from None
        atomic_write(self.info_path, LockInfo(owner=self.owner, pid=os.getpid(), since=now(), boot_id=boot_id()).dump(),
                     0o644)
        return self

    def __exit__(self, *exc):
        try:
            os.unlink(self.info_path)
        except FileNotFoundError:
            pass
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def holder(info_path) -> LockInfo:
    """Who holds the lock: lock.json, unless it was written in an earlier boot (the flock it described died with that
    boot; a holder of this boot has rewritten it) or is unreadable."""
    try:
        with open(info_path) as f:
            info = LockInfo.loads(f.read(), info_path)
    except (FileNotFoundError, ValueError):  # DocumentError included
        return LockInfo(owner="unknown")
    return info if info.boot_id in (None, boot_id()) else LockInfo(owner="unknown")


def boot_id():
    """This boot's id (the kernel's, fresh at every boot); None where it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def lock_holder(store):
    """The current holder (LockInfo), or None (a stale lock.json of a dead process does not count)."""
    path = os.path.join(store.root, "lock")
    if not os.path.exists(path):
        return None
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return holder(os.path.join(store.root, LockInfo.FILE))
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


# --- commands -------------------------------------------------------------------------------------

def cmd_state(args):
    store = Store(args.service)
    state = store.state()
    metas = [store.meta(release_id) for release_id in store.ids()]
    unit, env = store.read(store.unit_path), store.read(store.env_path)
    installed = content_hash(unit, env) if unit is not None and env is not None else None
    running = service_status(args.service)
    active_meta = next((meta for meta in metas if meta.id == state.active), None)
    drift = environment_drift(running["main_pid"], env_file_values(env)) if running["main_pid"] and env else None
    overriding = environment_drop_ins(args.service) if drift else []
    if drift and overriding:
        # A local override sets the environment: a restart would start the same process again (no convergence).
        store.problems.append(f"the server process's environment differs from the release's in {', '.join(drift)}, "
                              f"and {', '.join(overriding)} sets the environment: a restart would not change "
                              "that; remove the drop-in (the gate and the doctor name it)")
        drift = None
    inconsistent = [why for why, off in (
        ("no active release", not active_meta),
        ("a switch was interrupted", state.switching),
        ("the installed unit or environment file is not the active release's",
         active_meta and installed != active_meta.content_hash),
        (f"the service is {running['active_state']}", running["active_state"] != "active"),
        ("the server's command line is not the release's ExecStart",
         running["active_state"] == "active" and active_meta
         and not cmdline_matches(running["cmdline"], active_meta.exec_start)),
        (f"the server process's environment differs from the release's in {', '.join(drift or [])}", drift),
    ) if off]
    lock = lock_holder(store)
    emit(StoreReport(service=args.service, state=state, releases=metas, lock=lock, installed_hash=installed,
                     running=ServiceRun.from_dict(running, "the service's status"), consistent=not inconsistent,
                     inconsistent=inconsistent, problems=store.problems).to_dict())
    return 0


def cmd_history(args):
    """Every retained release's switches, gate result (medians) and perf-watch history, oldest first
    (history.StoreHistory)."""
    # deferred: 7 ms (the gate's, the reports' and the history's documents, 23 classes) on the host's python, not
    # needed by every deploy's `deploy_facts`, which imports this module (`python3 -X importtime` on the simulated
    # host, best of 10, 2026-12-06)
    from .contract.findings import WatchEntry
    from .contract.gate import GateConfig, GateResult
    from .contract.history import HistoryFloors, HistoryGate, HistoryRelease, StoreHistory
    store = Store(args.service)
    out = []
    for release_id in store.ids():
        meta = store.meta(release_id)
        directory = store.release_dir(release_id)
        try:
            gate = GateResult.load(directory)
        except FileNotFoundError:  # no gate ran for it
            gate = None
        except (OSError, DocumentError) as error:  # a listing: shown without its gate result, and why
            log(f"release {release_id}: no gate result shown: {error}")
            gate = None
        measurement = gate and gate.measurement  # a Measurement; None: no gate result, or not measured
        try:
            settings = GateConfig.load(directory).settings
        except (OSError, DocumentError) as error:  # a listing: the release's floors are shown as unknown, and why
            log(f"release {release_id}: no floors shown: {error}")
            settings = None
        path = os.path.join(directory, WatchEntry.FILE)
        try:
            watch = WatchEntry.lines(store.read(path), path)
        except DocumentError as error:  # a listing: shown without the watch's history, and why
            log(f"release {release_id}: no watch history shown: {error}")
            watch = []
        out.append(HistoryRelease(
            id=release_id, created=meta.created, history=meta.history, verdict=meta.verdict, exec_start=meta.exec_start,
            environment={name: "(masked)" if secret_name(name) else value for name, value in
                         env_file_values(store.read(os.path.join(directory, "sglang.env"))).items()},
            floors=HistoryFloors(decode_tok_s=settings and settings.min_decode_tok_s,
                                 accept_length=settings and settings.min_accept_length),
            gate=HistoryGate(verdict=gate.verdict, at=meta.gate and meta.gate.at,
                             decode_tok_s=measurement.decode_median if measurement else None,
                             accept_length=measurement.tau_median if measurement else None,
                             ttft_s=measurement.ttft_median if measurement else None) if gate else None,
            watch=watch[-args.limit:]))
    # the strict reader on the way out too: a value of the wrong type fails here, naming the field
    history = StoreHistory.from_dict(StoreHistory(service=args.service, state=store.state(), releases=out).to_dict())
    emit({"format": history.FORMAT, **history.to_dict()})
    return 0


def cmd_prune(args):
    store = Store(args.service)
    try:
        with Lock(store, "prune"):
            return prune_locked(store, args)
    except Locked as locked:
        log(f"prune skipped: another deploy or rollback is running ({locked.args[0].owner})")
        emit({"ok": False, "skipped": "locked"})
        return 0


def prune_locked(store, args):
    state = store.state()
    protected = {state.active, state.last_good, state.switching and state.switching.to}
    by_use = sorted(store.ids(), key=lambda release_id: last_used(store.meta(release_id)))
    removed = releases_to_prune(by_use, args.keep, protected)
    for release_id in removed:
        shutil.rmtree(store.release_dir(release_id))
    # Virtualenvs stay while any retained release of any service points at them.
    in_use = set()
    for service in os.listdir(paths.STORE_ROOT) if os.path.isdir(paths.STORE_ROOT) else []:
        other = Store(service)
        for release_id in other.ids():
            in_use.add(other.meta(release_id).venv)
    dropped_venvs = []
    if os.path.isdir(paths.VENV_ROOT) and in_use:
        for name in os.listdir(paths.VENV_ROOT):
            path = os.path.join(paths.VENV_ROOT, name)
            if path not in in_use and args.prune_venvs:
                shutil.rmtree(path)
                dropped_venvs.append(path)
    emit({"ok": True, "removed": removed, "kept": store.ids(), "removed_venvs": dropped_venvs})
    return 0


def service_name(value):
    """argparse type: a unit name that is also a safe path component."""
    if not SERVICE_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(f"not a service name: {value!r}")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m hostside.store")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("state").add_argument("--service", required=True, type=service_name)
    history = sub.add_parser("history")
    history.add_argument("--service", required=True, type=service_name)
    history.add_argument("--limit", type=int, default=500)
    prune = sub.add_parser("prune")
    prune.add_argument("--service", required=True, type=service_name)
    prune.add_argument("--keep", type=int, default=5)
    prune.add_argument("--prune-venvs", action="store_true")
    args = parser.parse_args(argv)
    return {"state": cmd_state, "history": cmd_history, "prune": cmd_prune}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
