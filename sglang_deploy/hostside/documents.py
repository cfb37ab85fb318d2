"""The release store's documents: what crosses between the controller and the host, typed once.

The controller builds these objects (sglang_deploy/gate.py, release_plan.py) and the roles write `doc.dump()`;
the host (switch, gate, watch, store, doctor, tune) reads them with `Class.load(...)` and uses attributes, never
string keys. Each document says here once:
  - its file name (FILE: under releases/<id>/ or the service's store root);
  - its fields and, only where a missing value is safe, their defaults (a field without a default is required);
  - its format version (FORMAT, written as "format" in the file; a document without one is format 1, as written
    before this module existed);
  - the fields earlier versions wrote and that are read and dropped (RETIRED).

The reader is tolerant of releases already on hosts and strict about everything else: a missing required field, an
unknown field, a value of the wrong type or a newer format is a DocumentError naming the document and the field.
A renamed floor (min_decode_tok_s) fails there; it never reads as None, which would mean "no floor".

Standard library only: shipped to the host with the rest of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .document import _DOCUMENTS, Document, DocumentError, line  # noqa: F401 - the store's names for them
from .measurement import Measurement  # a gate result's measurement
from .output_result import OutputCheck  # a gate result's output check

# The files of a release (releases/<id>/) and of the service's store root that are not typed below: named once.
PROFILE_FILE = "profile.json"  # the validated profile, as the controller read it
RESOLVED_FILE = "resolved.json"  # SGLang's own resolution of the unit's command line (sglang_deploy.resolution)
DOCTOR_FILE = "doctor.json"  # the doctor's report for the active release (doctor.py)
TUNE_RESULTS_FILE = "tune-results.json"  # the tune's table of candidates (tune.py)
AB_RESULTS_FILE = "ab-results.json"  # the doctor's A/B on request (doctor/ab.py), in the tune's shape
WATCH_HISTORY_FILE = "watch.jsonl"  # the perf watch's measurements (hostside/watch.py)
PACKAGES_FILE = "packages.json"  # the venv's packages and their hashes, copied in at stage time

# --- the gate: releases/<id>/gate-config.json --------------------------------------------------------------

@dataclass(frozen=True)
class GateSettings(Document):
    """The profile's gate section (sglang_deploy/profile/sections.py GateSection, which validates and holds the
    defaults): the controller writes every field, so none has a default here."""
    RETIRED: ClassVar[frozenset] = frozenset({"engine"})  # the gate's measuring engine, removed 2026-11-30
    min_decode_tok_s: float | None  # None: no floor, written explicitly
    min_accept_length: float | None
    max_regression_pct: float
    samples: int
    warmup: int
    max_new_tokens: int
    concurrency: int
    on_inconclusive: str  # rollback or keep
    # The sequential comparison (gate.look_alpha): measurement rounds at most, and the seconds the rounds after the
    # first may take. Releases staged before 2026-12-06: one round, as they were gated.
    max_rounds: int = 1
    rounds_budget_s: int | float = 0.0


@dataclass(frozen=True)
class GateExpect(Document):
    """What the running server and process must show (sglang_deploy/gate.expectations)."""
    RETIRED: ClassVar[frozenset] = frozenset({  # replaced by SGLang's own resolution (resolved) on 2026-11-30
        "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"})
    decode_graphs: bool
    custom_all_reduce: bool
    environment: dict
    venv: str
    model_path: str
    resolved: dict = field(default_factory=dict)  # releases from before 2026-11-30 19:25 compared no resolved fields
    served_name: str | None = None  # releases from before 2026-12-01: the output check asks for "default"


@dataclass(frozen=True)
class GateConfig(Document):
    FILE: ClassVar[str] = "gate-config.json"
    settings: GateSettings
    expect: GateExpect


@dataclass(frozen=True)
class GateMark(Document):
    """The last gate's verdict in a release's meta.json (switch.switch_locked): what the baseline choice, the
    release list and the perf watch read; the whole result is the release's gate-result.json (GateResult)."""
    verdict: str  # pass, fail, inconclusive
    summary: str  # "pass 50.1 tok/s tau 2.91"
    at: str  # when it was measured
    simulated: bool | None = None  # measured a simulated server; None: the gate could not run
    baseline: str | None = None  # the release compared with; None: none (and releases from before 2026-12-01)


