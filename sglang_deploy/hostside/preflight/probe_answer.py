"""The preflight probe's answer (probe.py's stdout inside the transient unit), typed once.

probe.py runs by path in the release's python with -I (no package to import from), so it prints its dicts itself;
tests/test_preflight_answer.py holds the keys it writes equal to these classes' fields (and allreduce.py's answer
equal to PreflightAllReduce's). The runner reads the probe's stdout with `PreflightFacts.loads`, adds its own
outside view (PreflightOutside), and findings.py judges the facts by attribute: a renamed field is an error naming
the answer and the field, never a fact read as None ("not checked"). PreflightReport.facts (outputs.py) holds them.

The probe and the runner ship together (one release's hostside/), and the runner reads the report it has just
written: no older version's answer is read, so every field the probe always writes is required.

Its own module, imported by the runner, findings.py and outputs.py only (not on a no-op deploy's path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..document import Document

SOURCE = "the preflight probe's answer"


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class PreflightLimit(Document):
    """One resource limit from /proc/self/limits, as written there ("unlimited" or a number)."""
    soft: str
    hard: str


@dataclass(frozen=True)
class PreflightLimits(Document):
    """probe.parse_limits: the limits as the service gets them; None: the line was not in /proc/self/limits."""
    nofile: PreflightLimit | None = None
    memlock: PreflightLimit | None = None


@dataclass(frozen=True)
class PreflightToolchain(Document):
    """What the first JIT compile needs (probe.toolchain): each compiler's path (None: not found) and Python.h."""
    KEYS: ClassVar[dict] = {"gxx": "g++"}
    gcc: str | None
    gxx: str | None
    python_h: str
    python_h_present: bool


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class PreflightResolution(Document):
    """SGLang's whole resolution of the release's argv on the host (probe.resolution); a cached acceptance has at
    and cached."""
    error: str | None  # SGLang's refusal; None: accepted
    step: str | None  # the step that refused
    steps: int
    resolved: dict  # the resolved fields the preflight compares (probe.resolution's keep)
    at: str | None = None  # when the cached acceptance was resolved; None: resolved now
    cached: bool = False


@dataclass(frozen=True)
class PreflightDriver(Document):
    """The CUDA driver as the service (probe.cuda_driver_facts); a libcuda that does not load has error alone."""
    kernel_module: str | None
    libcuda: str | None
    cu_init: int | None  # cuInit's CUresult; None: libcuda did not load
    error: str | None
    cu_init_name: str | None = None


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class PreflightTriton(Document):
    """A Triton kernel compiled and run on GPU 0 (probe.triton_facts)."""
    error: str | None
    seconds: int | float
    cache_dir: str | None


@dataclass(frozen=True)
class PreflightOutside(Document):
    """What the runner adds from outside the sandbox (runner.outside_facts)."""
    serving: bool | None  # the service is active now; None: not asked
    port: int | None  # the release's port; None: no argv
    listening: bool
    listener: str | None  # ss's line for who listens
    gpu_processes: list | None  # nvidia-smi's compute apps; None: simulated, or nvidia-smi failed


@dataclass(frozen=True)
class PreflightFacts(Document):
    """What probe.py prints (probe.probe), with the runner's outside view; findings.diagnose judges it."""
    FILE: ClassVar[str] = SOURCE
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
