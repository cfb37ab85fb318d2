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


def draft_tensors(config):
    """A DFlash draft model's tensors (BF16), from its config.json: dense Qwen3 layers over the target's hidden
    states, and the fc that projects the target layers it reads (dflash_config.target_layer_ids) into the draft; the
    embeddings and the LM head are the target's (SGLang shares them), so the draft has none of its own."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    q_out = config["num_attention_heads"] * config["head_dim"]
    kv_out = config["num_key_value_heads"] * config["head_dim"]
    targets = len((config.get("dflash_config") or {}).get("target_layer_ids") or [0])
    tensors = [("fc.weight", "BF16", [hidden, targets * hidden]), ("hidden_norm.weight", "BF16", [hidden]),
               ("norm.weight", "BF16", [hidden])]
    for index in range(config["num_hidden_layers"]):
        prefix = f"layers.{index}"
        for name, rows, cols in (("self_attn.q_proj", q_out, hidden), ("self_attn.k_proj", kv_out, hidden),
                                 ("self_attn.v_proj", kv_out, hidden), ("self_attn.o_proj", hidden, q_out),
                                 ("mlp.gate_proj", inter, hidden), ("mlp.up_proj", inter, hidden),
                                 ("mlp.down_proj", hidden, inter)):
            tensors.append((f"{prefix}.{name}.weight", "BF16", [rows, cols]))
        tensors += [(f"{prefix}.self_attn.q_norm.weight", "BF16", [config["head_dim"]]),
                    (f"{prefix}.self_attn.k_norm.weight", "BF16", [config["head_dim"]]),
                    (f"{prefix}.input_layernorm.weight", "BF16", [hidden]),
                    (f"{prefix}.post_attention_layernorm.weight", "BF16", [hidden])]
    return tensors


def write_draft(model_dir, config, header_only=False):
    """A synthetic draft checkpoint (one safetensors file, real headers) with the draft's config.json."""
    os.makedirs(model_dir, exist_ok=True)
    write_safetensors(os.path.join(model_dir, "model.safetensors"), draft_tensors(config), header_only)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


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


# The words the simulator's engine emits (engine.WORDS), one token each after the 256 byte tokens; kept here too so
# this file runs alone (standard library only).
WORDS = ("the", "model", "server", "token", "decode", "graph", "memory", "bandwidth", "cache", "layer",
         "request", "batch", "kernel", "stream", "value", "return", "def", "for", "in", "data", "result",
         "system", "time", "speed", "and", "of", "to", "a", "is", "with")
# Qwen3.5's special tokens (the tokenizer renumbers them after the vocabulary; nothing reads their ids here).
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>")
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _byte_alphabet():
    """GPT-2's byte-to-character table, as byte-level BPE tokenizers (Qwen's among them) use it."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return chars


def write_tokenizer(model_dir):
    """A byte-level BPE tokenizer without merges (every byte one token) plus one token per simulator word, with
    Qwen's special tokens and a ChatML template, and the Qwen3-VL processor configs SGLang's TokenizerManager
    loads for this architecture: real tokenizer files, read by transformers as a checkpoint's are."""
    alphabet = _byte_alphabet()
    vocab = {alphabet[byte]: byte for byte in range(256)}
    for index, word in enumerate(WORDS):
        vocab["\u0120" + word] = 256 + index  # Ġword: the word with its leading space
    added = [{"id": len(vocab) + index, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for index, token in enumerate(SPECIALS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
                 "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
                 "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                           "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                           "ignore_merges": False, "vocab": vocab, "merges": []}}
    files = {
        "tokenizer.json": tokenizer,
        "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
                                  "pad_token": "<|endoftext|>", "model_max_length": 262144,
                                  "chat_template": CHAT_TEMPLATE, "image_token": "<|image_pad|>",
                                  "video_token": "<|video_pad|>", "vision_start_token": "<|vision_start|>",
                                  "vision_end_token": "<|vision_end|>"},
        "preprocessor_config.json": {"image_processor_type": "Qwen2VLImageProcessorFast", "patch_size": 16,
                                     "temporal_patch_size": 2, "merge_size": 2,
                                     "size": {"shortest_edge": 65536, "longest_edge": 16777216},
                                     "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]},
        "video_preprocessor_config.json": {"video_processor_type": "Qwen3VLVideoProcessor", "patch_size": 16,
                                           "temporal_patch_size": 2, "merge_size": 2,
                                           "size": {"shortest_edge": 4096, "longest_edge": 25165824},
                                           "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]},
        "generation_config.json": {"eos_token_id": [len(vocab) + 2, len(vocab)], "temperature": 0.7, "top_p": 0.8,
                                   "top_k": 20},
    }
    for name, content in files.items():
        with open(os.path.join(model_dir, name), "w") as f:
            json.dump(content, f, indent=1)
            f.write("\n")


def write(model_dir, header_only=False, architecture=None, config=None):
    """The shards and their index; with `config` (the checkpoint's config.json, as SGLang's resolution reads it)
    that config and a tokenizer, so that SGLang's own front end loads the directory; with only `architecture` the
    stub config.json the model-only simulator needs."""
    os.makedirs(model_dir, exist_ok=True)
    weight_map = {}
    for file_name, tensors in shards():
        write_safetensors(os.path.join(model_dir, file_name), tensors, header_only)
        weight_map.update((name, file_name) for name, _, _ in tensors)
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    if config is not None:
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        write_tokenizer(model_dir)
    elif architecture:
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            json.dump({"architectures": [architecture], "simulated": True,
                       "note": "stub checkpoint for the SGLang simulator"}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    write(sys.argv[1], header_only="--header-only" in sys.argv[2:])