@dataclass(frozen=True)
class NodeMark(Document):
    """A multi-node server's release in meta.json: this host's place in it (release_plan.build_meta)."""
    rank: int  # 0 serves HTTP; the others join it
    nnodes: int
    dist_init_addr: str  # rank 0's rendezvous, host:port


@dataclass(frozen=True)
class SnapshotMark(Document):
    """A verified weights snapshot in a release's meta.json (its weights, its draft, each of its offered_drafts):
    sglang_deploy/weights.Weights.meta writes it; the switch, the doctor and the weights' prune read it."""
    source: str  # hf://org/name@revision or file://directory
    revision: str | None  # None: a local directory
    manifest_sha256: str
    manifest: str  # the frozen manifest's path on the host
    path: str  # the snapshot's directory on the host
    bytes: int
    files: int


@dataclass(frozen=True)
class TokenMapMark(Document):
    """A token map a release ships (meta.json's token_map, each of offered_token_maps): token_map/part.py MapPart.meta
    writes it; the switch's check, the weights' prune and the listing read it."""
    sha256: str
    path: str  # on the host: /srv/models/token-maps/<sha256>.pt
    size: int | None = None  # token ids in the map (None: not recorded)
    file: str | None = None  # the controller's file name (None: not recorded)


@dataclass(frozen=True)
class TuneMark(Document):
    """A tune's temporary release in meta.json (tune/host.py stage_files): never marked good, removed at the end."""
    session: str
    temporary: bool
    candidate: str  # the candidate's id


# --- a release: releases/<id>/meta.json (written last: a directory without it is not a release) -------------

@dataclass(frozen=True)
class ReleaseMeta(Document):
    """What a release is and what became of it. The controller writes the first ten fields and the ones below
    them (release_plan.build_meta); the host's switch and watch add the verdict and the history."""
    FILE: ClassVar[str] = "meta.json"
    id: str
    created: str
    deployed_by: str
    git: dict
    profile: str
    sglang_version: str
    venv: str
    content_hash: str
    exec_start: list
    simulated: bool
    service: str
    probe_url: str
    start_timeout_s: int | float
    # Defaults below: releases written before the field existed (2026-11-30 to 12-01) mean exactly this.
    auth: str | None = None  # None: from the command line (store.release_auth)
    weights: SnapshotMark | None = None  # None: weights not managed (no snapshot to verify)
    draft: SnapshotMark | None = None  # None: no separate draft model
    offered_drafts: list[SnapshotMark] = field(default_factory=list)  # tune.drafters: kept by the weights' prune
    token_map: TokenMapMark | None = None  # speculative.token_map, shipped content-addressed; None: no map
    offered_token_maps: list[TokenMapMark] = field(default_factory=list)  # tune.token_maps, for the vocab axis
    waivers: dict = field(default_factory=dict)
    preflight: str | None = None  # "passed", "skipped (skip_preflight)"; None: from before the preflight
    node: NodeMark | None = None  # a multi-node server: this host's rank in it; None: one host
    serves_http: bool = True  # False: a multi-node rank > 0 (no HTTP server of its own)
    tune: TuneMark | None = None  # a tune's temporary candidate; None: a deploy's release
    verdict: str | None = None  # good, bad, inconclusive; None: unverified
    verdict_by: str | None = None  # gate, skip_gate, readiness, rank 0
    gate: GateMark | None = None  # the last gate's verdict; None: never gated
    history: list[HistoryEvent] = field(default_factory=list)  # activations, failures, restarts

    def with_event(self, at, event, **changes):
        """This meta with one more history entry (and the changes)."""
        return self.but(history=[*self.history, HistoryEvent(at=at, event=event)], **changes)


@dataclass(frozen=True)
class HistoryEvent(Document):
    at: str
    event: str  # "activated (deploy)", "marked bad (rollback)", "restarted by the watch (...)", ...


