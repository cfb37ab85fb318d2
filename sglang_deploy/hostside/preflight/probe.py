"""The preflight's probe: run by the runner (preflight.py) inside a transient unit with the release's own unit
properties, as the service user, in the release's own python (-I, by path), it gathers raw facts of what the
service would meet (devices, shm, toolchain, caches, the sandbox, SGLang's resolution, torch, Triton) and prints
them as one JSON line, which the runner reads as probes.PreflightFacts (tests/test_preflight_answer.py
holds the keys written here equal to its fields); findings.py judges them.

    PY -I hostside/preflight/probe.py --gpus N [--argv-json FILE] [--simulated] [--no-gpu] [--step-timeout S]

Standard library only and self-contained (no imports from its package): it runs by path in the release's python.
"""

import argparse
import contextlib
import grp
import importlib.util
import io
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time


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
    return parse_limits(read_text("/proc/self/limits"))


def toolchain():
    include = sysconfig.get_paths().get("include") or ""
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
            "uid_map": read_text("/proc/self/uid_map").split(),
            "lxc_nesting_mounts": "/dev/.lxc/proc" in read_text("/proc/self/mountinfo")}


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _load(path, module_name):
    """A module loaded by path (the probe runs by path in the release's python, -I: no package to import from)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _resolution_module():
    here = os.path.dirname(os.path.abspath(__file__))
    return _load(os.path.join(os.path.dirname(here), "lib", "sglang_resolution.py"), "sglang_deploy_resolution")


def two_process_all_reduce(world, step_timeout, simulated):
    """One process per GPU, as SGLang's TP ranks (allreduce.py beside this file); on a simulated host the GPU
    stand-in's."""
    here = os.path.dirname(os.path.abspath(__file__))
    return _load(os.path.join(here, "allreduce.py"), "sglang_deploy_preflight_allreduce").run(
        world, step_timeout=step_timeout, standin=simulated)


# What systemd sets anew for every invocation: not an input of SGLang's resolution.
PER_INVOCATION_ENV = ("INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "MANAGERPID", "NOTIFY_SOCKET",
                      "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_PID", "WATCHDOG_USEC",
                      "MEMORY_PRESSURE_WATCH", "MEMORY_PRESSURE_WRITE", "CREDENTIALS_DIRECTORY")
# The simulator's own variables (its modelled Scheduler's faults and knobs, docs/simulator.md): no SGLang code reads
# them (tests/test_preflight_logic.py greps SGLang's installed source), so they are not an input of its resolution.
SIMULATOR_ENV_PREFIX = "SGLANG_SIM_"


