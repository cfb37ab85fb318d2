"""Everything a deploy decides before it touches a host: profile, validation, rendered files.

Pure: takes the inventory's host data (a mapping) and returns a Plan or raises PlanError whose message
names the file, field or flag. deploy.py calls it before any operation is queued, so a bad profile
changes nothing on the host and the running release keeps running.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .hostdata import get as _get, host_flag  # noqa: F401 - host_flag is part of this module's interface
from .profile import Profile, ProfileError, load_profile
from .render import Rendered, render
from .validate import check_profile
from .validator_env import ValidatorEnvError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_API_KEY_ENV = "SGLANG_DEPLOY_API_KEY"


class PlanError(RuntimeError):
    pass


@dataclass(frozen=True)
class Plan:
    profile: Profile
    rendered: Rendered
    port: int
    simulated: bool
    skipped_rules: tuple[str, ...]
    hardware_notes: tuple[str, ...] = ()
    resolution: dict | None = None  # what SGLang resolves for the unit's command line (resolution.py)

    @property
    def probe_url(self) -> str:
        host = self.profile.service.host
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{self.port}"


def resolve_api_key(data) -> str | None:
    """The API key comes from a file (host data api_key_file) or an environment variable of the controller."""
    key_file = _get(data, "api_key_file")
    if key_file:
        path = Path(key_file) if Path(key_file).is_absolute() else REPO_ROOT / key_file
        if path.exists():
            if path.stat().st_mode & 0o077:
                raise PlanError(f"api_key_file {key_file} is readable by group/others; chmod 600 it")
            return path.read_text().strip() or None
    return os.environ.get(_get(data, "api_key_env", DEFAULT_API_KEY_ENV)) or None


def resolve_profile_path(profile_path) -> Path:
    """Relative paths are tried from the working directory, then from the repository."""
    path = Path(profile_path)
    if not path.is_absolute() and not path.exists():
        path = REPO_ROOT / path
    return path


def reconcile_hardware(data, detected: dict | None, declared_by: str = "inventory",
                       labels: dict | None = None) -> tuple[int | None, str | None, list[str]]:
    """GPU count and topology for the validation rules: the host's own facts where it is reachable,
    the inventory's values otherwise. Both present and different is an error naming both."""
    notes = []
    values = {}
    for name in ("gpus", "gpu_topology"):
        declared, found = _get(data, name), (detected or {}).get(name)
        label = (labels or {}).get(name, name)
        if declared is not None and found is not None and str(declared) != str(found):
            raise PlanError(f"{declared_by} says {label} {declared} but the host reports {found} "
                            f"(nvidia-smi); correct {declared_by}, or leave out {label} to use what the host reports")
        if declared is None and found is not None:
            notes.append(f"{label} {found} from the host's facts")
        values[name] = declared if declared is not None else found
    gpus = values["gpus"]
    return (int(gpus) if gpus is not None else None), values["gpu_topology"], notes


def plan_for_host(data, detected: dict | None = None) -> Plan:
    profile_path = _get(data, "profile")
    if not profile_path:
        raise PlanError("no profile: set `profile` in the host's inventory data or pass --data profile=PATH")
    path = resolve_profile_path(profile_path)
    try:
        profile = load_profile(path)
    except ProfileError as error:
        raise PlanError("invalid profile:\n" + "\n".join(error.problems)) from None
    gpus, topology, notes = reconcile_hardware(data, detected)
    port = int(_get(data, "port", profile.service.port))
    try:
        report = check_profile(profile, gpus=gpus, topology=topology, port=port)
    except (ValidatorEnvError, ValueError) as error:
        raise PlanError(f"cannot validate {path}: {error}") from None
    if not report.ok:
        raise PlanError(f"{path} fails validation ({len(report.problems)} problem(s)):\n" + "\n".join(report.lines()))
    cuda_version = _get(data, "cuda_version")
    rendered = render(profile, api_key=resolve_api_key(data), port=port,
                      cuda_home=f"/usr/local/cuda-{cuda_version}" if cuda_version else None)
    return Plan(profile=profile, rendered=rendered, port=port, simulated=bool(_get(data, "simulated", False)),
                skipped_rules=tuple(report.skipped), hardware_notes=tuple(notes), resolution=report.resolution)
