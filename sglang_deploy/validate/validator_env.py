"""Cached virtualenvs holding a pinned SGLang without its GPU stack, used only to parse flags.

One environment per SGLang version, created on first use under
``$SGLANG_DEPLOY_CACHE/validators/sglang-<version>`` (default ``~/.cache/sglang-deploy``), so a
profile pinned to another SGLang version is checked against that version's own parser.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from .. import releases
from ..hostside.store import secret_name
from ..results import cache_dir
from . import probe_client

CACHE_DIR = cache_dir()
PACKAGE = Path(__file__).resolve().parent.parent  # sglang_deploy/
PROBE_SCRIPT = Path(__file__).with_name("parser_probe.py")
RESOLUTION_SCRIPT = PACKAGE / "hostside" / "lib" / "sglang_resolution.py"  # loaded by the probe
# The recipe of each release's environment is data (releases/<version>/dependencies.json, written from that release's
# own Requires-Dist by `sglang-deploy sglang add`): "parser" is what `from sglang.srt.server_args import ServerArgs`
# needs on a CPU-only machine plus what SGLang's GPU-free resolution hooks import; "torch" the matched torch and
# torchvision pair the hooks' transformers import needs (SGLANG_DEPLOY_VALIDATOR_TORCH overrides it for machines with
# other wheels at hand); "full_layer" the kernel package and what SGLang's whole resolution imports (--no-deps).
TORCH_OVERRIDE = os.environ.get("SGLANG_DEPLOY_VALIDATOR_TORCH")
# Bump when the way an environment is built changes: an environment built by an older recipe is rebuilt.
ENV_RECIPE = "3"
# SGLang's whole resolution takes the CUDA code path, which imports SGLang's kernel package; its extension
# modules link libcuda.so.1. The layer adds the package sglang pins and the GPU stand-in (gpu_standin/): a stub
# driver library, an nvidia-smi that answers from the stated facts, and torch.cuda facts installed by the probe.
STANDIN_DIR = PACKAGE / "gpu_standin"


def recipe(version: str) -> releases.Dependencies:
    """Release <version>'s dependency recipe; ValidatorEnvError naming sglang.version and the command that adds it."""
    try:
        return releases.dependencies(version)
    except releases.UnknownRelease as error:
        raise ValidatorEnvError(str(error)) from None


def torch_requirements(version: str) -> list[str]:
    return TORCH_OVERRIDE.split() if TORCH_OVERRIDE else list(recipe(version).torch)


class ValidatorEnvError(RuntimeError):
    pass


def env_dir(version: str) -> Path:
    return CACHE_DIR / "validators" / f"sglang-{version}"


def ensure_env(version: str, quiet: bool = False) -> Path:
    """Return the validator env's python, creating the env (once, under a lock) when missing."""
    target = env_dir(version)
    python = target / "bin" / "python"
    if _complete(target, version):
        return python
    recipe(version)  # an unknown release is refused before anything is made
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".sglang-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(target, version):
            return python
        dependencies = recipe(version)
        if not quiet:
            print(f"[check] creating the flag-validation environment for SGLang {version} in {target} "
                  "(once; a few minutes)", file=sys.stderr, flush=True)
        shutil.rmtree(target, ignore_errors=True)
        pip = installer(python)
        steps = [
            venv_command(sys.executable, target),
            pip + ["--no-deps", f"sglang=={version}"],
            pip + [*torch_requirements(version), *dependencies.parser],
        ]
        for step in steps:
            result = subprocess.run(step, capture_output=True, text=True, env=scrubbed_environment())
            if result.returncode != 0:
                shutil.rmtree(target, ignore_errors=True)
                raise ValidatorEnvError(
                    f"sglang.version {version}: could not create the validation environment for SGLang {version} "
                    f"in {target} (removed again, nothing half-built is used): {' '.join(step[:6])} ... failed; "
                    f"build it alone with `sglang-deploy sglang add {version} --check` (writes no release data):\n"
                    f"{result.stderr.strip()[-2000:]}"
                )
        (target / ".complete").write_text(f"{version} recipe {ENV_RECIPE} {_base_digest(version)}\n")
    return python


def venv_command(base_python, target: Path) -> list[str]:
    """The command that creates an environment at target for installer(): without pip where uv installs (ensurepip
    took 3.4 of its 3.5 s here), with it where pip itself is the installer."""
    return [str(base_python), "-m", "venv", *(["--without-pip"] if _uv() else []), str(target)]


