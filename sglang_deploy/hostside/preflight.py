"""Preflight: can this release's server start on this host? Asked before anything running is touched.

The runner (root, outside any sandbox) starts a probe as a transient unit with the release's own unit
properties (User, Group, SupplementaryGroups, the environment file, every sandbox directive, the limits), in the
release's own python, and reads back what the probe found as the service would find it:

  sandbox      the unit's namespace can be set up at all (exit 226/NAMESPACE: an LXC container without nesting)
  devices      every /dev/nvidia* node the server opens exists, is a character device and opens read-write
  shm          /dev/shm is large enough for NCCL between the TP ranks
  toolchain    gcc, g++ and the base interpreter's Python.h for Triton's and FlashInfer's first JIT compile
  caches       the JIT and graph caches are writable and persist (the service's state and cache directories)
  resolution   SGLang's own whole resolution of the release's command line, with the host's GPUs
  torch        torch sees the profile's GPU count and can place a tensor on each GPU
  p2p          peer access between the TP GPUs and a small NCCL all-reduce over them (the release's NCCL env)
  triton       a Triton kernel compiles into the service's cache directory and runs
  limits       LimitNOFILE/LimitMEMLOCK as the service gets them (clamped in an unprivileged container: info)

Every failure names its cause and the fix. The probe uses a few MiB of GPU memory per GPU: it fits beside a
running server. Nothing is written to the release store. On a simulated host (no GPU) the GPU steps that need a
GPU say so and are skipped; the rest runs for real.

    python3 -m hostside.preflight --service S --unit FILE --env FILE --python PY --gpus N [--resolve] [--simulated]
        [--json OUT] [--container-id ID]
    PY -I hostside/preflight.py probe --gpus N [--argv-json FILE] [--simulated]      (inside the transient unit)
"""

import argparse
import grp
import json
import os
import pwd
import re
import shlex
import stat
import subprocess
import sys
import time

# The unit's [Service] settings the probe runs under: who, where, what environment, the sandbox and the limits.
# Not taken: how it starts, stops and restarts (ExecStart, Type, Restart*, Timeout*, KillMode).
UNIT_PROPERTIES_SKIPPED = ("ExecStart", "ExecStartPre", "ExecStartPost", "ExecStop", "ExecReload", "Type", "Restart",
                           "RestartSec", "TimeoutStartSec", "TimeoutStopSec", "KillMode", "Description")
SIMULATED_MARKER = "/etc/sglang-deploy-simulated"  # sglang_deploy/layout.py's
NAMESPACE_EXIT = 226  # systemd's EXIT_NAMESPACE: the unit's mount namespace could not be set up
SHM_MIN_BYTES = 512 << 20
NESTING_DIRECTIVES = ("ProtectKernelTunables", "ProtectControlGroups")  # they imply MountAPIVFS= (fresh /proc, /sys)
PROXMOX_DEVICE_HINT = ("in /etc/pve/lxc/{ctid}.conf give the passthrough line a mode or a group: "
                       "`devN: {node},mode=0666` or `devN: {node},gid={gid}` (the container's video group); "
                       "Proxmox creates a passed-through node 0660 root:root otherwise")


# --- the probe: runs inside the transient unit, as the service user --------------------------------------

def node_facts(path):
    """One device node as the service sees it: type, mode, owner, major:minor, and whether it opens read-write."""
    facts = {"path": path, "exists": os.path.lexists(path)}
    if not facts["exists"]:
        return facts
    info = os.stat(path)
    facts.update(char=stat.S_ISCHR(info.st_mode), mode=f"{stat.S_IMODE(info.st_mode):04o}", uid=info.st_uid,
                 gid=info.st_gid, owner=_name(pwd.getpwuid, info.st_uid), group=_name(grp.getgrgid, info.st_gid))
    if facts["char"]:
        facts["major"], facts["minor"] = os.major(info.st_rdev), os.minor(info.st_rdev)
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CLOEXEC))
        facts["open"] = None
    except OSError as error:
        facts["open"] = error.strerror or str(error)
        facts["errno"] = error.errno
    return facts


def _name(lookup, number):
    try:
        return lookup(number)[0]
    except KeyError:
        return str(number)


