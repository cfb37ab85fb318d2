"""The value types of host settings (sglang_deploy/settings.py): each a converter that returns the value or
raises ValueError saying what is accepted, with the text docs/settings.md shows as what it accepts.

A `--data` value arrives as a string, or as what pyinfra's parser makes of it (an int, a float, true/false);
every string is checked for control characters (safety.control_message) before its own rule.
"""

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator

from . import safety
from .hostside.contract.paths import TOOL_ROOT, VENV_ROOT
from .rules import AXES


def _text(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"must be a string, got {value!r}")
    text = str(value)
    message = safety.control_message(text)
    if message:
        raise ValueError(message)
    return text


def Text(problem=None, kind: str = "string"):
    """A string (a number from `--data` is taken as its text); `problem(text)` returns a refusal or None."""
    def convert(value):
        if value is None:
            return None
        text = _text(value)
        message = problem(text) if problem else None
        if message:
            raise ValueError(message)
        return text
    return Annotated[str | None, BeforeValidator(convert), kind]  # kind: what docs/settings.md says it accepts


def Matching(pattern: re.Pattern, accepted: str):
    return Text(lambda v: None if safety.full(pattern, v) else f"must be {accepted}, got {v!r}", accepted)


def Int(low: int, high: int):
    def convert(value):
        if value is None:
            return None
        if isinstance(value, str):
            _text(value)
        problem = safety.int_in(value, low, high)
        if problem:
            raise ValueError(problem)
        return int(str(value), 10)
    return Annotated[int | None, BeforeValidator(convert), f"integer {low}..{high}"]


def Number(low: float, high: float):
    def convert(value):
        if value is None:
            return None
        try:
            if isinstance(value, bool):
                raise ValueError(value)
            number = float(_text(value))
        except ValueError:
            raise ValueError(f"must be a number between {low:g} and {high:g}, got {value!r}") from None
        if not low <= number <= high:
            raise ValueError(f"must be between {low:g} and {high:g}, got {number:g}")
        return number
    return Annotated[float | None, BeforeValidator(convert), f"number {low:g}..{high:g}"]


TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _flag(value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise ValueError(f"must be true or false (also yes/no, on/off, 1/0), got {value!r}")


Flag = Annotated[bool, BeforeValidator(_flag), "true/false"]


def Choice(*options: str):
    return Text(lambda v: None if v in options else f"must be {' or '.join(options)}, got {v!r}",
                " or ".join(options))


def _package_list(value):
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(p, str) and all(safety.full(safety.DEB_PACKAGE, name)
                                                                            for name in p.split("|"))
                                                 for p in value):
        return list(value)
    raise ValueError(f"must be a list of Debian package names (a|b: the first the repository has), got {value!r}")


PackageList = Annotated[list[str] | None, BeforeValidator(_package_list), "list of Debian packages"]


def api_key_env_problem(name: str) -> str | None:
    if safety.full(safety.ENV_NAME, name) and name.startswith("SGLANG_DEPLOY_"):
        return None
    return ("must be an environment variable name starting with SGLANG_DEPLOY_ (the controller reads the key from "
            f"it; another name could hand over any variable of the controller's environment), got {name!r}")


def repo_url_problem(key_url: bool):
    def problem(value: str) -> str | None:
        if safety.full(safety.URL, value) or safety.full(safety.ABS_PATH, value):
            return None
        if key_url and not value.startswith("/") and "://" not in value:  # a controller file, relative
            return None
        return f"must be an http(s) or file URL, got {value!r}"
    return problem


PROXY = re.compile(r"https?://(?:[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?/?")


def proxy_problem(value: str) -> str | None:
    """http(s)://host[:port]: no credentials (they would land in logs and process lists), no path."""
    if "@" in value:
        return ("must not carry credentials (user:password@): they would be logged; use a proxy that admits the "
                "host by address, got a URL with '@'")
    return None if PROXY.fullmatch(value) else f"must be http://host:port or https://host:port, got {value!r}"

# The pythons a host-data value may name: the system's, or one of the tool's venvs (root-owned, under VENV_ROOT or
# the hub client's beside it). Any other path is a program a host-data value would have root run (security review 3).
# A release venv's python (VENV_ROOT) runs as the service user (layout.python_argv); the weights fetch runs as root,
# so hub_python is never one (its wheels' .pth files would run as root).
HUB_PYTHON = re.compile(re.escape(TOOL_ROOT) + r"/hub-client/bin/python3?")
VENV_PYTHON = re.compile(re.escape(VENV_ROOT) + r"/[A-Za-z0-9][A-Za-z0-9._-]{0,99}/bin/python3?|" + HUB_PYTHON.pattern)


def python_problem(value: str) -> str | None:
    if value in ("python3", "/usr/bin/python3") or safety.full(VENV_PYTHON, value):
        return None
    return (f"must be python3, /usr/bin/python3 or a venv's python ({VENV_ROOT}/<venv>/bin/python), got {value!r}: "
            "root runs it on the host")


def hub_python_problem(value: str) -> str | None:
    if value in ("python3", "/usr/bin/python3") or safety.full(HUB_PYTHON, value):
        return None
    return (f"must be python3, /usr/bin/python3 or the hub client's python ({HUB_PYTHON.pattern.replace(chr(92), '')}),"
            f" got {value!r}: root runs the weights fetch with it, and a release venv's wheels would run as root")


REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIRS_VARIABLE = "SGLANG_DEPLOY_DATA_DIRS"
PROFILE_DIRS_VARIABLE = "SGLANG_DEPLOY_PROFILE_DIRS"


def _env_dirs(variable: str) -> list[str]:
    return [os.path.realpath(p) for p in os.environ.get(variable, "").split(":") if p.startswith("/")]


def controller_path_problem(value: str, repo_dirs: tuple[str, ...], variable: str | None, what: str) -> str | None:
    """A controller file or directory host data names: under one of the repository's `repo_dirs`, or under a
    directory the operator names in the controller's environment (`variable`, ':'-separated), its symlinks
    resolved; no '..'. Anything else could hand any controller file to the host, or overwrite one."""
    if ".." in value.split("/"):
        return f"{value!r}: no '..' accepted"
    path = value if os.path.isabs(value) else str(REPO_ROOT / value)
    roots = [os.path.realpath(REPO_ROOT / d) for d in repo_dirs] + (_env_dirs(variable) if variable else [])
    real = os.path.realpath(path)
    if any(os.path.commonpath([real, root]) == root for root in roots):
        return None
    named = (f" and the controller directories ${variable} names (now {os.environ.get(variable) or 'unset'})"
             if variable else "")
    return f"{value!r} is outside the repository's {', '.join(d + '/' for d in repo_dirs)}{named}; accepted: {what} there"


def data_file_problem(value: str) -> str | None:
    return controller_path_problem(value, ("secrets",), DATA_DIRS_VARIABLE, "a file or directory")


def key_url_problem(value: str) -> str | None:
    """cuda_repo_key_url: an http(s) URL, or a controller file under secrets/ or $SGLANG_DEPLOY_DATA_DIRS."""
    if safety.full(safety.URL, value) and not value.startswith("file:"):
        return None
    problem = repo_url_problem(True)(value)
    return problem or data_file_problem(value.removeprefix("file://"))


def profile_path_problem(value: str) -> str | None:
    if not os.path.isabs(value) and ".." not in value.split("/") and os.path.exists(value):
        value = os.path.abspath(value)  # relative to the working directory first, as plan.resolve_profile_path
    return controller_path_problem(value, ("profiles",), PROFILE_DIRS_VARIABLE, "a profile")


def results_path_problem(value: str) -> str | None:
    return controller_path_problem(value, ("results",), None, "a file")


def ip_literal_problem(value: str) -> str | None:
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        return f"must be an IP literal (127.0.0.1, ::1, 0.0.0.0), got {value!r}"


ROUTER_POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")
Topology = Choice("pcie", "nvlink")
SimServer = Choice("sglang", "model")
ProvisionMode = Choice("install", "verify")
RouterPolicy = Choice(*ROUTER_POLICIES)
AbArm = Choice("nospec")  # doctor.py ab=: the arm measured against the active release
CudaVersion = Matching(safety.CUDA_VERSION, "MAJOR.MINOR such as 13.0")
NcclVersion = Matching(safety.NCCL_VERSION, "X.Y.Z such as 2.28.3")
NcclPackageVersion = Matching(safety.DEB_VERSION_GLOB, "a Debian version pattern such as '{version}-1+cuda{cuda}'")
DriverPackageVersion = Matching(safety.DEB_VERSION_GLOB, "a Debian version glob such as '{version}-*'")
HostName = Matching(re.compile(r"[A-Za-z0-9.-]+"), "a host name such as developer.download.nvidia.com")
GroupName = Matching(re.compile(r"[A-Za-z_][A-Za-z0-9_]*"), "an inventory group name")
ReleaseId = Matching(re.compile(r"[0-9]{4}-[0-9a-f]{8}"), "a release id such as 0003-1a2b3c4d")


def int_list_problem(value: str) -> str | None:
    parts = value.replace(" ", "").split(",")
    if all(re.fullmatch(r"[0-9]{1,3}(?:-[0-9]{1,3})?", part) for part in parts):
        return None
    return f"{value!r} is not a list such as 1-6 or 1,2,4"


def int_list(text: str) -> tuple[int, ...]:
    """`1-6` or `1,2,4` (as TuneArgs accepts them) as sorted distinct ints."""
    values = []
    for part in text.replace(" ", "").split(","):
        low, _, high = part.partition("-")
        values += list(range(int(low), int(high or low) + 1))
    return tuple(sorted(set(values)))


def attention_problem(value: str) -> str | None:
    """tune_attention: all, or backends that SGLang's parser offers for --attention-backend (in an exported option
    table; the tune asks the pinned version's resolution about each again)."""
    # deferred: 5.1 ms (releases, validate.flag_table) on facts.py, only when tune_attention names backends
    from . import releases
    from .validate.flag_table import load

    if value.strip() == "all":
        return None
    offered = set()
    for version in releases.versions():
        table = load(version) or {"actions": []}
        offered.update(*(a.get("choices") or [] for a in table["actions"] if a["dest"] == "attention_backend"))
    parts = [part.strip() for part in value.split(",")]
    unknown = [part for part in parts if part not in offered]
    if not unknown:
        return None
    return (f"{', '.join(map(repr, unknown))} is not an --attention-backend choice of SGLang's parser; accepted: all, "
            f"or a comma list of {', '.join(sorted(offered))}")


def axes_problem(value: str) -> str | None:
    parts = [part.strip() for part in value.split(",")]
    if value.strip() == "all" or all(part in AXES for part in parts):
        return None
    return f"{value!r}; accepted: {', '.join(AXES)}, all (or a comma list)"
