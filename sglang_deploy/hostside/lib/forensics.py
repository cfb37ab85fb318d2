"""Nothing the service user wrote outlives a rollback (security review 3, finding 6): before the switch starts the
release it rolls back to (the automatic rollback after a failed gate or start, and every manual rollback), the
directories the service user writes are moved aside, kept for forensics in the store, which only root reads.

What moves: the service's state directory (its HOME: ~/.nccl.conf, FlashInfer's and Triton's caches there) and cache
directory (the Triton, TorchInductor and HF caches, the preflight's cached acceptance), and any other directory the
release's environment file points a cache or HOME at, if the service user owns it. Never a symlink, never a directory
someone else owns (the weights root stays). systemd creates fresh, empty ones at the next start (StateDirectory=,
CacheDirectory=); the next start compiles its JIT kernels again. Standard library only; runs under the store's lock.
"""

import errno
import json
import os
import pwd
import shlex
import shutil
import stat
import time

from .service import systemctl
from ..store import atomic_write, log

FORENSICS_DIR = "forensics"  # under the service's store directory
# Forensics directories kept per place (the store's, and the root-only holder beside a directory on another file
# system); older ones are removed (security review 4, R2: caches of gigabytes each, kept for good before).
KEEP = 3
# Variables of the release's environment that name a directory the server writes and reads back at a later start.
CACHE_VARIABLES = ("HOME", "SGLANG_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "HF_HOME",
                   "CUDA_CACHE_PATH", "FLASHINFER_WORKSPACE_BASE", "XDG_CACHE_HOME")
ROOTS = ("/var/lib", "/var/cache")  # StateDirectory= and CacheDirectory= of the unit: <root>/<service>
SYSTEM_DIRS = ("/", "/var", "/var/lib", "/var/cache", "/srv", "/tmp", "/var/tmp", "/dev/shm", "/run", "/home", "/opt")


def env_paths(env_text):
    """The absolute paths the environment file gives CACHE_VARIABLES (systemd's KEY=value lines, shell quoting)."""
    found = []
    for line in (env_text or "").splitlines():
        key, sep, value = line.partition("=")
        if not sep or key.strip() not in CACHE_VARIABLES:
            continue
        try:
            words = shlex.split(value)
        except ValueError:
            continue
        if words and os.path.isabs(words[0]):
            found.append(os.path.normpath(words[0]))
    return found


def _inside(path, other):
    return path != other and path.startswith(other.rstrip("/") + "/")


def written_by(candidates, uid):
    """The candidates that are directories the uid owns (not symlinks, not system directories), outermost only."""
    owned = []
    for path in dict.fromkeys(os.path.normpath(p) for p in candidates):
        if path in SYSTEM_DIRS:
            continue
        try:
            status = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(status.st_mode) and status.st_uid == uid:
            owned.append(path)
    return [p for p in owned if not any(_inside(p, other) for other in owned)]


def holder_dir(source, service):
    """Where a directory on another file system than the store goes: a root-only directory beside it, on its own
    file system (rename, never a copy). Its parent must be root's and not writable by others."""
    parent = os.path.dirname(source)
    status = os.lstat(parent)
    if status.st_uid != 0 or status.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or not stat.S_ISDIR(status.st_mode):
        raise ForensicsError(f"{source} is on another file system than the store and its parent {parent} is not "
                             "root's alone: it cannot be moved aside safely")
    return os.path.join(parent, f".{service}.forensics")


class ForensicsError(Exception):
    pass


def movable_problem(sources, store_dir):
    """Why a source cannot be moved by a rename (None: every one can): a mount point (its own file system: a rename
    would fail after the stop), or on another file system than the store with a parent that is not root's alone."""
    try:
        store_dev = os.stat(store_dir if os.path.exists(store_dir) else os.path.dirname(store_dir)).st_dev
    except OSError as error:
        return f"the store {store_dir}: {error}"
    for source in sources:
        try:
            dev, parent_dev = os.lstat(source).st_dev, os.lstat(os.path.dirname(source)).st_dev
        except OSError as error:
            return f"{source}: {error}"
        if dev != parent_dev:
            return f"{source} is a mount point: it can only be copied, which root never does (review 4, R1)"
        if dev != store_dev:
            try:
                holder_dir(source, "x")
            except ForensicsError as error:
                return str(error)
    return None


def _move(source, target, service):
    """Rename source to target; on another file system (EXDEV), rename it within its own file system into a
    root-only holder beside it (holder_dir). Never a copy as root: a FIFO the service user left stops a copy, a
    sparse file fills the store (security review 4, R1). Returns where it went."""
    try:
        os.rename(source, target)
        return target
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
    holder = holder_dir(source, service)
    try:
        os.mkdir(holder, 0o700)
    except FileExistsError:
        pass
    status = os.lstat(holder)
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != 0:
        raise ForensicsError(f"{holder} is not root's directory: {source} is left in place")
    os.chmod(holder, 0o700)
    destination = os.path.join(holder, os.path.basename(os.path.dirname(target)) + "__" + os.path.basename(target))
    os.rename(source, destination)
    return destination