def device_paths(gpus):
    """The nodes the server opens: nvidiactl, nvidia-uvm, and every /dev/nvidiaN the container has (at least gpus)."""
    present = sorted((name for name in _listdir("/dev") if re.fullmatch(r"nvidia[0-9]+", name)),
                     key=lambda name: int(name[6:]))
    numbered = present or [f"nvidia{i}" for i in range(gpus)]
    return ["/dev/nvidiactl", "/dev/nvidia-uvm"] + [f"/dev/{name}" for name in numbered]


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def parse_limits(text):
    """/proc/<pid>/limits -> {"nofile": {"soft", "hard"}, "memlock": {...}} (also the controller's container facts)."""
    wanted = {"Max open files": "nofile", "Max locked memory": "memlock"}
    found = {}
    for line in text.splitlines():
        for label, key in wanted.items():
            if line.startswith(label):
                soft, hard = line[len(label):].split()[:2]
                found[key] = {"soft": soft, "hard": hard}
    return found


def limits():
    return parse_limits(_read("/proc/self/limits"))


def toolchain():
    import sysconfig

    include = sysconfig.get_paths().get("include") or ""
    import shutil

    return {"gcc": shutil.which("gcc"), "g++": shutil.which("g++"), "python_h": os.path.join(include, "Python.h"),
            "python_h_present": os.path.exists(os.path.join(include, "Python.h"))}


def writable(directory):
    if not directory:
        return None
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, f".sglang-deploy-preflight-{os.getpid()}")
        with open(probe, "w") as handle:
            handle.write("x")
        os.unlink(probe)
        return None
    except OSError as error:
        return f"{directory}: {error.strerror or error}"


