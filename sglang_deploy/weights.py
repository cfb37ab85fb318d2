"""Model weights as part of a release (controller side): the profile's `model.source`, its frozen manifest,
and the `sglang-deploy manifest` command that writes one.

    model.source: hf://ORG/NAME@REVISION   a full 40-hex commit of a Hugging Face repo (or of host data hf_endpoint's)
    model.source: file:///abs/dir           a directory on the controller, pushed over the deploy's SSH connection

The served path is derived: /srv/models/<org>--<name>/<revision> (local directories: local--<dir name>/<the
first 40 hex of the manifest hash>). The manifest (every file, size, sha256) lives in the repository
(default manifests/<org>--<name>/<revision>.json) and is reviewed like code; the host verifies against it
without any network (hostside/weights/).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .hostside.weights.manifest import (MODELS_ROOT, REPO_PART, REVISION, TOOL_DIR, check_manifest, file_problem,
                                        manifest_hash, sha256_file, total_bytes)

REPO_ROOT = Path(__file__).resolve().parent.parent
MANIFESTS_DIR = REPO_ROOT / "manifests"
# The controller directories a file:// source or an absolute manifest may come from: colon-separated absolute paths,
# set by the operator in the controller's environment (a profile, which comes in a pull request, cannot widen it).
WEIGHTS_DIRS_VARIABLE = "SGLANG_DEPLOY_WEIGHTS_DIRS"
MANIFEST_MAX_BYTES = 64 << 20  # a manifest of a million files is 150 MB; this bounds what `check` reads
HF_SOURCE = re.compile(r"hf://([^/@]+)/([^/@]+)@(.*)")
HUB_CLIENT_PIN = "huggingface_hub==1.33.0"  # what SGLang's venv brings


class WeightsSourceError(ValueError):
    pass


@dataclass(frozen=True)
class Source:
    kind: str  # "hf" or "dir"
    repo: str | None  # ORG/NAME
    revision: str | None  # 40-hex commit (hf)
    local_dir: str | None  # controller directory (dir)

    @property
    def text(self) -> str:
        return f"hf://{self.repo}@{self.revision}" if self.kind == "hf" else f"file://{self.local_dir}"


def parse_source(text: str, allow_branch: bool = False) -> Source:
    """hf://ORG/NAME@<40-hex commit> or file:///absolute/dir; a branch or tag name is refused (unless allow_branch,
    for the manifest command, which resolves it to the commit)."""
    match = HF_SOURCE.fullmatch(text)
    if match:
        org, name, revision = match.groups()
        if not REPO_PART.fullmatch(org) or not REPO_PART.fullmatch(name):
            raise WeightsSourceError(f"{text!r}: ORG and NAME must be letters, digits, '.', '_' or '-'")
        if not revision:
            raise WeightsSourceError(f"{text!r}: the revision after '@' is missing; pin a full 40-hex commit")
        if not REVISION.fullmatch(revision) and not allow_branch:
            raise WeightsSourceError(
                f"{text!r}: revision {revision!r} is a branch or tag name, not a commit: it can move, and the "
                f"release would no longer say which weights it serves; pin the full 40-hex commit "
                f"(`sglang-deploy manifest hf://{org}/{name}@{revision}` resolves it and writes the manifest)")
        if allow_branch and not re.fullmatch(r"[A-Za-z0-9._/-]{1,200}", revision):
            raise WeightsSourceError(f"{text!r}: {revision!r} is not a revision name")
        return Source("hf", f"{org}/{name}", revision, None)
    if text.startswith("file://"):
        directory = text[len("file://"):]
        if not directory.startswith("/") or ".." in directory.split("/") or not re.fullmatch(r"[A-Za-z0-9._/+-]+", directory):
            raise WeightsSourceError(f"{text!r}: expected file:///absolute/directory on the controller "
                                     "(letters, digits, '.', '_', '+', '-', no '..')")
        return Source("dir", None, None, directory.rstrip("/") or "/")
    raise WeightsSourceError(f"{text!r} is not a weights source; accepted: hf://ORG/NAME@<40-hex commit> "
                             "(Hugging Face or an HF-compatible mirror) or file:///absolute/directory (controller)")


def weights_dirs() -> list[str]:
    return [os.path.realpath(p) for p in os.environ.get(WEIGHTS_DIRS_VARIABLE, "").split(":") if p.startswith("/")]


def inside(path, roots) -> bool:
    """Whether path, its symlinks resolved, is one of roots or below one."""
    real = os.path.realpath(path)
    return any(os.path.commonpath([real, root]) == root for root in roots)


def _accepted_dirs() -> str:
    return (f"accepted: a directory under one of ${WEIGHTS_DIRS_VARIABLE} (colon-separated absolute directories of "
            f"the controller, set by the operator; now {':'.join(weights_dirs()) or 'unset'})")


def local_dir_problem(directory: str) -> str | None:
    """A file:// source's directory: under a configured weights directory, no hidden component (.ssh, .aws)."""
    hidden = next((part for part in directory.split("/") if part.startswith(".")), None)
    if hidden:
        return f"file://{directory}: the hidden path component {hidden!r} is not accepted; {_accepted_dirs()}"
    if not inside(directory, weights_dirs()):
        return f"file://{directory} is not under a weights directory of this controller; {_accepted_dirs()}"
    return None


