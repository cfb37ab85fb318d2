"""Custom pyinfra facts read from the target host."""

import base64
import hashlib
import json
import os
import re
import shlex
import tempfile
import zlib
from pathlib import Path

from pyinfra.api import FactBase

from sglang_deploy import hostfacts
from sglang_deploy.hostfacts import GPU_QUERY, parse_venv_torch
from sglang_deploy.hostside.contract.answers import SnapshotStatus, StoreReport, VenvHooks, WeightsFailure
from sglang_deploy.hostside.contract.document import DocumentError
from sglang_deploy.hostside.contract.history import StoreHistory
from sglang_deploy.layout import HOSTSIDE, SIMULATED_MARKER, host_package, host_program, python_argv
from sglang_deploy.results import cache_dir
from sglang_deploy.safety import UNIT_MARKER, USER_MARKER

# The controller's cache of carried programs (inline_program), one file per program.
INLINE_CACHE = cache_dir() / "inline"
CONTRACT = "contract"  # hostside/contract/: the typed documents and the host's paths, carried as one
RELATIVE_IMPORT = re.compile(r"^\s*from (\.+)([\w.]*) import ([\w, ()]+)", re.M)

# Runs on the host (python3, standard library): the host package's modules carried in the program itself, imported
# as the package `hostside` from memory, and one of them run as __main__ (as `python3 -m hostside.<module>` would).
BOOTSTRAP = """import base64, importlib.util, json, runpy, sys, zlib
SOURCES = json.loads(zlib.decompress(base64.b64decode(%r)))
class Carried:
    def key(self, name):
        if name != "hostside" and not name.startswith("hostside."):
            return None, False
        path = name.split(".")[1:]
        if "/".join(path + ["__init__"]) in SOURCES:
            return "/".join(path + ["__init__"]), True
        return ("/".join(path) if "/".join(path) in SOURCES else None), False
    def find_spec(self, name, path=None, target=None):
        module, package = self.key(name)
        if module:
            return importlib.util.spec_from_loader(name, self, is_package=package)
    def create_module(self, spec):
        return None
    def get_code(self, name):
        module = self.key(name)[0]
        return compile(SOURCES[module], "<hostside/" + module + ".py>", "exec")
    def exec_module(self, module):
        exec(self.get_code(module.__name__), module.__dict__)
sys.meta_path.insert(0, Carried())
runpy.run_module(%r, run_name="__main__")
"""


def host_modules(module: str) -> list[str]:
    """`module` of the host package and every module it imports from its package, directly or not, as paths under
    hostside/ without .py (a sub-package's modules with their package's __init__; a sub-package run as `module`
    with its __main__; the contract whole, once one of its modules is imported)."""
    found = set()
    pending = [f"{module}/__init__", f"{module}/__main__"] if (HOSTSIDE / module).is_dir() else [module]
    while pending:
        name = pending.pop()
        if name in found or not (HOSTSIDE / f"{name}.py").exists():
            continue
        found.add(name)
        package = name.split("/")[:-1]
        if package == [CONTRACT]:  # the contract ships whole: every document a read can meet is registered
            pending += [f"{CONTRACT}/{path.stem}" for path in (HOSTSIDE / CONTRACT).glob("*.py")]
        pending += ["/".join(package + ["__init__"])] if package else []
        for dots, source, names in RELATIVE_IMPORT.findall((HOSTSIDE / f"{name}.py").read_text()):
            base = package[:len(package) - len(dots) + 1]
            within = source.split(".") if source else []  # `from .pkg import module` imports pkg/module too
            targets = [within] * bool(source) + [within + [n.split(" as ")[0].strip()]
                                                 for n in names.strip("()").split(",") if n.strip()]
            pending += ["/".join(base + target + tail) for target in targets for tail in ([], ["__init__"])]
    return sorted(found)


