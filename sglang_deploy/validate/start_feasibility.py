"""Which (attention backend, KV dtype, draft backend) combinations can start on a card, per SGLang release: derived
from that release's own code and the kernel wheels its environment installs, kept as data.

SGLang's resolution accepts many combinations that die at start on a given card (the attention registry's asserts,
the EAGLE draft backend maps, the dtypes each kernel was compiled for): a deploy would load the weights and crash,
and the tune would spend a start on each. `derive-start` reads, in the validator environment of a release:

- sglang's attention registry (attention_registry.py): the registered backends, fa3's compute-capability assert, the
  backends that need (or refuse) an MLA model or refuse speculative decoding;
- sglang's default backend choice for a card (model_override_base.py): what SGLang itself starts on it;
- the EAGLE draft backend maps (speculative/draft_utils.py) and their error;
- the post-process that swaps fa3 + fp8_e5m2 for triton (arg_groups/overrides.py);
- FA3's q cast to the KV dtype (flashattention_backend.py), and the architectures and dtype instantiations of
  sglang-kernel's flash_ops library (cuobjdump --list-elf, nm -D): which dtypes FA3 runs on which card;
- FA4's SM 8.x paged-KV assert (kernels/ops/attention/flash_attn/cute/interface.py);
- Triton's fp8e4nv capability floor (triton/backends/nvidia/compiler.py) and the Triton decode kernel's dot in the
  KV buffer's dtype (decode_attention.py);
- the KV dtype `auto` resolves to (mem_cache/kv_cache_dtype.py);
- FlashMLA's kernel architectures (flashmla_ops library);

each with its file:line, into sglang_deploy/releases/<version>/start-feasibility.json. (The SGLANG_* variables a
release reads are in its environment.json, written by `sglang-deploy sglang add`: validate/scan.py.)
`judge` evaluates a resolved configuration against that data (the tune uses it; `problems` is check's stage of the
start). A pattern the derivation
no longer finds is an error: a new release is read again, not assumed.

    python -m sglang_deploy.validate.start_feasibility derive-start VERSION   # writes start-feasibility.json
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .. import releases

FEASIBILITY_FILE = "start-feasibility.json"
# The algorithms whose draft worker builds its backends from draft_utils' maps (NEXTN and EAGLE3 resolve to EAGLE's
# worker; DFLASH, DSPARK and NGRAM have their own).
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "MTP")


class DerivationError(RuntimeError):
    pass


def data_path(version: str, name: str = FEASIBILITY_FILE) -> Path:
    return releases.folder(version) / name


def load(version: str) -> dict | None:
    try:
        return json.loads(data_path(version).read_text())
    except FileNotFoundError:
        return None


# --- derivation (needs the release's validator environment) ----------------------------------------------------

class Source:
    """The site-packages of a validator env; finds lines by pattern and cites them as package/path:line."""

    def __init__(self, site: Path):
        self.site = site

    def text(self, rel: str) -> str:
        try:
            return (self.site / rel).read_text()
        except FileNotFoundError:
            raise DerivationError(f"{rel} is not in {self.site}: this release is laid out differently; read it "
                                  "again") from None

    def find(self, rel: str, pattern: str, after: int = 0) -> tuple[int, re.Match]:
        """The first line (1-based, after line `after`) matching pattern, and its match."""
        for number, line in enumerate(self.text(rel).splitlines(), 1):
            if number > after:
                match = re.search(pattern, line)
                if match:
                    return number, match
        raise DerivationError(f"{rel}: no line matches {pattern!r} (after line {after}): read the release again")

    def cite(self, rel: str, line: int) -> str:
        return f"{rel}:{line}"


def _registry(src: Source) -> dict:
    rel = "sglang/srt/layers/attention/attention_registry.py"
    text = src.text(rel)
    lines = text.splitlines()
    backends: dict[str, dict] = {}
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "register_attention_backend" \
                    and decorator.args and isinstance(decorator.args[0], ast.Constant):
                info = backends.setdefault(decorator.args[0].value, {"line": decorator.lineno})
                for number in range(node.lineno, node.end_lineno + 1):  # the creating function's own lines
                    line, where = lines[number - 1], src.cite(rel, number)
                    if "can only be used with MLA models" in line:
                        info["needs_mla"] = where
                    if "can only be used with non-MLA models" in line:
                        info["needs_non_mla"] = where
                    if "does not support speculative decoding" in line:
                        info["no_speculation"] = where
    if not backends:
        raise DerivationError(f"{rel}: no @register_attention_backend: read the release again")
    return {"file": rel, "backends": dict(sorted(backends.items()))}


def _fa3_majors(src: Source) -> dict:
    rel = "sglang/srt/layers/attention/attention_registry.py"
    start, _ = src.find(rel, r'@register_attention_backend\("fa3"\)')
    line, match = src.find(rel, r"assert \(major == (\d+) and not runner\.use_mla_backend\) or major == (\d+)", start)
    return {"mha_majors": sorted({int(match.group(1)), int(match.group(2))}), "mla_majors": [int(match.group(2))],
            "source": src.cite(rel, line),
            "reason": "SGLang's fa3 backend asserts (major == 8 and not MLA) or major == 9 when it is created"}


def _default_backends(src: Source) -> dict:
    """What SGLang picks itself for an MHA model on a CUDA card that is neither Hopper with CUDA 12.3 nor SM100:
    flashinfer where it is installed, else triton (both start there: SGLang's own default)."""
    rel = "sglang/srt/arg_groups/model_override_base.py"
    flashinfer, _ = src.find(rel, r'if get_platform\(\)\.has_flashinfer and not model_config\.has_attention_sinks')
    first, _ = src.find(rel, r'return "flashinfer"', flashinfer)
    second, _ = src.find(rel, r'return "triton"', first)
    hopper, _ = src.find(rel, r"get_platform\(\)\.is_hopper_with_cuda_12_3")
    return {"backends": ["flashinfer", "triton"], "source": src.cite(rel, first),
            "fallback_source": src.cite(rel, second), "hopper_source": src.cite(rel, hopper),
            "reason": "SGLang's own default MHA attention backend on a CUDA card below Hopper (flashinfer, else triton)"}


def _draft_maps(src: Source) -> dict:
    rel = "sglang/srt/speculative/draft_utils.py"
    tree = ast.parse(src.text(rel))
    maps = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in ("create_decode_backend", "create_draft_extend_backend"):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Assign) and isinstance(inner.value, ast.Dict) and \
                        any(isinstance(t, ast.Name) and t.id == "backend_map" for t in inner.targets):
                    keys = [k.value for k in inner.value.keys if isinstance(k, ast.Constant)]
                    message = next((c.value for c in ast.walk(node) if isinstance(c, ast.Constant)
                                    and isinstance(c.value, str) and "not supported in" in c.value), None)
                    maps[node.name] = {"backends": keys, "source": src.cite(rel, inner.lineno), "message": message}
    if set(maps) != {"create_decode_backend", "create_draft_extend_backend"}:
        raise DerivationError(f"{rel}: the EAGLE draft backend maps were not found: read the release again")
    steps, _ = src.find(rel, r"if self\.speculative_num_steps <= 1:")
    maps["create_decode_backend"]["only_with_steps_above"] = 1
    maps["create_decode_backend"]["steps_source"] = src.cite(rel, steps)
    return {"decode": maps["create_decode_backend"], "extend": maps["create_draft_extend_backend"]}


