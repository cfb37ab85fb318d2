"""The simulated host's SGLang install: an SGLang release's own front end (`sglang serve`: resolution, HTTP server,
TokenizerManager, detokenizer, run_scheduler_process) runnable without a GPU.

It is a layer on the validator environment (sglang_deploy/validate/validator_env.py: SGLang, torch, transformers, the
kernel package and the GPU stand-in): a virtualenv in ``<validator env>/frontend`` whose site-packages comes
first and whose ``.pth`` line adds the validator env's site-packages after it (relative, so the pair works
wherever it is mounted), plus the packages SGLang's serving path imports that resolution does not. A second
``.pth`` line installs the GPU stand-in (gpu_standin/standin.py) into torch.cuda when the process finds the
host's GPU facts (``SGLANG_DEPLOY_GPU_FACTS``, or the file the simulated host keeps them in).

    python -m testbed.sglang_env [--version VERSION]     (build it; prints its python; default: the newest reviewed)
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sglang_deploy import releases  # noqa: E402

from sglang_deploy.validate import validator_env

# The front-end layer's recipe is the release's data (releases/<version>/dependencies.json): "frontend", what `sglang
# serve` imports beyond the validator env, at the versions that release pins (its METADATA; the built layer satisfies
# each of them, tests/test_frontends.py), and "frontend_pins", what pip resolves for them over the validator env plus
# flashinfer_python (a pinned dependency of sglang) installed without its CUDA dependencies: it imports on a CPU-only
# machine, and its presence is what SGLang reads to choose the flashinfer attention and sampling backends, as on
# the real host. Installed as pinned and without dependencies, by uv or pip (validator_env.installer): the same
# files either way (uv does not see the validator env's packages through the .pth line, so it must not resolve).
SGLANG_VERSION = releases.newest_reviewed()  # the simulated host's SGLang unless a caller names another


def frontend_packages(version: str = SGLANG_VERSION) -> list[str]:
    return list(validator_env.recipe(version).frontend)


def frontend_pins(version: str = SGLANG_VERSION) -> list[str]:
    return list(validator_env.recipe(version).frontend_pins)


# Where the simulated host keeps its GPU facts (its "hardware"): written by testbed/simhost.py.
HOST_GPU_FACTS = "/etc/sglang-sim/gpus.json"
# A .pth line runs inside site.addpackage, where `sitedir` is the site-packages directory being read.
STANDIN_PTH = """import os; _hook = os.path.join(sitedir, "..", "..", "..", "gpu_standin_hook.py"); exec(compile(open(_hook).read(), _hook, "exec"), {"__file__": _hook}) if os.path.exists(_hook) else None
"""
# Installed as <frontend>/gpu_standin_hook.py, run by the .pth line above at every interpreter start: cheap (no
# torch import); it patches torch.cuda right after torch is imported, before any SGLang code reads it.
HOOK = '''
def _sglang_deploy_gpu_standin():
    import importlib.abc, importlib.machinery, json, os, sys
    text = os.environ.get("SGLANG_DEPLOY_GPU_FACTS")
    if not text and os.path.exists({facts!r}):
        with open({facts!r}) as handle:
            text = handle.read()
    if not text:
        return
    os.environ["SGLANG_DEPLOY_GPU_FACTS"] = text
    standin = os.path.join(os.path.dirname(__file__), "gpu_standin.py")

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "torch":
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None:
                return None
            loader = spec.loader
            real_exec = loader.exec_module

            def exec_module(module):
                real_exec(module)
                namespace = {{}}
                exec(compile(open(standin).read(), standin, "exec"), namespace)
                namespace["install"]()

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())


_sglang_deploy_gpu_standin()
'''.format(facts=HOST_GPU_FACTS)


def recipe_digest(version: str = SGLANG_VERSION) -> str:
    digest = hashlib.sha256(json.dumps([frontend_packages(version), frontend_pins(version)]).encode() + HOOK.encode()
                            + STANDIN_PTH.encode())
    digest.update((validator_env.STANDIN_DIR / "standin.py").read_bytes())
    return digest.hexdigest()[:16]


def frontend_dir(version: str) -> Path:
    return validator_env.env_dir(version) / "frontend"


def ensure(version: str = SGLANG_VERSION, quiet: bool = False) -> Path:
    """The front end's python (built once under a lock; rebuilt when the recipe changes), on the validator env with
    its full-resolution layer."""
    validator_env.ensure_full_layer(version, quiet)
    return ensure_frontend_layer(version, quiet)


def ensure_frontend_layer(version: str = SGLANG_VERSION, quiet: bool = False) -> Path:
    """The front-end layer alone: it needs the validator env, not its full-resolution layer (a lock of its own), so
    testbed/prepare.py builds the two side by side."""
    validator_env.ensure_env(version, quiet)
    target = frontend_dir(version)
    marker = target / ".complete"
    digest = recipe_digest(version)
    if marker.is_file() and marker.read_text().strip() == digest:
        return target / "bin" / "python"
    with open(validator_env.env_dir(version).parent / f".sglang-{version}-frontend.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file() and marker.read_text().strip() == digest:
            return target / "bin" / "python"
        if not quiet:
            print(f"[sglang-env] adding SGLang {version}'s front-end packages in {target} (once; a minute or two)",
                  file=sys.stderr, flush=True)
        shutil.rmtree(target, ignore_errors=True)
        base = base_python(version)
        subprocess.run(validator_env.venv_command(base, target), check=True, capture_output=True)
        site = next((target / "lib").glob("python3*/site-packages"))
        validator_site = next((validator_env.env_dir(version) / "lib").glob("python3*/site-packages"))
        (site / "zz-sglang-validator-env.pth").write_text(str(Path("..") / ".." / ".." / ".." /
                                                              validator_site.relative_to(validator_env.env_dir(version)))
                                                          + "\n")
        (site / "zzz-sglang-deploy-gpu-standin.pth").write_text(STANDIN_PTH)
        (target / "gpu_standin_hook.py").write_text(HOOK)
        shutil.copy(validator_env.STANDIN_DIR / "standin.py", target / "gpu_standin.py")
        step = validator_env.installer(target / "bin" / "python") + ["--no-deps", *frontend_pins(version)]
        result = subprocess.run(step, capture_output=True, text=True, env=validator_env.scrubbed_environment())
        if result.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            raise RuntimeError(f"could not install SGLang's front-end packages:\n{result.stderr[-3000:]}")
        marker.write_text(digest + "\n")
    return target / "bin" / "python"


def interpreter_pth(install_root: str, version: str = SGLANG_VERSION) -> str:
    """The .pth of another interpreter's virtualenv (the simulated host's own python3 3.11) that makes it run this
    install mounted at `install_root`: the front-end layer, then the validator env, then the GPU stand-in hook."""
    validator = validator_env.env_dir(version)
    site = next((frontend_dir(version) / "lib").glob("python3*/site-packages")).relative_to(validator)
    validator_site = next((validator / "lib").glob("python3*/site-packages")).relative_to(validator)
    hook = f"{install_root}/frontend/gpu_standin_hook.py"
    return (f"{install_root}/{site}\n{install_root}/{validator_site}\n"
            f'import os; exec(compile(open("{hook}").read(), "{hook}", "exec"), {{"__file__": "{hook}"}})\n')


def base_python(version: str) -> Path:
    """The interpreter the validator env was made from (its pyvenv.cfg `home`)."""
    config = (validator_env.env_dir(version) / "pyvenv.cfg").read_text()
    home = next(line.split("=", 1)[1].strip() for line in config.splitlines() if line.startswith("home"))
    version_line = next(line for line in config.splitlines() if line.startswith("version"))
    major_minor = ".".join(version_line.split("=", 1)[1].strip().split(".")[:2])
    return Path(home) / f"python{major_minor}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", default=SGLANG_VERSION)
    print(ensure(parser.parse_args().version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