def inline_program(module: str) -> str:
    """The program inline_host runs, base64-encoded: it carries hostside/<module>.py and the host modules it imports
    (host_modules). Kept in the tool's cache under the host package's digest, which covers every source it carries,
    and this file's own (BOOTSTRAP, the import walk): building it costs about 13 ms (the walk 4 ms, zlib 7 ms),
    reading it back well under 1 ms (2026-12-06); each deploy sends one, a no-op's included."""
    digest = hashlib.sha256(host_package().digest.encode() + Path(__file__).read_bytes()).hexdigest()
    cached = INLINE_CACHE / f"{module}.b64"
    try:
        stored_digest, program = cached.read_text().split("\n", 1)
        if stored_digest == digest:
            return program
    except (OSError, ValueError):
        pass
    sources = {name: (HOSTSIDE / f"{name}.py").read_text() for name in ["__init__", *host_modules(module)]}
    payload = base64.b64encode(zlib.compress(json.dumps(sources).encode(), 9)).decode()
    program = base64.b64encode((BOOTSTRAP % (payload, f"hostside.{module}")).encode()).decode()
    try:  # written whole, then renamed: a deploy beside this one reads the old program or the new one
        INLINE_CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=INLINE_CACHE, prefix=f".{module}.", delete=False) as partial:
            partial.write(f"{digest}\n{program}")
        os.replace(partial.name, cached)
    except OSError:
        pass  # no cache: the next deploy builds it again
    return program


def inline_host(module: str, *args: str) -> str:
    """Run this checkout's hostside/<module>.py on the host. Where the host package installed on the host is this
    checkout's (HOST_LIB/.manifest holds its digest), its compiled modules run (`python3 -m hostside.<module>` from
    HOST_LIB, as host_program); otherwise the program goes inline without uploading anything (base64 on stdin),
    carrying the module and the host modules it imports (host_modules), so a fact works before the host package was
    installed and always runs this checkout's version of it. Carried modules are compiled from source in each run
    (about 0.1 s a program here), installed ones are not. The host's shell gets a fact's whole command as one
    argument, which Linux caps at 128 KiB (MAX_ARG_STRLEN): one carried program per command."""
    package = host_package()
    carried = f"echo {inline_program(module)} | base64 -d | python3 - {shlex.join(args)}"
    return (f'if [ "$(cat {package.manifest} 2>/dev/null)" = {package.digest} ]; then ({host_program(module, *args)}); '
            f"else {carried}; fi")


def inline_store(subcommand: str, service: str) -> str:
    """`hostside.store <subcommand> --service S` on the host, sent inline (inline_host)."""
    return inline_host("store", subcommand, "--service", service)


def split_sections(output) -> dict:
    """Lines after each '@@name' marker line, by name (the facts that gather several answers at once)."""
    sections, current = {}, None
    for line in output:
        if line.startswith("@@"):
            current = line[2:]
            sections[current] = []
        elif current:
            sections[current].append(line)
    return sections


class ReleaseStore(FactBase):
    """`hostside.store <view>` on the host: view "state" (StoreReport: releases, active/last good, lock holder,
    installed vs running) or "history" (StoreHistory: each retained release's switches, gate medians and perf-watch
    history, history.py).

    The program is sent inline (base64 on stdin), so the fact works before anything was uploaded and
    always matches this checkout's version of the store format. command() keeps the view for process(), as
    pyinfra's own facts keep their arguments (pyinfra/facts/files.py HashFileFactBase).
    """

    requires_command = "python3"
    VIEWS = {"state": StoreReport, "history": StoreHistory}

    def command(self, service: str, view: str = "state") -> str:
        self.view = view
        return inline_store(view, service)

    def process(self, output):
        source = f"the release store's {self.view} (hostside.store {self.view})"
        return self.VIEWS[self.view].loads("\n".join(output), source)


class SecretsDigest(FactBase):
    """A secrets file's render.secrets_digest on the host (None if absent): its content but the admin key's value,
    hashed there; no key is printed."""

    def command(self, path: str) -> str:
        # deferred: 37 ms (render: jinja2) on facts.py and releases.py, for the deploy's facts only
        from sglang_deploy.render import secrets_digest_command

        return f"{secrets_digest_command(path)} || true"

    def process(self, output):
        text = "\n".join(output).strip()
        return text or None