def _swaps(src: Source) -> list:
    rel = "sglang/srt/arg_groups/overrides.py"
    line, match = src.find(rel, r'view\.attention_backend == "(\w+)" and view\.kv_cache_dtype == "(\w+)"')
    to_line, to = src.find(rel, r'return \{"attention_backend": "(\w+)"\}', line)
    return [{"backend": match.group(1), "kv": match.group(2), "to": to.group(1), "source": src.cite(rel, line),
             "reason": f"SGLang's resolution replaces {match.group(1)} with {to.group(1)} for KV {match.group(2)} "
                       "(a warning in its log)"}]


def _auto_kv(src: Source) -> dict:
    rel = "sglang/srt/mem_cache/kv_cache_dtype.py"
    line, _ = src.find(rel, r'kv_cache_quant_algo\.upper\(\) == "FP8"')
    return {"fp8_when_quant_algo": "FP8", "fp8_dtype": "fp8_e4m3", "source": src.cite(rel, line),
            "reason": "KV dtype auto is the model's dtype unless its quantization config declares "
                      "kv_cache_quant_algo FP8 (then fp8_e4m3)"}


def _elf_arches(cuobjdump: Path, library: Path) -> list[str]:
    out = subprocess.run([str(cuobjdump), "--list-elf", str(library)], capture_output=True, text=True, check=True)
    return sorted(set(re.findall(r"\bsm_(\d+[a-z]?)\b", out.stdout)))


