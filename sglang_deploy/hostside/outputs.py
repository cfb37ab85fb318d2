"""What host programs answer the controller, typed once: the preflight's report, the GPU probe's answer and the
doctor's collection, the store's history, the tune session's answers, the weights' answers (verify, fetch|promote,
prune, the error line; status: weights/status.py) and the venv's hooks (the bench's measurement: measurement.py).

Typed like the store's documents (documents.py: the strict reader naming the answer and the field; "format" in the
text). The host program builds its answer through the class (a field renamed in the writer fails at the write), the
controller reads it with `Class.loads(text, source)` and attributes, never `json.loads(...)["key"]`: a renamed field
is an error naming the answer and the field, never a value read as None. Each answer is written and read by one
checkout (the host package is this checkout's: roles/release.install_programs, roles/facts.inline_host), so every
field the writer always writes is required.

Kept out of documents.py and reports.py: those are imported by every no-op deploy (the store's state fact); import
this module only where an answer is written or read.
Standard library only: shipped to the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .documents import Document, DocumentError, HistoryEvent, StoreState
from .reports import TuneStatus, WatchEntry

from .measurement import Measurement  # the doctor's collection's
from .output_result import OutputCounts  # the perf watch's answer's
from .preflight.probe_answer import PreflightFacts  # the preflight's answer's


# --- the preflight's report: /run/sglang-deploy/preflight/<service>.json (hostside/preflight/runner.py) ----------

@dataclass(frozen=True)
class PreflightFinding(Document):
    """One finding (preflight/findings.finding): a step's status, what was found and the fix."""
    step: str  # sandbox, devices, shm, toolchain, caches, resolution, driver, port, torch, p2p, triton, limits, probe
    status: str  # ok, info, warn, fail, skip
    detail: str
    fix: str | None  # None: nothing to do


@dataclass(frozen=True)
class PreflightReport(Document):
    """The runner's --json (roles/release.py reads it after a deploy's preflight; doctor_collect.sandbox_view after
    the doctor's). Its facts: preflight/probe_answer.py."""
    FILE: ClassVar[str] = "preflight/<service>.json"
    findings: list[PreflightFinding]
    seconds: int | float
    facts: PreflightFacts | None  # the probe's facts (preflight/probe_answer.py); None: the probe gave none (a
    # timeout, a sandbox that failed, an answer that could not be read)
    ok: bool  # no finding failed
    host: dict  # the runner's own: uid_map, unprivileged, nesting
    sandbox: list  # the unit's directives against what this host enforces (findings.sandbox_enforcement)

    def warnings(self) -> list:
        return [item for item in self.findings if item.status == "warn"]


# --- the GPU probe's answer: hostside/gpu_probe.py's stdout (the doctor's --probe) ------------------------------

@dataclass(frozen=True)
class ProbeDevice(Document):
    index: int
    name: str
    used_gib: int | float  # memory in use when the probe started
    total_gib: int | float


@dataclass(frozen=True)
class ProbeBandwidth(Document):
    """One GPU's memory bandwidth (gpu_probe.bandwidth), GB/s."""
    copy_gbs: int | float
    triad_gbs: int | float
    read_gbs: int | float  # a read-only reduction: the roofline's bandwidth
    buffer_gib: int | float


@dataclass(frozen=True)
class ProbeP2P(Document):
    """GPU 0 and 1 peer to peer (gpu_probe.p2p)."""
    can_access_0_1: bool
    can_access_1_0: bool
    copy_0_to_1_gbs: int | float


@dataclass(frozen=True)
class ProbeAllreduce(Document):
    """NCCL all-reduce latency over every GPU (gpu_probe.allreduce), by message size ("10KiB": us)."""
    world_size: int
    env: dict  # the NCCL variables it ran with
    latency_us: dict


@dataclass(frozen=True)
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


# --- the doctor's collection: hostside.doctor_collect's stdout ---------------------------------------------------

@dataclass(frozen=True)
class SandboxView(Document):
    """The active release's preflight without its GPU steps (doctor_collect.sandbox_view); or why not (error)."""
    findings: list[PreflightFinding] = field(default_factory=list)
    sandbox: list = field(default_factory=list)
    host: dict | None = None
    error: str | None = None  # the view could not be taken: why (and nothing else)