class DeployState(FactBase):
    """Everything a deploy decides from, in one round trip: the simulated-host marker, the release store's state and
    each snapshot's status (one host program, hostside/deploy_facts.py, through inline_host), the hashes of shipped
    archives, paths that must exist, files' modes and hashes, and timers' enablement and state
    (`systemctl is-enabled`, `is-active`)."""

    requires_command = "python3"

    def command(self, service: str, manifests: tuple = (), paths: tuple = (), user: str | None = None,
                files: tuple = (), timers: tuple = (), weights: tuple = (), draft: tuple = (),
                offered: tuple = (), secrets: str | None = None) -> str:
        """With `user`: also ServiceAccount's and UnitOwnership's answers (read before any change); with `weights`
        (manifest, snapshot directory, hub python or None): WeightsStatus's; with `draft` the same for the draft
        model."""
        snapshots = ([(weights, "weights")] if weights else []) + ([(draft, "draft")] if draft else []) + [
            ((manifest, directory), f"offered{index}") for index, (manifest, directory) in enumerate(offered)]
        # The store and every snapshot's status in one host program (hostside/deploy_facts.py: one python start),
        # run beside the shell's checks (about 60 ms and 40 ms on the simulated host) into a private temporary file
        # that is printed and removed at the end.
        snapshot_args = [word for snapshot, section in snapshots for word in ("--snapshot", section, *snapshot[:2])]
        background = (f'answers=$(mktemp) || exit 1; ({inline_host("deploy_facts", "--service", service, *snapshot_args)})'
                      ' > "$answers" &')
        checks = [f"echo '@@simulated'; test -e {SIMULATED_MARKER} && echo yes; echo"]
        for manifest in manifests:
            checks.append(f"echo '@@manifest {manifest}'; cat {shlex.quote(manifest)} 2>/dev/null; echo")
        for path in paths:
            checks.append(f"echo '@@path {path}'; test -e {shlex.quote(path)} && echo yes; echo")
        if files:  # mode, owner, group, then the content's sha256 (regular files only): one stat, one sha256sum
            # for all (one process per file and step cost the host about 18 ms of a no-op's 0.16 s CPU, 2026-12-06)
            quoted = " ".join(shlex.quote(path) for path in files)
            checks.append(f"echo '@@files'; printf '%s\\n' {quoted}; "
                          f"echo '@@stat'; stat -c '%a %U %G %n' -- {quoted} 2>/dev/null; "
                          f"echo '@@sha256'; set --; for f in {quoted}; do [ -f \"$f\" ] && set -- \"$@\" \"$f\"; done; "
                          '[ $# -eq 0 ] || sha256sum -- "$@" 2>/dev/null; echo')
        if secrets:  # the secrets file's digest but for the admin key (render.secrets_digest)
            # deferred: 37 ms (render: jinja2) on facts.py and releases.py, for the deploy's facts only
            from sglang_deploy.render import secrets_digest_command

            checks.append(f"echo '@@secrets_digest'; {secrets_digest_command(secrets)}; echo")
        for timer in timers:
            quoted = shlex.quote(timer)
            checks.append(f"echo '@@timer {timer}'; systemctl is-enabled {quoted} 2>/dev/null; "
                          f"systemctl is-active {quoted} 2>/dev/null; echo")
        if user:
            quoted = shlex.quote(user)
            checks.append(f"echo '@@user'; getent passwd {quoted}; id -nG {quoted} 2>/dev/null; echo")
            checks.append(f"echo '@@account'; {ServiceAccount().command(user)}")
            checks.append(f"echo '@@units'; {UnitOwnership().command(service)}")
        for snapshot, section in snapshots:  # a hub client's version, where a snapshot is fetched with one
            if len(snapshot) > 2 and snapshot[2]:
                checks.append(WeightsStatus.hub_check(snapshot[2], section))
        checks.append('wait; cat "$answers"; rm -f "$answers"')
        return f"{background} " + "; ".join(checks)

    def process(self, output):
        sections = split_sections(output)
        text = {key: "\n".join(value).strip() for key, value in sections.items()}
        return {
            "simulated": text.get("simulated") == "yes",
            "store": StoreReport.loads(text["store"], "the release store's state (hostside.store state)"),
            "manifests": {key[len("manifest "):]: value or None for key, value in text.items()
                          if key.startswith("manifest ")},
            "paths": {key[len("path "):]: value == "yes" for key, value in text.items() if key.startswith("path ")},
            "files": _files(sections),
            "timers": {key[len("timer "):]: value.split() for key, value in text.items() if key.startswith("timer ")},
            **({"secrets_digest": text["secrets_digest"] or None} if "secrets_digest" in text else {}),
            "user": _user(text.get("user")),
            "account": ServiceAccount().process(sections["account"]) if "account" in sections else None,
            "units": UnitOwnership().process(sections["units"]) if "units" in sections else None,
            "weights": WeightsStatus().process(output) if "weights_status" in sections else None,
            "draft": WeightsStatus().process(output, section="draft") if "draft_status" in sections else None,
            "offered": [WeightsStatus().process(output, section=key[:-len("_status")])
                        for key in sorted((k for k in sections if re.fullmatch(r"offered\d+_status", k)),
                                          key=lambda k: int(k[len("offered"):-len("_status")]))],
        }


