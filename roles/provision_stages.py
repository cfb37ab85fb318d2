"""provision.py's stages, in the order it runs them: nvidia_stack -> python_env (roles/provision.py's operations).

`provision_mode=verify` changes nothing and fails with what would have to change. The Python env is the profile's
(host data `profile`, no API key needed); `skip_python_env` leaves it out.
"""

from __future__ import annotations

from roles import provision, service_user
from roles.settings import host_settings, of
from sglang_deploy.layout import ServicePaths
from sglang_deploy.plan import PlanError, plan_for_host
from sglang_deploy.settings import ProvisionArgs


def nvidia_stack() -> None:
    """The NVIDIA driver (container-aware), the CUDA toolkit and NCCL."""
    provision.nvidia_stack(mode=host_settings().provision_mode)


def python_env() -> None:
    """The service user and the profile's versioned venv; refused with the plan's words on a bad profile."""
    if of(ProvisionArgs).skip_python_env:
        return
    mode = host_settings().provision_mode
    try:
        profile = plan_for_host(host_settings(), need_key=False).profile
    except PlanError as error:
        raise SystemExit(str(error)) from None
    if mode != "verify":  # the venv's import checks run as the service user, never as root
        service_user.install(user=profile.service.user, home=ServicePaths(profile.service.name).state_dir)
    provision.python_env(profile=profile, mode=mode)
