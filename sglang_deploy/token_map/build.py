"""Run in SGLang's validator environment (torch, transformers): count the token ids of a corpus with the model's own
tokenizer and torch.save the N most frequent as the list SGLang's `load_token_map` reads
(srt/speculative/spec_utils.py: `torch.load(path, weights_only=True)`, then `torch.tensor(..., int64)`).

    python build.py < {"model_dir": DIR, "texts": [...], "size": N, "output": PATH}

Prints one JSON line: {"ok": true, "tokens": total ids counted, "distinct": distinct ids, "vocab_size": V} or
{"ok": false, "error": "..."}. Started by sglang_deploy/token_map/file.py; nothing else imports it.
"""

import collections
import json
import sys


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        # deferred: optional, transformers and torch are in the validator's virtualenv only
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(request["model_dir"])
    except Exception as error:  # noqa: BLE001 - whatever transformers raises names the broken file
        print(json.dumps({"ok": False, "error": f"{request['model_dir']}: no tokenizer transformers can load "
                                                f"({type(error).__name__}: {str(error)[:300]})"}))
        return 0
    counts = collections.Counter()
    for text in request["texts"]:
        counts.update(tokenizer(text, add_special_tokens=False)["input_ids"])
    size = int(request["size"])
    vocab = len(tokenizer)
    if len(counts) < size:
        print(json.dumps({"ok": False, "distinct": len(counts), "vocab_size": vocab,
                          "error": f"the corpus has {len(counts)} distinct token ids, fewer than --size {size}: "
                                   f"use a larger corpus or --size {len(counts)} or less"}))
        return 0
    # most frequent first; equal counts by id, so the same corpus gives the same file
    hot = [token for token, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]]
    # deferred: optional, transformers and torch are in the validator's virtualenv only
    import torch

    torch.save(hot, request["output"])
    print(json.dumps({"ok": True, "tokens": sum(counts.values()), "distinct": len(counts), "vocab_size": vocab}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
