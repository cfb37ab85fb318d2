"""Provision the host only: NVIDIA driver (container-aware), CUDA toolkit, NCCL, Python env.

    pyinfra inventory/X.py provision.py [--data provision_mode=verify]

deploy.py runs the same roles first on real hosts; verify mode changes nothing and fails with what
would have to change.
"""

from roles import provision, service_user
from roles.settings import host_settings, of
from sglang_deploy.layout import ServicePaths
from sglang_deploy.plan import PlanError, plan_for_host
from sglang_deploy.settings import ProvisionArgs

mode = host_settings().provision_mode
provision.nvidia_stack(mode=mode)
if not of(ProvisionArgs).skip_python_env:
    try:
        profile = plan_for_host(host_settings(), need_key=False).profile
    except PlanError as error:
        raise SystemExit(str(error)) from None
    if mode != "verify":  # the venv's import checks run as the service user, never as root
        service_user.install(user=profile.service.user, home=ServicePaths(profile.service.name).state_dir)
    provision.python_env(profile=profile, mode=mode)
