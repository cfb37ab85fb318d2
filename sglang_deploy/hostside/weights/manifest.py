"""A weights snapshot against its frozen manifest: the manifest's checks and identity, hashing, the verification
record of a snapshot directory, and whether a release's snapshots are still as they were verified.

The tool's directory under MODELS_ROOT (contract/paths.py) is written here once (fetch.py, prune.py and the
controller read it from here). Standard library only; of its package it imports only the paths' table.
"""

import argparse
import hashlib
import json
import os
import re
import sys
import time

from ..contract.paths import MODELS_ROOT

TOOL_DIR = ".sglang-deploy"
SHA256 = re.compile(r"[0-9a-f]{64}")
REVISION = re.compile(r"[0-9a-f]{40}")
REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
PATH_PART = re.compile(r"[A-Za-z0-9._+-]{1,200}")
# ReleaseMeta's fields (contract/release.py) of the snapshots a release serves; the flags that name them: prune.py
SNAPSHOT_KEYS = ("weights", "draft")
# Token maps (--speculative-token-map), a release part of their own: content-addressed, <sha256>.pt
MAPS_DIR = os.path.join(MODELS_ROOT, "token-maps")
MAP_FLAG = "--speculative-token-map"
MAP_NAME = re.compile(r"([0-9a-f]{64})\.pt")


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


# A diffusion pipeline's index at the snapshot's top: sglang's cli/serve.py then serves it with the diffusion runtime
# (multimodal_gen), whose server takes no API key (security review 3, finding 7).
DIFFUSION_INDEXES = ("model_index.json", "modular_model_index.json")


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
        if entry["path"] in DIFFUSION_INDEXES:
            problems.append(f"{where}: {entry['path']} makes `sglang serve` start its diffusion server, which has no "
                            "API key; accepted: a language model's snapshot (config.json, no diffusion model index)")
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


def snapshot_change(mine, theirs, unmanaged):
    """(their label, my label) when two releases' snapshot records (meta.json `weights` or `draft`; None or {}: not
    managed, labelled `unmanaged`; release.SnapshotMark) name other weights (another source or manifest), else None. The one comparison
    behind the gate's baseline note (switch.baseline_weights_note) and the listing (release_plan.weights_change)."""
    def key(w):
        return (w.source, w.manifest_sha256) if w else (None, None)

    def label(w):
        return f"{w.source} (manifest {w.manifest_sha256[:12]})" if w else unmanaged

    return None if key(mine) == key(theirs) else (label(theirs), label(mine))


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


def snapshot_dir(value):
    """argparse type: a directory under the models root, <org>--<name>/<revision>."""
    path = os.path.abspath(value)
    root = os.path.abspath(MODELS_ROOT)
    if not path.startswith(root + "/") or ".." in value.split("/"):
        raise argparse.ArgumentTypeError(f"{value!r} is not under {root}")
    return path


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
    digests = []
    if to_hash:  # a status check (every deploy's fact) hashes nothing and imports no thread pool
        # deferred: 4.8 ms (concurrent.futures) on hostside.deploy_facts, only where a file is hashed
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1, len(to_hash)))) as pool:
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



def release_problem(meta):
    """Before a switch: the release's snapshots (its weights, its draft model) must be in place and unchanged since
    they were verified (no hashing). None when the release (a ReleaseMeta) has no managed weights or they are fine."""
    for key in SNAPSHOT_KEYS:
        problem = snapshot_problem(getattr(meta, key), "weights" if key == "weights" else "draft model")
        if problem:
            return problem
    return map_problem(meta.exec_start)


def map_path(sha256, maps_dir=None):
    """Where a token map of this digest lives on the host."""
    return os.path.join(maps_dir or MAPS_DIR, f"{sha256}.pt")


def map_problem(argv, maps_dir=None):
    """Before a switch: a --speculative-token-map the release's command line names under the maps directory must be
    there with the sha256 its name says (hashed each time: a map is a few hundred KB). None when fine or unmanaged."""
    argv = list(argv or [])
    maps_dir = maps_dir or MAPS_DIR
    for index, arg in enumerate(argv[:-1]):
        if arg != MAP_FLAG or os.path.dirname(argv[index + 1]) != maps_dir:
            continue
        path = argv[index + 1]
        match = MAP_NAME.fullmatch(os.path.basename(path))
        if not match:
            return f"the release's token map {path} is not named <sha256>.pt: not a map the deploy shipped"
        try:
            actual = sha256_file(path)
        except OSError:
            return f"the release's token map {path} is not on the host (pruned?); deploy it again"
        if actual != match.group(1):
            return (f"the release's token map {path} has sha256 {actual}, not the {match.group(1)} it was shipped "
                    "with: it changed on the host; deploy it again")
    return None


def snapshot_problem(weights, what):
    """weights: the release's SnapshotMark (contract/release.py), or None: not managed."""
    if not weights:
        return None
    manifest = read_json(weights.manifest)
    if manifest is None or check_manifest(manifest) or manifest_hash(manifest) != weights.manifest_sha256:
        return f"the manifest {weights.manifest} of the release's {what} is missing or not the recorded one"
    if not os.path.isdir(weights.path):
        return f"the release's {what} {weights.path} are not on the host (pruned?); deploy them again"
    problems, _ = verify(weights.path, manifest, quick=True)
    if problems:
        return f"the release's {what} in {weights.path} changed since they were verified: " + "; ".join(problems)
    return None


def load_manifest_file(path):
    manifest = read_json(path)
    problems = check_manifest(manifest) if manifest is not None else [f"{path}: not readable JSON"]
    if problems:
        raise WeightsError(f"{path}: " + "; ".join(problems))
    return manifest