@dataclass(frozen=True)
class DoctorCollection(Document):
    """What the doctor's collector gathers on the host (hostside/doctor_collect.py), redacted; doctor.py diagnoses it
    (sglang_deploy/doctor/diagnosis.py diagnose, with_collection)."""
    FILE: ClassVar[str] = "hostside.doctor_collect's output"
    active: str | None  # the active release; None: none
    errors: list  # what could not be read, each a sentence
    meta: dict  # the active release's meta.json ({}: none)
    gate: Measurement | None  # the measurement (the gate's, or the collector's own); None: none
    environ: dict  # the server process's environment
    log_findings: dict  # SGLang's own log lines (evidence.log_findings)
    costly_env: list  # costly variables the release did not declare (evidence.costly_undeclared)
    server_info: dict  # /server_info ({}: unreadable, said in errors)
    checkpoint_path: str | None
    checkpoint: dict | None  # the checkpoint's bytes by role (safetensors_headers.summarize)
    draft_checkpoint: dict | None
    offered_drafts: list  # {"source", "bytes"} of each offered drafter
    last_tune: dict | None  # the active release's last tune (doctor_collect.last_tune)
    last_ab: dict | None  # its last A/B
    clock_reasons: dict  # each GPU's clock-limit reasons, by index (a string once through JSON)
    card_memory_mib: list
    sandbox: SandboxView
    gate_source: str | None = None  # the collector measured (no gate result): how; None: the gate's
    probe: GpuProbe | None = None  # the GPU probe's answer; None: not asked (--probe)


# --- the store's history: hostside.store history's stdout (roles/facts.ReleaseHistory, history.py) --------------

@dataclass(frozen=True)
class HistoryFloors(Document):
    """The release's gate floors (GateSettings); None: none, or the gate config unreadable."""
    decode_tok_s: int | float | None
    accept_length: int | float | None


@dataclass(frozen=True)
class HistoryGate(Document):
    """The release's gate result, its medians."""
    verdict: str
    at: str | None  # meta.json's gate mark; None: none
    decode_tok_s: int | float | None
    accept_length: int | float | None
    ttft_s: int | float | None


@dataclass(frozen=True)
class HistoryRelease(Document):
    """One retained release in the history (store.cmd_history)."""
    id: str
    created: str
    history: list[HistoryEvent]
    verdict: str | None
    exec_start: list
    environment: dict  # the release's environment file, secrets masked
    floors: HistoryFloors
    gate: HistoryGate | None  # None: no gate result
    watch: list[WatchEntry]  # the perf watch's last entries


@dataclass(frozen=True)
class StoreHistory(Document):
    """`hostside.store history`: every retained release's switches, gate medians and perf-watch entries, oldest
    first (sglang_deploy/history.py draws it)."""
    FILE: ClassVar[str] = "hostside.store history's output"
    service: str
    state: StoreState
    releases: list[HistoryRelease]

    def release(self, release_id):
        return next((release for release in self.releases if release.id == release_id), None)


# --- the tune session's answers: hostside.tune_session's stdout, its last line (sglang_deploy/tune/host.py) -------

@dataclass(frozen=True)
class TuneItemResult(Document):
    """A measured queue item (tune_runner.Session.measure_item: <store>/tune/<session>/results/<seq>.json), as poll
    passes it on. Every path writes the first six fields; the others say how far the item got."""
    FILE: ClassVar[str] = "results/<seq>.json"
    seq: int
    id: str  # the candidate's id
    release_id: str
    ok: bool  # every repeat measured a decode rate
    at: str
    duration_s: int | float
    readiness: dict | None = None  # the switch's readiness ({ready, stage, detail, elapsed_s}); None: no restart
    error: str | None = None  # why not measured
    allreduce: dict | None = None  # the all-reduce path the server reports; None: not checked (never ready)
    map_ignored: str | None = None  # SGLang's line saying it ignores the token map; None: none
    config_problems: list = field(default_factory=list)  # the running server against the release
    output: OutputCounts | None = None  # the output check's verdict and counts (output_result.py); None: not run
    repeats: list = field(default_factory=list)  # each repeat's medians (tune_runner.repeat_summary)
    restart_s: int | float | None = None
    simulated: bool | None = None  # measured a simulated server; None: not measured