def source_problem(text: str) -> str | None:
    """What is wrong with a profile's model.source (None: fine)."""
    try:
        source = parse_source(text)
    except WeightsSourceError as error:
        return str(error)
    return local_dir_problem(source.local_dir) if source.kind == "dir" else None


def manifest_path_problem(value: str) -> str | None:
    """model.manifest: relative, under the repository's manifests/ (no '..'); or absolute, under a weights
    directory."""
    if not os.path.isabs(value):
        if ".." in value.split("/") or not inside(REPO_ROOT / value, [os.path.realpath(MANIFESTS_DIR)]):
            return (f"model.manifest {value!r}: a relative manifest must be under the repository's manifests/ "
                    "(no '..')")
        return None
    if not inside(value, weights_dirs()):
        return (f"model.manifest {value!r} is not under the repository's manifests/ or a weights directory; "
                + _accepted_dirs().replace("a directory", "a file"))
    return None


def default_manifest_path(source: Source) -> str:
    if source.kind == "hf":
        return f"manifests/{source.repo.replace('/', '--')}/{source.revision}.json"
    return f"manifests/local--{os.path.basename(source.local_dir)}.json"


def resolve_manifest_path(value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else REPO_ROOT / path


def load_manifest(path: Path) -> dict:
    try:
        status = os.stat(path)
        if not stat.S_ISREG(status.st_mode) or status.st_size > MANIFEST_MAX_BYTES:
            raise WeightsSourceError(f"manifest {path}: not a regular file of at most {MANIFEST_MAX_BYTES >> 20} MiB")
        manifest = json.loads(path.read_text())
    except OSError as error:
        raise WeightsSourceError(f"manifest {path}: cannot read it ({error.strerror}); create it with "
                                 f"`sglang-deploy manifest SOURCE --output {path}`") from None
    except ValueError as error:
        raise WeightsSourceError(f"manifest {path}: not JSON ({error})") from None
    problems = check_manifest(manifest)
    if problems:
        raise WeightsSourceError(f"manifest {path}: " + "; ".join(problems))
    return manifest


def served_path(source: Source, manifest: dict) -> str:
    if source.kind == "hf":
        org, name = source.repo.split("/")
        return f"{MODELS_ROOT}/{org}--{name}/{source.revision}"
    return f"{MODELS_ROOT}/local--{os.path.basename(source.local_dir)}/{manifest_hash(manifest)[:40]}"


@dataclass(frozen=True)
class Weights:
    """Everything a deploy needs about the profile's weights."""

    source: Source
    manifest_file: Path
    manifest: dict
    digest: str  # manifest_hash
    path: str  # served snapshot directory on the host

    @property
    def host_manifest(self) -> str:
        return f"{MODELS_ROOT}/{TOOL_DIR}/manifests/{self.digest}.json"

    @property
    def total_bytes(self) -> int:
        return total_bytes(self.manifest)

    @property
    def revision(self) -> str:
        return self.source.revision or f"sha256:{self.digest[:12]}"

    def meta(self) -> dict:
        """What a release records (meta.json `weights`)."""
        return {"source": self.source.text, "revision": self.revision, "manifest_sha256": self.digest,
                "manifest": self.host_manifest, "path": self.path, "bytes": self.total_bytes,
                "files": len(self.manifest["files"])}

    def local_files(self) -> list[tuple[dict, str]]:
        """(manifest entry, controller file) for a file:// source: each a regular file inside the source directory
        after symlinks are resolved (a symlink there could hand over any controller file)."""
        root = os.path.realpath(self.source.local_dir)
        out = []
        for entry in self.manifest["files"]:
            path = os.path.join(self.source.local_dir, entry["path"])
            if not inside(path, [root]) or not os.path.isfile(path):
                raise WeightsSourceError(f"{path}: not a regular file inside {self.source.local_dir} (a symlink out of "
                                         "it, or missing); nothing was pushed")
            out.append((entry, path))
        return out

    def unit_comment(self) -> str:
        """A line of the unit: the weights are part of the release's content (its hash)."""
        return f"# Weights: {self.source.text} (manifest sha256:{self.digest}, {len(self.manifest['files'])} files, " \
               f"{self.total_bytes} bytes)"


def weights_for(source_text: str, manifest_value: str | None) -> Weights:
    source = parse_source(source_text)
    problem = manifest_path_problem(manifest_value) if manifest_value else None
    if problem:
        raise WeightsSourceError(problem)
    manifest_file = resolve_manifest_path(manifest_value or default_manifest_path(source))
    manifest = load_manifest(manifest_file)
    if source.kind == "hf" and manifest.get("revision") not in (None, source.revision):
        raise WeightsSourceError(f"manifest {manifest_file} is for revision {manifest.get('revision')}, the source pins "
                                 f"{source.revision}")
    return Weights(source, manifest_file, manifest, manifest_hash(manifest), served_path(source, manifest))


# --- making a manifest ------------------------------------------------------------------------------------

def manifest_from_directory(directory: Path, source_text: str | None = None) -> dict:
    files = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        relative = path.relative_to(directory).as_posix()
        if relative.startswith((".cache/", ".git/")):
            continue
        problem = file_problem(relative)
        if problem:
            raise WeightsSourceError(f"{directory}: {problem}")
        files.append({"path": relative, "size": path.stat().st_size, "sha256": sha256_file(path)})
    if not files:
        raise WeightsSourceError(f"{directory}: no files")
    return {"format": 1, "source": source_text or f"file://{directory}", "files": files,
            "total_bytes": sum(f["size"] for f in files)}


def manifest_from_hub(repo: str, revision: str, endpoint: str | None = None, token: str | None = None,
                      config_out: Path | None = None) -> dict:
    """From the Hub's metadata through huggingface_hub's own API: sizes and LFS sha256 for every file; files the Hub
    stores without LFS (config, tokenizer) carry no sha256 there and are downloaded and hashed."""
    # deferred: 100 ms (huggingface_hub) on every deploy, for sglang-deploy manifest only
    from huggingface_hub import HfApi, hf_hub_download

    api = HfApi(endpoint=endpoint, token=token)
    info = api.model_info(repo, revision=revision, files_metadata=True)
    commit = info.sha
    files = []
    with tempfile.TemporaryDirectory() as scratch:
        for sibling in sorted(info.siblings, key=lambda s: s.rfilename):
            problem = file_problem(sibling.rfilename)
            if problem:
                raise WeightsSourceError(f"{repo}@{commit}: {problem}")
            if sibling.lfs is not None:
                files.append({"path": sibling.rfilename, "size": sibling.lfs.size, "sha256": sibling.lfs.sha256})
                continue
            local = hf_hub_download(repo, sibling.rfilename, revision=commit, local_dir=scratch, endpoint=endpoint,
                                    token=token)
            files.append({"path": sibling.rfilename, "size": os.path.getsize(local), "sha256": sha256_file(local)})
            if sibling.rfilename == "config.json" and config_out is not None:
                config_out.parent.mkdir(parents=True, exist_ok=True)
                config_out.write_bytes(Path(local).read_bytes())
    return {"format": 1, "source": f"hf://{repo}@{commit}", "repo": repo, "revision": commit, "files": files,
            "total_bytes": sum(f["size"] for f in files)}


def write_manifest(manifest: dict, output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(manifest, indent=1) + "\n")


_CACHE: dict = {}


def profile_weights(profile) -> Weights | None:
    """The profile's managed weights (None for a model.path the tool does not manage)."""
    model = profile.model
    if not model.source:
        return None
    key = (model.source, model.manifest)
    if key not in _CACHE:
        _CACHE[key] = weights_for(model.source, model.manifest)
    return _CACHE[key]
