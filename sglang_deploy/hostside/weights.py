#!/usr/bin/env python3
"""Model weights on the host: a snapshot directory per pinned revision, checked against a frozen manifest.

    /srv/models/<org>--<name>/<revision>/           the snapshot the unit serves (root-owned, read-only to the
                                                     service user); exactly the manifest's files
    /srv/models/<org>--<name>/.staging-<revision>/  a download or push in progress (resumable)
    /srv/models/.sglang-deploy/manifests/<hash>.json the manifests the controller uploaded (no network needed)
    /srv/models/.sglang-deploy/verified/<key>.json  per snapshot: size, mtime and sha256 of every file as last
                                                     hashed; a file whose size and mtime are unchanged is not
                                                     hashed again

Commands (JSON on stdout, progress on stderr):
  status   --manifest M --dir D                     verified or not, without hashing anything
  verify   --manifest M --dir D                     every file (hashing only what changed); exit 1 names files
  fetch    --manifest M --dir D --repo R --revision REV --python PY [--endpoint URL]
                                                    free disk first, then huggingface_hub's own client
                                                    (hf_hub_download, resumable) into the staging directory,
                                                    verify, then rename into place
  promote  --manifest M --dir D                     the staging directory (filled by the controller's push) is
                                                    verified and renamed into place
  prune                                             drop snapshots (made by this tool) that no retained release
                                                    of any service points at, verified over PRUNE_GRACE_S ago;
                                                    skipped while a fetch, promote or verify runs

fetch, promote and verify hold /srv/models/.sglang-deploy/lock shared, prune holds it exclusive without waiting:
a prune never removes a snapshot being fetched, and the grace period covers a deploy between its fetch and the
release that records the snapshot.

Standard library only: runs with the host's python3.
"""

import argparse
import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

MODELS_ROOT = os.environ.get("SGLANG_DEPLOY_MODELS", "/srv/models")
STORE_ROOT = os.environ.get("SGLANG_DEPLOY_STORE", "/var/lib/sglang-deploy")
TOOL_DIR = ".sglang-deploy"
SHA256 = re.compile(r"[0-9a-f]{64}")
REVISION = re.compile(r"[0-9a-f]{40}")
REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
PATH_PART = re.compile(r"[A-Za-z0-9._+-]{1,200}")
DISK_MARGIN = 1 << 30  # keep 1 GiB free beyond the weights
EXIT_MISMATCH = 1
EXIT_NO_SPACE = 5
# meta.json keys of the snapshots a release serves, and the flags that name them on its command line
SNAPSHOT_KEYS = ("weights", "draft")
SNAPSHOT_FLAGS = ("--model-path", "--speculative-draft-model-path")
PRUNE_GRACE_S = 3600  # a snapshot verified this recently is kept even if no release records it yet


class WeightsError(Exception):
    pass


# --- manifests (pure; imported by the controller) ---------------------------------------------------

def file_problem(path):
    """Why a manifest entry's path is not acceptable (None when it is): relative, no '..', no tool paths."""
    if not isinstance(path, str) or not path or len(path) > 1000:
        return f"file path {path!r} is empty or too long"
    parts = path.split("/")
    for part in parts:
        if part in (".", "..") or not PATH_PART.fullmatch(part):
            return f"file path {path!r}: each part must be letters, digits, '.', '_', '+' or '-' (no '..', no '/' at either end)"
    if parts[0] in (".cache", TOOL_DIR):
        return f"file path {path!r}: {parts[0]}/ is reserved (download bookkeeping)"
    return None


def check_manifest(manifest):
    """A manifest's structural problems, as sentences naming the entry."""
    problems = []
    if not isinstance(manifest, dict) or manifest.get("format") != 1:
        return ["not a weights manifest (expected a JSON object with \"format\": 1)"]
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        return ["\"files\" must be a non-empty list of {path, size, sha256}"]
    seen = set()
    for index, entry in enumerate(files):
        where = f"files[{index}]"
        if not isinstance(entry, dict) or set(entry) != {"path", "size", "sha256"}:
            problems.append(f"{where}: must have exactly path, size and sha256")
            continue
        problem = file_problem(entry["path"])
        if problem:
            problems.append(f"{where}: {problem}")
        if entry["path"] in seen:
            problems.append(f"{where}: {entry['path']} is listed twice")
        seen.add(entry["path"])
        if not isinstance(entry["size"], int) or isinstance(entry["size"], bool) or entry["size"] < 0:
            problems.append(f"{where} ({entry['path']}): size must be a byte count")
        if not isinstance(entry["sha256"], str) or not SHA256.fullmatch(entry["sha256"]):
            problems.append(f"{where} ({entry['path']}): sha256 must be 64 lower-case hex digits")
    return problems


