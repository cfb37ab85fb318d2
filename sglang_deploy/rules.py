"""The tool's own validation rules: their ids, which a profile may waive, and the lists they use.

Imported by the profile schema (waivers name rule ids), the validator and the doctor; it imports
nothing of the project, so no import cycle runs through it. The tune's axes are declared here too (TUNE_AXES).
"""

from typing import NamedTuple

# rule id -> what it protects. Ids are what `waivers:` in a profile refers to.
RULES = {
    "env-tool-owned": "the profile's environment does not override a variable the tool sets",
    "env-loads-code": "no variable that loads code or a config from a path or by name, unless waived with a reason",
    "env-fakes-measurement": "no variable that makes SGLang simulate what the gate measures (SGLANG_SIMULATE_*)",
    "env-value": "an allow-listed variable has one of its accepted values (paths: the service's own directories or "
                 "the weights root)",
    "env-not-reviewed": "only variables the tool has reviewed (releases/<version>/environment.json), unless waived with a reason",
    "no-secret-in-profile": "no secret flag (admin key, TLS key password) in a profile",
    "tool-derived-flag": "no spelling of a flag the tool sets (model path, host, port, key, config, nodes)",
    "one-spelling-per-flag": "one spelling per SGLang field",
    "canonical-flag-name": "flags use SGLang's first spelling, the one the rules read",
    "no-option-as-value": "no flag value that SGLang's parser would read as an option",
    "tool-flags-intact": "the rendered command line parses to the tool's own values",
    "sglang-parser": "the pinned SGLang release's own argument parser accepts the command line",
    "sglang-resolution": "the pinned SGLang release's own resolution hooks accept the command line (always reported, "
                         "whatever else is found or waived)",
    "sglang-start": "the resolved attention backend, KV dtype and draft backend can start on the target's card (SGLang's "
                    "start-time asserts, draft maps and the kernels its wheels ship: releases/<v>/start-feasibility.json)",
    "full-flag-names": "flags are written in full (argparse abbreviations break when a new flag appears)",
    "flag-value-kind": "switches get true/false, valued flags get a value",
    "speculative-algorithm": "the speculative algorithm is one the pinned SGLang knows (MTP is not)",
    "gate-floors-required": "with speculation on, the gate has both floors (acceptance length and decode tokens/s)",
    "model-config-pinned": "model.config of managed weights is the config.json their manifest pins",
    "relax-privileges": "service.relax keeps the directives that stop privilege gain and system writes, unless waived",
    "watch-textfile-dir": "watch.textfile_dir is a node_exporter textfile directory, never the service's own",
    "draft-tokens-chain": "with --speculative-eagle-topk 1, draft tokens = steps + 1",
    "draft-model": "a draft model only with an algorithm that reads one, frozen by a manifest, its config the one served",
    "tp-matches-gpus": "--tp-size equals the host's GPU count (times nodes for a multi-node profile)",
    "multinode-tp-divisible": "with nodes > 1, --tp-size is a multiple of nodes",
    "mem-fraction-range": "--mem-fraction-static between 0.5 and 0.95",
    "decode-graph-covers-batch": "--cuda-graph-max-bs-decode >= --max-running-requests",
    "cuda-graphs-on": "decode CUDA graphs stay enabled",
    "no-adaptive-speculation-on-hybrid": "no --speculative-adaptive on hybrid (Gated DeltaNet) models",
    "nccl-ll128-needs-nvlink": "NCCL_PROTO=LL128 is never forced on a PCIe-only host",
    "nccl-p2p-level-nvl-needs-nvlink": "NCCL_P2P_LEVEL=NVL is never set on a PCIe-only host (it turns P2P off)",
    "nccl-debug-knob-needs-reason": "NCCL debugging knobs carry a recorded reason",
    "flag-reviewed": "every flag's SGLang dest is classified for the pinned SGLang version (flag-tables/*.classes.json)",
    "flag-exposes-service": "no flag (or resolved setting) that opens a listener, connects out or writes request data, "
                            "unless waived",
    "flag-runs-code": "no flag (or resolved setting) that loads code or a config by name or path, unless waived",
    "flag-serves-other-weights": "no flag that serves other weights or a tokenizer/template from outside the verified "
                                 "snapshot, unless waived",
    "flag-value-range": "a flag's value means what its name says: a limit stays a limit, a timeout finite, one "
                        "tokenizer worker (the classes file's `values`; no number beyond 1e12)",
    "unit-line-length": "the unit's command line fits one line systemd loads (render.MAX_UNIT_LINE_BYTES)",
    "token-map-verified": "--speculative-token-map names a file a verified snapshot's manifest lists (sha256 checked "
                          "on the host)",
    "token-map-part": "a token map the profile ships (speculative.token_map, tune.token_maps) is the file its frozen "
                      "sha256 names, and --speculative-token-map has one source",
    "pin-outside-cuda-family": "sglang.pins only name the CUDA/torch/kernel family, unless waived with a reason",
    "venv-startup-hook": "no wheel of the venv carries a startup hook (.pth file, sitecustomize) other than the reviewed "
                         "ones, unless waived (checked on the host after the install: hostside/venv_hooks.py)",
}
# Rules a profile may switch off with `waivers: {rule: reason}`; the others protect against a server
# that does not start, or against corrupted results.
WAIVABLE = {"tp-matches-gpus", "mem-fraction-range", "decode-graph-covers-batch", "cuda-graphs-on", "env-loads-code",
            "pin-outside-cuda-family", "flag-runs-code", "flag-serves-other-weights", "flag-exposes-service",
            "env-not-reviewed", "relax-privileges", "venv-startup-hook"}

