"""Provisioning decisions (pure): what the driver, CUDA, NCCL and Python-env roles must do on a host.

Each function takes host facts and the settings from group data, and returns a Step: nothing to do,
an install to perform (exact package versions), or an error that names what was found and what is
needed. In verify mode an install becomes an error, so `provision_mode=verify` changes nothing.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from .hostfacts import driver_branch, driver_verdict, nccl_differs
from .hostside.contract.paths import TOOL_ROOT

# NVIDIA's user-space compute driver packages (their debian12 CUDA repository, the names Debian uses); no kernel module.
USERSPACE_DRIVER_PACKAGES = ("libcuda1", "libnvidia-ml1", "nvidia-smi")
# Ubuntu packages the driver per branch (libnvidia-compute-580); NVIDIA's Ubuntu repository drops the suffix from 590
# on. "a|b": the first name the repository has at the host module's version is installed.
USERSPACE_DRIVER_PACKAGES_UBUNTU = ("libnvidia-compute-{branch}|libnvidia-compute", "nvidia-utils-{branch}|nvidia-utils")
# Exactly the kernel module's version, any packaging revision (580.95.05-1, -0ubuntu1, -1ubuntu1):
# an apt version glob, also valid in apt preferences.
DRIVER_PACKAGE_VERSION = "{version}-*"
NCCL_PACKAGE_VERSION = "{version}-1+cuda{cuda}"  # 2.28.3 -> 2.28.3-1+cuda13.0
REPO_ARCH = {"x86_64": "x86_64", "aarch64": "sbsa"}  # `uname -m` -> NVIDIA's repository directory


def nvidia_repo_path(os_release: dict, machine: str) -> dict:
    """The {distro} and {arch} of NVIDIA's repository URLs for a host: debian12/x86_64, ubuntu2404/sbsa."""
    distro_id = (os_release.get("ID") or "").lower()
    version = (os_release.get("VERSION_ID") or "").replace(".", "")
    if distro_id not in ("debian", "ubuntu") or not version:
        raise ValueError(f"NVIDIA's CUDA apt repositories cover Debian and Ubuntu; this host is "
                         f"{distro_id or 'unknown'} {os_release.get('VERSION_ID', '')}: set cuda_repo_url to a repository for it")
    if machine not in REPO_ARCH:
        raise ValueError(f"no NVIDIA CUDA repository for architecture {machine}; accepted: {', '.join(REPO_ARCH)}")
    return {"distro": f"{distro_id}{version}", "arch": REPO_ARCH[machine]}


def userspace_driver_defaults(os_release: dict) -> tuple[tuple[str, ...], str]:
    """Package names and Debian version template of the user-space driver on this distribution."""
    if (os_release.get("ID") or "").lower() == "ubuntu":
        return USERSPACE_DRIVER_PACKAGES_UBUNTU, DRIVER_PACKAGE_VERSION
    return USERSPACE_DRIVER_PACKAGES, DRIVER_PACKAGE_VERSION


@dataclass
class Step:
    role: str
    action: str  # "ok", "install", "error"
    message: str
    packages: list[str] = field(default_factory=list)  # apt names, "name=version" where exact
    reboot_needed: bool = False
    # Exact versions apt must keep (written to /etc/apt/preferences.d) and may downgrade to.
    hold: dict[str, str] = field(default_factory=dict)
    # The driver's user space: `packages` are names ("a|b": the first the repository has) to install at this version
    # glob, with every package of their source packages pinned to it (apt_install_script).
    exact: str | None = None


