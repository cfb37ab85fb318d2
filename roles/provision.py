"""Provision a GPU host: NVIDIA driver (container-aware), CUDA toolkit, NCCL, the versioned Python env.

Decisions come from sglang_deploy.provision (pure) over host facts; this module only turns them into
pyinfra operations. `provision_mode=verify` turns every install into an error and changes nothing.
"""

import shlex
from io import StringIO

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.server import Arch, LinuxDistribution, Which
from pyinfra.operations import files, server

from roles.facts import GpuHost, VenvState, VenvTorch
from roles.settings import host_settings
from sglang_deploy.hostfacts import userspace_driver
from sglang_deploy.hostside.venv_hooks import RULE as HOOK_RULE
from sglang_deploy.layout import TOOL_ROOT, python_argv, requirements, venv_path
from sglang_deploy.provision import (DISK_NEEDS_MIB, HOLDS_FILE, LEGACY_REPO_PREFERENCES_FILE,
                                     NVIDIA_REPO_PREFERENCES_FILE, apt_install_script, create_command,
                                     apt_proxy_options, cuda_toolkit_step, disk_check_command, driver_step, holds_text,
                                     install_commands, nccl_step, nvidia_repo_path, nvidia_repo_preferences, proxy_env,
                                     toolchain_step, userspace_driver_defaults, with_proxy)

KEYRING = "/usr/share/keyrings/nvidia-cuda.asc"
SOURCES = "/etc/apt/sources.list.d/nvidia-cuda.sources"
REPO_PREFERENCE = f"/etc/apt/preferences.d/{NVIDIA_REPO_PREFERENCES_FILE}"
HOLDS = f"/etc/apt/preferences.d/{HOLDS_FILE}"
CUDA_SOURCES = """Types: deb
URIs: {url}
Suites: /
Signed-By: {keyring}
"""


def os_release() -> dict:
    return host.get_fact(LinuxDistribution)["release_meta"]


def nvidia_repository():
    """NVIDIA's CUDA apt repository (or a mirror): keyring, deb822 source, preference for its packages.
    {distro} and {arch} in the URLs come from the host (debian12/x86_64, ubuntu2404/sbsa, ...)."""
    url, key = host_settings().cuda_repo_url, host_settings().cuda_repo_key_url
    if "{" in url + key:
        try:
            path = nvidia_repo_path(os_release(), host.get_fact(Arch))
        except ValueError as error:
            raise DeployError(f"{host.name}: {error}") from None
        url, key = url.format(**path), key.format(**path)
    if "://" in key:
        files.download(name="NVIDIA CUDA repository key", src=key, dest=KEYRING, mode="644",
                       _env=proxy_env(host_settings().proxy))
    else:  # a key file on the controller (air-gapped hosts)
        files.put(name="NVIDIA CUDA repository key", src=key, dest=KEYRING, mode="644")
    files.put(name="NVIDIA CUDA repository (deb822)", dest=SOURCES, mode="644",
              src=StringIO(CUDA_SOURCES.format(url=url, keyring=KEYRING)))
    files.put(name="NVIDIA's repository for NVIDIA's packages only (apt preferences)", dest=REPO_PREFERENCE, mode="644",
              src=StringIO(nvidia_repo_preferences(host_settings().cuda_repo_origin)))
    files.file(name="Remove the earlier preference for all of NVIDIA's repository", present=False,
               path=f"/etc/apt/preferences.d/{LEGACY_REPO_PREFERENCES_FILE}")