def _uv() -> str | None:
    """The controller's uv (beside its python, or on PATH), or None."""
    return shutil.which("uv", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def installer(python: Path) -> list[str]:
    """The command that installs packages into the environment of `python`. uv's pip when the controller has uv (the
    test extra brings it; it downloads and unpacks in parallel: the 6 GB env in about 35 s here against pip's 90 s),
    given this machine's pip configuration (indexes, find-links, constraints, no cache) so that it picks the files
    pip would; else pip itself."""
    uv = _uv()
    if uv is None:
        return [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    return [uv, "pip", "install", "-q", "--python", str(python), "--compile-bytecode",
            "--index-strategy", "unsafe-best-match", *uv_options_from_pip_config()]


def uv_options_from_pip_config() -> list[str]:
    """pip's configuration (files and PIP_* variables, as `pip config list` shows it) as uv's options."""
    result = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            env=scrubbed_environment())
    options = []
    flags = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
             "constraint": "--constraint"}
    for line in result.stdout.splitlines():
        name, _, value = line.partition("=")
        flag = flags.get(name.rsplit(".", 1)[-1])
        for item in value.strip().strip("'\"").split() if flag else ():
            if (flag, item) not in zip(options[::2], options[1::2]):
                options += [flag, item]
    if os.environ.get("PIP_NO_CACHE_DIR", "").lower() in ("1", "true", "yes", "on"):
        options.append("--no-cache")
    return options


