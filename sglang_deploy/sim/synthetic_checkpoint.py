#!/usr/bin/env python3
"""A synthetic checkpoint with the tensor layout and byte counts of Qwen3.6-27B FP8 (BF16 LM head).

Real safetensors headers, data regions left as holes (sparse files: a few KB on disk), so the doctor
reads the simulated host's checkpoint exactly as it reads a real one. With header_only (what the simulated
host gets, pushed and verified like real weights: ~0.4 MB) the data regions are cut off: the headers still
declare every tensor's dtype, shape and offsets, which is all the doctor's roofline reads; the simulator never
loads tensors.

    python3 synthetic_checkpoint.py MODEL_DIR [--header-only]     (standard library only)
"""

import json
import os
import struct
import sys

HIDDEN, VOCAB, LAYERS, INTERMEDIATE = 5120, 248320, 64, 20096
Q_OUT, KV_OUT = 6144, 1024


def layer_tensors(prefix):
    fp8 = [("self_attn.q_proj", Q_OUT, HIDDEN), ("self_attn.k_proj", KV_OUT, HIDDEN), ("self_attn.v_proj", KV_OUT, HIDDEN),
           ("self_attn.o_proj", HIDDEN, Q_OUT), ("mlp.gate_proj", INTERMEDIATE, HIDDEN),
           ("mlp.up_proj", INTERMEDIATE, HIDDEN), ("mlp.down_proj", HIDDEN, INTERMEDIATE)]
    tensors = []
    for name, rows, cols in fp8:
        tensors.append((f"{prefix}.{name}.weight", "F8_E4M3", [rows, cols]))
        tensors.append((f"{prefix}.{name}.weight_scale_inv", "BF16", [rows // 128, cols // 128]))
    tensors += [(f"{prefix}.input_layernorm.weight", "BF16", [HIDDEN]),
                (f"{prefix}.post_attention_layernorm.weight", "BF16", [HIDDEN])]
    return tensors


def shards():
    """Tensors grouped into shard files: (file name, [(tensor, dtype, shape), ...])."""
    out = [("model-embed.safetensors", [("model.language_model.embed_tokens.weight", "BF16", [VOCAB, HIDDEN]),
                                         ("lm_head.weight", "BF16", [VOCAB, HIDDEN])])]
    for start in range(0, LAYERS, 16):
        tensors = []
        for index in range(start, start + 16):
            tensors += layer_tensors(f"model.language_model.layers.{index}")
        out.append((f"model-layers-{start:02d}.safetensors", tensors))
    mtp = layer_tensors("mtp.layers.0") + [("mtp.fc.weight", "F8_E4M3", [HIDDEN, 2 * HIDDEN])]
    vision = [(f"model.visual.blocks.{i}.mlp.fc{j}.weight", "BF16", [4304, 1152]) for i in range(27) for j in (1, 2)]
    out.append(("model-mtp-visual.safetensors", mtp + vision))
    return out


SIZES = {"F8_E4M3": 1, "BF16": 2, "F32": 4}


def write_safetensors(path, tensors, header_only=False):
    """One safetensors file with real headers for (name, dtype, shape); the data region is a hole (or absent)."""
    note = "synthetic (sglang-deploy): header only, no tensor data" if header_only else "synthetic (sglang-deploy)"
    header, offset = {"__metadata__": {"format": "pt", "note": note}}, 0
    for name, dtype, shape in tensors:
        size = SIZES[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        if not header_only:
            f.truncate(8 + len(raw) + offset)  # no data blocks are written: a sparse file


def write(model_dir, header_only=False, architecture=None):
    """The shards and their index; with `architecture` also the stub config.json the simulator needs."""
    os.makedirs(model_dir, exist_ok=True)
    weight_map = {}
    for file_name, tensors in shards():
        write_safetensors(os.path.join(model_dir, file_name), tensors, header_only)
        weight_map.update((name, file_name) for name, _, _ in tensors)
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    if architecture:
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            json.dump({"architectures": [architecture], "simulated": True,
                       "note": "stub checkpoint for the SGLang simulator"}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    write(sys.argv[1], header_only="--header-only" in sys.argv[2:])
