"""What the diagnostic programs answer the controller: the preflight's report (a file under /run) and its probe's
facts, the GPU probe's answer and the doctor's collection. Apart from answers.py, which every deploy reads (the store's
state and history, the weights' answers, the venv's hooks): a deploy that changes nothing never imports these 21
classes (about 0.6 ms each; measured 2026-12-06). The same rules as answers.py: the writer builds through the class,
the reader reads attributes; the preflight probe and the GPU probe print their dicts themselves (python3 -I), held
equal by tests/test_preflight_answer.py and tests/test_outputs.py. Standard library only: shipped to the host.
"""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from .document import Document, DocumentError, document
from .findings import ABResults, TuneResults
from .gate import Measurement
from .release import ReleaseMeta


# --- the preflight's report: /run/sglang-deploy/preflight/<service>.json (hostside/preflight/runner.py) --------------

@document
class PreflightFinding(Document):
    """One finding (preflight/findings.finding): a step's status, what was found and the fix."""
    step: str  # sandbox, devices, shm, toolchain, caches, resolution, driver, port, torch, p2p, triton, limits, probe
    status: str  # ok, info, warn, fail, skip
    detail: str
    fix: str | None  # None: nothing to do


@document
class PreflightReport(Document):
    """The runner's --json (roles/release.py reads it after a deploy's preflight; doctor_collect.sandbox_view after
    the doctor's). Its facts: PreflightFacts below."""
    FILE: ClassVar[str] = "preflight/<service>.json"
    findings: list[PreflightFinding]
    seconds: int | float
    facts: PreflightFacts | None  # the probe's facts (PreflightFacts); None: the probe gave none (a
    # timeout, a sandbox that failed, an answer that could not be read)
    ok: bool  # no finding failed
    host: dict  # the runner's own: uid_map, unprivileged, nesting
    sandbox: list  # the unit's directives against what this host enforces (findings.sandbox_enforcement)

    def warnings(self) -> list:
        return [item for item in self.findings if item.status == "warn"]


# --- the preflight probe's facts: preflight/probe.py's stdout inside the transient unit (PreflightReport.facts) ------

@document
class PreflightNode(Document):
    """One device node as the service sees it (probe.node_facts); a missing node has its path and exists only."""
    path: str
    exists: bool
    char: bool | None = None  # a character device; None: missing
    mode: str | None = None  # "0666"
    uid: int | None = None
    gid: int | None = None
    owner: str | None = None
    group: str | None = None
    major: int | None = None  # None: missing, or not a character device
    minor: int | None = None
    open: str | None = None  # why opening it read-write failed; None: it opens (or missing)
    errno: int | None = None  # the failed open's errno (13 EACCES: the mode; 1 EPERM: the cgroup's device filter)


@document
class PreflightLimit(Document):
    """One resource limit from /proc/self/limits, as written there ("unlimited" or a number)."""
    soft: str
    hard: str


@document
class PreflightLimits(Document):
    """probe.parse_limits: the limits as the service gets them; None: the line was not in /proc/self/limits."""
    nofile: PreflightLimit | None = None
    memlock: PreflightLimit | None = None


@document
class PreflightToolchain(Document):
    """What the first JIT compile needs (probe.toolchain): each compiler's path (None: not found) and Python.h."""
    KEYS: ClassVar[dict] = {"gxx": "g++"}
    gcc: str | None
    gxx: str | None
    python_h: str
    python_h_present: bool


@document
class PreflightSandbox(Document):
    """What the unit's sandbox enforces, seen from inside (probe.sandbox_facts)."""
    usr_read_only: bool
    home_hidden: bool
    proc_sys_read_only: bool
    device_outside_allow_refused: bool | None  # None: no /dev/fuse to try
    no_new_privs: bool
    seccomp: bool
    cap_bounding_empty: bool
    uid_map: list
    lxc_nesting_mounts: bool


@document
class PreflightResolution(Document):
    """SGLang's whole resolution of the release's argv on the host (probe.resolution); a cached acceptance has at
    and cached."""
    error: str | None  # SGLang's refusal; None: accepted
    step: str | None  # the step that refused
    steps: int
    resolved: dict  # the resolved fields the preflight compares (probe.resolution's keep)
    at: str | None = None  # when the cached acceptance was resolved; None: resolved now
    cached: bool = False


