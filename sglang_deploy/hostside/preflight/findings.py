"""The preflight's judgement: the probe's raw facts (probe.py) as findings, each with its cause and fix, the
sandbox the unit declares against what the host enforces, and the report. Pure, tested with fixtures
(tests/test_preflight_logic.py); the doctor shows sandbox_report. Standard library only.
"""

import re

NAMESPACE_EXIT = 226  # systemd's EXIT_NAMESPACE: the unit's mount namespace could not be set up
SHM_MIN_BYTES = 512 << 20
NESTING_DIRECTIVES = ("ProtectKernelTunables", "ProtectControlGroups")  # they imply MountAPIVFS= (fresh /proc, /sys)
PROXMOX_DEVICE_HINT = ("on the Proxmox host give the node's passthrough (its `devN:` line in /etc/pve/lxc/{ctid}.conf) "
                       "a group or a mode: `pct set {ctid} --devN {node},gid={gid}` (the container's video group) or "
                       "`--devN {node},mode=0666`; Proxmox creates a passed-through node 0660 root:root otherwise")


# --- the judgement: pure, tested with fixtures (tests/test_preflight_logic.py) ---------------------------

def _typed(answer, name):
    """The probe's answer (or a part of it) as its class of contract/probes.py: a dict (the tests' fixtures) is read
    through it. Imported here, not at the top: container.py imports this module for unprivileged() alone."""
    if not isinstance(answer, dict):
        return answer
    # deferred: 15 ms (contract.probes) on facts.py, which imports this module for container.unprivileged alone
    from ..contract import probes

    return getattr(probes, name).from_dict(answer)


def finding(step, status, detail, fix=None):
    return {"step": step, "status": status, "detail": detail, "fix": fix}


def namespace_failure(journal_line, relaxed, container_id="<CTID>"):
    """The unit's namespace could not be set up (exit 226): the cause and the two fixes."""
    still = [name for name in NESTING_DIRECTIVES if name not in relaxed]
    fix = (f"the container needs nesting (the CT config line `features: nesting=1`): on the Proxmox host add it to the "
           f"features the CT has (`pct config {container_id} | grep ^features`), since --features replaces the whole "
           f"list: e.g. `pct set {container_id} --features keyctl=1,nesting=1`; then restart the container")
    if still:
        fix += (f"; or relax {' and '.join(still)} in the profile (`service.relax: [{', '.join(still)}]`): they imply "
                "fresh /proc and /sys mounts, which an unprivileged container without nesting denies")
    return finding("sandbox", "fail", "the release's sandbox cannot be set up on this host: systemd exits "
                   f"{NAMESPACE_EXIT}/NAMESPACE ({journal_line or 'see the journal'})", fix)