@deploy("Provision: NVIDIA driver, CUDA toolkit, NCCL")
def nvidia_stack(mode: str, python: str | None = None, user: str = "sglang"):
    """python: the interpreter whose torch reports the NCCL that is actually loaded (the profile's venv, which runs
    as the service `user`)."""
    facts = host.get_fact(GpuHost)
    torch = host.get_fact(VenvTorch, python=host_settings().verify_python or python or "python3", user=user)
    cuda_version = host_settings().cuda_version  # `--data cuda_version=13.1` arrives as a float; the setting is its text
    nccl_pin = host_settings().nccl_version
    default_packages, _ = userspace_driver_defaults(os_release())
    driver = driver_step(facts, host_settings().cuda_major, host_settings().driver_branch, mode,
                         userspace_packages=host_settings().driver_userspace_packages or default_packages,
                         package_version=host_settings().driver_package_version)
    steps = [
        driver,
        cuda_toolkit_step(facts, cuda_version, mode),
        nccl_step(facts, str(nccl_pin) if nccl_pin else None, (torch or {}).get("nccl"), mode,
                  cuda_version=cuda_version, package_version=host_settings().nccl_package_version),
        toolchain_step(facts, mode),
    ]
    for step in steps:
        host.log(f"{step.role}: {step.action}: {step.message}", logger.info if step.action != "error" else logger.error)
    errors = [step for step in steps if step.action == "error"]
    if errors:
        raise DeployError(f"{host.name}: provisioning cannot continue; nothing was changed:\n"
                          + "\n".join(f"  {s.role}: {s.message}" for s in errors))
    if mode == "verify":
        return
    packages = [package for step in steps if step.action == "install" for package in step.packages]
    container_user_space = driver.action == "install" and bool(driver.exact)
    kernel = facts["kernel_driver"]
    # The repository is touched only when something must be installed: a working (often firewalled)
    # host needs no network at all.
    holds = {package: version for step in steps for package, version in step.hold.items()}
    if packages:
        toolkit = steps[1]
        if toolkit.action == "install":  # before the repository, the pin or any package changes
            path, need = DISK_NEEDS_MIB["cuda-toolkit"]
            server.shell(name=f"Check disk space for {', '.join(toolkit.packages)}",
                         commands=[disk_check_command(", ".join(toolkit.packages), path, need)])
        # Only NVIDIA's packages need NVIDIA's repository: the toolchain alone comes from the host's own sources, so a
        # container that reaches a distribution mirror but not NVIDIA is not refused for gcc or python3-venv.
        nvidia = any(step.action == "install" for step in steps if step.role != "toolchain")
        if nvidia:
            nvidia_repository()
        server.shell(name="apt update" + (" (NVIDIA repository)" if nvidia else ""),
                     commands=["apt-get update -q" + apt_proxy_options(host_settings().proxy)])
        # One transaction: the driver's source packages pinned at the module's version (their exact-version siblings
        # follow), simulated first (`apt-get install -s`: a refusal names the conflict and changes nothing), then the
        # pin and holds written and the install run. Versions may be globs (580.95.05-*): quoted by the script.
        # --no-install-recommends: a Debian-style libcuda1 recommends kernel-module packages (dkms in a container).
        others = [package for step in steps if step.action == "install" and not (step is driver and container_user_space)
                  for package in step.packages]
        check, commit = apt_install_script(others, holds, driver if container_user_space else None, kernel,
                                           userspace_driver(facts["gpus"], facts["libcuda"]), host_settings().proxy)
        shown = [f"{package}={driver.exact}" for package in driver.packages] if container_user_space else []
        server.shell(name=f"Install {', '.join(shown + others)} (simulated first)", commands=[check + "\n" + commit])
    if holds:
        files.put(name="Hold driver user space and NCCL at their exact versions", dest=HOLDS, mode="644",
                  src=StringIO(holds_text(holds)))
    if container_user_space:
        server.shell(name=f"Check user space is now {kernel}", commands=[
            f"ls /usr/lib/*-linux-gnu/libcuda.so.{kernel} /usr/lib64/libcuda.so.{kernel} 2>/dev/null | grep -q . || "
            f"{{ echo \"libcuda.so.{kernel} is missing after the install: the kernel module is {kernel}, user space is "
            f"$(ls /usr/lib/*-linux-gnu/libcuda.so.*.* 2>/dev/null | sed 's/.*libcuda.so.//' | tr '\\n' ' ')\" >&2; exit 1; }}"])
    if (facts.get("container") or "none") == "none":
        # The sandboxed unit has NoNewPrivileges: CUDA's setuid nvidia-modprobe cannot create /dev/nvidia-uvm
        # at first use, so the module is loaded at boot (and now) and its nodes exist before the service starts.
        files.put(name="Load nvidia-uvm at boot (the sandboxed service cannot)", dest="/etc/modules-load.d/nvidia-uvm.conf",
                  src=StringIO("nvidia-uvm\n"), mode="644")
        if not facts.get("nvidia_uvm") and not driver.reboot_needed:
            server.shell(name="Load nvidia-uvm and create /dev/nvidia-uvm",
                         commands=["modprobe nvidia-uvm && (nvidia-modprobe -u -c=0 || true)"])
    if driver.reboot_needed:
        logger.warning(f"[{host.name}] a new kernel driver was installed: REBOOT NEEDED (not done automatically)")