@document
class PreflightDriver(Document):
    """The CUDA driver as the service (probe.cuda_driver_facts); a libcuda that does not load has error alone."""
    kernel_module: str | None
    libcuda: str | None
    cu_init: int | None  # cuInit's CUresult; None: libcuda did not load
    error: str | None
    cu_init_name: str | None = None


@document
class PreflightAllReduce(Document):
    """The two-process all-reduce (allreduce.run): one process per GPU, as SGLang's TP ranks."""
    world: int
    ok: bool
    timed_out: bool
    waiting: list  # ranks still running at the deadline
    wrong: dict  # rank -> how many values differ
    errors: dict  # rank -> its error
    ms: dict  # bytes -> the slowest rank's milliseconds
    stopped: list
    killed: list
    standin: bool  # the simulated host's GPU stand-in
    step_timeout: int | float
    fault: str | None  # the stand-in's planted fault
    seconds: int | float | None = None  # None: not finished (an exception on the way)
    unkillable: list | None = None  # pids that did not die; None: none


@document
class PreflightTorch(Document):
    """torch as the service (probe.torch_facts): an import that failed has error alone; a simulated host has count,
    torch and, with 2+ GPUs, the stand-in's all-reduce; a real one the rest (up to the step that raised: error)."""
    error: str | None
    count: int | None = None  # torch.cuda.device_count(); None: torch did not import
    torch: str | None = None
    free_mib: list | None = None  # per GPU; None: simulated, or not reached
    total_mib: list | None = None
    p2p: dict | None = None  # "a-b" -> peer access
    iommu: dict | None = None  # GPU index -> its IOMMU group type
    p2p_copy: dict | None = None  # "a-b" -> the copied data arrived intact
    all_reduce_ms: int | float | None = None  # the one-process NCCL all-reduce; None: not reached
    all_reduce_ok: bool | None = None
    all_reduce_2p: PreflightAllReduce | None = None  # None: one GPU, or not reached


@document
class PreflightTriton(Document):
    """A Triton kernel compiled and run on GPU 0 (probe.triton_facts)."""
    error: str | None
    seconds: int | float
    cache_dir: str | None


@document
class PreflightOutside(Document):
    """What the runner adds from outside the sandbox (runner.outside_facts)."""
    serving: bool | None  # the service is active now; None: not asked
    port: int | None  # the release's port; None: no argv
    listening: bool
    listener: str | None  # ss's line for who listens
    gpu_processes: list | None  # nvidia-smi's compute apps; None: simulated, or nvidia-smi failed


@document
class PreflightFacts(Document):
    """What probe.py prints (probe.probe), with the runner's outside view; findings.diagnose judges it."""
    FILE: ClassVar[str] = "the preflight probe's answer"
    uid: int
    user: str
    groups: list
    nodes: list[PreflightNode]
    limits: PreflightLimits
    toolchain: PreflightToolchain
    sandbox: PreflightSandbox
    caches: dict  # HOME, TRITON_CACHE_DIR, SGLANG_CACHE_DIR -> why it is not writable; None: writable (or unset)
    shm_bytes: int
    timings: dict  # step -> seconds
    seconds: int | float
    resolution: PreflightResolution | None = None  # None: no argv given
    driver: PreflightDriver | None = None  # None: a simulated host (no libcuda)
    torch: PreflightTorch | None = None  # None: --no-gpu (the doctor's view)
    triton: PreflightTriton | None = None  # None: simulated, --no-gpu, or torch saw no GPU
    outside: PreflightOutside | None = None  # the runner's; None: as the probe printed it


# --- the GPU probe's answer: hostside/gpu_probe.py's stdout (the doctor's --probe) -----------------------------------

@document
class ProbeDevice(Document):
    index: int
    name: str
    used_gib: int | float  # memory in use when the probe started
    total_gib: int | float


@document
class ProbeBandwidth(Document):
    """One GPU's memory bandwidth (gpu_probe.bandwidth), GB/s."""
    copy_gbs: int | float
    triad_gbs: int | float
    read_gbs: int | float  # a read-only reduction: the roofline's bandwidth
    buffer_gib: int | float


