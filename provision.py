"""Provision the host only: NVIDIA driver (container-aware), CUDA toolkit, NCCL, Python env.

    pyinfra inventory/X.py provision.py [--data provision_mode=verify]

deploy.py runs the same roles first on real hosts; verify mode changes nothing and fails with what
would have to change.
"""

from roles import provision_stages as stages

stages.nvidia_stack()  # the NVIDIA driver (container-aware), the CUDA toolkit, NCCL
stages.python_env()  # the service user and the profile's versioned venv (skip_python_env skips it)
