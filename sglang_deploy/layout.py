"""Where things live on a deployed host. Every path the roles and templates use comes from here."""

from __future__ import annotations

import functools
import hashlib
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from .hostside import PROGRAMS
# The host's paths are written once, in the host package's table (hostside/contract/paths.py: stdlib only).
from .hostside.contract.paths import (HOST_LIB, PREFLIGHT_DIR, SIMULATED_MARKER, STORE_ROOT,  # noqa: F401 - the roles'
                                      TOOL_ROOT, VENV_ROOT, ServicePaths)

if TYPE_CHECKING:  # the layout is importable without pydantic (verify runs on bare GPU hosts)
    from .profile import Profile

HOST_PACKAGE = "hostside"  # sglang_deploy/hostside, installed as HOST_LIB/hostside
HOSTSIDE = Path(__file__).resolve().parent / HOST_PACKAGE


@functools.cache
def host_package():
    """The host package (sglang_deploy/hostside: every module, standard library only) as one archive for
    HOST_LIB/hostside, named by its hash (HOST_LIB/.manifest on the host). Built once per process: the facts and the
    install both need its digest."""
    # deferred: 2.1 ms (shipment) on facts.py and sglang-deploy check, for the host package only
    from . import shipment

    return shipment.build("programs", HOST_LIB, f"{HOST_LIB}/.manifest", shipment.tree(HOSTSIDE, HOST_PACKAGE))


def host_program_argv(module: str, *args: str, python: str = "/usr/bin/python3") -> list[str]:
    """argv running a host program (hostside.PROGRAMS) as a module of the host package; its working directory must
    be HOST_LIB. A module that is not a program is refused here, on the controller."""
    if module not in PROGRAMS:
        raise ValueError(f"hostside.{module} is not a host program (hostside/__init__.py PROGRAMS)")
    return [python, "-m", f"{HOST_PACKAGE}.{module}", *args]


def host_program(module: str, *args: str) -> str:
    """The shell command that runs a host program: `cd HOST_LIB && python3 -m hostside.<module> ARGS`.
    The root-owned HOST_LIB is the working directory, so `-m` finds the package there and nowhere else."""
    return f"cd {HOST_LIB} && " + shlex.join(host_program_argv(module, *args, python="python3"))


# A release venv's python (VENV_ROOT/<venv>/bin/python...). Root never starts one as it is: a wheel's .pth file or
# sitecustomize would run as root (security review 3, finding 3). It runs as the service user (service_user_argv),
# or, where only the standard library is needed, as `-I -S` (no site-packages, no .pth); the host programs read a
# venv from outside with the system python (hostside/venv_hooks.py). tests/test_venv_python.py scans every command.
RELEASE_PYTHON = re.compile(re.escape(VENV_ROOT) + r"/[^/\s'\"]+/bin/python[0-9.]*")
SERVICE_USER_PATH = "PATH=/usr/bin:/bin"


def service_user_argv(user: str, argv: list[str]) -> list[str]:
    """argv run as the service user with a clean environment (no HOME of root's, no PYTHON* variables)."""
    return ["runuser", "-u", user, "--", "env", "-i", SERVICE_USER_PATH, "HOME=/nonexistent", *argv]


def python_argv(python: str, args: list[str], user: str) -> list[str]:
    """`python ARGS` for root to run: a release venv's python as the service user, isolated (-I); any other python
    (the system's, the tool's own hub client) as it is."""
    if RELEASE_PYTHON.fullmatch(python):
        return service_user_argv(user, [python, "-I", *args])
    return [python, *args]


def requirements(profile: "Profile") -> list[str]:
    extras = f"[{','.join(sorted(profile.sglang.extras))}]" if profile.sglang.extras else ""
    return [f"sglang{extras}=={profile.sglang.version}", *sorted(profile.sglang.pins)]


def venv_path(profile: "Profile") -> str:
    """Versioned: SGLang version plus a hash of the requirements, so releases can point at old envs."""
    digest = hashlib.sha256("\n".join(requirements(profile)).encode()).hexdigest()[:10]
    return f"{VENV_ROOT}/sglang-{profile.sglang.version}-{digest}"