def _files(sections: dict) -> dict:
    """Each file asked for: [mode, owner, group] from stat (none where it is missing), then the sha256 of a regular
    file's content ([] for a path that does not exist)."""
    found = {path: [] for path in sections.get("files", []) if path}
    for line in sections.get("stat", []):
        mode_owner_group_path = line.split(" ", 3)
        if len(mode_owner_group_path) == 4 and mode_owner_group_path[3] in found:
            found[mode_owner_group_path[3]] = mode_owner_group_path[:3]
    for line in sections.get("sha256", []):  # "<hash>  <path>"; a name sha256sum escapes (a backslash) is left out
        digest, separator, path = line[:64], line[64:66], line[66:]
        if separator == "  " and path in found:
            found[path] = found[path] + [digest]
    return found


def _user(text):
    """getent passwd + id -nG -> {home, shell, groups}, or None when the account does not exist."""
    lines = (text or "").splitlines()
    if not lines or lines[0].count(":") < 6:
        return None
    fields = lines[0].split(":")
    return {"gecos": fields[4], "home": fields[5], "shell": fields[6],
            "groups": sorted((lines[1] if len(lines) > 1 else "").split())}


def container_facts(text: dict) -> dict:
    """The container sections of GpuHost's output, parsed (sglang_deploy/container.py)."""
    # deferred: 8 ms (container) on every deploy, for facts.py's GpuHost only
    from sglang_deploy import container

    compilers = dict(line.split("=", 1) for line in text.get("compilers", "").splitlines() if "=" in line)
    shm = text.get("shm", "").strip()
    return {**container.parse_uid_map(text.get("uid_map", "")), "nesting": container.parse_nesting(text.get("nesting", "")),
            "nodes": container.parse_nodes(text.get("nodes", "")),
            "majors": {k: v for k, v in container.parse_proc_devices(text.get("proc_devices", "")).items()
                       if k in container.NVIDIA_GROUPS},
            "shm_bytes": int(shm) if shm.isdigit() else None,
            "service_limits": container.parse_limits(text.get("service_limits", "")),
            "compilers": {"gcc": compilers.get("gcc") or None, "g++": compilers.get("g++") or None,
                          "python_h": compilers.get("python_h") == "True",
                          # python3 -m venv needs ensurepip (Debian: python3-venv); None: not asked (older output)
                          "venv": {"True": True, "False": False}.get(compilers.get("venv"))},
            "video_gid": int(text["video_gid"].strip()) if text.get("video_gid", "").strip().isdigit() else None,
            "simulated": text.get("simulated", "").strip() == "yes"}