def driver_step(facts: dict, cuda_major: int, driver_branch_pin: int, mode: str,
                userspace_packages=USERSPACE_DRIVER_PACKAGES, package_version: str = DRIVER_PACKAGE_VERSION) -> Step:
    verdict = driver_verdict(facts["gpus"], facts["kernel_driver"], facts["container"], cuda_major,
                             facts.get("libcuda"))
    kernel, userspace, minimum = verdict["kernel_driver"], verdict["userspace_driver"], verdict["minimum_branch"]
    # In a container, apt must keep user space at exactly the host module's version (no `apt upgrade` drift).
    hold = ({name: package_version.format(version=kernel) for package in userspace_packages
             for name in package.format(branch=driver_branch(kernel)).split("|")} if verdict["container"] and kernel else {})
    if verdict["ok"]:
        return Step("driver", "ok", f"NVIDIA driver {kernel or userspace} (>= R{minimum}) works: nothing to install",
                    hold=hold)
    if verdict["container"]:
        # The kernel module belongs to the Proxmox host: never install one here. Only the user-space
        # libraries can be fixed in the container, and only to exactly the host module's version.
        where = f"in a {verdict['container']} container"
        if not kernel or driver_branch(kernel) < minimum:
            return Step("driver", "error", f"{where}: " + "; ".join(verdict["problems"])
                        + (f"; upgrade the driver on the Proxmox host to R{minimum} or newer" if kernel else ""))
        if mode == "verify":
            return Step("driver", "error", f"verify mode, {where}: " + "; ".join(verdict["problems"]))
        return Step("driver", "install",
                    f"{where}: user-space driver {userspace or 'missing'} -> {kernel} (the host's kernel module)",
                    [package.format(branch=driver_branch(kernel)) for package in userspace_packages], hold=hold,
                    exact=package_version.format(version=kernel))
    if kernel and driver_branch(kernel) >= minimum:
        # The module is adequate but user space disagrees: typically a driver upgrade before a reboot.
        return Step("driver", "error", "; ".join(verdict["problems"]) + "; if the driver was just upgraded, reboot")
    if mode == "verify":
        return Step("driver", "error", "verify mode: " + "; ".join(verdict["problems"]))
    return Step("driver", "install", f"install the R{driver_branch_pin} driver from NVIDIA's CUDA repository",
                [f"cuda-drivers-{driver_branch_pin}"], reboot_needed=True)


def cuda_toolkit_step(facts: dict, cuda_version: str, mode: str) -> Step:
    """The toolkit at /usr/local/cuda-<version>, the path the unit uses (CUDA_HOME), not only whatever
    /usr/local/cuda or the PATH's nvcc is. Facts without the versioned directories (an older fact) use nvcc's."""
    package = f"cuda-toolkit-{cuda_version.replace('.', '-')}"
    home = f"/usr/local/cuda-{cuda_version}"
    versioned = facts.get("cuda_toolkits")
    present = versioned.get(cuda_version) == cuda_version if versioned is not None \
        else facts["cuda_toolkit"] == cuda_version
    if present:
        return Step("cuda-toolkit", "ok", f"CUDA toolkit {cuda_version} (nvcc) present at {home}")
    found = facts["cuda_toolkit"] or "none"
    where = f"{cuda_version} required at {home} (the unit's CUDA_HOME; {package})" + (
        "; there: " + ", ".join(f"/usr/local/cuda-{v} (nvcc {r or 'without a release'})"
                                for v, r in sorted(versioned.items())) if versioned else "")
    if mode == "verify":
        return Step("cuda-toolkit", "error", f"verify mode: CUDA toolkit {found} found, {where}")
    return Step("cuda-toolkit", "install", f"CUDA toolkit {found} -> {where}", [package])


def nccl_package_version(nccl_pin: str, cuda_version: str, template: str = NCCL_PACKAGE_VERSION) -> str:
    """A pin is an upstream version (2.28.3) or already a Debian version (2.28.3-1+cuda13.0)."""
    return nccl_pin if "-" in nccl_pin else template.format(version=nccl_pin, cuda=cuda_version)


