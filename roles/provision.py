"""Provision a GPU host: NVIDIA driver (container-aware), CUDA toolkit, NCCL, the versioned Python env.

Decisions come from sglang_deploy.provision (pure) over host facts; this module only turns them into
pyinfra operations. `provision_mode=verify` turns every install into an error and changes nothing.
"""

from io import StringIO

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import File
from pyinfra.operations import apt, files, server

from roles.facts import GpuHost, SGLangVersion, VenvTorch
from sglang_deploy.layout import requirements, venv_path
from sglang_deploy.provision import cuda_toolkit_step, driver_step, nccl_step

CUDA_SOURCES = """Types: deb
URIs: {url}
Suites: /
Signed-By: {keyring}
"""
CUDA_PIN = """Package: *
Pin: origin {origin}
Pin-Priority: 600
"""


def setting(name):
    return host.data.get(name)


@deploy("Provision: NVIDIA driver, CUDA toolkit, NCCL")
def nvidia_stack(mode: str):
    facts = host.get_fact(GpuHost)
    torch = host.get_fact(VenvTorch, python=setting("verify_python") or "python3")
    steps = [
        driver_step(facts, int(setting("cuda_major")), int(setting("driver_branch")), mode),
        cuda_toolkit_step(facts, setting("cuda_version"), mode),
        nccl_step(facts, setting("nccl_version"), (torch or {}).get("nccl"), mode),
    ]
    for step in steps:
        host.log(f"{step.role}: {step.action}: {step.message}", logger.info if step.action != "error" else logger.error)
    errors = [step for step in steps if step.action == "error"]
    if errors:
        raise DeployError(f"{host.name}: provisioning cannot continue:\n" + "\n".join(f"  {s.role}: {s.message}" for s in errors))
    packages = [package for step in steps if step.action == "install" for package in step.packages]
    if not packages:
        return
    keyring = "/usr/share/keyrings/nvidia-cuda.asc"
    files.download(name="NVIDIA CUDA repository key", src=setting("cuda_repo_key_url"), dest=keyring, mode=644)
    files.put(name="NVIDIA CUDA repository (deb822)", dest="/etc/apt/sources.list.d/nvidia-cuda.sources",
              src=StringIO(CUDA_SOURCES.format(url=setting("cuda_repo_url"), keyring=keyring)), mode=644)
    files.put(name="Prefer NVIDIA's repository for CUDA packages", dest="/etc/apt/preferences.d/nvidia-cuda",
              src=StringIO(CUDA_PIN.format(origin=setting("cuda_repo_origin"))), mode=644)
    apt.packages(name=f"Install {', '.join(packages)}", packages=packages, update=True, cache_time=3600)
    if any(step.reboot_needed for step in steps):
        logger.warning(f"[{host.name}] a new kernel driver was installed: REBOOT NEEDED (not done automatically)")


@deploy("Provision: Python environment")
def python_env(profile, mode: str):
    venv = venv_path(profile)
    installed = host.get_fact(SGLangVersion, python=f"{venv}/bin/python")
    if installed == profile.sglang.version:
        host.log(f"python env: {venv} has SGLang {installed}", logger.info)
        return
    if mode == "verify":
        raise DeployError(f"{host.name}: verify mode: {venv} has SGLang {installed or 'nothing'}, "
                          f"the profile pins {profile.sglang.version}")
    wheelhouse = setting("wheelhouse")  # a local directory of wheels: install offline
    pip_args = ""
    if wheelhouse:
        remote = f"/opt/sglang-deploy/wheelhouse/sglang-{profile.sglang.version}"
        files.sync(name="Upload the wheelhouse", src=wheelhouse, dest=remote)
        pip_args = f"--no-index --find-links {remote}"
    if not host.get_fact(File, path=f"{venv}/bin/python"):
        server.shell(name=f"Create {venv}", commands=[f"python3 -m venv {venv}"])
    server.shell(name=f"Install {' '.join(requirements(profile))} into {venv}",
                 commands=[f"{venv}/bin/pip install -q {pip_args} " + " ".join(f"'{r}'" for r in requirements(profile)),
                           f"{venv}/bin/python -c 'import sglang; assert sglang.__version__ == \"{profile.sglang.version}\"'"])