DTYPE_NAMES = {"cutlass::bfloat16_t": "bf16", "cutlass::half_t": "fp16", "cutlass::float_e4m3_t": "fp8_e4m3",
               "cutlass::float_e5m2_t": "fp8_e5m2"}


def _fa3_kernels(src: Source, cuobjdump: Path) -> dict:
    rel = "sgl_kernel/flash_ops.abi3.so"
    library = src.site / rel
    if not library.exists():
        raise DerivationError(f"{rel} is not in {src.site}: read the kernel wheel again")
    symbols = subprocess.run(["nm", "-D", "-C", str(library)], capture_output=True, text=True, check=True).stdout
    found: dict[str, dict[str, set]] = {}
    for arch, dtype, head in re.findall(r"run_mha_fwd_<(\d+), ([\w:]+), (\d+)", symbols):
        found.setdefault(arch, {}).setdefault(DTYPE_NAMES.get(dtype, dtype), set()).add(int(head))
    if not found:
        raise DerivationError(f"{rel}: no run_mha_fwd_<arch, dtype, head dim> instantiations: read it again")
    cast, _ = src.find("sglang/srt/layers/attention/flashattention_backend.py", r"q = q\.to\(self\.kv_cache_dtype\)")
    message = next((m for m in re.findall(rb"FlashAttention on [\w/]+ cards only supports [\w ]+",
                                          library.read_bytes())), b"").decode()
    return {"library": rel, "elf_arches": _elf_arches(cuobjdump, library),
            "instantiations": {arch: {dtype: sorted(heads) for dtype, heads in sorted(kinds.items())}
                               for arch, kinds in sorted(found.items())},
            "q_cast_source": src.cite("sglang/srt/layers/attention/flashattention_backend.py", cast),
            "message": message,
            "reason": "FA3 casts q to a non-auto KV dtype and runs only the (arch, dtype, head dim) kernels "
                      "sglang-kernel instantiated"}


def _fa4(src: Source) -> dict:
    rel = "sglang/kernels/ops/attention/flash_attn/cute/interface.py"
    arch_line, match = src.find(rel, r"if arch // 10 == (\d+):")
    line, _ = src.find(rel, r'assert page_table is None, "paged KV not supported on SM', arch_line)
    return {"fails_on_majors": [int(match.group(1))], "source": src.cite(rel, line),
            "reason": "FA4's SM 8.x path asserts page_table is None (paged KV not supported), and SGLang's KV cache "
                      "is paged"}


def _triton(src: Source) -> dict:
    rel = "triton/backends/nvidia/compiler.py"
    line, match = src.find(rel, r"if capability >= (\d+):")
    add, _ = src.find(rel, r'supported_fp8_dtypes\.add\("fp8e4nv"\)', line)
    if add != line + 1:
        raise DerivationError(f"{rel}:{line}: the fp8e4nv floor moved: read it again")
    dot, _ = src.find("sglang/kernels/ops/attention/decode_attention.py", r"q_k = q\.to\(K_Buffer\.dtype\.element_ty\)")
    return {"kv": ["fp8_e4m3"], "min_capability": int(match.group(1)), "source": src.cite(rel, add),
            "kernel_source": src.cite("sglang/kernels/ops/attention/decode_attention.py", dot),
            "reason": f"Triton supports fp8e4nv (fp8_e4m3) only from capability {match.group(1)}, and SGLang's Triton "
                      "decode kernel dots q cast to the KV buffer's dtype"}


def _flashmla(src: Source, cuobjdump: Path) -> dict:
    rel = "sgl_kernel/flashmla_ops.abi3.so"
    return {"library": rel, "elf_arches": _elf_arches(cuobjdump, src.site / rel),
            "reason": "FlashMLA's kernels exist only for these architectures"}