class GpuHost(FactBase):
    """GPUs, drivers, container, CUDA toolkit, NCCL and topology in one round trip (all optional)."""

    def command(self) -> str:
        sections = {
            "gpus": f"nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader,nounits",
            "proc_driver": "cat /proc/driver/nvidia/version",
            "container": "systemd-detect-virt --container || (grep -qa 'container=lxc' /proc/1/environ && echo lxc) "
                         "|| ([ -e /.dockerenv ] && echo docker) || ([ -e /run/.containerenv ] && echo podman)",
            # The files dpkg installs, and wherever the dynamic loader finds libcuda (container runtimes mount it).
            "libcuda": "ls -1 /usr/lib/*-linux-gnu/libcuda.so.* /usr/lib64/libcuda.so.*; "
                       "ldconfig -p | awk '/libcuda\\.so/ {print $NF}' | xargs -r readlink -f",
            "nvcc": "/usr/local/cuda/bin/nvcc --version || nvcc --version",
            # each versioned toolkit and its nvcc's release: the unit's CUDA_HOME is /usr/local/cuda-<cuda_version>
            "nvcc_versioned": "for n in /usr/local/cuda-[0-9]*/bin/nvcc; do [ -x \"$n\" ] && echo \"$n $(\"$n\" "
                              "--version | grep -o 'release [0-9][0-9.]*' | head -n1)\"; done",
            "nccl_deb": "dpkg-query -W -f='${Version}' libnccl2",
            "topo": "nvidia-smi topo -m",
            "p2p": "nvidia-smi topo -p2p r",
            "uvm": "ls -1d /dev/nvidia-uvm",
            # what kind of container, and what the service will meet in it (sglang_deploy/container.py)
            "uid_map": "cat /proc/self/uid_map",
            "nodes": "for f in /dev/nvidia*; do [ -e \"$f\" ] && stat -c '%n|%F|%a|%U|%G|%t|%T' \"$f\"; done",
            "proc_devices": "cat /proc/devices",
            "shm": "df -B1 --output=size /dev/shm | tail -1",
            "service_limits": "systemd-run --quiet --wait --pipe --collect -p LimitNOFILE=1048576 "
                              "-p LimitMEMLOCK=infinity cat /proc/self/limits",
            "nesting": "systemd-run --quiet --wait --collect -p ProtectKernelTunables=yes -p ProtectControlGroups=yes "
                       "/bin/true; echo rc=$?",
            "compilers": "echo gcc=$(command -v gcc); echo g++=$(command -v g++); python3 -c 'import os, sysconfig; "
                         "print(\"python_h=\" + str(os.path.exists(os.path.join(sysconfig.get_paths()[\"include\"], "
                         "\"Python.h\"))))'; python3 -c 'import ensurepip' && echo venv=True || echo venv=False",
            "video_gid": "getent group video | cut -d: -f3",
            # the CPUs this host (in a container: the CT, its cpuset) gives a process: JIT's MAX_JOBS
            "cpus": "nproc",
            "simulated": f"test -e {SIMULATED_MARKER} && echo yes",
        }
        # Each section ends with a newline even when its command printed none (dpkg-query -f does not).
        return "; ".join(f"echo '@@{name}'; ({command}) 2>/dev/null; echo" for name, command in sections.items()) + "; true"

    def process(self, output):
        sections = split_sections(output)
        text = {key: "\n".join(value) for key, value in sections.items()}
        return {
            "gpus": hostfacts.parse_gpus(text.get("gpus", "")),
            "kernel_driver": hostfacts.parse_kernel_driver(text.get("proc_driver", "")),
            "libcuda": hostfacts.parse_libcuda(text.get("libcuda", "")),
            "container": (text.get("container", "").strip() or "none").splitlines()[0],
            "cuda_toolkit": hostfacts.parse_nvcc(text.get("nvcc", "")),
            # None: the section was not asked (output recorded before it existed): the step falls back to nvcc's
            "cuda_toolkits": hostfacts.parse_versioned_nvcc(text["nvcc_versioned"]) if "nvcc_versioned" in text
            else None,
            "system_nccl": text.get("nccl_deb", "").strip() or None,
            "topology": hostfacts.parse_topology(text.get("topo", ""), text.get("p2p", "")),
            "nvidia_uvm": "/dev/nvidia-uvm" in text.get("uvm", ""),
            "cpus": int(text["cpus"].strip()) if text.get("cpus", "").strip().isdigit() else None,
            "lxc": container_facts(text),
        }


class VenvTorch(FactBase):
    """The torch that a virtualenv (or a python) loads: versions of torch, CUDA and NCCL, GPUs it sees. A release
    venv's python runs as the service user (layout.python_argv), never as root."""

    def command(self, python: str, user: str = "sglang") -> str:
        program = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
                   "'nccl': '.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None, "
                   "'cuda_available': torch.cuda.is_available(), 'device_count': torch.cuda.device_count()}))")
        return f"{shlex.join(python_argv(python, ['-c', program], user))} 2>/dev/null || echo null"

    def process(self, output):
        return parse_venv_torch("\n".join(output))


class VenvState(FactBase):
    """A release venv read from outside, without starting its python (hostside/venv_hooks.py, inline): the SGLang
    version its dist-info names (None when absent) and the startup hooks (.pth, sitecustomize) it refuses."""

    def command(self, venv: str) -> str:
        return f"{inline_host('venv_hooks', '--venv', venv, '--waived')} 2>/dev/null || true"

    def process(self, output):
        try:
            found = VenvHooks.loads(output[-1] if output else "", "hostside.venv_hooks's output")
        except DocumentError as error:  # the reader failed: never taken for "no venv" (the install removes one)
            said = (output or ["no output"])[-1][:200] if "not JSON" in str(error) else str(error)  # or the field
            return {"sglang": None, "problems": [], "unreadable": said}
        return {"sglang": found.sglang, "problems": list(found.problems)}


class ServiceAccount(FactBase):
    """The service user's passwd entry (None when the account does not exist) and the host's UID_MIN."""

    def command(self, user: str) -> str:
        return (f"echo \"passwd $(getent passwd -- {shlex.quote(user)})\"; "
                "echo \"uid_min $(awk '$1 == \"UID_MIN\" {print $2}' /etc/login.defs 2>/dev/null)\"")

    def process(self, output):
        values = dict((line.split(" ", 1) + [""])[:2] for line in output)
        uid_min = values.get("uid_min", "").strip()
        return {"passwd": values.get("passwd", "").strip() or None,
                "uid_min": int(uid_min) if uid_min.isdigit() else 1000}


