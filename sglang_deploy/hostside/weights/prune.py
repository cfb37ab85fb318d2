"""Snapshot bookkeeping: which snapshots retained releases of any service use, the weights' lock, and pruning the
snapshots this tool made that nothing uses any more.

Standard library only.
"""

import contextlib
import datetime
import fcntl
import os
import shutil
import stat
import time

from . import manifest as weights_manifest
from ..contract import paths
from ..contract.document import DocumentError
from ..contract.release import ReleaseMeta
from .manifest import MAP_FLAG, MAP_NAME, SNAPSHOT_KEYS, TOOL_DIR, log, read_json

SNAPSHOT_FLAGS = ("--model-path", "--speculative-draft-model-path", MAP_FLAG)
PRUNE_GRACE_S = 3600  # a snapshot verified this recently is kept even if no release records it yet


def referenced_snapshots(store_root=None):
    """Snapshot paths that retained releases of any service point at: their weights, their draft model, the
    drafters their profile offers the tune (meta.json offered_drafts), and their token maps (token_map,
    offered_token_maps, and a --speculative-token-map on a tune's temporary command line)."""
    store_root = store_root or paths.STORE_ROOT
    used = set()
    for service in os.listdir(store_root) if os.path.isdir(store_root) else []:
        releases = os.path.join(store_root, service, "releases")
        for release_id in os.listdir(releases) if os.path.isdir(releases) else []:
            try:  # a release whose meta.json cannot be read stops the prune (DocumentError): its snapshots are unknown
                meta = ReleaseMeta.load(os.path.join(releases, release_id))
            except FileNotFoundError:  # not a complete release (meta.json is written last)
                continue
            argv = meta.exec_start
            parts = [getattr(meta, key) for key in SNAPSHOT_KEYS] + meta.offered_drafts + [
                meta.token_map, *meta.offered_token_maps]
            for path in [part.path for part in parts if part] + [
                    argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in SNAPSHOT_FLAGS]:
                if path:
                    used.add(os.path.abspath(path))
    return used


@contextlib.contextmanager
def models_lock(models_root=None, exclusive=False):
    """The weights' lock: shared by fetch, promote and verify, exclusive (never waiting) for prune.
    Raises BlockingIOError when prune would have to wait."""
    path = os.path.join(models_root or weights_manifest.MODELS_ROOT, TOOL_DIR, "lock")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def verified_seconds_ago(record, now=None):
    try:
        at = datetime.datetime.strptime(record.get("verified_at") or "", "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return (now or time.time()) - at.replace(tzinfo=datetime.timezone.utc).timestamp()


def prune(models_root=None, store_root=None, grace_s=PRUNE_GRACE_S):
    """Remove snapshots this tool made (they have a verification record) that no retained release uses and that
    were verified over grace_s ago; nothing while another command holds the weights' lock."""
    models_root = models_root or weights_manifest.MODELS_ROOT
    if not any(os.path.isdir(os.path.join(models_root, *part)) for part in ((TOOL_DIR, "verified"), ("token-maps",))):
        # no managed weights or maps on this host
        return {"ok": True, "removed": [], "kept": []}
    try:
        with models_lock(models_root, exclusive=True):
            result = prune_locked(models_root, store_root, grace_s)
            maps = prune_maps(os.path.join(models_root, "token-maps"), referenced_snapshots(store_root), grace_s)
            return {**result, "removed": result["removed"] + maps["removed"], "kept": result["kept"] + maps["kept"]}
    except BlockingIOError:
        log("weights prune skipped: a fetch, promote or verify is running")
        return {"ok": True, "skipped": "locked", "removed": [], "kept": []}
    except DocumentError as error:  # which snapshots that release uses is unknown: nothing is removed
        log(f"weights prune skipped: {error}")
        return {"ok": True, "skipped": str(error), "removed": [], "kept": []}
    except OSError as error:  # a read-only models directory: nothing to prune here, and not a failed deploy
        log(f"weights prune skipped: {error}")
        return {"ok": True, "skipped": str(error), "removed": [], "kept": []}


def snapshot_below(directory, models_root):
    """Whether a record's directory is a snapshot <org>--<name>/<revision> of the models root itself: written
    normalized (no '..', '.', '//'), no hidden part, and no symlink on the way (its real path is the one written under
    the root's real path), so a forged record can never name a path outside the models root."""
    if not isinstance(directory, str) or not os.path.isabs(directory) or os.path.normpath(directory) != directory:
        return False
    root = os.path.normpath(os.path.abspath(models_root))
    relative = os.path.relpath(directory, root)
    parts = relative.split(os.sep)
    if relative.startswith("..") or len(parts) != 2 or any(part.startswith(".") for part in parts):
        return False
    try:
        if not all(stat.S_ISDIR(os.lstat(path).st_mode) for path in (os.path.join(root, parts[0]), directory)):
            return False  # a symlink (lstat does not follow it), or not a directory
    except OSError:
        return False
    return os.path.realpath(directory) == os.path.join(os.path.realpath(root), relative)


def prune_locked(models_root, store_root, grace_s):
    used = referenced_snapshots(store_root)
    records_dir = os.path.join(models_root, TOOL_DIR, "verified")
    removed, kept = [], []
    for name in sorted(os.listdir(records_dir)) if os.path.isdir(records_dir) else []:
        record = read_json(os.path.join(records_dir, name)) or {}
        directory = record.get("directory")
        if not snapshot_below(directory, models_root):  # also .staging-* (hidden) and the tool's own directory
            continue
        age = verified_seconds_ago(record)
        if directory in used or (age is not None and age < grace_s):
            kept.append(directory)
            continue
        shutil.rmtree(directory, ignore_errors=True)
        os.remove(os.path.join(records_dir, name))
        removed.append(directory)
    return {"ok": True, "removed": removed, "kept": kept}


def maps_to_remove(ages, used, maps_dir, grace_s):
    """The token maps (name -> seconds since written, in the maps directory) that no retained release names and
    that were shipped over grace_s ago; a file not named <sha256>.pt is not the tool's and stays."""
    return sorted(name for name, age in ages.items() if MAP_NAME.fullmatch(name)
                  and os.path.join(maps_dir, name) not in used and age >= grace_s)


def prune_maps(maps_dir, used, grace_s, now=None):
    """Remove the content-addressed token maps that no retained release uses (maps_to_remove)."""
    if not os.path.isdir(maps_dir):
        return {"removed": [], "kept": []}
    now = now or time.time()
    ages = {}
    for name in os.listdir(maps_dir):
        path = os.path.join(maps_dir, name)
        if stat.S_ISREG(os.lstat(path).st_mode):
            ages[name] = now - os.lstat(path).st_mtime
    doomed = maps_to_remove(ages, used, maps_dir, grace_s)
    for name in doomed:
        os.remove(os.path.join(maps_dir, name))
    return {"removed": [os.path.join(maps_dir, n) for n in doomed],
            "kept": [os.path.join(maps_dir, n) for n in sorted(set(ages) - set(doomed)) if MAP_NAME.fullmatch(n)]}