def diagnose(facts, gpus, simulated=False, video_gid=None, container_id="<CTID>", expected=None):
    """facts: probe()'s answer (PreflightFacts; a dict is read through it). Returns the findings, one or more per
    step, in the order of the module docstring."""
    facts = _typed(facts, "PreflightFacts")
    out = [finding("sandbox", "ok", "the unit's namespace and sandbox were set up (the probe ran inside them)")]
    denied = []
    gid_text = str(video_gid) if video_gid is not None else "<video gid>"
    numbered = [n for n in facts.nodes if re.fullmatch(r"/dev/nvidia[0-9]+", n.path)]
    for node in facts.nodes:
        path = node.path
        if not node.exists:
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
        if not node.char:
            out.append(finding("devices", "fail", f"{path} is not a character device (an empty placeholder: an "
                               "lxc.mount.entry with optional,create=file whose source was missing at container start)",
                               f"create the node on the Proxmox host before the container starts, or use `devN: {path}`"))
            continue
        if node.open and node.errno == 13:
            denied.append(node)
        elif node.open and node.errno == 1:  # EPERM: not the mode, the cgroup's device filter
            major, minor = node.major, node.minor
            out.append(finding("devices", "fail", f"{path} ({major}:{minor}): opening it is refused by the "
                               "container's cgroup device filter (EPERM, not a file permission)",
                               f"on the Proxmox host pass it with `pct set {container_id} --devN {path},gid={gid_text}` "
                               "(Proxmox allows the node's current major:minor at every start), or correct the "
                               f"`lxc.cgroup2.devices.allow: c {major}:* rwm` line in /etc/pve/lxc/{container_id}.conf: "
                               f"{major} is this node's major now (nvidia-uvm's changes when the host reboots)"))
        elif node.open:
            out.append(finding("devices", "fail", f"{path} ({node.major}:{node.minor}): opening it "
                               f"fails: {node.open}", "the node exists but its driver does not answer: is the "
                               "NVIDIA kernel module loaded on the host, with the same major as the node?"))
    if denied:
        first = denied[0]
        out.append(finding("devices", "fail", "the service user {} (groups {}) cannot open {}: permission denied "
                           "(mode {}, owner {}:{})".format(facts.user, ", ".join(facts.groups),
                                                         ", ".join(n.path for n in denied), first.mode,
                                                         first.owner, first.group),
                           PROXMOX_DEVICE_HINT.format(ctid=container_id, node=first.path, gid=gid_text)
                           + "; one line per node: " + ", ".join(n.path for n in denied)))
    if len(numbered) < gpus:
        out.append(finding("devices", "fail", f"the profile needs {gpus} GPUs; the container has "
                           f"{len(numbered)} /dev/nvidiaN node(s)", "pass every GPU of the TP group through "
                           "(`devN: /dev/nvidiaN,mode=0666` per GPU)"))
    if not any(f["step"] == "devices" for f in out):
        out.append(finding("devices", "ok", ", ".join(f"{n.path} {n.mode} {n.owner}:{n.group}"
                                                      for n in facts.nodes)))
    shm = facts.shm_bytes
    if gpus > 1 and shm < SHM_MIN_BYTES:
        out.append(finding("shm", "fail", f"/dev/shm is {shm >> 20} MiB; NCCL between {gpus} ranks needs at least "
                           f"{SHM_MIN_BYTES >> 20} MiB", "give the container a larger /dev/shm (a tmpfs without "
                           "size=, as systemd mounts it, gets half the memory)"))
    else:
        out.append(finding("shm", "ok", f"/dev/shm {shm >> 20} MiB"))
    tools = facts.toolchain
    missing = [f"{tool} (package {tool})" for tool, path in (("gcc", tools.gcc), ("g++", tools.gxx)) if not path]
    if not tools.python_h_present:
        missing.append(f"{tools.python_h} (package python3-dev)")
    if missing:
        status = "warn" if simulated else "fail"
        out.append(finding("toolchain", status, "missing for the first JIT compile (Triton's launcher, FlashInfer, "
                           "nvcc's host compiler): " + ", ".join(missing)
                           + (" -- simulated host: its server compiles nothing, a real host fails here" if simulated
                              else ""), "apt-get install gcc g++ python3-dev (provisioning installs them)"))
    else:
        out.append(finding("toolchain", "ok", f"gcc, g++, {tools.python_h}"))
    broken = {name: problem for name, problem in facts.caches.items() if problem}
    if broken:
        out.append(finding("caches", "fail", "not writable by the service: " + "; ".join(broken.values()),
                           "the unit's StateDirectory/CacheDirectory: is the file system read-only or full?"))
    else:
        out.append(finding("caches", "ok", "HOME, TRITON_CACHE_DIR and SGLANG_CACHE_DIR are writable and persist "
                           "across releases (JIT and graph caches)"))
    out += _resolution_findings(facts.resolution, expected)
    outside = facts.outside
    if outside and outside.port:
        out.append(_port_finding(outside))
    driver = _driver_finding(facts.driver) if facts.driver else None
    if driver:
        out.append(driver)
    if facts.torch is not None:  # not in the doctor's view (--no-gpu)
        fraction = (facts.resolution.resolved.get("mem_fraction_static") if facts.resolution else None) \
            or (expected or {}).get("mem_fraction_static")
        out += _torch_findings(facts.torch, facts.triton, gpus, simulated,
                               driver_failed=bool(driver and driver["status"] == "fail"))
        if not simulated:
            out += _memory_findings(facts.torch, fraction, outside)
    out.append(_limits_finding(facts.limits))
    return out