# Variables that make the server load code from a path (plugins, injection libraries, compiler binaries); waivable
# with `waivers: {env-loads-code: reason}`. Patterns are fullmatched.
CODE_LOADING_ENV = (r"NCCL_\w*PLUGIN\w*", r"NCCL_NET", r"TRITON_\w*_PATH", r"CUDA_INJECTION\w*", r"TORCH_EXTENSIONS_DIR",
                    r"SGLANG_\w*PLUGIN\w*", r"PYTORCH_\w*PLUGIN\w*")
# SGLang fields (dests) whose flag runs code someone else chooses; waivable with `waivers: {flag-runs-code: reason}`.
# trust_remote_code only where the weights are not the tool's verified snapshot (model.path instead of model.source).
CODE_FLAGS = {
    "enable_custom_logit_processor": "unpickles (dill) a processor that every API request may carry: code from any "
                                     "client, run as the service user",
    "custom_weight_loader": "imports and calls the callables it names (any importable function, e.g. os.system)",
    "trust_remote_code": "runs the checkpoint's own Python code, here from weights the tool does not verify (model.path; "
                         "with model.source, a verified snapshot, the flag is not refused)",
}
# Load formats that read the verified snapshot's files as they are; any other (random weights, another server's,
# another format) is flag-serves-other-weights.
VERIFIED_FORMATS = ("auto", "safetensors", "pt", "npcache", "instanttensor", "fastsafetensors")
LOAD_FORMAT_DESTS = ("load_format", "speculative_draft_load_format")
# Path-valued fields that make the server read weights, a tokenizer or a template: only inside the verified snapshot
# (model.source). True: a plain name (no '/') is a built-in template, not a path.
WEIGHTS_PATH_DESTS = {
    "tokenizer_path": False, "lora_paths": False, "kt_weight_path": False,
    "quantization_param_path": False, "decrypted_config_file": False, "decrypted_draft_config_file": False,
    "speculative_ngram_external_corpus_path": False, "chat_template": True, "completion_template": True,
}
# Packages sglang.pins may name without a waiver: the exact names (normalized) of the CUDA, torch and kernel stack
# SGLang is built against, as NVIDIA, PyTorch and the kernel projects publish them (the validator env's own
# packages among them). Not prefixes: anyone can register a name under nvidia-* or cuda-*. Any other package is code
# a pull request brings into the root-run install: `waivers: {pin-outside-cuda-family: reason}`.
_CUDA_LIBS = ("cublas", "cuda-cupti", "cuda-nvrtc", "cuda-runtime", "cufft", "cufile", "curand", "cusolver",
              "cusparse", "nvjitlink", "nvtx")
PIN_FAMILY = frozenset(
    ("torch", "torchvision", "torchaudio", "triton", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache",
     "sgl-kernel", "sglang-kernel", "xgrammar", "flash-attn", "cuda-python", "cuda-bindings", "cuda-pathfinder",
     "cuda-toolkit", "nvidia-ml-py")
    + tuple(f"nvidia-{lib}{suffix}" for lib in _CUDA_LIBS for suffix in ("", "-cu12", "-cu13"))
    + tuple(f"nvidia-{lib}-{cuda}" for lib in ("cudnn", "cusparselt", "nccl", "nvshmem") for cuda in ("cu12", "cu13")))