# --- the store's state: <store root>/state.json ----------------------------------------------------------

@dataclass(frozen=True)
class Switching(Document):
    """A switch under way in state.json (hostside/switch.py, tune_runner.switch_to): left behind, it names the
    interrupted switch, and the release it was installing stays out of prune's reach."""
    KEYS: ClassVar[dict] = {"previous": "from"}
    to: str
    previous: str | None  # the release active before ("from" in the file)
    since: str
    reason: str | None = None  # deploy, rollback, tune session ...


@dataclass(frozen=True)
class Recovery(Document):
    """What the boot recovery (hostside/recover.py) found and did: an interrupted switch rolled back to the last good
    release (or committed, when its release passed its gate before the cut), or installed files put back."""
    at: str
    boot_id: str | None  # the boot it ran in (/proc/sys/kernel/random/boot_id)
    reason: str  # what it found, a sentence
    interrupted: str | None  # the release the interrupted switch was installing; None: no switch was under way
    restored: str | None  # the release it installed or kept; None: none to restore
    action: str  # rolled back, committed, reinstalled, nothing to restore


@dataclass(frozen=True)
class StoreState(Document):
    """Written by the host alone (switch, tune); every default is the empty store's."""
    FILE: ClassVar[str] = "state.json"
    active: str | None = None
    last_good: str | None = None
    auto_rollbacks_in_row: int = 0
    switching: Switching | None = None  # while a switch runs; left behind by a crash
    recovered: Recovery | None = None  # the last boot recovery that changed something (hostside/recover.py)


# --- the bound on decode: releases/<id>/roofline.json ---------------------------------------------------------

@dataclass(frozen=True)
class Roofline(Document):
    """What the controller knows of the release's bandwidth bound (sglang_deploy/roofline.release_inputs); the perf
    watch adds the checkpoint's bytes and the measured acceptance length (hostside/watch.roofline_bound)."""
    FILE: ClassVar[str] = "roofline.json"
    gpu: str | None  # None: unknown (no GPU fact)
    bandwidth_gbs: int | float | None  # the datasheet's; None: a GPU without one
    bandwidth_source: str
    tp: int
    algorithm: str | None  # the speculative algorithm; None: none
    steps: int
    model_path: str
    draft_path: str | None  # a separate draft model's path; None: none, or drafted by the target's own layers


# --- the store's lock: <store root>/lock.json ------------------------------------------------------------

@dataclass(frozen=True)
class LockInfo(Document):
    """Who holds the store's lock (written by the holder: switch, prune, tune, perf watch); "unknown" when the
    file is gone or unreadable while the lock is held."""
    FILE: ClassVar[str] = "lock.json"
    owner: str
    pid: int | None = None
    since: str | None = None
    boot_id: str | None = None  # the holder's boot: a lock.json of an earlier boot names no holder (store.lock_holder)

    def refusal(self) -> str:
        """The one sentence for a change refused while another holds the lock: the switch on the host, the
        deploy's refusals (plan.refusals) and the rollback on the controller."""
        return f"another deploy or rollback is running: {self.owner} (pid {self.pid}, since {self.since})"


# --- the gate's outcome: releases/<id>/gate-result.json -------------------------------------------------------

@dataclass(frozen=True)
class GateResult(Document):
    """The gate's checks, measurement and verdict (hostside/gate.run; switch.run_gate adds the baseline), redacted.
    A later gate reads the passed ones as its baseline (switch.run_gate); the switch's outcome carries it too."""
    FILE: ClassVar[str] = "gate-result.json"
    verdict: str  # pass, fail, inconclusive
    reasons: list  # why it failed
    inconclusive: list  # why it could not tell
    rows: list  # the table's rows: {"metric", "value", "spread_pct", "threshold", "previous", "verdict"}
    config_problems: list  # the running server against the release (gate.config_problems)
    comparison: dict | None = None  # the paired comparison with the baseline (gate.compare); None: none made
    measurement: Measurement | None = None  # the bench client's (hostside/measurement.py); None: not measured
    output: OutputCheck | None = None  # the output check's (hostside/output_result.py); None: not checked
    simulated: bool | None = None  # measured a simulated server; None: the gate could not run
    duration_s: int | float | None = None
    baseline_release: str | None = None  # the release compared with; None: the floors alone decided
    baseline: dict | None = None  # {"release", "note"}: which baseline, or why none

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


