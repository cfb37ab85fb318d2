"""Where things live on a deployed host. Every path the roles and templates use comes from here."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the layout is importable without pydantic (verify runs on bare GPU hosts)
    from .profile import Profile

VENV_ROOT = "/opt/sglang-deploy/venvs"
TOOL_BIN = "/opt/sglang-deploy/bin"
SIMULATED_MARKER = "/etc/sglang-deploy-simulated"


def requirements(profile: "Profile") -> list[str]:
    extras = f"[{','.join(sorted(profile.sglang.extras))}]" if profile.sglang.extras else ""
    return [f"sglang{extras}=={profile.sglang.version}", *sorted(profile.sglang.pins)]


def venv_path(profile: "Profile") -> str:
    """Versioned: SGLang version plus a hash of the requirements, so releases can point at old envs."""
    digest = hashlib.sha256("\n".join(requirements(profile)).encode()).hexdigest()[:10]
    return f"{VENV_ROOT}/sglang-{profile.sglang.version}-{digest}"


@dataclass(frozen=True)
class ServiceLayout:
    service: str

    @property
    def unit_path(self) -> str:
        return f"/etc/systemd/system/{self.service}.service"

    @property
    def config_dir(self) -> str:
        return f"/etc/sglang-deploy/{self.service}"

    @property
    def env_path(self) -> str:
        return f"{self.config_dir}/sglang.env"

    @property
    def secrets_path(self) -> str:
        return f"{self.config_dir}/secrets.yaml"

    @property
    def state_dir(self) -> str:
        return f"/var/lib/{self.service}"

    @property
    def cache_dir(self) -> str:
        return f"/var/cache/{self.service}"