def nccl_step(facts: dict, nccl_pin: str | None, torch_nccl: str | None, mode: str, cuda_version: str = "13.0",
              package_version: str = NCCL_PACKAGE_VERSION) -> Step:
    system = facts["system_nccl"]
    note = ""
    if nccl_differs(system, torch_nccl):
        note = f"; note: PyTorch in the venv loads its own NCCL {torch_nccl}, not the system's {system}"
    if not nccl_pin:
        return Step("nccl", "ok", f"system libnccl2 {system or 'not installed (PyTorch brings its own)'} (not pinned){note}")
    wanted = nccl_package_version(nccl_pin, cuda_version, package_version)
    if system == wanted:
        return Step("nccl", "ok", f"system libnccl2 {system}{note}", hold={"libnccl2": wanted})
    if mode == "verify":
        return Step("nccl", "error", f"verify mode: libnccl2 {system or 'missing'}, pinned {wanted}{note}")
    return Step("nccl", "install", f"libnccl2 {system or 'missing'} -> {wanted}{note}", [f"libnccl2={wanted}"],
                hold={"libnccl2": wanted})


# What the server's first JIT compile needs (Triton's launcher and FlashInfer build C against the base interpreter's
# Python.h; nvcc needs a host compiler), and python3 -m venv's ensurepip: Debian's package for each missing piece.
TOOLCHAIN = (("gcc", "gcc"), ("g++", "g++"), ("python_h", "python3-dev"), ("venv", "python3-venv"))


def toolchain_step(facts: dict, mode: str) -> Step:
    compilers = (facts.get("lxc") or {}).get("compilers") or {}
    # venv: None where the facts did not ask (output of an older version): not counted as missing
    missing = [package for key, package in TOOLCHAIN if not compilers.get(key) and not (key == "venv" and
                                                                                        compilers.get(key) is None)]
    if not missing:
        return Step("toolchain", "ok", "gcc, g++ and Python.h for the first JIT compile (Triton, FlashInfer, nvcc), "
                    "python3-venv")
    if mode == "verify":
        return Step("toolchain", "error", f"verify mode: {', '.join(missing)} missing (Triton's and FlashInfer's first "
                    "JIT compile at start needs the compilers and Python.h; python3 -m venv needs python3-venv)")
    return Step("toolchain", "install", f"{', '.join(missing)} missing: installed for the first JIT compile and the "
                "venv", missing)


# --- NVIDIA's repository, for NVIDIA's packages only ---------------------------------------------------------------

# The names raised above the distribution's (apt_preferences globs): the driver's family (its Debian-style packaging
# pulls glx-alternative-*, glx-diversions, update-glx), CUDA and NCCL. Anything else NVIDIA's repository carries stays
# below the distribution's own package of that name.
NVIDIA_PACKAGE_GLOBS = ("*nvidia*", "*cuda*", "libnccl*", "glx-*", "update-glx")
# In apt's preferences.d, read in the order of the names, and the first specific record that matches a package version
# decides its priority: this file's raised names (600) must come after the driver's source pin and the holds (1001),
# or they would shadow them (tests/test_driver_apt.py shows the install failing then). "sglang-deploy-n..." sorts
# after "sglang-deploy-driver" and "sglang-deploy-holds".
NVIDIA_REPO_PREFERENCES_FILE = "sglang-deploy-nvidia-repository"
LEGACY_REPO_PREFERENCES_FILE = "nvidia-cuda"  # earlier versions' (every NVIDIA package at 600): removed


def nvidia_repo_preferences(origin: str) -> str:
    """apt preferences for NVIDIA's repository: its origin pinned low (100, below a distribution's 500: a package
    of it is installed only where the distribution has none of that name), and only NVIDIA's names raised (600).
    The driver's source pin (1001, sglang-deploy-driver) and the holds still decide versions."""
    return (f"Explanation: sglang-deploy: NVIDIA's repository ({origin}) for NVIDIA's packages only\n"
            f"Package: *\nPin: origin {origin}\nPin-Priority: 100\n\n"
            f"Explanation: sglang-deploy: the driver's family, CUDA and NCCL from NVIDIA's repository\n"
            f"Package: {' '.join(NVIDIA_PACKAGE_GLOBS)}\nPin: origin {origin}\nPin-Priority: 600\n")