def prune(parent, keep=KEEP):
    """Remove all but the `keep` newest entries of a forensics directory (names start with their UTC stamp);
    shutil.rmtree works through file descriptors and never follows a symlink."""
    try:
        names = sorted(name for name in os.listdir(parent) if name[:1].isdigit())
    except OSError:
        return []
    removed = []
    for name in names[:-keep] if keep else names:
        path = os.path.join(parent, name)
        if os.path.islink(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def move_aside(service, user, env_text, store_dir, reason, release=None, stamp=None, roots=None):
    """Move what the service user wrote into <store_dir>/forensics/<stamp>-<reason>/ (0700, root's). Returns
    {"dir": that directory or None when nothing was there, "moved": {new path: old path}}."""
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        return {"dir": None, "moved": {}}
    if uid == 0:  # never root's directories (the profile refuses root; a belt for the braces)
        return {"dir": None, "moved": {}}
    sources = written_by([*(os.path.join(root, service) for root in roots or ROOTS), *env_paths(env_text)], uid)
    if not sources:
        return {"dir": None, "moved": {}}
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    parent = os.path.join(store_dir, FORENSICS_DIR)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    os.chmod(parent, 0o700)
    target = os.path.join(parent, f"{stamp}-{reason}")
    suffix = 1
    while os.path.exists(target):
        suffix += 1
        target = os.path.join(parent, f"{stamp}-{reason}-{suffix}")
    os.makedirs(target, mode=0o700)
    moved, holders = {}, set()
    for source in sources:
        destination = _move(source, os.path.join(target, source.strip("/").replace("/", "__")), service)
        if os.path.dirname(destination) != target:
            holders.add(os.path.dirname(destination))
        moved[destination] = source
    atomic_write(os.path.join(target, "moved.json"), json.dumps(  # durable: a cut right after still finds it
        {"service": service, "user": user, "reason": reason, "release": release, "at": stamp, "moved": moved},
        indent=1), 0o600)
    prune(parent)
    for holder in holders:
        prune(holder)
    return {"dir": target, "moved": moved}


# A start after the caches were moved aside compiles every JIT kernel again (roles/stages.py FIRST_START_TIMEOUT_S).
COLD_START_TIMEOUT_S = 3600


def unit_user(unit_text):
    return next((line.split("=", 1)[1].strip() for line in (unit_text or "").splitlines()
                 if line.startswith("User=")), None)


def before_start(store, leaving, target, reason):
    """Stop the service, then move aside what its user wrote (hostside/lib/forensics.py) before `target` starts: the
    leaving release's and the target's cache paths, the user from the unit. Returns the forensics directory (named
    in the output) or None when nothing was there."""
    texts = {name: "" for name in ("unit", "env")}
    for release in (leaving, target):
        if release and release in store.ids():
            for name, file in (("unit", "sglang.service"), ("env", "sglang.env")):
                texts[name] += (store.read(os.path.join(store.release_dir(release), file)) or "") + "\n"
    user = unit_user(texts["unit"]) or unit_user(store.read(store.unit_path))
    if not user:
        return None
    # Whatever happens here, the target still starts (the caller activates it next): a failure is said, not raised
    # (security review 4, R1: a copy that raised after the stop left no service and `switching` set).
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        return None
    if uid == 0:
        return None
    try:
        sources = written_by([*(os.path.join(root, store.service) for root in ROOTS), *env_paths(texts["env"])], uid)
        problem = movable_problem(sources, os.path.join(store.root, FORENSICS_DIR))
        if problem:  # refused before the stop: nothing is half moved
            log(f"WARNING: not moving aside what {user} wrote before {target} starts: {problem}; {target} starts "
                "with those directories as they are")
            return None
        systemctl("stop", f"{store.service}.service")  # nothing writes while the directories move
        moved = move_aside(store.service, user, texts["env"], store.root, reason, release=leaving)
    except Exception as error:  # noqa: BLE001 - the rollback's start must not depend on the forensics
        log(f"WARNING: moving aside what {user} wrote failed ({type(error).__name__}: {error}); {target} starts "
            "anyway")
        return None
    if moved["dir"]:
        log(f"moved aside what {user} wrote ({', '.join(moved['moved'].values())}) before {target} starts; kept for "
            f"forensics in {moved['dir']}; the next start compiles its JIT caches again")
    return moved["dir"]