@document
class ProbeP2P(Document):
    """GPU 0 and 1 peer to peer (gpu_probe.p2p)."""
    can_access_0_1: bool
    can_access_1_0: bool
    copy_0_to_1_gbs: int | float


@document
class ProbeAllreduce(Document):
    """NCCL all-reduce latency over every GPU (gpu_probe.allreduce), by message size ("10KiB": us)."""
    world_size: int
    env: dict  # the NCCL variables it ran with
    latency_us: dict


@document
class GpuProbe(Document):
    """What hostside/gpu_probe.py prints (it runs alone with the release's python, -I: it prints its dict itself;
    tests/test_outputs.py keeps the two spellings one); doctor_collect reads it through this class. A probe that
    could not measure says why (error) and nothing else but, when the GPUs were busy, the devices."""
    FILE: ClassVar[str] = "the GPU probe's answer"
    MEASURED: ClassVar[tuple] = ("torch", "cuda", "nccl", "devices", "bandwidth", "p2p", "allreduce_default")
    error: str | None = None  # why nothing was measured; None: measured (every field of MEASURED written)
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    devices: list[ProbeDevice] = field(default_factory=list)
    bandwidth: list[ProbeBandwidth] = field(default_factory=list)
    p2p: ProbeP2P | None = None  # None: one GPU
    allreduce_default: ProbeAllreduce | None = None  # None: one GPU
    allreduce_profile: ProbeAllreduce | None = None  # with the release's NCCL variables; None: none declared

    @classmethod
    def from_dict(cls, data, source=None):
        """A measured answer has every field of MEASURED (the probe writes them all): one missing is named."""
        probe = super().from_dict(data, source)
        missing = [key for key in cls.MEASURED if key not in data] if probe.error is None else []
        if missing:
            raise DocumentError(f"{source or cls.FILE}: required field {missing[0]!r} is missing")
        return probe

    def read_bandwidth(self):
        """The slowest GPU's read-only bandwidth, GB/s; None: not measured."""
        return min(entry.read_gbs for entry in self.bandwidth) if self.bandwidth else None


# --- the doctor's collection: hostside.doctor_collect's stdout -------------------------------------------------------

@document
class SandboxView(Document):
    """The active release's preflight without its GPU steps (doctor_collect.sandbox_view); or why not (error)."""
    findings: list[PreflightFinding] = field(default_factory=list)
    sandbox: list = field(default_factory=list)
    host: dict | None = None
    error: str | None = None  # the view could not be taken: why (and nothing else)


@document
class DoctorCollection(Document):
    """What the doctor's collector gathers on the host (hostside/doctor_collect.py), redacted; doctor.py diagnoses it
    (sglang_deploy/doctor/diagnosis.py diagnose, with_collection)."""
    FILE: ClassVar[str] = "hostside.doctor_collect's output"
    active: str | None  # the active release; None: none
    errors: list  # what could not be read, each a sentence
    meta: ReleaseMeta | None  # the active release's meta.json; None: no active release
    gate: Measurement | None  # the measurement (the gate's, or the collector's own); None: none
    environ: dict  # the server process's environment
    log_findings: dict  # SGLang's own log lines (evidence.log_findings)
    costly_env: list  # costly variables the release did not declare (evidence.costly_undeclared)
    server_info: dict  # /server_info ({}: unreadable, said in errors)
    checkpoint_path: str | None
    checkpoint: dict | None  # the checkpoint's bytes by role (safetensors_headers.summarize)
    draft_checkpoint: dict | None
    offered_drafts: list  # {"source", "bytes"} of each offered drafter
    last_tune: TuneResults | None  # the active release's last tune (doctor_collect.last_tune); None: none
    last_ab: ABResults | None  # its last A/B; None: none
    clock_reasons: dict  # each GPU's clock-limit reasons, by index (a string once through JSON)
    card_memory_mib: list
    sandbox: SandboxView
    gate_source: str | None = None  # the collector measured (no gate result): how; None: the gate's
    probe: GpuProbe | None = None  # the GPU probe's answer; None: not asked (--probe)