def site_packages(version: str) -> Path:
    # deferred: optional, validator_env is not shipped beside the simulator (roles/simulator.py SIM_SHIPS)
    from .validator_env import env_dir

    found = sorted(env_dir(version).glob("lib/python3*/site-packages"))
    if not found:
        raise DerivationError(f"no validator environment for SGLang {version} at {env_dir(version)}: "
                              f"`sglang-deploy check --full` builds it")
    return found[0]


def package_versions(site: Path) -> dict:
    out = {}
    for name in ("sglang", "sglang_kernel", "triton", "flashinfer_python"):
        found = sorted(site.glob(f"{name}-*.dist-info"))
        if found:
            out[name.replace("_", "-")] = found[0].name[len(name) + 1:-len(".dist-info")]
    return out


def derive(version: str, site: Path | None = None) -> dict:
    site = site or site_packages(version)
    src = Source(site)
    cuobjdump = site / "triton/backends/nvidia/bin/cuobjdump"  # the CUDA tool the env's Triton ships
    return {"sglang_version": version, "derived_from": package_versions(site),
            "registry": _registry(src), "default": _default_backends(src), "fa3": _fa3_majors(src),
            "fa3_kernels": _fa3_kernels(src, cuobjdump), "fa4": _fa4(src), "triton_fp8": _triton(src),
            "flashmla_kernels": _flashmla(src, cuobjdump), "draft_maps": _draft_maps(src), "swaps": _swaps(src),
            "auto_kv": _auto_kv(src)}


