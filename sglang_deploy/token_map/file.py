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

import hashlib
import json
import os
import subprocess
from pathlib import Path

from ..validate.problem import Problem, flag_field, remove_or_waive

FLAG = "--speculative-token-map"
BUILD_SCRIPT = Path(__file__).with_name("build.py")
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


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def build(corpus: Path, model_dir: Path, size: int, output: Path, version: str | None = None) -> dict:
    """Tokenise the corpus with the model directory's tokenizer (in SGLang <version>'s validator environment; default
    the newest reviewed release), save the `size` most frequent ids where SGLang's load_token_map reads them, and
    freeze the digest."""
    from .. import releases
    from ..validator_env import ensure_env, scrubbed_environment

    version = version or releases.newest_reviewed()

    if size < 1:
        raise TokenMapError(f"--size {size}: accepted: a positive number of token ids")
    if not (model_dir / "tokenizer.json").is_file() and not (model_dir / "tokenizer_config.json").is_file():
        raise TokenMapError(f"--model {model_dir}: no tokenizer.json or tokenizer_config.json in it; accepted: a "
                            "checkpoint directory with its tokenizer")
    prompts = read_corpus(corpus)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    request = {"model_dir": str(model_dir), "texts": prompts, "size": size, "output": str(partial)}
    result = subprocess.run([str(ensure_env(version)), "-P", str(BUILD_SCRIPT)], input=json.dumps(request),
                            capture_output=True, text=True, env=scrubbed_environment())
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        partial.unlink(missing_ok=True)
        raise TokenMapError(f"the token counter failed:\n{result.stderr.strip()[-1500:]}") from None
    if not answer.get("ok"):
        partial.unlink(missing_ok=True)
        raise TokenMapError(f"{corpus}: {answer.get('error')}")
    if size > answer["vocab_size"]:
        partial.unlink(missing_ok=True)
        raise TokenMapError(f"--size {size} exceeds the tokenizer's vocabulary of {answer['vocab_size']}")
    partial.replace(output)
    return {**answer, "prompts": len(prompts), "size": size, "path": str(output), "sha256": write_digest(output)}


# --- the check ------------------------------------------------------------------------------------------

def verified_snapshots(profile) -> list:
    """The verified snapshots of the profile: its weights and its draft model (each with its manifest)."""
    from ..drafter import draft_weights
    from ..weights import WeightsSourceError, profile_weights

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
    from .part import shipped_paths

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