def resolution_key(argv):
    """What SGLang's answer depends on: the argv, the environment (the unit's EnvironmentFile: SGLang's hooks read
    SGLANG_* variables while resolving), the interpreter and its install, the checkpoint's config.json, the GPUs
    nvidia-smi reports and the resolution code itself. An unchanged key reuses an earlier acceptance."""
    # deferred: 2.5 ms (hashlib) on hostside.preflight, only where the probe resolves a command line
    import hashlib

    digest = hashlib.sha256(json.dumps(argv).encode())
    digest.update(json.dumps(sorted((name, value) for name, value in os.environ.items()
                                    if name not in PER_INVOCATION_ENV
                                    and not name.startswith(SIMULATOR_ENV_PREFIX))).encode())
    digest.update(os.path.realpath(sys.executable).encode() + sys.prefix.encode())
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hostside/, above preflight/
    for path in ([os.path.join(here, "lib", "sglang_resolution.py")]
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


def resolution(argv, fresh=False):
    """SGLang's whole resolution of argv in this interpreter; an acceptance is kept in the service's cache
    directory under resolution_key (a refusal is always asked again). fresh: a rollback's preflight, which never
    trusts an acceptance the service user's directory holds (security review 3, finding 6)."""
    cache_dir = os.path.join(os.environ.get("SGLANG_CACHE_DIR") or "/nonexistent", "sglang-deploy-preflight")
    cached = os.path.join(cache_dir, resolution_key(argv) + ".json")
    try:
        if not fresh:
            with open(cached) as handle:
                return {**json.load(handle), "cached": True}
    except (OSError, ValueError):
        pass
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        answer = _resolution_module().resolve({"argv": argv})
    resolved = answer.get("resolved") or {}
    keep = ("tp_size", "speculative_algorithm", "speculative_num_steps", "speculative_num_draft_tokens",
            "attention_backend", "mem_fraction_static", "max_running_requests", "cuda_graph_config", "context_length",
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


# CUresult values cuInit returns that name a cause (cuda.h)
CU_RESULTS = {0: "CUDA_SUCCESS", 3: "CUDA_ERROR_NOT_INITIALIZED", 35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
              100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE", 304: "CUDA_ERROR_OPERATING_SYSTEM",
              803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
              999: "CUDA_ERROR_UNKNOWN"}


def kernel_module_version(text):
    """/proc/driver/nvidia/version -> the kernel module's version (in a container: the host's)."""
    match = re.search(r"Kernel Module(?: for \w+)?\s+([\d.]+)", text or "")
    return match.group(1) if match else None


def library_version(maps_text, name="libcuda.so"):
    """The version of the loaded library, from /proc/self/maps: .../libcuda.so.580.95.05 -> 580.95.05."""
    for line in (maps_text or "").splitlines():
        path = line.split()[-1] if line.split() else ""
        if f"/{name}" in path:
            match = re.search(re.escape(name) + r"\.(\d+\.\d+(?:\.\d+)?)$", os.path.realpath(path) if os.path.exists(path)
                              else path)
            if match:
                return match.group(1)
    return None


def cuda_driver_facts():
    """What the CUDA driver says as the service: cuInit's CUresult, the kernel module's version and the user-space
    library's (libcuda.so.VERSION as loaded). A mismatch between them is CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)."""
    # deferred: 1.2 ms (ctypes) on hostside.preflight and facts.py, only on a host with a real GPU
    import ctypes

    found = {"kernel_module": kernel_module_version(read_text("/proc/driver/nvidia/version")), "libcuda": None,
             "cu_init": None, "error": None}
    try:
        library = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        found["error"] = f"libcuda.so.1 does not load: {error}"
        return found
    found["cu_init"] = int(library.cuInit(0))
    found["cu_init_name"] = CU_RESULTS.get(found["cu_init"], f"CUresult {found['cu_init']}")
    found["libcuda"] = library_version(read_text("/proc/self/maps"))
    return found


def iommu_type(properties):
    """The IOMMU group type of a GPU (identity: passthrough; DMA, DMA-FQ: translated), from its PCI address."""
    try:
        bdf = f"{properties.pci_domain_id:04x}:{properties.pci_bus_id:02x}:{properties.pci_device_id:02x}.0"
    except AttributeError:
        return None
    return read_text(f"/sys/bus/pci/devices/{bdf}/iommu_group/type").strip() or None


def torch_facts(gpus, simulated, step_timeout=120.0):
    """Device count; on a real host a tensor on each GPU, free memory, peer access, a peer copy compared, an NCCL
    all-reduce in this process and, with 2+ GPUs, one over one process per GPU (on a simulated host: its model)."""
    found = {"error": None}
    try:
        # deferred: optional, torch is in the release's virtualenv only; facts.py imports this module without it
        import torch
    except Exception as error:  # noqa: BLE001 - the message is the finding
        return {"error": f"import torch: {type(error).__name__}: {error}"}
    found["count"] = torch.cuda.device_count()
    found["torch"] = torch.__version__
    if simulated:
        if gpus > 1 and found["count"] >= gpus:
            print("step all-reduce", file=sys.stderr, flush=True)
            found["all_reduce_2p"] = two_process_all_reduce(gpus, step_timeout, simulated=True)
        return found
    try:
        found["free_mib"] = []
        tensors = []
        for index in range(min(gpus, found["count"])):
            tensors.append(torch.ones(1 << 20, device=f"cuda:{index}"))
            free, total = torch.cuda.mem_get_info(index)
            found["free_mib"].append(free >> 20)
            found.setdefault("total_mib", []).append(total >> 20)
        found["p2p"] = {f"{a}-{b}": bool(torch.cuda.can_device_access_peer(a, b))
                        for a in range(len(tensors)) for b in range(len(tensors)) if a != b}
        found["iommu"] = {index: iommu_type(torch.cuda.get_device_properties(index)) for index in range(len(tensors))}
        print("step p2p", file=sys.stderr, flush=True)
        found["p2p_copy"] = {}
        for a in range(len(tensors)):  # what the driver says is one thing; the data that arrives is another
            pattern = torch.arange(1 << 22, dtype=torch.int32, device=f"cuda:{a}")
            for b in range(len(tensors)):
                if a != b:
                    arrived = pattern.to(f"cuda:{b}")
                    torch.cuda.synchronize(b)
                    found["p2p_copy"][f"{a}-{b}"] = bool(torch.equal(arrived.cpu(), pattern.cpu()))
        print("step nccl", file=sys.stderr, flush=True)
        if tensors:  # one GPU too: NCCL loads and sums
            started = time.perf_counter()
            torch.cuda.nccl.all_reduce(tensors)
            for index in range(len(tensors)):
                torch.cuda.synchronize(index)
            found["all_reduce_ms"] = round((time.perf_counter() - started) * 1000, 1)
            found["all_reduce_ok"] = all(float(t[0].item()) == float(len(tensors)) for t in tensors)
        if len(tensors) > 1:  # SGLang's ranks are processes: CUDA IPC, /dev/shm, NCCL's proxies between them
            print("step all-reduce", file=sys.stderr, flush=True)
            found["all_reduce_2p"] = two_process_all_reduce(len(tensors), step_timeout, simulated=False)
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
    started = time.perf_counter()
    try:
        # deferred: optional, torch is in the release's virtualenv only; facts.py imports this module without it
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


def probe(gpus, argv=None, simulated=False, no_gpu=False, step_timeout=120.0, fresh=False):
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
        facts["resolution"] = resolution(argv, fresh)
        timings["resolution"] = round(time.perf_counter() - at, 2)
    if not simulated:  # no libcuda on a simulated host
        facts["driver"] = cuda_driver_facts()
    if no_gpu:
        facts["timings"], facts["seconds"] = timings, round(time.perf_counter() - started, 2)
        return facts
    at = time.perf_counter()
    print("step torch", file=sys.stderr, flush=True)  # the runner names the last step when the probe hangs
    facts["torch"] = torch_facts(gpus, simulated, step_timeout)
    timings["torch"] = round(time.perf_counter() - at, 2)
    if not simulated and not facts["torch"].get("error") and facts["torch"].get("count", 0) >= 1:
        print("step triton", file=sys.stderr, flush=True)
        facts["triton"] = triton_facts()
        timings["triton"] = facts["triton"]["seconds"]
    facts["timings"] = timings
    facts["seconds"] = round(time.perf_counter() - started, 2)
    return facts



def main(argv=None):
    parser = argparse.ArgumentParser(prog="hostside/preflight/probe.py")
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--argv-json")
    parser.add_argument("--simulated", action="store_true")
    parser.add_argument("--no-gpu", action="store_true", help="skip torch and Triton (the doctor's view)")
    parser.add_argument("--step-timeout", type=float, default=120.0, help="the two-process all-reduce's limit")
    parser.add_argument("--fresh", action="store_true", help="resolve again, whatever the cache holds (a rollback)")
    args = parser.parse_args(argv)
    argv_list = None
    if args.argv_json:
        with open(args.argv_json) as handle:
            argv_list = json.load(handle)
    print(json.dumps(probe(args.gpus, argv_list, args.simulated, args.no_gpu, args.step_timeout, args.fresh)),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