# Variables the tool sets itself (render.py base_environment): a profile that changed them would undo the offline
# start, move the JIT caches out of the service's directories or swap the toolkit.
TOOL_ENV = ("HOME", "SGLANG_CACHE_DIR", "HF_HOME", "HF_HUB_OFFLINE", "HF_ENDPOINT", "PYTHONSAFEPATH", "CUDA_HOME",
            "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "PATH")

# NVIDIA documents these as debugging knobs, not production settings.
NCCL_DEBUG_KNOBS = (
    "NCCL_PROTO", "NCCL_ALGO", "NCCL_NTHREADS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
    "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_BUFFSIZE",
    "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE",
)


class Lever(NamedTuple):
    """A flag of a tune axis set to each value SGLang's resolution accepts (tune/axes.accepted_values)."""

    flag: str
    dest: str  # SGLang's resolved field, a dotted path for a nested one
    choices_of: str  # the dest whose parser choices list its values
    prefix: str  # a candidate's id: <prefix>-<value>
    runs: str | None = None  # the part of start_feasibility's Verdict.runs that says what runs for it
    with_spec: bool = False  # only when the profile speculates


class Axis(NamedTuple):
    """One tune axis: what the search (tune/search.py, tune/axes.py), its order (tune/discipline.py), the report
    and the tune_space setting read of it. Its candidates are tune/'s `axis_<name>`."""

    name: str
    gain_pct: float | None  # expected single-stream decode gain on CT129-class hosts, %; None: the control, first
    suspects: tuple[str, ...] = ()  # the doctor's suspect and opportunity ids that speak for it (doctor.json)
    after: str | None = None  # an axis it must come after
    levers: tuple[Lever, ...] = ()
    by_kind: bool = False  # its gain depends on the text: the per-class table lists its candidates


# The tune's axes in the search's order (tune/search.py walks them), declared here, below tune/, because the
# tune_space setting accepts them (settings_types.axes_problem). The gains are the doctor's own estimates (doctor.py
# and doctor/levers.py gain_pct; sources in ../shared/notes/anchors-refresh-4.md).
TUNE_AXES = (
    Axis("nospec", None, by_kind=True),
    # weak-speculation: the incident's 1 -> 3 steps, ~40 -> ~52 tok/s
    Axis("spec", 30.0, ("weak-speculation", "no-speculation", "low-acceptance")),
    # a DFlash-class drafter over MTP: peers +30-45 %; it replaces the speculation the spec axis tuned
    Axis("drafter", 37.0, ("drafter",), after="spec", by_kind=True),
    # token-map: a 40k draft vocabulary +10 % on one 3090 (syv-ai); roofline +22 %
    Axis("vocab", 10.0, ("token-map",), by_kind=True),
    # fp8-kv-on-ampere: peers up to +32 % with FlashAttention, SGLang's unmeasured
    Axis("kv", 15.0, ("fp8-kv-on-ampere",), levers=(
        Lever("--kv-cache-dtype", "kv_cache_dtype", "kv_cache_dtype", "kv", runs="kv"),), by_kind=True),
    # the other half of the same peer figure; the draft's backend on top of the best target backend
    Axis("attention", 10.0, levers=(
        Lever("--attention-backend", "attention_backend", "attention_backend", "attention", runs="target"),
        Lever("--speculative-draft-attention-backend", "speculative_draft_attention_backend", "attention_backend",
              "draft-attention", runs="draft", with_spec=True)), by_kind=True),
    # batch-limit / graph-batch-limit: aggregate throughput; the decode graph backend (full, breakable, disabled),
    # which SGLang folds into cuda_graph_config
    Axis("graphs", 8.0, ("batch-limit", "graph-batch-limit", "cuda-graphs"), levers=(
        Lever("--cuda-graph-backend-decode", "cuda_graph_config.decode.backend", "cuda_graph_backend_decode",
              "decode-graphs"),)),
    # custom-all-reduce: +3-8 %
    Axis("nccl", 5.5, ("custom-all-reduce", "p2p-unavailable", "nccl-debug-knobs")),
)
AXES = tuple(axis.name for axis in TUNE_AXES)
