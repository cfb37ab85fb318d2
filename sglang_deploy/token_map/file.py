"""A hot-vocabulary draft head (FR-Spec): the token map SGLang's `--speculative-token-map` reads, built from a
prompt corpus with the model's own tokenizer, frozen with a sha256 digest, and checked as part of a verified snapshot.

    sglang-deploy token-map CORPUS --model DIR --size N [--output FILE.pt]

SGLang's `load_token_map` (srt/speculative/spec_utils.py) `torch.load`s the file (weights_only) and makes an int64
tensor of it; the EAGLE/NEXTN draft worker (eagle_worker_v2.py `init_token_map`, `init_lm_head`) then computes the
draft's logits over those ids only. The ids are the N most frequent ones in the tokenisation of CORPUS by DIR's
tokenizer (counted in SGLang's validator environment, which has torch and transformers: build.py).

The served file must be one the host verifies before the switch: a map the profile ships as a release part
(speculative.token_map or tune.token_maps, part.py), or a file inside a verified snapshot (model.source or
speculative.draft), listed in its manifest (whose sha256 the host checks). SGLang downloads a missing path from the
Hub under its directory's name (load_token_map), so a path outside a verified snapshot would serve anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..drafter import draft_weights
from ..hostside.weights.manifest import sha256_file  # noqa: F401 - the token map's digest, as the host checks it
from ..profile.problem import Problem, flag_field, remove_or_waive
from ..weights import WeightsSourceError, profile_weights
from .part import shipped_paths

FLAG = "--speculative-token-map"
BUILD_SCRIPT = Path(__file__).with_name("build.py")  # the counter (validate/token_counter.py runs it)
MAX_CORPUS_BYTES = 256 << 20
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "manifests" / "token-maps"


class TokenMapError(ValueError):
    pass


def read_corpus(path: Path) -> list[str]:
    """The prompts of a corpus: a .jsonl file (each line a JSON string, or an object with a `prompt` or `text`
    string) or any other text file (one prompt per non-blank line). Errors name the file and line."""
    try:
        if path.stat().st_size > MAX_CORPUS_BYTES:
            raise TokenMapError(f"{path}: larger than {MAX_CORPUS_BYTES >> 20} MiB; accepted: a prompt corpus of at "
                                "most that size")
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise TokenMapError(f"{path}: cannot read it ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        line = path.read_bytes()[:error.start].count(b"\n") + 1
        raise TokenMapError(f"{path}:{line}: not UTF-8 text; accepted: a UTF-8 text or JSONL file") from None
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if path.suffix != ".jsonl":
            prompts.append(line)
            continue
        try:
            entry = json.loads(line)
        except ValueError as error:
            raise TokenMapError(f"{path}:{number}: not JSON ({error}); accepted per line: a JSON string or an object "
                                "with a `prompt` or `text` string") from None
        if isinstance(entry, dict):
            entry = entry.get("prompt", entry.get("text"))
        if not isinstance(entry, str) or not entry.strip():
            raise TokenMapError(f"{path}:{number}: no prompt; accepted per line: a JSON string or an object with a "
                                "non-empty `prompt` or `text` string")
        prompts.append(entry)
    if not prompts:
        raise TokenMapError(f"{path}: no prompts in it")
    return prompts


def digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def write_digest(path: Path) -> str:
    """The frozen digest beside the map, in sha256sum's format (`sha256sum -c` checks it)."""
    value = sha256_file(path)
    digest_path(path).write_text(f"{value}  {path.name}\n")
    return value


def verify(path: Path) -> str:
    """The map's digest, after checking it against the frozen one beside it; TokenMapError when it differs."""
    try:
        frozen = digest_path(path).read_text().split()[0]
    except (OSError, IndexError):
        raise TokenMapError(f"{digest_path(path)}: no frozen digest (`sglang-deploy token-map` writes it)") from None
    actual = sha256_file(path)
    if actual != frozen:
        raise TokenMapError(f"{path}: sha256 {actual} differs from the frozen {frozen} ({digest_path(path)}): "
                            "the map changed after it was built")
    return actual


# --- the check ------------------------------------------------------------------------------------------

def verified_snapshots(profile) -> list:
    """The verified snapshots of the profile: its weights and its draft model (each with its manifest)."""

    out = []
    for get in (profile_weights, draft_weights):
        try:
            weights = get(profile)
        except WeightsSourceError:
            continue  # reported by the weights and draft rules
        if weights is not None:
            out.append(weights)
    return out


def problems(profile) -> list[Problem]:
    """--speculative-token-map names a file of a verified snapshot, listed in its manifest (the host checks its
    sha256 before the switch); anything else is served unverified (or downloaded from the Hub by SGLang)."""
    value = profile.sglang.flags.get(FLAG)
    if value is None or value is False:
        return []
    text = str(value)

    if text in shipped_paths(profile):
        return []  # a map the profile ships (part.py): its digest is checked on the host
    snapshots = verified_snapshots(profile)
    for weights in snapshots:
        root = weights.path.rstrip("/") + "/"
        if not (os.path.isabs(text) and text.startswith(root) and ".." not in text.split("/")):
            continue
        relative = text[len(root):]
        entry = next((f for f in weights.manifest["files"] if f["path"] == relative), None)
        if entry is None:
            return [Problem("token-map-verified", flag_field(FLAG),
                            f"{FLAG} {text}: {relative} is not in the manifest of {weights.source.text} "
                            f"({weights.manifest_file}), so nothing checks it on the host; freeze the snapshot again "
                            f"with the map in it (sglang-deploy manifest {weights.source.text} --output "
                            f"{weights.manifest_file})")]
        return []
    where = " or ".join(w.path for w in snapshots) or "a verified snapshot (model.source or speculative.draft)"
    return [Problem("flag-serves-other-weights", flag_field(FLAG),
                    f"{FLAG} {text} is outside {where}: SGLang would read (or download from the Hub) a map nobody "
                    "verified; accepted: a file of a verified snapshot, listed in its manifest (build it with "
                    "`sglang-deploy token-map`); " + remove_or_waive("flag-serves-other-weights"))]
