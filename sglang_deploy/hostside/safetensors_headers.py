#!/usr/bin/env python3
"""Weight bytes of a safetensors checkpoint by role, from the headers only (standard library).

    python3 safetensors_headers.py MODEL_DIR   -> JSON {"layers", "lm_head", "embedding", "mtp", "vision", ...}

Decode reads the transformer layers and the LM head every verify pass, and the MTP layer plus the LM
head every draft step; embedding rows are gathered, not read in full; a vision tower is not read
during text decode.
"""

import json
import os
import stat
import struct
import sys

DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
               "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1}


MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own limit
MAX_DIM, MAX_RANK = 1 << 48, 8


def open_regular(path):
    """A file object of a regular file, opened without following a symlink and without blocking (a FIFO
    planted in the weights directory would hang root's watch, and with it the store's lock); ValueError
    for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == 40:  # ELOOP: the last component is a symlink
            raise ValueError(f"{path}: a symlink; root's readers follow none in the weights directory") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ValueError(f"{path}: not a regular file (mode {stat.filemode(mode)}): not read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_header(path):
    """The JSON header (ValueError for a file that is not safetensors: the watch runs as root and must not
    allocate what a corrupt or hostile length field asks for)."""
    with open_regular(path) as f:
        prefix = f.read(8)
        if len(prefix) != 8:
            raise ValueError(f"{path}: shorter than a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"{path}: header length {length} is over the format's {MAX_HEADER_BYTES} bytes")
        return json.loads(f.read(length))


def role(name):
    lowered = name.lower()
    if "embed_tokens" in lowered or lowered.endswith("wte.weight"):
        return "embedding"
    if lowered.startswith("lm_head") or ".lm_head." in lowered:
        return "lm_head"
    if lowered.startswith("mtp.") or ".mtp." in lowered:
        return "mtp"
    if "visual" in lowered or "vision" in lowered:
        return "vision"
    return "layers"


def tensor_bytes(info):
    shape = info["shape"]
    if not isinstance(shape, list) or len(shape) > MAX_RANK or not all(
            isinstance(dim, int) and 0 <= dim < MAX_DIM for dim in shape):
        raise ValueError(f"tensor shape {str(shape)[:80]} is not a list of at most {MAX_RANK} sizes below 2**48")
    count = 1
    for dim in shape:
        count *= dim
    return count * DTYPE_BYTES.get(info["dtype"], 0)


def summarize(model_dir):
    totals = dict.fromkeys(("layers", "lm_head", "embedding", "mtp", "vision"), 0)
    unknown_dtypes = set()
    rows = {"lm_head": 0, "embedding": 0}  # the vocabulary: the LM head's rows (the embedding's when tied)
    shards = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    for shard in shards:
        for name, info in read_header(os.path.join(model_dir, shard)).items():
            if name == "__metadata__":
                continue
            if info["dtype"] not in DTYPE_BYTES:
                unknown_dtypes.add(info["dtype"])
            totals[role(name)] += tensor_bytes(info)
            shape = info.get("shape")
            if role(name) in ("lm_head", "embedding") and isinstance(shape, list) and shape and \
                    isinstance(shape[0], int):
                rows[role(name)] = max(rows[role(name)], shape[0])
    tied, vocab = False, None
    config_path = os.path.join(model_dir, "config.json")
    if os.path.lexists(config_path):
        with open_regular(config_path) as f:
            config = json.loads(f.read(MAX_HEADER_BYTES))
        text_config = config.get("text_config", config)
        tied = bool(text_config.get("tie_word_embeddings", config.get("tie_word_embeddings")))
        vocab = text_config.get("vocab_size", config.get("vocab_size"))
    if tied and not totals["lm_head"]:
        totals["lm_head"] = totals["embedding"]  # the LM head is the embedding matrix, read in full
    return {"shards": len(shards), "bytes": totals, "tied_embeddings": tied,
            "vocab_size": vocab if isinstance(vocab, int) and vocab > 0 else (rows["lm_head"] or rows["embedding"]
                                                                              or None),
            "unknown_dtypes": sorted(unknown_dtypes)}


if __name__ == "__main__":
    print(json.dumps(summarize(sys.argv[1])))