# --- a proxy, for a host whose only way out is one -----------------------------------------------------

NO_PROXY = "localhost,127.0.0.1,::1"  # the host's own services (health checks, a local mirror) never go through it


def proxy_env(proxy: str | None) -> dict[str, str]:
    """The environment curl, pip, uv and huggingface_hub read (both spellings); {} without a proxy."""
    if not proxy:
        return {}
    return {"http_proxy": proxy, "https_proxy": proxy, "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy,
            "no_proxy": NO_PROXY, "NO_PROXY": NO_PROXY}


def with_proxy(command: str, proxy: str | None) -> str:
    """COMMAND run with the proxy's environment (`env K=V ... sh -c COMMAND`); unchanged without a proxy."""
    if not proxy:
        return command
    return shlex.join(["env", *(f"{k}={v}" for k, v in proxy_env(proxy).items()), "sh", "-c", command])


def apt_proxy_options(proxy: str | None) -> str:
    """apt's own options for it (apt reads Acquire::http(s)::Proxy, not every spelling of the environment)."""
    if not proxy:
        return ""
    return f" -o Acquire::http::Proxy={shlex.quote(proxy)} -o Acquire::https::Proxy={shlex.quote(proxy)}"


# --- disk space, before a large install --------------------------------------------------------------

# About what each install unpacks (MiB): cuda-toolkit-13-0 ~7 GB under /usr/local; a venv with SGLang, torch and
# CUDA's wheels ~10 GB under /opt (pip's cache aside). Proxmox's default CT root disk is 8 GB.
DISK_NEEDS_MIB = {"cuda-toolkit": ("/usr/local", 7500), "python-env": (TOOL_ROOT, 10000)}


def disk_check_command(what: str, path: str, need_mib: int) -> str:
    """A shell check that the file system holding PATH (or its nearest existing parent) has NEED MiB free; it
    fails naming both numbers and the fix, before anything is installed."""
    q = shlex.quote
    return (f"d={q(path)}; while [ ! -e \"$d\" ]; do d=$(dirname \"$d\"); done; "
            "avail=$(df -Pm \"$d\" | awk 'NR==2 {print $4}'); "
            f"[ \"$avail\" -ge {int(need_mib)} ] || {{ echo \"{what} needs about {int(need_mib)} MiB free under "
            f"{path}; the file system of $d has $avail MiB: grow the container's root disk (on the Proxmox host: "
            "pct resize <CTID> rootfs +16G) or free space; nothing was installed\" >&2; exit 1; }")


# --- the Python env -------------------------------------------------------------------------------

# Written into the venv after its install; each release staged on it keeps a copy (packages.json): every installed
# distribution with the sha256 of its RECORD, which lists the sha256 of each file the wheel installed. Read by the
# system python from outside the venv (importlib.metadata on its site-packages): root never starts the venv's python.
PACKAGES_FILE = "sglang-deploy-packages.json"
PACKAGES_SCRIPT = """import glob, hashlib, json, os, sys
from importlib import metadata
sites = glob.glob(os.path.join(sys.argv[1], "lib", "python3*", "site-packages"))
found = {f"{d.metadata['Name']}=={d.version}": hashlib.sha256((d.read_text('RECORD') or '').encode()).hexdigest()
         for d in metadata.distributions(path=sites)}
with open(sys.argv[2], "w") as out:
    json.dump(dict(sorted(found.items())), out, indent=1)
"""
SYSTEM_PYTHON = "/usr/bin/python3"
HOOKS_PROGRAM = Path(__file__).resolve().parent / "hostside" / "venv_hooks.py"