# --- the last switch: <store root>/last_switch.json -------------------------------------------------------------

@dataclass(frozen=True)
class Readiness(Document):
    """A start's staged readiness (hostside/readiness.wait_ready, wait_running)."""
    ready: bool
    stage: str  # the stage reached: active, health, listener, generate, auth, weights, ...
    elapsed_s: int | float
    detail: str | None = None  # why not ready
    journal: str = ""  # the failed start's last journal lines
    auth: str | None = None  # the authentication checked (api-key, none, n/a)


@dataclass(frozen=True)
class SwitchOutcome(Document):
    """What the last switch did (hostside/switch.finish), redacted; the controller reads it to report a switch
    (roles/release.py), the tune for its start estimate."""
    FILE: ClassVar[str] = "last_switch.json"
    release: str
    ok: bool
    exit_code: int
    finished: str
    error: str | None = None  # refused before any restart: why (no readiness then)
    previous: str | None = None  # the release active before
    reason: str | None = None  # deploy, rollback, tune, ...
    readiness: Readiness | None = None  # None: refused before the restart
    auth: str | None = None  # the release's authentication (store.release_auth)
    auth_change: str | None = None  # a sentence when the switch changed it
    gate: GateResult | None = None  # None: no gate ran
    failure: str | None = None  # why the release failed (readiness or gate)
    rolled_back_to: str | None = None  # the automatic rollback's target; None: none
    rollback_readiness: Readiness | None = None
    rollback_auth_change: str | None = None
    forensics: str | None = None  # where what the service user wrote was moved aside before a start (forensics.py)
    active: str | None = None  # the release active after a successful switch
    verdict: str | None = None  # its verdict after a successful switch


# --- what a release ships beside its unit: resolved.json and profile.json ----------------------------------

@dataclass(frozen=True)
class Resolution(Document):
    """SGLang's own resolution of the unit's command line (sglang_deploy/resolution.document): the doctor reads the
    parallelism, the rollback's preflight the resolved fields it compares."""
    FILE: ClassVar[str] = RESOLVED_FILE
    sglang_version: str
    argv: list
    resolved: dict | None  # ServerArgs after resolve_once(); None: SGLang refused the command line (error)
    steps: list = field(default_factory=list)  # Defaults: what releases from before a field existed mean
    step: str | None = None  # the step that refused; None: none did
    error: str | None = None
    log: list = field(default_factory=list)
    full: bool = True  # SGLang's whole resolution ran (not its option table alone)
    skipped: list = field(default_factory=list)
    gpu: dict | None = None  # the GPU facts it resolved for: {"model", "count"}
    model_config: str | None = None  # the checkpoint's config.json it read

    def parallel_gpus(self) -> int:
        """GPUs one server uses: tp x pp (1 when SGLang refused the command line)."""
        resolved = self.resolved or {}
        return int(resolved.get("tp_size") or 1) * int(resolved.get("pp_size") or 1)


@dataclass(frozen=True)
class ProfileService(Document):
    """The profile's service section (sglang_deploy/profile/sections.py ServiceSection, the validator)."""
    name: str
    user: str
    host: str
    port: int
    start_timeout_s: int
    auth: str | None = None  # None: a profile from before 2026-11-30 20:00 (the command line says: store.release_auth)
    relax: list = field(default_factory=list)


@dataclass(frozen=True)
class ProfileSnapshot(Document):
    """profile.json, the validated profile as the controller read it (release_plan.profile_snapshot). The host reads
    its service section; the other sections are the controller's (its pydantic model validates them)."""
    FILE: ClassVar[str] = PROFILE_FILE
    OTHERS: ClassVar[bool] = True
    service: ProfileService
