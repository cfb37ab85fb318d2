"""Filling a weights snapshot: free disk first, a resumable staging directory filled by huggingface_hub's own
client (or by the controller's push), then verified (manifest.py) and renamed into place, root-owned.

Standard library only (huggingface_hub runs in the --python the host names, as a child process).
"""

import json
import os
import shutil
import subprocess
import sys
import threading
import time

from ..contract.paths import VENV_ROOT
from . import manifest as weights_manifest
from .manifest import (TOOL_DIR, WeightsError, human, is_verified, log, read_json, state_path, total_bytes,
                               verify, write_json)

DISK_MARGIN = 1 << 30  # keep 1 GiB free beyond the weights


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
    if os.path.normpath(python).startswith(VENV_ROOT + "/"):  # root runs the downloader: never a release venv's
        raise WeightsError(f"{python} is a release venv's python: the fetch runs as root, and a wheel's .pth file "
                           "would run with it; host data hub_python names the hub client's or the system's")
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
        progress_path = os.path.join(weights_manifest.MODELS_ROOT, TOOL_DIR, "progress", f"{os.path.basename(os.path.dirname(directory))}-{revision}.txt")
        os.makedirs(os.path.dirname(progress_path), exist_ok=True)
        log(f"progress: {progress_path}")
        with Progress(staging, total_bytes(manifest), progress_path):
            result = subprocess.run([python, "-c", DOWNLOADER, json.dumps(spec)], env=env, stdout=sys.stderr)
        if result.returncode != 0:
            raise WeightsError(f"the download stopped (huggingface_hub exit {result.returncode}); what arrived is kept "
                               f"in {staging} and the next run resumes it; nothing was switched")
    return promote(directory, manifest)