def create_command(venv: str, use_uv: bool) -> str:
    """A fresh, empty venv (an earlier, partial one removed): pip and uv never run on site-packages a previous
    install left, so no wheel's startup hook runs in the installer, which runs as root."""
    q_venv = shlex.quote(venv)
    create = f"UV_PYTHON_DOWNLOADS=never uv venv --python python3 {q_venv}" if use_uv else f"python3 -m venv {q_venv}"
    return f"rm -rf {q_venv} && {create}"


def hooks_command(venv: str, waived: bool = False) -> str:
    """The startup hooks check (hostside/venv_hooks.py, sent inline, run by the system python -I): a refused hook
    removes the venv, so nothing later starts its python, and the install fails naming the wheel and the file."""
    check = shlex.join([SYSTEM_PYTHON, "-I", "-c", HOOKS_PROGRAM.read_text(), "--venv", venv] + ["--waived"] * waived)
    removed = shlex.quote(f"{venv} removed: nothing was switched")
    return f"{check} >/dev/null || {{ rm -rf {shlex.quote(venv)}; echo {removed} >&2; exit 1; }}"


def install_commands(venv: str, wanted: list[str], index_args: list[str], use_uv: bool,
                     waived_hooks: bool = False) -> list[str]:
    """Install the requirements from binary wheels only (an sdist runs its build backend, as root here) into the
    fresh venv (create_command), refuse startup hooks, then record what was installed. The requirements are PEP 508
    pins the profile validated; everything is quoted."""
    python = f"{venv}/bin/python"
    if use_uv:
        install = ["uv", "pip", "install", "-q", "--no-build", "--python", python, *index_args, *wanted]
    else:
        install = [f"{venv}/bin/pip", "install", "-q", "--disable-pip-version-check", "--only-binary", ":all:",
                   *index_args, *wanted]
    return [shlex.join(install), hooks_command(venv, waived_hooks),
            shlex.join([SYSTEM_PYTHON, "-I", "-c", PACKAGES_SCRIPT, venv, f"{venv}/{PACKAGES_FILE}"])]


# --- the apt transaction: pin, simulate, then install --------------------------------------------------------------

DRIVER_PIN_FILE = "sglang-deploy-driver"  # in apt's preferences.d: the driver's source packages at the module's version
HOLDS_FILE = "sglang-deploy-holds"  # exact versions of named packages (driver user space, NCCL)
APT_OPTIONS = ("-q --no-install-recommends --allow-downgrades "
               "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold")


def holds_text(holds: dict[str, str]) -> str:
    """The holds file (apt preferences): each named package at its exact version, which apt may downgrade to."""
    return "".join(f"Package: {package}\nPin: version {version}\nPin-Priority: 1001\n\n"
                   for package, version in sorted(holds.items()))


def driver_refusal(kernel: str, userspace: str | None) -> str:
    """What an operator can do when NVIDIA's repository has no user space of exactly the host module's version."""
    return (f"the kernel module is {kernel}, user space here is {userspace or 'missing'}: they must match, so nothing "
            f"was installed. Alternatives: install that build's user space in the container from NVIDIA's "
            f"NVIDIA-Linux-<arch>-{kernel}.run with --no-kernel-module (provisioning then finds it and installs "
            f"nothing); or let LXC mount the Proxmox host's own libraries at each start (lxc.hook.mount: "
            f"/usr/share/lxc/hooks/nvidia, with lxc.environment: NVIDIA_VISIBLE_DEVICES=all and "
            f"NVIDIA_DRIVER_CAPABILITIES=compute,utility; needs nvidia-container-cli on the host); or point "
            f"cuda_repo_url at a repository that has {kernel}")