class UnitOwnership(FactBase):
    """Who owns <service>.service and the directories systemd hands to the service user: every file that
    defines the unit (the loaded fragment, aliases, any unit directory, a SysV script) with whether its first
    line carries the tool's marker, and the owners of /var/lib/<service> and /var/cache/<service> with whether
    the owner is an account the tool created (its GECOS marker)."""

    def command(self, service: str) -> str:
        unit = shlex.quote(f"{service}.service")
        files = " ".join(shlex.quote(f"{directory}/{service}.service") for directory in (
            "/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"))
        directories = " ".join(shlex.quote(f"{root}/{service}") for root in ("/var/lib", "/var/cache"))
        return (f"for f in $(systemctl show -p FragmentPath --value {unit} 2>/dev/null) {files} "
                f"{shlex.quote('/etc/init.d/' + service)}; do "
                f"if [ -e \"$f\" ] || [ -L \"$f\" ]; then if head -n 1 \"$f\" 2>/dev/null | grep -qF {shlex.quote(UNIT_MARKER)}; "
                "then echo \"file 1 $f\"; else echo \"file 0 $f\"; fi; fi; done; "
                f"for d in {directories}; do if [ -e \"$d\" ]; then o=$(stat -c %U \"$d\"); "
                f"if getent passwd -- \"$o\" | cut -d: -f5 | grep -qF {shlex.quote(USER_MARKER)}; then m=1; else m=0; fi; "
                "echo \"dir $o $m $d\"; fi; done; true")

    def process(self, output):
        report = {"files": {}, "directories": {}}
        for line in output:
            kind, _, rest = line.partition(" ")
            value, _, path = rest.partition(" ")
            if kind == "file":
                report["files"][path] = value == "1"
            elif kind == "dir":
                marked, _, path = path.partition(" ")
                report["directories"][path] = value if marked == "0" else "(sglang-deploy)"
        return report


class WeightsStatus(FactBase):
    """Whether a weights snapshot is in place and unchanged since it was verified (nothing is hashed: sizes and
    mtimes against the host's record), and whether a python can import huggingface_hub. hostside.weights is sent
    inline with the host modules it imports (inline_host), so the fact works before the host programs were uploaded."""

    requires_command = "python3"

    def command(self, manifest: str, directory: str, python: str | None = None, section: str = "weights") -> str:
        missing = json.dumps({"verified": False, "path": directory})  # answers.SnapshotStatus, no manifest
        checks = [f"echo '@@{section}_status'; if test -f {shlex.quote(manifest)}; then "
                  f"{inline_host('weights', 'status', '--manifest', manifest, '--dir', directory)}; "
                  f"else echo {shlex.quote(missing)}; fi"]
        if python:
            checks.append(WeightsStatus.hub_check(python, section))
        return "; ".join(checks)

    @staticmethod
    def hub_check(python: str, section: str) -> str:
        """The hub client's version as `python` imports it (an empty section: none)."""
        return (f"echo '@@{section}_hub'; {shlex.quote(python)} -c 'import huggingface_hub; "
                f"print(huggingface_hub.__version__)' 2>/dev/null; echo")

    def process(self, output, section: str = "weights"):
        """{verified, hub_client}, from the section's last line: answers.SnapshotStatus, or the program's
        refusal (answers.WeightsFailure: a manifest it cannot read) as not verified with its `error` (the deploy
        uploads the manifest again). An answer that is neither adds `unreadable`, naming the answer and the field
        (plan.refusals stops the deploy on it: never taken for "not verified")."""
        sections = split_sections(output)
        hub = "\n".join(sections.get(f"{section}_hub") or []).strip() or None
        lines = [line for line in sections.get(f"{section}_status") or [] if line.strip()]
        if not lines:
            return {"verified": False, "hub_client": hub, "unreadable": f"{section}: {SnapshotStatus.FILE}: no answer"}
        try:  # the answer through its class: a field renamed on either side is named here
            status = SnapshotStatus.loads(lines[-1], f"{section}: {SnapshotStatus.FILE}")
        except DocumentError as error:
            try:
                refused = WeightsFailure.loads(lines[-1], f"{section}: {WeightsFailure.FILE}")
            except DocumentError:
                return {"verified": False, "hub_client": hub, "unreadable": str(error)}
            return {"verified": False, "hub_client": hub, "error": refused.error}
        return {"verified": status.verified, "hub_client": hub}