def sandbox_facts():
    """What the unit's sandbox enforces here, seen from inside (the doctor's report of declared vs enforced)."""
    def refused(action):
        try:
            action()
            return False
        except OSError:
            return True

    def write_usr():
        with open(f"/usr/.sglang-deploy-preflight-{os.getpid()}", "w"):
            pass
        os.unlink(f"/usr/.sglang-deploy-preflight-{os.getpid()}")

    def write_proc_sys():
        with open("/proc/sys/kernel/hostname", "w") as handle:
            handle.write(os.uname().nodename)

    def open_outside_device_allow():
        # /dev/fuse (10:229, 0666) is neither one of DevicePolicy=closed's pseudo devices nor NVIDIA's: where the
        # unit's device policy is enforced, opening it fails
        os.close(os.open("/dev/fuse", os.O_RDWR))

    try:
        home = os.listdir("/home")
    except OSError:  # ProtectHome=yes: an inaccessible directory
        home = []
    with open("/proc/self/status") as handle:
        status = dict(line.split(":\t", 1) for line in handle.read().splitlines() if ":\t" in line)
    return {"usr_read_only": refused(write_usr), "home_hidden": not home, "proc_sys_read_only": refused(write_proc_sys),
            "device_outside_allow_refused": refused(open_outside_device_allow) if os.path.exists("/dev/fuse") else None,
            "no_new_privs": status.get("NoNewPrivs", "").strip() == "1",
            "seccomp": status.get("Seccomp", "").strip() == "2",
            "cap_bounding_empty": int(status.get("CapBnd", "0").strip() or "0", 16) == 0,
            "uid_map": _read("/proc/self/uid_map").split(),
            "lxc_nesting_mounts": "/dev/.lxc/proc" in _read("/proc/self/mountinfo")}


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _resolution_module():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sglang_resolution.py")
    spec = importlib.util.spec_from_file_location("sglang_deploy_resolution", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resolution_key(argv):
    """What SGLang's answer depends on: the argv, the interpreter and its install, the checkpoint's config.json, the
    GPUs nvidia-smi reports and the resolution code itself. An unchanged key reuses an earlier acceptance."""
    import hashlib

    digest = hashlib.sha256(json.dumps(argv).encode())
    digest.update(os.path.realpath(sys.executable).encode() + sys.prefix.encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for path in ([os.path.join(here, "sglang_resolution.py")]
                 + ([os.path.join(argv[argv.index("--model-path") + 1], "config.json")] if "--model-path" in argv
                    else [])):
        try:
            with open(path, "rb") as handle:
                digest.update(handle.read())
        except OSError:
            digest.update(b"-")
    try:
        digest.update(subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                                     capture_output=True, timeout=30).stdout)
    except (OSError, subprocess.TimeoutExpired):
        digest.update(b"no nvidia-smi")
    return digest.hexdigest()[:32]


def resolution(argv):
    """SGLang's whole resolution of argv in this interpreter; an acceptance is kept in the service's cache
    directory under resolution_key (a refusal is always asked again)."""
    import contextlib
    import io

    cache_dir = os.path.join(os.environ.get("SGLANG_CACHE_DIR") or "/nonexistent", "sglang-deploy-preflight")
    cached = os.path.join(cache_dir, resolution_key(argv) + ".json")
    try:
        with open(cached) as handle:
            return {**json.load(handle), "cached": True}
    except (OSError, ValueError):
        pass
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        answer = _resolution_module().resolve({"argv": argv})
    resolved = answer.get("resolved") or {}
    keep = ("tp_size", "speculative_algorithm", "speculative_num_steps", "speculative_num_draft_tokens",
            "attention_backend", "mem_fraction_static", "max_running_requests", "cuda_graph_max_bs", "context_length",
            "disable_custom_all_reduce", "page_size", "chunked_prefill_size")
    found = {"error": answer.get("error"), "step": answer.get("step"), "steps": len(answer.get("steps") or []),
             "resolved": {key: resolved.get(key) for key in keep if key in resolved}}
    if not found["error"]:
        try:
            os.makedirs(cache_dir, exist_ok=True)
            with open(cached + ".tmp", "w") as handle:
                json.dump({**found, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, handle)
            os.replace(cached + ".tmp", cached)
        except OSError:
            pass
    return found


def torch_facts(gpus, simulated):
    """Device count; on a real host a tensor on each GPU, free memory, peer access and an NCCL all-reduce."""
    found = {"error": None}
    try:
        import torch
    except Exception as error:  # noqa: BLE001 - the message is the finding
        return {"error": f"import torch: {type(error).__name__}: {error}"}
    found["count"] = torch.cuda.device_count()
    found["torch"] = torch.__version__
    if simulated:
        return found
    try:
        found["free_mib"] = []
        tensors = []
        for index in range(min(gpus, found["count"])):
            tensors.append(torch.ones(1 << 20, device=f"cuda:{index}"))
            free, _total = torch.cuda.mem_get_info(index)
            found["free_mib"].append(free >> 20)
        found["p2p"] = {f"{a}-{b}": bool(torch.cuda.can_device_access_peer(a, b))
                        for a in range(len(tensors)) for b in range(len(tensors)) if a != b}
        if tensors:  # one GPU too: NCCL loads and sums
            started = time.perf_counter()
            torch.cuda.nccl.all_reduce(tensors)
            for index in range(len(tensors)):
                torch.cuda.synchronize(index)
            found["all_reduce_ms"] = round((time.perf_counter() - started) * 1000, 1)
            found["all_reduce_ok"] = all(float(t[0].item()) == float(len(tensors)) for t in tensors)
    except Exception as error:  # noqa: BLE001
        found["error"] = f"{type(error).__name__}: {error}"
    return found


TRITON_SOURCE = '''
import triton
import triton.language as tl

@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)
'''


def triton_facts():
    """A Triton kernel compiled into TRITON_CACHE_DIR (its launcher needs gcc and Python.h) and run on GPU 0."""
    import importlib.util
    import tempfile

    started = time.perf_counter()
    try:
        import torch

        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "sglang_deploy_preflight_kernel.py")
            with open(path, "w") as handle:
                handle.write(TRITON_SOURCE)
            spec = importlib.util.spec_from_file_location("sglang_deploy_preflight_kernel", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            x = torch.zeros(1024, device="cuda:0")
            module.add_one[(1,)](x, 1024, BLOCK=1024)
            torch.cuda.synchronize(0)
            ok = float(x.sum().item()) == 1024.0
        return {"error": None if ok else "the kernel ran but computed a wrong result",
                "seconds": round(time.perf_counter() - started, 2), "cache_dir": os.environ.get("TRITON_CACHE_DIR")}
    except Exception as error:  # noqa: BLE001
        return {"error": f"{type(error).__name__}: {str(error)[:600]}", "seconds": round(time.perf_counter() - started, 2),
                "cache_dir": os.environ.get("TRITON_CACHE_DIR")}


def probe(gpus, argv=None, simulated=False, no_gpu=False):
    """Everything the service would meet, as raw facts (diagnose() judges them)."""
    started = time.perf_counter()
    facts = {"uid": os.getuid(), "user": _name(pwd.getpwuid, os.getuid()),
             "groups": sorted({_name(grp.getgrgid, g) for g in os.getgroups()}),
             "nodes": [node_facts(path) for path in device_paths(gpus)],
             "limits": limits(), "toolchain": toolchain(), "sandbox": sandbox_facts(),
             "caches": {name: writable(os.environ.get(name)) for name in ("HOME", "TRITON_CACHE_DIR", "SGLANG_CACHE_DIR")}}
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    facts["shm_bytes"] = shm.f_blocks * shm.f_frsize if shm else 0
    timings = {}
    if argv:
        at = time.perf_counter()
        facts["resolution"] = resolution(argv)
        timings["resolution"] = round(time.perf_counter() - at, 2)
    if no_gpu:
        facts["timings"], facts["seconds"] = timings, round(time.perf_counter() - started, 2)
        return facts
    at = time.perf_counter()
    facts["torch"] = torch_facts(gpus, simulated)
    timings["torch"] = round(time.perf_counter() - at, 2)
    if not simulated and not facts["torch"].get("error") and facts["torch"].get("count", 0) >= 1:
        facts["triton"] = triton_facts()
        timings["triton"] = facts["triton"]["seconds"]
    facts["timings"] = timings
    facts["seconds"] = round(time.perf_counter() - started, 2)
    return facts


# --- the judgement: pure, tested with fixtures (tests/test_preflight_logic.py) ---------------------------

def finding(step, status, detail, fix=None):
    return {"step": step, "status": status, "detail": detail, "fix": fix}


def namespace_failure(journal_line, relaxed, container_id="<CTID>"):
    """The unit's namespace could not be set up (exit 226): the cause and the two fixes."""
    still = [name for name in NESTING_DIRECTIVES if name not in relaxed]
    fix = (f"the container needs nesting: on the Proxmox host `pct set {container_id} --features nesting=1` "
           f"(the CT config line `features: nesting=1`), then restart the container")
    if still:
        fix += (f"; or relax {' and '.join(still)} in the profile (`service.relax: [{', '.join(still)}]`): they imply "
                "fresh /proc and /sys mounts, which an unprivileged container without nesting denies")
    return finding("sandbox", "fail", "the release's sandbox cannot be set up on this host: systemd exits "
                   f"{NAMESPACE_EXIT}/NAMESPACE ({journal_line or 'see the journal'})", fix)


def diagnose(facts, gpus, simulated=False, video_gid=None, container_id="<CTID>", expected=None):
    """facts: probe()'s answer. Returns the findings, one or more per step, in the order of the module docstring."""
    out = [finding("sandbox", "ok", "the unit's namespace and sandbox were set up (the probe ran inside them)")]
    denied = []
    gid_text = str(video_gid) if video_gid is not None else "<video gid>"
    numbered = [n for n in facts["nodes"] if re.fullmatch(r"/dev/nvidia[0-9]+", n["path"])]
    for node in facts["nodes"]:
        path = node["path"]
        if not node["exists"]:
            if path == "/dev/nvidia-uvm":
                out.append(finding("devices", "fail", f"{path} is missing (nvidia-smi works without it, CUDA does not)",
                                   "on the Proxmox host load nvidia-uvm and create its node before the container "
                                   "starts (`nvidia-modprobe -u -c=0` at boot), and pass it through: "
                                   f"`devN: {path},mode=0666` (its major is dynamic: a fixed "
                                   "lxc.cgroup2.devices.allow line goes stale)"))
            elif path == "/dev/nvidiactl" or node in numbered:
                out.append(finding("devices", "fail", f"{path} is missing in the container",
                                   f"pass it through from the Proxmox host: `devN: {path},mode=0666`"))
            continue
        if not node.get("char"):
            out.append(finding("devices", "fail", f"{path} is not a character device (an empty placeholder: an "
                               "lxc.mount.entry with optional,create=file whose source was missing at container start)",
                               f"create the node on the Proxmox host before the container starts, or use `devN: {path}`"))
            continue
        if node.get("open") and node.get("errno") == 13:
            denied.append(node)
        elif node.get("open"):
            out.append(finding("devices", "fail", f"{path} ({node.get('major')}:{node.get('minor')}): opening it "
                               f"fails: {node['open']}", "the node exists but its driver does not answer: is the "
                               "NVIDIA kernel module loaded on the host, with the same major as the node?"))
    if denied:
        first = denied[0]
        out.append(finding("devices", "fail", "the service user {} (groups {}) cannot open {}: permission denied "
                           "(mode {}, owner {}:{})".format(facts.get("user"), ", ".join(facts.get("groups") or []),
                                                         ", ".join(n["path"] for n in denied), first.get("mode"),
                                                         first.get("owner"), first.get("group")),
                           PROXMOX_DEVICE_HINT.format(ctid=container_id, node=first["path"], gid=gid_text)
                           + "; one line per node: " + ", ".join(n["path"] for n in denied)))
    if len(numbered) < gpus:
        out.append(finding("devices", "fail", f"the profile needs {gpus} GPUs; the container has "
                           f"{len(numbered)} /dev/nvidiaN node(s)", "pass every GPU of the TP group through "
                           "(`devN: /dev/nvidiaN,mode=0666` per GPU)"))
    if not any(f["step"] == "devices" for f in out):
        out.append(finding("devices", "ok", ", ".join(f"{n['path']} {n.get('mode')} {n.get('owner')}:{n.get('group')}"
                                                      for n in facts["nodes"])))
    shm = facts.get("shm_bytes") or 0
    if gpus > 1 and shm < SHM_MIN_BYTES:
        out.append(finding("shm", "fail", f"/dev/shm is {shm >> 20} MiB; NCCL between {gpus} ranks needs at least "
                           f"{SHM_MIN_BYTES >> 20} MiB", "give the container a larger /dev/shm (a tmpfs without "
                           "size=, as systemd mounts it, gets half the memory)"))
    else:
        out.append(finding("shm", "ok", f"/dev/shm {shm >> 20} MiB"))
    tools = facts["toolchain"]
    missing = [f"{tool} (package {tool})" for tool in ("gcc", "g++") if not tools.get(tool)]
    if not tools.get("python_h_present"):
        missing.append(f"{tools.get('python_h')} (package python3-dev)")
    if missing:
        status = "warn" if simulated else "fail"
        out.append(finding("toolchain", status, "missing for the first JIT compile (Triton's launcher, FlashInfer, "
                           "nvcc's host compiler): " + ", ".join(missing)
                           + (" -- simulated host: its server compiles nothing, a real host fails here" if simulated
                              else ""), "apt-get install gcc g++ python3-dev (provisioning installs them)"))
    else:
        out.append(finding("toolchain", "ok", f"gcc, g++, {tools.get('python_h')}"))
    broken = {name: problem for name, problem in (facts.get("caches") or {}).items() if problem}
    if broken:
        out.append(finding("caches", "fail", "not writable by the service: " + "; ".join(broken.values()),
                           "the unit's StateDirectory/CacheDirectory: is the file system read-only or full?"))
    else:
        out.append(finding("caches", "ok", "HOME, TRITON_CACHE_DIR and SGLANG_CACHE_DIR are writable and persist "
                           "across releases (JIT and graph caches)"))
    out += _resolution_findings(facts.get("resolution"), expected)
    if "torch" in facts:  # not in the doctor's view (--no-gpu)
        out += _torch_findings(facts["torch"], facts.get("triton"), gpus, simulated)
    out.append(_limits_finding(facts.get("limits") or {}))
    return out


def _resolution_findings(answer, expected):
    if answer is None:
        return []
    if answer.get("error"):
        return [finding("resolution", "fail", f"SGLang on this host refuses the release's command line at "
                        f"{answer.get('step')}: {answer['error']}", "change the profile's flags (the controller's "
                        "check resolves with the GPU model's facts; this host's GPUs differ from them)")]
    resolved = answer.get("resolved") or {}
    differ = sorted(key for key, value in (expected or {}).items() if key in resolved and resolved[key] != value)
    if differ:
        return [finding("resolution", "warn", f"SGLang resolved {answer.get('steps')} steps with the host's GPUs; "
                        "these differ from the release's resolved.json: "
                        + ", ".join(f"{k} {expected[k]!r} -> {resolved[k]!r}" for k in differ),
                        "check the host's GPU model (host data gpu_model) so the release is resolved for it")]
    return [finding("resolution", "ok", f"SGLang's whole resolution ({answer.get('steps')} steps) accepts the "
                    "command line with the host's GPUs"
                    + (f" (the same inputs were resolved at {answer.get('at')})" if answer.get("cached") else ""))]


def _torch_findings(found, triton, gpus, simulated):
    out = []
    if found.get("error") and "count" not in found:
        return [finding("torch", "fail", found["error"], "the release's venv: is torch installed for this CUDA?")]
    count = found.get("count", 0)
    if count < gpus:
        out.append(finding("torch", "fail", f"torch sees {count} of {gpus} GPUs as the service user",
                           "check the device nodes above (nvidia-uvm above all) and CUDA_VISIBLE_DEVICES"))
    elif found.get("error"):
        out.append(finding("torch", "fail", f"a tensor on each GPU failed: {found['error']}",
                           "see the device nodes; on a host with a running server, the memory it leaves"))
    else:
        free = found.get("free_mib")
        out.append(finding("torch", "ok", f"torch {found.get('torch')} sees {count} GPU(s)"
                           + (f"; free MiB per GPU {free}" if free else "")
                           + (" (simulated: the GPU stand-in's count)" if simulated else "")))
    if simulated:
        out.append(finding("p2p", "skip", "simulated host: no GPU, no peer access or NCCL all-reduce to try"))
        out.append(finding("triton", "skip", "simulated host: no GPU to compile a Triton kernel for"))
        return out
    if not found.get("error"):
        no_peer = sorted(pair for pair, ok in (found.get("p2p") or {}).items() if not ok)
        if no_peer:
            out.append(finding("p2p", "warn", f"no peer access between GPUs {', '.join(no_peer)}: SGLang's custom "
                               "all-reduce falls back, which the gate counts as a config failure",
                               "fix P2P on the Proxmox host (IOMMU passthrough `iommu=pt`, ACS) or add "
                               "--disable-custom-all-reduce to the profile"))
        if found.get("all_reduce_ok") is False:
            out.append(finding("p2p", "fail", "the NCCL all-reduce over the TP GPUs computed a wrong sum",
                               "check NCCL_P2P_DISABLE / the IOMMU setup"))
        elif "all_reduce_ms" in found:
            out.append(finding("p2p", "ok", f"NCCL all-reduce over {gpus} GPU(s) in {found['all_reduce_ms']} ms"
                               + ("" if gpus > 1 else " (one GPU: no peer to reach)")))
    if triton is not None:
        if triton.get("error"):
            out.append(finding("triton", "fail", f"a Triton kernel does not compile or run: {triton['error']}",
                               "gcc, g++ and python3-dev (see toolchain), and a writable TRITON_CACHE_DIR"))
        else:
            out.append(finding("triton", "ok", f"compiled and ran in {triton.get('seconds')} s into "
                               f"{triton.get('cache_dir')}"))
    return out


def _limits_finding(found):
    nofile, memlock = found.get("nofile", {}), found.get("memlock", {})
    return finding("limits", "info", f"as the service gets them: nofile {nofile.get('soft')}/{nofile.get('hard')}, "
                   f"memlock {memlock.get('soft')}/{memlock.get('hard')} (an unprivileged container clamps "
                   "LimitNOFILE/LimitMEMLOCK to its own hard limits, silently)")


def unprivileged(uid_map_fields):
    """/proc/self/uid_map of the host's root: '0 0 4294967295' is the init namespace (bare metal, a privileged
    container, nspawn without --private-users); anything else maps root to another uid (an unprivileged container)."""
    fields = list(uid_map_fields or [])
    return bool(fields) and fields[:3] != ["0", "0", "4294967295"]


def sandbox_enforcement(facts, unit_text, host=None):
    """What the unit declares next to what this host enforces, measured from inside the probe's sandbox:
    [(directive, declared, enforced: True/False/None, how it was measured)]."""
    declared = {}
    for line in unit_text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            declared.setdefault(key.strip(), value.strip())
    box = facts.get("sandbox") or {}
    limit = facts.get("limits") or {}
    rows = []

    def row(directive, enforced, how):
        if directive in declared:
            rows.append((directive, declared[directive], enforced, how))

    row("ProtectSystem", box.get("usr_read_only"), "writing to /usr")
    row("ProtectHome", box.get("home_hidden"), "listing /home")
    row("ProtectKernelTunables", box.get("proc_sys_read_only"), "writing /proc/sys/kernel/hostname")
    row("NoNewPrivileges", box.get("no_new_privs"), "NoNewPrivs in /proc/self/status")
    row("SystemCallFilter", box.get("seccomp"), "Seccomp mode 2 in /proc/self/status")
    row("CapabilityBoundingSet", box.get("cap_bounding_empty"), "CapBnd in /proc/self/status")
    row("DevicePolicy", box.get("device_outside_allow_refused"),
        "opening /dev/fuse, outside DeviceAllow (needs BPF device control: CAP_BPF in the init user namespace)"
        if box.get("device_outside_allow_refused") is not None else "no device outside DeviceAllow to try")
    for directive, key in (("LimitNOFILE", "nofile"), ("LimitMEMLOCK", "memlock")):
        got = (limit.get(key) or {}).get("hard")
        want = declared.get(directive)
        if want is not None and got is not None:
            same = got == want or (want == "infinity" and got == "unlimited")
            row(directive, same, f"hard limit as the service gets it: {got}"
                + ("" if same else " (raising a hard limit needs CAP_SYS_RESOURCE in the init user namespace)"))
    return rows


def sandbox_report(rows, host=None):
    lines = []
    if host:
        kind = "unprivileged container (uid map " + " ".join(host.get("uid_map") or []) + ")" \
            if host.get("unprivileged") else "privileged (root is the init namespace's root)"
        lines.append(f"host: {kind}; nesting (a fresh /proc for a unit): "
                     + {True: "yes", False: "NO (units with ProtectKernelTunables/ProtectControlGroups fail with "
                        "226/NAMESPACE)", None: "not tried"}[host.get("nesting")])
    enforced = [r for r in rows if r[2] is True]
    inert = [r for r in rows if r[2] is False]
    lines.append(f"sandbox: {len(rows)} directives measured, {len(enforced)} enforced here"
                 + (f"; NOT enforced here: " + ", ".join(f"{d}={v} ({how})" for d, v, _, how in inert) if inert else ""))
    unknown = [r for r in rows if r[2] is None]
    if unknown:
        lines.append("not measurable here: " + ", ".join(f"{d} ({how})" for d, _, _, how in unknown))
    return "\n".join(lines)


def failed(findings):
    return [f for f in findings if f["status"] == "fail"]


def report(findings, seconds=None):
    lines = []
    for f in findings:
        lines.append(f"preflight {f['step']:<10} {f['status']:<5} {f['detail']}")
        if f["fix"] and f["status"] in ("fail", "warn"):
            lines.append(f"    fix: {f['fix']}")
    if seconds is not None:
        lines.append(f"preflight FAILED in {seconds:.1f} s: the release was not staged and nothing running was "
                     "touched" if failed(findings) else f"preflight passed in {seconds:.1f} s")
    return "\n".join(lines)


# --- the runner: root, outside the sandbox -------------------------------------------------------------

def unit_properties(unit_text, env_path):
    """systemd-run -p arguments from the unit's [Service] section; EnvironmentFile= points at the release's env."""
    properties, section, pending = [], None, ""
    for raw in unit_text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section != "[Service]" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if key in UNIT_PROPERTIES_SKIPPED:
            continue
        if key == "EnvironmentFile":
            value = env_path
        properties.append(f"{key}={value}")
    return properties


def relaxed_directives(unit_text):
    present = {line.split("=", 1)[0] for line in unit_text.splitlines() if "=" in line and not line.startswith("#")}
    return [name for name in NESTING_DIRECTIVES if name not in present]


def _journal_reason(unit):
    out = subprocess.run(["journalctl", "-u", unit, "-o", "cat", "--no-pager", "-n", "20"], capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        if "Failed to set up" in line or "Failed at step" in line:
            return line.split(": ", 1)[-1] if line.startswith("run-") or ".service: " in line else line
    return None


def nesting_check():
    """Can a unit get a fresh /proc here (what ProtectKernelTunables= needs)? None where systemd-run is missing."""
    try:
        result = subprocess.run(["systemd-run", "--quiet", "--wait", "--collect", "-p", "ProtectKernelTunables=yes",
                                 "-p", "ProtectControlGroups=yes", "/bin/true"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.returncode == 0 if result.returncode in (0, NAMESPACE_EXIT) else None


def host_facts():
    return {"uid_map": _read("/proc/self/uid_map").split(), "unprivileged": unprivileged(_read("/proc/self/uid_map").split()),
            "nesting": nesting_check()}


def active_unit(service):
    """The installed unit of the service and the environment file it names (the active release's)."""
    path = f"/etc/systemd/system/{service}.service"
    with open(path) as handle:
        text = handle.read()
    env = next((line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("EnvironmentFile=")),
               f"/etc/sglang-deploy/{service}/sglang.env")
    return path, env.lstrip("-")


def unit_interpreter(unit_text):
    """The python of the unit's server: the shebang of the program ExecStart runs (<venv>/bin/sglang)."""
    for raw in unit_text.replace("\\\n", " ").splitlines():
        if raw.startswith("ExecStart="):
            words = shlex.split(raw.split("=", 1)[1])
            program = next((w for w in words if w.endswith("/bin/sglang")), None)
            if program:
                try:
                    with open(program) as handle:
                        first = handle.readline()
                    if first.startswith("#!"):
                        return first[2:].strip().split()[0]
                except OSError:
                    pass
                return os.path.join(os.path.dirname(program), "python")
    return "/usr/bin/python3"


def run(args):
    started = time.perf_counter()
    if args.active:
        args.unit, args.env = active_unit(args.service)
        args.simulated = args.simulated or os.path.exists(SIMULATED_MARKER)
    with open(args.unit) as handle:
        unit_text = handle.read()
    args.python = args.python or unit_interpreter(unit_text)
    properties = unit_properties(unit_text, args.env)
    unit = f"sglang-deploy-preflight-{os.getpid()}"
    probe_argv = [args.python, "-I", os.path.abspath(__file__), "probe", "--gpus", str(args.gpus)]
    probe_argv += ["--no-gpu"] * args.no_gpu
    if args.argv_json:
        probe_argv += ["--argv-json", args.argv_json]
    if args.simulated:
        probe_argv.append("--simulated")
    command = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", f"--unit={unit}",
               "-p", "StandardInput=null"]
    for prop in properties:
        command += ["-p", prop]
    result = subprocess.run(command + ["--"] + probe_argv, capture_output=True, text=True, timeout=args.timeout)
    video = None
    try:
        video = grp.getgrnam("video").gr_gid
    except KeyError:
        pass
    expected = None
    if args.expected:
        with open(args.expected) as handle:
            expected = json.load(handle)
    if result.returncode == NAMESPACE_EXIT:
        findings = [namespace_failure(_journal_reason(f"{unit}.service"), relaxed_directives(unit_text),
                                      args.container_id)]
        facts = None
    elif result.returncode != 0 or not result.stdout.strip():
        tail = (result.stderr or "").strip().splitlines()[-6:]
        findings = [finding("sandbox", "fail", f"the probe exited {result.returncode} under the release's unit "
                            f"properties: {' | '.join(tail) or _journal_reason(unit + '.service') or 'no output'}",
                            f"journalctl -u {unit}.service")]
        facts = None
    else:
        facts = json.loads(result.stdout.strip().splitlines()[-1])
        findings = diagnose(facts, args.gpus, args.simulated, video, args.container_id, expected)
    seconds = time.perf_counter() - started
    host = host_facts()
    document = {"findings": findings, "seconds": round(seconds, 2), "facts": facts, "ok": not failed(findings),
                "host": host, "sandbox": sandbox_enforcement(facts, unit_text) if facts else []}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(document, handle, indent=1)
    if not (args.quiet and not failed(findings)):
        print(report(findings, seconds), file=sys.stderr if failed(findings) else sys.stdout, flush=True)
    return 1 if failed(findings) else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="hostside.preflight")
    sub = parser.add_subparsers(dest="mode")
    probe_parser = sub.add_parser("probe")
    probe_parser.add_argument("--gpus", type=int, required=True)
    probe_parser.add_argument("--argv-json")
    probe_parser.add_argument("--simulated", action="store_true")
    probe_parser.add_argument("--no-gpu", action="store_true", help="skip torch and Triton (the doctor's view)")
    parser.add_argument("--service")
    parser.add_argument("--unit")
    parser.add_argument("--env")
    parser.add_argument("--python")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--argv-json", help="the release's server argv (JSON list): SGLang resolves it on the host")
    parser.add_argument("--expected", help="the release's resolved fields (JSON) to compare the host's with")
    parser.add_argument("--simulated", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--container-id", default="<CTID>")
    parser.add_argument("--active", action="store_true", help="the installed unit (the active release), not --unit")
    parser.add_argument("--no-gpu", action="store_true", help="skip torch and Triton (the doctor's view)")
    parser.add_argument("--quiet", action="store_true", help="no report on stdout (with --json)")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    if args.mode == "probe":
        argv_list = None
        if args.argv_json:
            with open(args.argv_json) as handle:
                argv_list = json.load(handle)
        print(json.dumps(probe(args.gpus, argv_list, args.simulated, args.no_gpu)), flush=True)
        return 0
    if not (args.active and args.service) and not (args.unit and args.env):
        parser.error("--unit and --env, or --active with --service, are needed")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
