#!/usr/bin/env python3
"""Weight bytes of a safetensors checkpoint by role, from the headers only (standard library).

    python3 safetensors_headers.py MODEL_DIR   -> JSON {"layers", "lm_head", "embedding", "mtp", "vision", ...}

Decode reads the transformer layers and the LM head every verify pass, and the MTP layer plus the LM
head every draft step; embedding rows are gathered, not read in full; a vision tower is not read
during text decode.
"""

import json
import os
import struct
import sys

DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
               "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1}


MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own limit


def read_header(path):
    """The JSON header (ValueError for a file that is not safetensors: the watch runs as root and must not
    allocate what a corrupt or hostile length field asks for)."""
    with open(path, "rb") as f:
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
    count = 1
    for dim in info["shape"]:
        count *= dim
    return count * DTYPE_BYTES.get(info["dtype"], 0)


def summarize(model_dir):
    totals = dict.fromkeys(("layers", "lm_head", "embedding", "mtp", "vision"), 0)
    unknown_dtypes = set()
    shards = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    for shard in shards:
        for name, info in read_header(os.path.join(model_dir, shard)).items():
            if name == "__metadata__":
                continue
            if info["dtype"] not in DTYPE_BYTES:
                unknown_dtypes.add(info["dtype"])
            totals[role(name)] += tensor_bytes(info)
    tied = False
    config_path = os.path.join(model_dir, "config.json")
    if os.path.exists(config_path):
        with open(config_path) as f:
            config = json.load(f)
        text_config = config.get("text_config", config)
        tied = bool(text_config.get("tie_word_embeddings", config.get("tie_word_embeddings")))
    if tied and not totals["lm_head"]:
        totals["lm_head"] = totals["embedding"]  # the LM head is the embedding matrix, read in full
    return {"shards": len(shards), "bytes": totals, "tied_embeddings": tied,
            "unknown_dtypes": sorted(unknown_dtypes)}


if __name__ == "__main__":
    print(json.dumps(summarize(sys.argv[1])))
