"""`sglang-deploy token-map`: the hot-vocabulary map's counter (token_map/build.py, by path) run in SGLang's validator
environment, which has torch and transformers: the one step of the token map that needs SGLang's environment, so it
lives beside that environment (validator_env.py) and token_map/ needs nothing of the wing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .. import releases
from ..token_map.file import BUILD_SCRIPT, TokenMapError, read_corpus, write_digest
from .validator_env import ensure_env, scrubbed_environment


def build(corpus: Path, model_dir: Path, size: int, output: Path, version: str | None = None) -> dict:
    """Tokenise the corpus with the model directory's tokenizer (in SGLang <version>'s validator environment; default
    the newest reviewed release), save the `size` most frequent ids where SGLang's load_token_map reads them, and
    freeze the digest."""
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