def manifest_hash(manifest):
    """The identity of a set of weights: sha256 over the sorted (path, size, sha256) entries."""
    entries = sorted((f["path"], f["size"], f["sha256"]) for f in manifest["files"])
    return hashlib.sha256(json.dumps(entries, separators=(",", ":")).encode()).hexdigest()


def total_bytes(manifest):
    return sum(f["size"] for f in manifest["files"])


def sha256_file(path, chunk=8 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def human(size):
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{size:.0f} B"
        size /= 1000.0


def log(message):
    print(f"weights: {message}", file=sys.stderr, flush=True)


# --- verification ------------------------------------------------------------------------------------

def state_path(directory):
    """Where the verification record of a snapshot directory lives (outside it: the snapshot holds exactly the
    manifest's files)."""
    key = hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:24]
    return os.path.join(MODELS_ROOT, TOOL_DIR, "verified", f"{key}.json")


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path, document):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(document, f, indent=1, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def verify(directory, manifest, rehash=False, quick=False, extra_ok=()):
    """Check every manifest file in `directory`. Returns (problems, stats).

    A file whose size and mtime match the last record (and whose recorded hash is the manifest's) is not hashed
    again unless `rehash`; `quick` hashes nothing (a file that would need hashing is a problem: 'not verified').
    Files in the directory that the manifest does not list are problems too (SGLang would load a stray shard)."""
    record_path = state_path(directory)
    record = read_json(record_path) or {}
    known = record.get("files") or {} if record.get("directory") == os.path.abspath(directory) else {}
    problems, hashed_bytes, hashed_files, fresh = [], 0, 0, {}
    to_hash = []
    for entry in manifest["files"]:
        name = entry["path"]
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except OSError:
            problems.append(f"{name}: missing")
            continue
        if st.st_size != entry["size"]:
            problems.append(f"{name}: size {st.st_size}, the manifest says {entry['size']}")
            continue
        previous = known.get(name)
        if (not rehash and previous and previous.get("size") == st.st_size and previous.get("mtime_ns") == st.st_mtime_ns
                and previous.get("sha256") == entry["sha256"]):
            fresh[name] = previous
            continue
        if quick:
            problems.append(f"{name}: changed since it was verified (size or mtime), or never verified")
            continue
        to_hash.append((entry, path, st))
    # hashlib releases the GIL on large blocks: several files hash at once, one per core (at most 8).
    workers = max(1, min(8, os.cpu_count() or 1, len(to_hash)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        digests = list(pool.map(lambda item: sha256_file(item[1]), to_hash))
    for (entry, path, st), digest in zip(to_hash, digests):
        name = entry["path"]
        hashed_bytes += st.st_size
        hashed_files += 1
        if digest != entry["sha256"]:
            problems.append(f"{name}: sha256 {digest}, the manifest says {entry['sha256']}")
            continue
        fresh[name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    listed = {entry["path"] for entry in manifest["files"]}
    for root, dirs, files in os.walk(directory):
        relative_root = os.path.relpath(root, directory)
        for name in files:
            relative = name if relative_root == "." else os.path.join(relative_root, name)
            if relative not in listed and not relative.startswith(tuple(extra_ok)):
                problems.append(f"{relative}: not in the manifest")
    if not quick and (fresh != known or not problems):
        write_json(record_path, {"directory": os.path.abspath(directory), "manifest_sha256": manifest_hash(manifest),
                                 "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) if not problems else None,
                                 "files": fresh})
    return problems, {"hashed_files": hashed_files, "hashed_bytes": hashed_bytes, "files": len(manifest["files"])}


def is_verified(directory, manifest):
    """True when every file is in place and unchanged since it was hashed (nothing is hashed)."""
    if not os.path.isdir(directory):
        return False
    record = read_json(state_path(directory)) or {}
    if not record.get("verified_at") or record.get("manifest_sha256") != manifest_hash(manifest):
        return False
    problems, _ = verify(directory, manifest, quick=True)
    return not problems


# --- free disk, progress --------------------------------------------------------------------------------

def bytes_present(directory, manifest):
    """Bytes of manifest files already complete in `directory` (right size)."""
    present = 0
    for entry in manifest["files"]:
        try:
            if os.stat(os.path.join(directory, entry["path"])).st_size == entry["size"]:
                present += entry["size"]
        except OSError:
            pass
    return present


def check_free_space(directory, needed):
    probe = directory
    while not os.path.isdir(probe):
        probe = os.path.dirname(probe) or "/"
    st = os.statvfs(probe)
    free = st.f_bavail * st.f_frsize
    if needed + DISK_MARGIN > free:
        raise WeightsError(f"not enough disk space on {probe}: the weights need {human(needed)} more "
                           f"(+ {human(DISK_MARGIN)} margin), {human(free)} is free; nothing was downloaded")
    return free


def staged_bytes(directory):
    """Bytes of weights in a staging directory: its files, and the partial downloads in huggingface_hub's
    bookkeeping (`.cache/huggingface/download/*.incomplete`), not that bookkeeping's metadata and locks."""
    total = 0
    for root, _, files in os.walk(directory):
        bookkeeping = os.path.relpath(root, directory).split(os.sep)[0] == ".cache"
        for name in files:
            if bookkeeping and not name.endswith(".incomplete"):
                continue
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class Progress:
    """At the start, every few seconds and at the end: bytes in the staging directory (partial downloads included),
    on stderr (which the deploy prints as it arrives) and in a file."""

    def __init__(self, directory, total, path, interval=5.0):
        self.directory, self.total, self.path, self.interval = directory, total, path, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.started = time.monotonic()
        self.initial = None

    def line(self):
        done = staged_bytes(self.directory)
        elapsed = time.monotonic() - self.started
        if self.initial is None:
            self.initial = done
        text = f"{human(done)} of {human(self.total)} ({100.0 * done / max(self.total, 1):.0f} %) after {elapsed:.0f} s"
        rate = (done - self.initial) / elapsed if elapsed > 0 else 0
        if rate > 0 and done < self.total:
            text += f", {human(rate)}/s, about {(self.total - done) / rate:.0f} s left"
        return text

    def report(self):
        text = self.line()
        log(text)
        try:
            with open(self.path, "w") as f:
                f.write(text + "\n")
        except OSError:
            pass

    def run(self):
        while not self.stop.wait(self.interval):
            self.report()

    def __enter__(self):
        self.report()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.report()


# --- snapshots ------------------------------------------------------------------------------------------

def staging_dir(directory):
    parent, revision = os.path.split(os.path.abspath(directory))
    return os.path.join(parent, f".staging-{revision}")


def seal(directory):
    """Root-owned, not writable by anyone else: the service user reads, never changes the weights."""
    for root, dirs, files in os.walk(directory):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)


def promote(directory, manifest):
    """Verify the staging directory, then rename it into place. Nothing moves when a file does not match."""
    staging = staging_dir(directory)
    if is_verified(directory, manifest):
        return {"ok": True, "changed": False, "path": directory}
    if os.path.isdir(directory):
        problems, stats = verify(directory, manifest)
        if not problems:
            return {"ok": True, "changed": False, "path": directory, **stats}
        # Not a snapshot this tool verified (no record), or one changed on disk: never replaced or deleted here,
        # it may be someone's own copy of the weights.
        raise WeightsError(f"{directory} already exists and does not match the manifest ("
                           + "; ".join(problems[:3]) + (f"; {len(problems) - 3} more" if len(problems) > 3 else "")
                           + f"); nothing was switched. The tool does not overwrite a directory it did not verify: "
                           f"move it away (mv {directory} {directory}.old) and deploy again, or point the profile at it "
                           "with model.path (weights managed outside the tool)")
    bookkeeping = os.path.join(staging, ".cache")
    problems, stats = verify(staging, manifest, extra_ok=(".cache/",))
    if problems:
        # A file with the wrong content is removed, so the next attempt fetches it again.
        for problem in problems:
            name = problem.split(": ", 1)[0]
            if "sha256" in problem or "size" in problem:
                try:
                    os.remove(os.path.join(staging, name))
                except OSError:
                    pass
        raise WeightsError("the downloaded files do not match the manifest (nothing was switched): "
                           + "; ".join(problems))
    shutil.rmtree(bookkeeping, ignore_errors=True)
    seal(staging)
    record = read_json(state_path(staging))
    os.rename(staging, directory)
    if record:
        record["directory"] = os.path.abspath(directory)
        write_json(state_path(directory), record)
        try:
            os.remove(state_path(staging))
        except OSError:
            pass
    return {"ok": True, "changed": True, "path": directory, **stats}


DOWNLOADER = r"""
import json, sys
from huggingface_hub import hf_hub_download, __version__
spec = json.loads(sys.argv[1])
print(f"weights: huggingface_hub {__version__} from {spec['endpoint']}", file=sys.stderr, flush=True)
for name in spec["files"]:
    print(f"weights: downloading {name}", file=sys.stderr, flush=True)
    hf_hub_download(spec["repo"], name, revision=spec["revision"], local_dir=spec["dir"])
"""


def fetch(directory, manifest, repo, revision, python, endpoint=None, token_file=None):
    """Download what is missing with huggingface_hub's own client, then verify and promote."""
    if is_verified(directory, manifest):
        log(f"{directory}: verified, unchanged (nothing hashed, nothing downloaded)")
        return {"ok": True, "changed": False, "path": directory}
    if os.path.isdir(directory):
        return promote(directory, manifest)
    staging = staging_dir(directory)
    os.makedirs(staging, mode=0o755, exist_ok=True)
    needed = total_bytes(manifest) - bytes_present(staging, manifest)
    free = check_free_space(staging, needed)
    missing = [f["path"] for f in manifest["files"]
               if not os.path.exists(os.path.join(staging, f["path"]))
               or os.stat(os.path.join(staging, f["path"])).st_size != f["size"]]
    log(f"{repo}@{revision}: {len(missing)} of {len(manifest['files'])} files to fetch, {human(needed)} "
        f"({human(free)} free)")
    if missing and not os.access(python, os.X_OK):
        raise WeightsError(f"{python} (the python whose huggingface_hub downloads the weights) is not on this host; "
                           "host data hub_python names another, hub_wheelhouse installs a small venv for it")
    if missing:
        env = dict(os.environ, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1")
        env.pop("HF_HUB_OFFLINE", None)
        if endpoint:
            env["HF_ENDPOINT"] = endpoint.rstrip("/")
        if token_file:
            env["HF_TOKEN_PATH"] = token_file
        spec = {"repo": repo, "revision": revision, "dir": staging, "files": missing,
                "endpoint": env.get("HF_ENDPOINT", "https://huggingface.co")}
        progress_path = os.path.join(MODELS_ROOT, TOOL_DIR, "progress", f"{os.path.basename(os.path.dirname(directory))}-{revision}.txt")
        os.makedirs(os.path.dirname(progress_path), exist_ok=True)
        log(f"progress: {progress_path}")
        with Progress(staging, total_bytes(manifest), progress_path):
            result = subprocess.run([python, "-c", DOWNLOADER, json.dumps(spec)], env=env, stdout=sys.stderr)
        if result.returncode != 0:
            raise WeightsError(f"the download stopped (huggingface_hub exit {result.returncode}); what arrived is kept "
                               f"in {staging} and the next run resumes it; nothing was switched")
    return promote(directory, manifest)


def referenced_snapshots(store_root=None):
    """Snapshot paths that retained releases of any service point at: their weights, their draft model, the
    drafters their profile offers the tune (meta.json offered_drafts)."""
    store_root = store_root or STORE_ROOT
    used = set()
    for service in os.listdir(store_root) if os.path.isdir(store_root) else []:
        releases = os.path.join(store_root, service, "releases")
        for release_id in os.listdir(releases) if os.path.isdir(releases) else []:
            meta = read_json(os.path.join(releases, release_id, "meta.json")) or {}
            argv = meta.get("exec_start") or []
            offered = [entry.get("path") for entry in meta.get("offered_drafts") or [] if isinstance(entry, dict)]
            for path in [(meta.get(key) or {}).get("path") for key in SNAPSHOT_KEYS] + offered + [
                    argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in SNAPSHOT_FLAGS]:
                if path:
                    used.add(os.path.abspath(path))
    return used


@contextlib.contextmanager
def models_lock(models_root=None, exclusive=False):
    """The weights' lock: shared by fetch, promote and verify, exclusive (never waiting) for prune.
    Raises BlockingIOError when prune would have to wait."""
    path = os.path.join(models_root or MODELS_ROOT, TOOL_DIR, "lock")
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
    models_root = models_root or MODELS_ROOT
    if not os.path.isdir(os.path.join(models_root, TOOL_DIR, "verified")):  # no managed weights on this host
        return {"ok": True, "removed": [], "kept": []}
    try:
        with models_lock(models_root, exclusive=True):
            return prune_locked(models_root, store_root, grace_s)
    except BlockingIOError:
        log("weights prune skipped: a fetch, promote or verify is running")
        return {"ok": True, "skipped": "locked", "removed": [], "kept": []}
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


def release_problem(meta):
    """Before a switch: the release's snapshots (its weights, its draft model) must be in place and unchanged since
    they were verified (no hashing). None when the release has no managed weights or they are fine."""
    for key in SNAPSHOT_KEYS:
        problem = snapshot_problem((meta or {}).get(key), "weights" if key == "weights" else "draft model")
        if problem:
            return problem
    return None


def snapshot_problem(weights, what):
    if not weights:
        return None
    manifest = read_json(weights.get("manifest") or "")
    if manifest is None or check_manifest(manifest) or manifest_hash(manifest) != weights.get("manifest_sha256"):
        return f"the manifest {weights.get('manifest')} of the release's {what} is missing or not the recorded one"
    if not os.path.isdir(weights["path"]):
        return f"the release's {what} {weights['path']} are not on the host (pruned?); deploy them again"
    problems, _ = verify(weights["path"], manifest, quick=True)
    if problems:
        return f"the release's {what} in {weights['path']} changed since they were verified: " + "; ".join(problems)
    return None


def load_manifest_file(path):
    manifest = read_json(path)
    problems = check_manifest(manifest) if manifest is not None else [f"{path}: not readable JSON"]
    if problems:
        raise WeightsError(f"{path}: " + "; ".join(problems))
    return manifest


def snapshot_dir(value):
    """argparse type: a directory under the models root, <org>--<name>/<revision>."""
    path = os.path.abspath(value)
    root = os.path.abspath(MODELS_ROOT)
    if not path.startswith(root + "/") or ".." in value.split("/"):
        raise argparse.ArgumentTypeError(f"{value!r} is not under {root}")
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(prog="weights.py")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("status", "verify", "fetch", "promote"):
        command = sub.add_parser(name)
        command.add_argument("--manifest", required=True)
        command.add_argument("--dir", required=True, type=snapshot_dir)
        if name == "verify":
            command.add_argument("--rehash", action="store_true")
        if name == "fetch":
            command.add_argument("--repo", required=True)
            command.add_argument("--revision", required=True)
            command.add_argument("--python", required=True)
            command.add_argument("--endpoint")
            command.add_argument("--token-file")
    sub.add_parser("prune")
    args = parser.parse_args(argv)
    try:
        if args.command == "prune":
            print(json.dumps(prune()))
            return 0
        if args.command == "status":  # reads only (a fact runs it, --dry included): no lock, nothing written
            return run_locked(args)
        with models_lock():
            return run_locked(args)
    except WeightsError as error:
        log(f"ERROR {error}")
        print(json.dumps({"ok": False, "error": str(error)}))
        return EXIT_NO_SPACE if "not enough disk" in str(error) else EXIT_MISMATCH


def run_locked(args):
    """status, verify, fetch, promote: under the weights' lock, shared (prune waits for none of them to run)."""
    manifest = load_manifest_file(args.manifest)
    if args.command == "status":
        print(json.dumps({"verified": is_verified(args.dir, manifest), "path": args.dir}))
        return 0
    if args.command == "verify":
        started = time.monotonic()
        problems, stats = verify(args.dir, manifest, rehash=args.rehash)
        print(json.dumps({"ok": not problems, "problems": problems, "seconds": round(time.monotonic() - started, 3),
                          **stats}))
        for problem in problems:
            log(f"MISMATCH {problem}")
        return EXIT_MISMATCH if problems else 0
    if args.command == "fetch":
        repo_parts = args.repo.split("/")
        if len(repo_parts) != 2 or not all(REPO_PART.fullmatch(p) for p in repo_parts) \
                or not REVISION.fullmatch(args.revision):
            raise WeightsError(f"--repo {args.repo!r} / --revision {args.revision!r}: expected ORG/NAME and a "
                               "40-hex commit")
        result = fetch(args.dir, manifest, args.repo, args.revision, args.python, args.endpoint, args.token_file)
    else:
        result = promote(args.dir, manifest)
    log(f"{args.dir}: verified" + (" and in place" if result.get("changed") else ", unchanged"))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