PICK = r"""pick() {  # pick GLOB NAME...: the first NAME the repository has at GLOB joins the install, its source the pin
  glob=$1; shift; have=
  for candidate in "$@"; do
    versions=$(apt-cache madison "$candidate" 2>/dev/null | awk '{print $3}' | tr '\n' ' ')
    have="$have${versions:+$candidate: $versions}"
    for v in $versions; do
      case $v in $glob)
        install="$install $candidate=$v"
        source=$(apt-cache show "$candidate=$v" | sed -n 's/^Source: *\([^ ]*\).*/\1/p' | head -n1)
        sources="$sources ${source:-$candidate}"
        return 0;;
      esac
    done
  done
  echo "$(echo "$@" | sed 's/ / or /g') $glob is not in the repository (it has: ${have:-none}); $refusal" >&2
  rm -rf "$stage"; exit 1
}"""


def apt_install_script(packages: list[str], holds: dict[str, str], driver: Step | None = None,
                       kernel: str | None = None, userspace: str | None = None, proxy: str | None = None) -> tuple[str, str]:
    """Two shell scripts, (check, commit), run one after the other in one shell.

    check: finds each driver package at exactly the module's version in the repository ("a|b": the first name it has),
    stages apt's preferences with every package of those packages' source packages pinned there (a sibling such as
    nvidia-alternative (= V) would otherwise resolve to the repository's newest build) and the new holds, and
    simulates the whole install (`apt-get install -s`) under them. A refusal names what apt could not resolve and
    exits 1 having changed nothing. commit: puts the staged pin and holds in place and installs.
    Both read apt's directories from apt-config, so APT_CONFIG can point them at a scratch apt (the tests)."""
    q = shlex.quote
    exact = driver is not None and driver.exact
    options = APT_OPTIONS + apt_proxy_options(proxy)
    check = ["set -u", 'stage=$(mktemp -d) && mkdir "$stage/preferences.d"', 'eval "$(apt-config shell prefs Dir::Etc::PreferencesParts/d)"',
             f"install={q(' '.join(packages))}", "sources="]
    if exact:
        check += [f"refusal={q(driver_refusal(kernel or '?', userspace))}", PICK]
        check += [f"pick {q(driver.exact)} " + " ".join(q(n) for n in alternatives.split("|"))
                  for alternatives in driver.packages]
        check.append(f'for source in $(printf "%s\\n" $sources | sort -u); do printf "Package: src:%s\\nPin: version '
                     f'%s\\nPin-Priority: 1001\\n\\n" "$source" {q(driver.exact)}; done > "$stage/preferences.d/{DRIVER_PIN_FILE}"')
    check += [
        f'for f in "$prefs"*; do case ${{f##*/}} in {DRIVER_PIN_FILE}|{HOLDS_FILE}) ;; *) [ -f "$f" ] && cp -p "$f" "$stage/preferences.d/";; esac; done',
        f'printf %s {q(holds_text(holds))} > "$stage/preferences.d/{HOLDS_FILE}"',
        f'if ! apt-get install -s {options} -o Dir::Etc::PreferencesParts="$stage/preferences.d" $install > "$stage/simulation" 2>&1; then',
        '  echo "apt refuses to install $(echo $install) (simulated first: nothing was changed):" >&2',
        '  grep -E "^ |^E:" "$stage/simulation" | grep -v "^  [a-z]" >&2',
        *(['  echo "if it is the driver\'s packages: $refusal" >&2'] if exact else []),
        '  rm -rf "$stage"; exit 1',
        'fi',
        'grep "^Inst " "$stage/simulation" || true',
    ]
    commit = [
        'mkdir -p "$prefs"',
        *([f'cp "$stage/preferences.d/{DRIVER_PIN_FILE}" "${{prefs}}{DRIVER_PIN_FILE}"'] if exact else []),
        f'cp "$stage/preferences.d/{HOLDS_FILE}" "${{prefs}}{HOLDS_FILE}"',
        f'DEBIAN_FRONTEND=noninteractive apt-get install -y {options} $install',
        'status=$?; rm -rf "$stage"; exit $status',
    ]
    return "\n".join(check), "\n".join(commit)