def _resolution_findings(answer, expected):
    if answer is None:
        return []
    if answer.error:
        return [finding("resolution", "fail", f"SGLang on this host refuses the release's command line at "
                        f"{answer.step}: {answer.error}", "change the profile's flags (the controller's "
                        "check resolves with the GPU model's facts; this host's GPUs differ from them)")]
    resolved = answer.resolved
    differ = sorted(key for key, value in (expected or {}).items() if key in resolved and resolved[key] != value)
    if differ:
        return [finding("resolution", "warn", f"SGLang resolved {answer.steps} steps with the host's GPUs; "
                        "these differ from the release's resolved.json: "
                        + ", ".join(f"{k} {expected[k]!r} -> {resolved[k]!r}" for k in differ),
                        "check the host's GPU model (host data gpu_model) so the release is resolved for it")]
    return [finding("resolution", "ok", f"SGLang's whole resolution ({answer.steps} steps) accepts the "
                    "command line with the host's GPUs"
                    + (f" (the same inputs were resolved at {answer.at})" if answer.cached else ""))]


def timed_out(unit, seconds, stderr):
    """The probe did not finish: its last `step NAME` line on stderr says where it hung; its unit was stopped."""
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else (stderr or "")
    steps = [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("step ")]
    step = steps[-1] if steps else "unknown"
    fix = ("a P2P copy or an NCCL all-reduce that hangs rather than fails: peer writes through a translating "
           "IOMMU (the Proxmox default on AMD, on Intel from kernel 6.8) are dropped; set the IOMMU to passthrough "
           "on the Proxmox host (`iommu=pt` on the kernel command line), or add --disable-custom-all-reduce to "
           "the profile (SGLang then all-reduces through NCCL only: slower decode at small batches), or "
           "NCCL_P2P_DISABLE=1 in its env" if step in ("p2p", "nccl", "all-reduce", "torch") else
           f"see journalctl -u {unit}.service")
    return finding("probe", "fail", f"the probe did not finish in {seconds:.0f} s: it hung at step {step}; its unit "
                   f"{unit}.service was stopped", fix)


def listening(proc_net_tcp, port):
    """/proc/net/tcp and /proc/net/tcp6 text: is a socket in LISTEN (state 0A) on this port?"""
    for line in (proc_net_tcp or "").splitlines():
        fields = line.split()
        if len(fields) > 3 and ":" in fields[1] and fields[3] == "0A":
            try:
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return True
            except ValueError:
                continue
    return False


def _port_finding(outside):
    port = outside.port
    if not outside.listening:
        return finding("port", "ok", f"port {port} is free")
    if outside.serving:
        return finding("port", "ok", f"port {port} is held by the running release (the switch stops it first)")
    return finding("port", "fail", f"port {port}, the release's, is already in use and the service is not running: "
                   + (outside.listener or "a listener ss does not name"),
                   "stop what listens there (a server started by hand?), or give the profile another --port")


PROBE_OWN_MIB = 1024  # the probe's CUDA context and tensors, counted in what mem_get_info says is used


