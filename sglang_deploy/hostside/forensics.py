"""Nothing the service user wrote outlives a rollback (security review 3, finding 6): before the switch starts the
release it rolls back to (the automatic rollback after a failed gate or start, and every manual rollback), the
directories the service user writes are moved aside, kept for forensics in the store, which only root reads.

What moves: the service's state directory (its HOME: ~/.nccl.conf, FlashInfer's and Triton's caches there) and cache
directory (the Triton, TorchInductor and HF caches, the preflight's cached acceptance), and any other directory the
release's environment file points a cache or HOME at, if the service user owns it. Never a symlink, never a directory
someone else owns (the weights root stays). systemd creates fresh, empty ones at the next start (StateDirectory=,
CacheDirectory=); the next start compiles its JIT kernels again. Standard library only; runs under the store's lock.
"""

import json
import os
import pwd
import shlex
import shutil
import stat
import time

from .service import systemctl
from .store import atomic_write, log

FORENSICS_DIR = "forensics"  # under the service's store directory
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


def _move(source, target):
    try:
        os.rename(source, target)
    except OSError:  # another file system: copy (links as links), then remove
        shutil.copytree(source, target, symlinks=True)
        shutil.rmtree(source)


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
    moved = {}
    for source in sources:
        destination = os.path.join(target, source.strip("/").replace("/", "__"))
        _move(source, destination)
        moved[destination] = source
    atomic_write(os.path.join(target, "moved.json"), json.dumps(  # durable: a cut right after still finds it
        {"service": service, "user": user, "reason": reason, "release": release, "at": stamp, "moved": moved},
        indent=1), 0o600)
    return {"dir": target, "moved": moved}


# A start after the caches were moved aside compiles every JIT kernel again (roles/stages.py FIRST_START_TIMEOUT_S).
COLD_START_TIMEOUT_S = 3600


def unit_user(unit_text):
    return next((line.split("=", 1)[1].strip() for line in (unit_text or "").splitlines()
                 if line.startswith("User=")), None)


def before_start(store, leaving, target, reason):
    """Stop the service, then move aside what its user wrote (hostside/forensics.py) before `target` starts: the
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
    systemctl("stop", f"{store.service}.service")  # nothing writes while the directories move
    moved = move_aside(store.service, user, texts["env"], store.root, reason, release=leaving)
    if moved["dir"]:
        log(f"moved aside what {user} wrote ({', '.join(moved['moved'].values())}) before {target} starts; kept for "
            f"forensics in {moved['dir']}; the next start compiles its JIT caches again")
    return moved["dir"]