def write(version: str) -> list[Path]:
    out = []
    for name, document in ((FEASIBILITY_FILE, derive(version)),):
        path = data_path(version, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
        out.append(path)
    return out


# --- judging a configuration -----------------------------------------------------------------------------------

@dataclass
class Verdict:
    """What a configuration does at start on a card: fails (reasons with SGLang's file:line), runs something else
    than asked (swaps), or starts; `shown` is False where the release's code shows neither (not SGLang's default,
    no kernel of the card's architecture read): the tune does not spend a start on it, check does not refuse it."""

    fails: list = field(default_factory=list)  # (reason, source)
    swaps: list = field(default_factory=list)  # (reason, source)
    unshown: list = field(default_factory=list)  # (backend, why)
    runs: dict = field(default_factory=dict)  # {"target": backend, "draft": backend, "kv": dtype}

    @property
    def starts(self) -> bool | None:
        if self.fails:
            return False
        return None if self.unshown else True

    def summary(self) -> str:
        if self.fails:
            return "; ".join(f"{reason} ({source})" for reason, source in self.fails)
        if self.unshown:
            return "; ".join(f"{backend}: {why}" for backend, why in self.unshown)
        return "starts"


def model_facts(model_config: dict | None) -> dict:
    """What the judgement reads of the checkpoint's config.json: MLA or not, head dim, dtype, FP8 KV declared."""
    config = model_config or {}
    text = config.get("text_config") or config
    quant = config.get("quantization_config") or text.get("quantization_config") or {}
    heads = text.get("num_attention_heads")
    head_dim = text.get("head_dim") or (text.get("hidden_size") // heads if heads and text.get("hidden_size") else None)
    dtype = str(text.get("dtype") or text.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
    return {"mla": "kv_lora_rank" in text, "head_dim": head_dim,
            "dtype": {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}.get(dtype, dtype),
            "kv_quant_algo": str(quant.get("kv_cache_quant_algo") or "")}


def effective_kv(data: dict, kv: str | None, facts: dict) -> str:
    """The KV dtype a resolved kv_cache_dtype runs as (auto: kv_cache_dtype.py)."""
    kv = kv or "auto"
    if kv == "auto":
        if facts["kv_quant_algo"].upper() == data["auto_kv"]["fp8_when_quant_algo"]:
            return data["auto_kv"]["fp8_dtype"]
        return facts["dtype"]
    return {"bfloat16": "bf16", "float16": "fp16", "fp8_e4m3fn": "fp8_e4m3"}.get(kv, kv)


def _fa3_arch(data: dict, capability: tuple[int, int]) -> str | None:
    """The FA3 kernel family a card runs: the highest instantiated arch of its major at or below it."""
    value = capability[0] * 10 + capability[1]
    arches = [int(a) for a in data["fa3_kernels"]["instantiations"] if int(a) // 10 == capability[0] and int(a) <= value]
    return str(max(arches)) if arches else None


def _sass_for(arches: list[str], capability: tuple[int, int]) -> bool:
    """A cubin of the card's major at or below its minor (SASS runs on later minors of one major)."""
    value = capability[0] * 10 + capability[1]
    numbers = [int(re.match(r"\d+", a).group()) for a in arches]
    return any(n // 10 == capability[0] and n <= value for n in numbers)


def _backend(data: dict, backend: str, role: str, capability, facts: dict, kv: str, speculative: bool,
             verdict: Verdict):
    sm = f"sm_{capability[0]}{capability[1]}"
    registry = data["registry"]["backends"]
    info = registry.get(backend)
    if info is None:
        verdict.unshown.append((backend, f"not a backend of SGLang's attention registry ({data['registry']['file']})"))
        return
    if info.get("needs_mla") and not facts["mla"]:
        verdict.fails.append((f"{role} backend {backend} needs an MLA model", info["needs_mla"]))
    if info.get("needs_non_mla") and facts["mla"]:
        verdict.fails.append((f"{role} backend {backend} needs a non-MLA model", info["needs_non_mla"]))
    if info.get("no_speculation") and speculative:
        verdict.fails.append((f"{role} backend {backend} does not support speculative decoding", info["no_speculation"]))
    if backend == "fa3":
        fa3 = data["fa3"]
        majors = fa3["mla_majors"] if facts["mla"] else fa3["mha_majors"]
        if capability[0] not in majors:
            verdict.fails.append((f"{role} backend fa3 on {sm}: {fa3['reason']}", fa3["source"]))
            return
        kernels = data["fa3_kernels"]
        arch = _fa3_arch(data, capability)
        if arch is None or not _sass_for(kernels["elf_arches"], capability):
            verdict.fails.append((f"{role} backend fa3: {kernels['library']} has no kernel for {sm} (its "
                                  f"architectures: {', '.join(kernels['elf_arches'])})", kernels["library"]))
            return
        dtypes = kernels["instantiations"][arch]
        if kv not in dtypes:
            verdict.fails.append((f"{role} backend fa3 with KV {kv} on {sm}: FA3 casts q to the KV dtype "
                                  f"({kernels['q_cast_source']}) and {kernels['library']} instantiates "
                                  f"run_mha_fwd<{arch}> for {', '.join(dtypes)} only"
                                  + (f" (\"{kernels['message']}\")" if kernels.get("message") else ""),
                                  kernels["q_cast_source"]))
        elif facts["head_dim"] and facts["head_dim"] not in dtypes[kv]:
            verdict.fails.append((f"{role} backend fa3: head dim {facts['head_dim']} has no run_mha_fwd<{arch}, {kv}> "
                                  f"kernel (head dims {', '.join(map(str, dtypes[kv]))})", kernels["library"]))
        return
    if backend == "fa4":
        if capability[0] in data["fa4"]["fails_on_majors"]:
            verdict.fails.append((f"{role} backend fa4 on {sm}: {data['fa4']['reason']}", data["fa4"]["source"]))
        else:
            verdict.unshown.append((backend, f"not SGLang's default on {sm}; no start of it derived"))
        return
    if backend == "flashmla":
        arches = data["flashmla_kernels"]["elf_arches"]
        if not _sass_for(arches, capability):
            verdict.fails.append((f"{role} backend flashmla: {data['flashmla_kernels']['library']} has kernels for "
                                  f"{', '.join(arches)} only, not {sm}", data["flashmla_kernels"]["library"]))
            return
    if backend == "triton":
        rule = data["triton_fp8"]
        if kv in rule["kv"] and capability[0] * 10 + capability[1] < rule["min_capability"]:
            verdict.fails.append((f"{role} backend triton with KV {kv} on {sm}: {rule['reason']}", rule["source"]))
            return
    if verdict.fails:
        return
    if backend in data["default"]["backends"] and capability[0] < 9:
        return  # SGLang's own default on such a card
    if backend == "triton":
        return
    verdict.unshown.append((backend, f"neither SGLang's default on {sm} ({data['default']['source']}) nor a kernel "
                                     f"of {sm} read for it: not shown to start there"))


def judge(data: dict, capability: tuple[int, int], model_config: dict | None, resolved: dict) -> Verdict:
    """The start of SGLang's resolved configuration (resolved_dict fields) on a card of `capability`."""
    facts = model_facts(model_config)
    verdict = Verdict()
    target = resolved.get("attention_backend")
    kv = effective_kv(data, resolved.get("kv_cache_dtype"), facts)
    algorithm = resolved.get("speculative_algorithm")
    speculative = bool(algorithm)
    verdict.runs = {"target": target, "kv": kv}
    if not target:
        return verdict
    backends = {("target", target)}
    for name in ("prefill_attention_backend", "decode_attention_backend"):
        if resolved.get(name):
            backends.add((name.split("_")[0], resolved[name]))
    if speculative and str(algorithm).upper() in EAGLE_FAMILY:
        draft = resolved.get("speculative_draft_attention_backend") or resolved.get("decode_attention_backend") \
            or target
        verdict.runs["draft"] = draft
        maps = data["draft_maps"]
        steps = int(resolved.get("speculative_num_steps") or 0)
        for key in ("decode", "extend"):
            entry = maps[key]
            if key == "decode" and steps <= entry["only_with_steps_above"]:
                continue
            if draft not in entry["backends"]:
                message = (entry["message"] or "not supported: {backend_type}").format(backend_type=draft)
                verdict.fails.append((f"draft backend {draft}: \"{message}\" (SGLang's EAGLE draft {key} backends: "
                                      f"{', '.join(entry['backends'])})", entry["source"]))
                break  # one message: the first map that lacks it
        if draft != target:
            backends.add(("draft", draft))
    for role, backend in sorted(backends):
        _backend(data, backend, role, capability, facts, kv, speculative, verdict)
    return verdict


def swaps(data: dict, flags: dict, resolved: dict) -> list[tuple[str, str]]:
    """What the profile asks for that SGLang's resolution replaced (it runs the replacement): (message, source)."""
    out = []
    asked = flags.get("--attention-backend")
    for swap in data.get("swaps") or []:
        if asked == swap["backend"] and resolved.get("attention_backend") == swap["to"] and \
                resolved.get("kv_cache_dtype") == swap["kv"]:
            out.append((f"--attention-backend {asked} with --kv-cache-dtype {swap['kv']} runs {swap['to']}: "
                        f"{swap['reason']}", swap["source"]))
    return out


def problems(profile, gpu, config: dict | None, resolved: dict | None) -> tuple[list, list]:
    """What SGLang's start does with the resolved configuration on the target's card (this module's data, derived
    from the release's code and kernel wheels): a combination that cannot start is SGLang's refusal (not waivable:
    it names SGLang's file:line); one SGLang silently replaces, and one the release's code does not show to start
    there, are warnings naming what will run. check_profile's stage of the start."""
    # deferred: optional, the simulated host's server ships this module without the profile package
    # (roles/simulator.SIM_SHIPS), which imports pydantic
    from ..profile.problem import Problem, flag_field

    data = load(profile.sglang.version) if resolved and gpu is not None else None
    if data is None:
        return [], []
    verdict = judge(data, tuple(gpu.capability), config, resolved)
    card = f"{gpu.name} (sm_{gpu.capability[0]}{gpu.capability[1]})"
    fields = [name for name in ("--attention-backend", "--speculative-draft-attention-backend", "--kv-cache-dtype")
              if name in profile.sglang.flags]
    where = flag_field(fields[0]) if fields else ("sglang", "flags")
    runs = ", ".join(f"{role} {value}" for role, value in verdict.runs.items() if value)
    refused = [Problem("sglang-start", where, f"SGLang {profile.sglang.version} cannot start this on {card} "
                                              f"({runs}): {reason} [{source}]")
               for reason, source in verdict.fails]
    notes = [Problem("sglang-swap", where, f"{message} [{source}]; what runs: {runs}")
             for message, source in swaps(data, profile.sglang.flags, resolved)]
    notes += [Problem("start-not-shown", where, f"{backend}: {why} (validate/start_feasibility.py)")
              for backend, why in verdict.unshown if not verdict.fails]
    return refused, notes


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "derive-start":
        print("usage: python -m sglang_deploy.validate.start_feasibility derive-start VERSION", file=sys.stderr)
        return 2
    version = argv[1]
    try:
        for path in write(version):
            print(f"wrote {path}")
    except (DerivationError, subprocess.CalledProcessError) as error:
        print(f"derive-start: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