@dataclass(frozen=True)
class TuneSession(Document):
    """`tune_session open` and `close`: the session's status, or why there is none (state failed: open could not
    start it; missing: no such session)."""
    FILE: ClassVar[str] = "hostside.tune_session's answer"
    state: str  # the session's state (TuneStatus.state), or failed, missing
    message: str | None  # why (the status's message, or why no session)
    status: TuneStatus | None  # None: no session.json
    unit: str | None = None  # open: the session's transient unit

    @property
    def restore(self):
        """What the session's end did (reports.TuneRestore), or None: not ended, or no session."""
        return self.status.restore if self.status else None


@dataclass(frozen=True)
class TunePoll(Document):
    """`tune_session poll`: the session's status, its log from --log-offset, and the results from --results-from."""
    FILE: ClassVar[str] = "hostside.tune_session poll's answer"
    status: TuneSession  # the session's status (state missing: none)
    log: str
    log_offset: int
    results: list[TuneItemResult]
    unreadable: list = field(default_factory=list)  # result files that could not be read, each naming the field

    def result(self, seq):
        return next((result for result in self.results if result.seq == seq), None)


# --- the weights' failure: hostside.weights' last line when it fails (roles/weights.py _fetch_live) --------------

@dataclass(frozen=True)
class WeightsFailure(Document):
    """What `hostside.weights fetch|promote|verify|status` prints last when it refuses (weights/__main__.main)."""
    FILE: ClassVar[str] = "hostside.weights' error line"
    ok: bool  # False
    error: str  # why, naming the file or the disk


# --- the weights' answers: hostside.weights verify|fetch|promote|prune's last line (status: weights/status.py) ----

@dataclass(frozen=True)
class WeightsVerified(Document):
    """`hostside.weights verify`: every file against the manifest (hashing only what changed)."""
    FILE: ClassVar[str] = "hostside.weights verify's answer"
    ok: bool  # no problem
    problems: list  # each file that does not match, a sentence
    seconds: int | float
    hashed_files: int  # manifest.verify's stats: the files hashed (the others unchanged since their record)
    hashed_bytes: int
    files: int  # the manifest's


@dataclass(frozen=True)
class WeightsPlaced(Document):
    """`hostside.weights fetch` and `promote`: the snapshot verified and in place (weights/fetch.py)."""
    FILE: ClassVar[str] = "hostside.weights fetch|promote's answer"
    ok: bool  # True (a refusal is WeightsFailure)
    changed: bool  # renamed into place now; False: it was there already
    path: str
    hashed_files: int | None = None  # the verification's stats; None: verified in place, nothing hashed
    hashed_bytes: int | None = None
    files: int | None = None


@dataclass(frozen=True)
class WeightsPruned(Document):
    """`hostside.weights prune` (weights/prune.py): the snapshots and token maps removed and kept."""
    FILE: ClassVar[str] = "hostside.weights prune's answer"
    ok: bool
    removed: list  # paths
    kept: list
    skipped: str | None = None  # why nothing was pruned (another weights command holds the lock, ...); None: pruned


# --- the venv's startup hooks: hostside.venv_hooks's stdout (roles/facts.VenvState) ------------------------------

@dataclass(frozen=True)
class VenvHooks(Document):
    """A release venv read from outside (hostside/venv_hooks.read). venv_hooks.py also runs alone (provision.py
    hooks_command: `python3 -I -c <its source>`, no package), so it prints read()'s dict itself; the test of its
    fields (tests/test_outputs.py) keeps the two spellings one."""
    FILE: ClassVar[str] = "hostside.venv_hooks's output"
    sglang: str | None  # the installed SGLang's version; None: none
    site: str | None  # its site-packages; None: no venv there
    problems: list  # each refused startup hook, a sentence

