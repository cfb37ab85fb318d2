"""Build the tool's wheel and install it into a fresh virtualenv, as a user would (tests, benchmarks)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sglang_deploy.validate import validator_env

REPO = Path(__file__).resolve().parents[1]


def build(work: Path) -> Path:
    """The wheel of this checkout, built from a copy of the files git knows (tracked, or untracked and not
    ignored): setuptools' in-tree build/ directory would otherwise keep modules the checkout no longer has."""
    source = work / "source"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_symlink():  # sglang_deploy/templates -> ../templates: the wheel carries the files
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(REPO / name), source / name)
        elif (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    uv = _uv()
    command = ([uv, "build", "-q", "--wheel", "-o", str(work / "dist"), str(source)] if uv else
               [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(source)])
    subprocess.run(command, check=True, cwd=work, capture_output=True, timeout=300)
    return next((work / "dist").glob("sglang_deploy-*.whl"))


def _uv() -> str | None:
    """uv beside this interpreter (the test extra brings it), else on PATH."""
    return shutil.which("uv", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def install(wheel: Path, venv: Path) -> Path:
    """A fresh virtualenv with the wheel and its dependencies (not editable); returns its python."""
    uv = _uv()
    if uv:  # uv's resolver and parallel unpacking, with this machine's pip configuration (validator_env.installer)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        command = [part for part in validator_env.installer(venv / "bin/python") if part != "--compile-bytecode"]
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        command = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(command + [str(wheel)], check=True, capture_output=True, timeout=600)
    return venv / "bin/python"