@deploy("Provision: Python environment")
def python_env(profile, mode: str):
    """The release venv, read from outside (VenvState: root never starts its python); installed into a fresh venv,
    its startup hooks refused (hostside/venv_hooks.py), its imports checked as the service user, which exists by
    now (roles/stages.py, provision.py)."""
    venv = venv_path(profile)
    state = host.get_fact(VenvState, venv=venv)
    waived = HOOK_RULE in profile.waivers
    if state.get("unreadable"):  # the install would remove the venv: not on a reader's failure
        raise DeployError(f"{host.name}: {venv} could not be read ({state['unreadable']}); nothing was changed")
    installed = state["sglang"]
    if installed == profile.sglang.version:
        if state["problems"] and not waived:
            raise DeployError(f"{host.name}: {venv}: startup hooks refused; nothing was changed:\n  "
                              + "\n  ".join(state["problems"]))
        host.log(f"python env: {venv} has SGLang {installed}", logger.info)
        return
    if mode == "verify":
        raise DeployError(f"{host.name}: verify mode: {venv} has SGLang {installed or 'nothing'}, "
                          f"the profile pins {profile.sglang.version}")
    path, need = DISK_NEEDS_MIB["python-env"]  # before the wheelhouse upload and the venv
    server.shell(name=f"Check disk space for {venv}", commands=[disk_check_command(f"the Python env {venv}", path, need)])
    wheelhouse = host_settings().wheelhouse  # a directory of wheels on the controller: install offline
    index_args = []
    if wheelhouse:
        remote = f"{TOOL_ROOT}/wheelhouse/sglang-{profile.sglang.version}"
        files.sync(name="Upload the wheelhouse", src=wheelhouse, dest=remote, delete=True)
        index_args = ["--no-index", "--find-links", remote]
    # Requirements are PEP 508 (validated by the profile) and quoted by construction, never by hand.
    wanted = shlex.join(requirements(profile))
    use_uv = bool(host.get_fact(Which, command="uv"))
    install = install_commands(venv, requirements(profile), index_args, use_uv, waived_hooks=waived)
    check_version = ("import sglang, sys; v = sglang.__version__; "
                     "assert v == sys.argv[1], f'sglang {v} imported, {sys.argv[1]} pinned'")
    user, python = profile.service.user, f"{venv}/bin/python"
    checks = [shlex.join(python_argv(python, ["-c", check_version, profile.sglang.version], user))]
    gpus = len(host.get_fact(GpuHost)["gpus"])
    if gpus:  # a real GPU host: the venv's torch must see every GPU
        checks.append(shlex.join(python_argv(python, ["-c", (
            f"import torch; n = torch.cuda.device_count(); assert torch.cuda.is_available() and n == {int(gpus)}, "
            f"f'torch sees {{n}} of {int(gpus)} GPUs'")], user)))
    install[0] = with_proxy(install[0], host_settings().proxy)  # pip or uv; the checks need no network
    server.shell(name=f"Install {wanted} into {venv} (a fresh venv, binary wheels only, no startup hooks)",
                 commands=[create_command(venv, use_uv), *install, *checks])