def _memory_findings(found, fraction, outside):
    """GPU memory others hold beyond what mem_fraction_static leaves them: SGLang's start would not fit."""
    free, total = found.free_mib or [], found.total_mib or []
    if not (free and total and fraction):
        return []
    short = []
    for index, (free_mib, total_mib) in enumerate(zip(free, total)):
        used = total_mib - free_mib - PROBE_OWN_MIB
        if used > (1 - fraction) * total_mib:
            short.append(f"GPU {index}: {max(used, 0)} MiB of {total_mib} in use, mem_fraction_static {fraction} needs "
                         f"{int(fraction * total_mib)} MiB, {free_mib} free")
    if not short:
        return [finding("memory", "ok", f"free GPU memory fits mem_fraction_static {fraction}: {free} MiB free")]
    if outside and outside.serving:
        return [finding("memory", "info", "; ".join(short) + " (the running release's server holds memory now; the "
                        "switch stops it before this one starts)")]
    processes = outside.gpu_processes if outside else None
    who = (f"nvidia-smi sees: {'; '.join(processes)}" if processes else
           "nvidia-smi here sees no process using it: another container or the Proxmox host holds it "
           "(nvidia-smi on the Proxmox host lists them all)")
    return [finding("memory", "fail", "; ".join(short) + f"; {who}",
                    "stop what holds the GPUs, or lower mem_fraction_static in the profile (a smaller KV cache)")]


def _driver_finding(driver):
    """cuInit's CUresult as the service, and the two versions it compares."""
    kernel, library, code = driver.kernel_module, driver.libcuda, driver.cu_init
    versions = f"kernel module {kernel or 'unknown'} (/proc/driver/nvidia/version), libcuda {library or 'unknown'}"
    match = (f"user space must be exactly {kernel or 'the kernel module version'}: run provision.py (in a container it "
             "installs that version's user space; a host driver upgrade is the usual cause there), or on bare metal "
             "reboot after a driver upgrade")
    if driver.error:
        return finding("driver", "fail", f"{driver.error} ({versions})", match)
    name = driver.cu_init_name or f"CUresult {code}"
    if code == 803 or (code != 0 and kernel and library and kernel != library):
        return finding("driver", "fail", f"driver/library version mismatch: {versions}; cuInit returns {code} {name}",
                       match)
    if code == 35:
        return finding("driver", "fail", f"cuInit returns 35 {name}: the {versions} is older than this CUDA needs",
                       "upgrade the NVIDIA driver (in a container: on the Proxmox host) to R580 or newer")
    if code == 100:
        return finding("driver", "fail", f"cuInit returns 100 {name}: the service sees no GPU ({versions})",
                       "check the device nodes above and CUDA_VISIBLE_DEVICES")
    if code != 0:
        return finding("driver", "fail", f"cuInit returns {code} {name} ({versions})",
                       "see the device nodes above; the host's kernel log (dmesg) names the driver's side")
    return finding("driver", "ok", f"cuInit succeeds as the service: {versions}")