def _layer_digest(version: str) -> str:
    digest = hashlib.sha256(json.dumps(list(recipe(version).full_layer)).encode())
    for name in ("libcuda_stub.c", "nvidia-smi"):
        digest.update((STANDIN_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def standin_dir(version: str) -> Path:
    return env_dir(version) / "gpu-standin"


def ensure_full_layer(version: str, quiet: bool = False) -> Path:
    """The validator env with the layer SGLang's whole resolution needs (built once, on top of the env, so the
    6 GB base is not rebuilt when only the layer changes). Returns the stand-in's directory (lib/, bin/)."""
    python = ensure_env(version, quiet)
    target = standin_dir(version)
    marker = target / ".complete"
    digest = _layer_digest(version)
    if marker.is_file() and marker.read_text().strip() == digest:
        return target
    with open(env_dir(version).parent / f".sglang-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file() and marker.read_text().strip() == digest:
            return target
        if not quiet:
            print(f"[check] adding SGLang {version}'s kernel package and the GPU stand-in to {env_dir(version)} "
                  "(once; about a minute)", file=sys.stderr, flush=True)
        shutil.rmtree(target, ignore_errors=True)
        (target / "lib").mkdir(parents=True)
        (target / "bin").mkdir()
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise ValidatorEnvError("SGLang's full resolution needs a C compiler for the stub driver library "
                                    "(apt-get install gcc)")
        steps = [
            installer(python) + ["--no-deps", *recipe(version).full_layer],
            [compiler, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(target / "lib" / "libcuda.so.1"),
             str(STANDIN_DIR / "libcuda_stub.c")],
        ]
        for step in steps:
            result = subprocess.run(step, capture_output=True, text=True, env=scrubbed_environment())
            if result.returncode != 0:
                shutil.rmtree(target, ignore_errors=True)
                raise ValidatorEnvError(f"sglang.version {version}: could not add the full-resolution layer to "
                                        f"{env_dir(version)} (removed again, nothing half-built is used): "
                                        f"{' '.join(step[:6])} ... failed; build it alone with `sglang-deploy "
                                        f"sglang add {version} --check` (writes no release data):\n"
                                        f"{result.stderr.strip()[-2000:]}")
        shutil.copy(STANDIN_DIR / "nvidia-smi", target / "bin" / "nvidia-smi")
        (target / "bin" / "nvidia-smi").chmod(0o755)
        marker.write_text(digest + "\n")
    return target


def scrubbed_environment() -> dict:
    """The controller's environment without its secrets, for every process of the validator env (SGLang's code, pip):
    no SGLANG_DEPLOY_* variable (the API key is one: SGLANG_DEPLOY_API_KEY, or what api_key_env names) and no
    variable whose name says secret (*_TOKEN, *_API_KEY, ...)."""

    return {name: value for name, value in os.environ.items()
            if not name.startswith("SGLANG_DEPLOY_") and not secret_name(name)}


# What the shared probe server keeps of the controller's environment: enough to run, nothing SGLang reads as a
# setting (SGLANG_*, NCCL_*, CUDA_*, HF_* ... in the operator's shell must not change a verdict; the request states
# the unit's environment instead: hostside/lib/sglang_resolution.py).
PROBE_ENV_NAMES = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TERM")


def probe_environment() -> dict:
    return {name: value for name, value in os.environ.items() if name in PROBE_ENV_NAMES}


def standin_environment(version: str, gpu_facts: str) -> dict:
    """The environment a process of SGLang <version>'s validator env needs to take the target's CUDA path."""
    target = ensure_full_layer(version)
    return {**probe_environment(), "SGLANG_DEPLOY_GPU_FACTS": gpu_facts,
            "SGLANG_DEPLOY_GPU_STANDIN": str(STANDIN_DIR / "standin.py"),
            "LD_LIBRARY_PATH": str(target / "lib"), "PATH": f"{target / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONDONTWRITEBYTECODE": "1"}


def _base_digest(version: str) -> str:
    """What the base environment is built from: torch and the parser's dependencies of the release's recipe."""
    return hashlib.sha256(json.dumps([torch_requirements(version), list(recipe(version).parser)]).encode()).hexdigest()[:16]


def _complete(target: Path, version: str) -> bool:
    """Built by this ENV_RECIPE and, where the marker names one, from the release's current recipe (a changed
    releases/<version>/dependencies.json rebuilds it). A marker without a digest (written before the recipe became
    data) is taken as it is: bump ENV_RECIPE to rebuild those."""
    try:
        words = (target / ".complete").read_text().split()
    except FileNotFoundError:
        return False
    if words[-1:] == [ENV_RECIPE]:
        return True
    try:
        return words[-2:] == [ENV_RECIPE, _base_digest(version)]
    except ValidatorEnvError:
        return False


@lru_cache(maxsize=8)
def _probe_identity(version: str) -> tuple:
    """What an answer depends on besides the request: the env's recipe, the probe's and the stand-in's sources and
    the layer (the answers cache's key, and the shared probe server's); read once per process."""
    return (ENV_RECIPE, hashlib.sha256(PROBE_SCRIPT.read_bytes() + RESOLUTION_SCRIPT.read_bytes()).hexdigest(),
            hashlib.sha256((STANDIN_DIR / "standin.py").read_bytes()).hexdigest(), _layer_digest(version))


def _server_command(version: str, gpu_facts: str | None) -> tuple[list[str], dict]:
    """How the shared probe of SGLang <version> under these GPU facts is started (the facts are installed before
    the import, as SGLang caches what it reads of the platform)."""
    python = ensure_env(version)
    env = standin_environment(version, gpu_facts) if gpu_facts else probe_environment()
    return [str(python), "-P", str(PROBE_SCRIPT)], env


def run_probe(version: str, argvs: list[list[str]], algorithms: list[str] = (), resolve: dict | None = None,
              export: bool = False) -> dict:
    """Parse each argv with SGLang <version>'s own parser; see validate/parser_probe.py for the answer's shape. A
    resolve request runs SGLang's whole resolution under the GPU facts it carries (resolve["gpu_facts"]).
    The probe is a server shared by the controller's processes (validate/probe_client.py)."""
    request = {"argvs": argvs, "algorithms": list(algorithms)}
    if resolve:
        request["resolve"] = resolve
    if export:
        request["export"] = True
    gpu = (resolve or {}).get("gpu_facts")
    path = probe_client.socket_path(CACHE_DIR, [version, gpu, *_probe_identity(version)])
    try:
        answer = probe_client.answer(path, lambda: _server_command(version, gpu), request)
    except probe_client.ProbeServerError as error:
        raise ValidatorEnvError(f"SGLang {version}'s parser could not be loaded from {env_dir(version)}:\n{error}") from None
    if answer.get("sglang_version") != version:
        raise ValidatorEnvError(
            f"validation environment {env_dir(version)} holds SGLang {answer.get('sglang_version')}, not {version}; "
            "delete it to have it rebuilt"
        )
    return answer


def env_built(version: str) -> bool:
    """Whether the heavy environment of SGLang <version> is already here (nothing is built by asking)."""
    return _complete(env_dir(version), version)


def probe_cached(version: str, argvs: list[list[str]], algorithms: list[str] = (), resolve: dict | None = None) -> dict:
    """run_probe, answered from a cache keyed by the request's content, SGLang's version, the validator
    env's recipe and the probe's own source: an unchanged profile is not parsed or resolved again."""
    request = [version, argvs, list(algorithms), resolve, *_probe_identity(version)]
    path = CACHE_DIR / "answers" / f"{hashlib.sha256(json.dumps(request).encode()).hexdigest()}.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        pass
    answer = run_probe(version, argvs, algorithms, resolve)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(answer))
    tmp.replace(path)
    return answer


def export_table(version: str) -> dict:
    """SGLang <version>'s option table and what its argparse types check, from its own parser
    (sglang_deploy/validate/flag_table.py; the light check and the simulator rebuild the parser from it)."""
    return run_probe(version, [], export=True)["export"]
