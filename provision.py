"""Provision the host only: NVIDIA driver (container-aware), CUDA toolkit, NCCL, Python env.

    pyinfra inventory/X.py provision.py [--data provision_mode=verify]

deploy.py runs the same roles first on real hosts; verify mode changes nothing and fails with what
would have to change.
"""

from pyinfra import host

from roles import provision
from sglang_deploy.hostdata import host_flag

mode = host.data.get("provision_mode")
provision.nvidia_stack(mode=mode)
if not host_flag(host.data, "skip_python_env"):
    from sglang_deploy.plan import PlanError, plan_for_host  # needs pydantic; the NVIDIA stack does not

    try:
        profile = plan_for_host(host.data, need_key=False).profile
    except PlanError as error:
        raise SystemExit(str(error)) from None
    provision.python_env(profile=profile, mode=mode)