def _torch_findings(found, triton, gpus, simulated, driver_failed=False):
    out = []
    if found.error and found.count is None:
        return [finding("torch", "fail", found.error, "the release's venv: is torch installed for this CUDA?")]
    count = found.count or 0
    if count < gpus:
        out.append(finding("torch", "fail", f"torch sees {count} of {gpus} GPUs as the service user",
                           "the CUDA driver does not initialise: see the driver finding above" if driver_failed else
                           "check the device nodes above (nvidia-uvm above all) and CUDA_VISIBLE_DEVICES"))
    elif found.error:
        out.append(finding("torch", "fail", f"a tensor on each GPU failed: {found.error}",
                           "see the device nodes; on a host with a running server, the memory it leaves"))
    else:
        free = found.free_mib
        out.append(finding("torch", "ok", f"torch {found.torch} sees {count} GPU(s)"
                           + (f"; free MiB per GPU {free}" if free else "")
                           + (" (simulated: the GPU stand-in's count)" if simulated else "")))
    if simulated:
        out.append(finding("p2p", "skip", "simulated host: no GPU, no peer access, peer copy or NCCL to try"))
        if found.all_reduce_2p:
            out.append(all_reduce_finding(found.all_reduce_2p))
        out.append(finding("triton", "skip", "simulated host: no GPU to compile a Triton kernel for"))
        return out
    if not found.error:
        no_peer = sorted(pair for pair, ok in (found.p2p or {}).items() if not ok)
        if no_peer:
            out.append(finding("p2p", "warn", f"no peer access between GPUs {', '.join(no_peer)}: SGLang's custom "
                               "all-reduce falls back, which the gate counts as a config failure",
                               "fix P2P on the Proxmox host (IOMMU passthrough `iommu=pt`, ACS) or add "
                               "--disable-custom-all-reduce to the profile"))
        wrong = sorted(pair for pair, ok in (found.p2p_copy or {}).items() if ok is False)
        if wrong:
            out.append(finding("p2p", "fail", f"a copy between GPUs {', '.join(wrong)} arrived with wrong data while "
                               "the driver reports peer access: the IOMMU drops peer writes",
                               "set the IOMMU to passthrough on the Proxmox host (`iommu=pt`), or add "
                               "--disable-custom-all-reduce to the profile (slower decode at small batches)"))
        translating = sorted(f"GPU {gpu}: {kind}" for gpu, kind in (found.iommu or {}).items()
                             if kind and kind.startswith("DMA"))
        if translating and gpus > 1 and not wrong:
            out.append(finding("p2p", "warn", "the IOMMU translates the GPUs' DMA (" + ", ".join(translating) + "): "
                               "peer-to-peer writes can be dropped while the driver reports peer access; the copy "
                               "check passed, a long all-reduce may still hang",
                               "`iommu=pt` on the Proxmox host's kernel command line (the group type then reads "
                               "identity), or --disable-custom-all-reduce in the profile"))
        if found.all_reduce_ok is False:
            out.append(finding("p2p", "fail", "the NCCL all-reduce over the TP GPUs computed a wrong sum",
                               "check NCCL_P2P_DISABLE / the IOMMU setup"))
        elif found.all_reduce_ms is not None:
            out.append(finding("p2p", "ok", f"NCCL all-reduce over {gpus} GPU(s) in {found.all_reduce_ms} ms"
                               + ("" if gpus > 1 else " (one GPU: no peer to reach)")))
        if found.all_reduce_2p:
            out.append(all_reduce_finding(found.all_reduce_2p))
    if triton is not None:
        if triton.error:
            out.append(finding("triton", "fail", f"a Triton kernel does not compile or run: {triton.error}",
                               "gcc, g++ and python3-dev (see toolchain), and a writable TRITON_CACHE_DIR"))
        else:
            out.append(finding("triton", "ok", f"compiled and ran in {triton.seconds} s into "
                               f"{triton.cache_dir}"))
    return out


# What a peer-to-peer fault costs to fix, with the perf doctor's estimates of each cost (doctor.py).
P2P_FIX = ("set the IOMMU to passthrough on the Proxmox host: `iommu=pt` on its kernel command line, then reboot (each "
           "GPU's /sys/bus/pci/devices/<bdf>/iommu_group/type then reads identity); or, in the profile, "
           "--disable-custom-all-reduce (SGLang's own all-reduce writes peer memory directly; the perf doctor's "
           "estimate: +3-8 % decode time) and, since NCCL's P2P transport failed here too, NCCL_P2P_DISABLE: \"1\" "
           "in its environment (all-reduce through host memory, ~40-70 us instead of ~6-20 us: +10-20 % decode time)")


def all_reduce_finding(found):
    """The two-process all-reduce (allreduce.run's answer, PreflightAllReduce; a dict is read through it): ok, wrong
    data, a hang, or a rank's error."""
    found = _typed(found, "PreflightAllReduce")
    what = (f"the all-reduce over {found.world} processes, one per GPU as SGLang's TP ranks"
            + (" (simulated: the GPU stand-in's model of it" + (f", planted fault {found.fault}" if found.fault
                                                                 else "") + ")" if found.standin else ""))
    if found.timed_out:
        return finding("p2p", "fail", f"{what} did not finish in {found.step_timeout:.0f} s: rank(s) "
                       f"{', '.join(map(str, found.waiting))} still waiting, as a collective hangs when "
                       "peer writes are dropped; its processes were killed"
                       + (f" (pids {found.unkillable} did not die: the unit's stop takes them)"
                          if found.unkillable else ""), P2P_FIX)
    if found.wrong:
        return finding("p2p", "fail", f"{what} returned wrong data: " + "; ".join(
            f"rank {rank}: {count} values differ from the known sum" for rank, count in sorted(found.wrong.items()))
            + " (peer writes dropped on the way: a translating IOMMU)", P2P_FIX)
    if found.errors:
        return finding("p2p", "fail", f"{what} failed: " + "; ".join(
            f"rank {rank}: {error}" for rank, error in sorted(found.errors.items())),
            "NCCL's own message above (NCCL_DEBUG=INFO in the profile's environment names the transport it tried); "
            "if it is peer-to-peer: " + P2P_FIX)
    timing = ", ".join(f"{int(size) >> 10} KiB {ms} ms" for size, ms in sorted(found.ms.items(),
                                                                             key=lambda item: int(item[0])))
    return finding("p2p", "ok", f"{what} matched the known sum" + (f" ({timing})" if timing else ""))


def _limits_finding(found):
    nofile, memlock = found.nofile, found.memlock
    return finding("limits", "info", f"as the service gets them: nofile {_limit(nofile)}, "
                   f"memlock {_limit(memlock)} (an unprivileged container clamps "
                   "LimitNOFILE/LimitMEMLOCK to its own hard limits, silently)")


def _limit(limit):
    return f"{limit.soft}/{limit.hard}" if limit else "None/None"


def unprivileged(uid_map_fields):
    """/proc/self/uid_map of the host's root: '0 0 4294967295' is the init namespace (bare metal, a privileged
    container, nspawn without --private-users); anything else maps root to another uid (an unprivileged container)."""
    fields = list(uid_map_fields or [])
    return bool(fields) and fields[:3] != ["0", "0", "4294967295"]


def sandbox_enforcement(facts, unit_text, host=None):
    """What the unit declares next to what this host enforces, measured from inside the probe's sandbox:
    [(directive, declared, enforced: True/False/None, how it was measured)]. facts: PreflightFacts (a dict is read
    through it)."""
    facts = _typed(facts, "PreflightFacts")
    declared = {}
    for line in unit_text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            declared.setdefault(key.strip(), value.strip())
    box, limit = facts.sandbox, facts.limits
    rows = []

    def row(directive, enforced, how):
        if directive in declared:
            rows.append((directive, declared[directive], enforced, how))

    row("ProtectSystem", box.usr_read_only, "writing to /usr")
    row("ProtectHome", box.home_hidden, "listing /home")
    row("ProtectKernelTunables", box.proc_sys_read_only, "writing /proc/sys/kernel/hostname")
    row("NoNewPrivileges", box.no_new_privs, "NoNewPrivs in /proc/self/status")
    row("SystemCallFilter", box.seccomp, "Seccomp mode 2 in /proc/self/status")
    row("CapabilityBoundingSet", box.cap_bounding_empty, "CapBnd in /proc/self/status")
    row("DevicePolicy", box.device_outside_allow_refused,
        "opening /dev/fuse, outside DeviceAllow (needs BPF device control: CAP_BPF in the init user namespace)"
        if box.device_outside_allow_refused is not None else "no device outside DeviceAllow to try")
    for directive, key in (("LimitNOFILE", "nofile"), ("LimitMEMLOCK", "memlock")):
        got = getattr(limit, key).hard if getattr(limit, key) else None
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
                 + ("; NOT enforced here: " + ", ".join(f"{d}={v} ({how})" for d, v, _, how in inert) if inert else ""))
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
