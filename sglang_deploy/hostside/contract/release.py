"""Everything under a release's directory, releases/<id>/ of the store (paths.ServicePaths.release_dir), typed once:
its meta.json, the gate's config and result (with the bench's measurement and the output check it stores), the
roofline inputs, SGLang's resolution and the profile snapshot, and the reports kept beside it: the doctor's
(doctor.json), the tune's and the A/B's (tune-results.json, ab-results.json) and the perf watch's history
(watch.jsonl). The mechanism: document.py.

The controller builds these objects (sglang_deploy/gate.py, release_plan.py, doctor.py, tune/controller.py) and writes
`doc.dump()`; the host (switch, gate, watch, store, doctor, tune) reads them with `Class.load(directory)` and uses
attributes, never string keys. A passed gate's stored measurement and output check are the next gate's baseline, so
the reader takes what earlier versions stored on hosts: the fields added later have defaults saying what their
absence meant, and a failed bench run that the gate stored as its errors alone (before 2026-12-04) reads as
`Measurement.failed`. Standard library only: shipped to the host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar

from .document import Document, DocumentError, document

# A release's files that are not typed below, and the reports' file names: named once.
PROFILE_FILE = "profile.json"  # the validated profile, as the controller read it
RESOLVED_FILE = "resolved.json"  # SGLang's own resolution of the unit's command line (sglang_deploy.resolution)
DOCTOR_FILE = "doctor.json"  # the doctor's report for the active release (doctor.py)
TUNE_RESULTS_FILE = "tune-results.json"  # the tune's table of candidates (tune.py)
AB_RESULTS_FILE = "ab-results.json"  # the doctor's A/B on request (doctor/ab.py), in the tune's shape
WATCH_HISTORY_FILE = "watch.jsonl"  # the perf watch's measurements (hostside/watch.py)
PACKAGES_FILE = "packages.json"  # the venv's packages and their hashes, copied in at stage time

MEASUREMENT = "hostside.bench's measurement"  # Measurement's name in messages: bench.py's stdout, or a gate result's
OUTPUT_CHECK = "hostside.output_check's result"  # OutputCheck's
AGGREGATE_ROUNDS = 2  # bench.py --aggregate-rounds' default (the gate, the watch and the doctor leave it)


# --- a release: releases/<id>/meta.json (written last: a directory without it is not a release) ----------------------

@document
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


@document
class HistoryEvent(Document):
    at: str
    event: str  # "activated (deploy)", "marked bad (rollback)", "restarted by the watch (...)", ...


@document
class GateMark(Document):
    """The last gate's verdict in a release's meta.json (switch.switch_locked): what the baseline choice, the
    release list and the perf watch read; the whole result is the release's gate-result.json (GateResult)."""
    verdict: str  # pass, fail, inconclusive
    summary: str  # "pass 50.1 tok/s tau 2.91"
    at: str  # when it was measured
    simulated: bool | None = None  # measured a simulated server; None: the gate could not run
    baseline: str | None = None  # the release compared with; None: none (and releases from before 2026-12-01)


@document
class NodeMark(Document):
    """A multi-node server's release in meta.json: this host's place in it (release_plan.build_meta)."""
    rank: int  # 0 serves HTTP; the others join it
    nnodes: int
    dist_init_addr: str  # rank 0's rendezvous, host:port


@document
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


@document
class TokenMapMark(Document):
    """A token map a release ships (meta.json's token_map, each of offered_token_maps): token_map/part.py MapPart.meta
    writes it; the switch's check, the weights' prune and the listing read it."""
    sha256: str
    path: str  # on the host: /srv/models/token-maps/<sha256>.pt
    size: int | None = None  # token ids in the map (None: not recorded)
    file: str | None = None  # the controller's file name (None: not recorded)


@document
class TuneMark(Document):
    """A tune's temporary release in meta.json (tune/host.py stage_files): never marked good, removed at the end."""
    session: str
    temporary: bool
    candidate: str  # the candidate's id


# --- the gate: releases/<id>/gate-config.json ------------------------------------------------------------------------

@document
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


@document
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


@document
class GateConfig(Document):
    FILE: ClassVar[str] = "gate-config.json"
    settings: GateSettings
    expect: GateExpect


# --- the gate's outcome: releases/<id>/gate-result.json --------------------------------------------------------------

@document
class GateResult(Document):
    """The gate's checks, measurement and verdict (hostside/lib/gate.run; switch.run_gate adds the baseline), redacted.
    A later gate reads the passed ones as its baseline (switch.run_gate); the switch's outcome carries it too."""
    FILE: ClassVar[str] = "gate-result.json"
    verdict: str  # pass, fail, inconclusive
    reasons: list  # why it failed
    inconclusive: list  # why it could not tell
    rows: list  # the table's rows: {"metric", "value", "spread_pct", "threshold", "previous", "verdict"}
    config_problems: list  # the running server against the release (gate.config_problems)
    comparison: dict | None = None  # the paired comparison with the baseline (gate.compare); None: none made
    measurement: Measurement | None = None  # the bench client's (Measurement below); None: not measured
    output: OutputCheck | None = None  # the output check's (OutputCheck below); None: not checked
    simulated: bool | None = None  # measured a simulated server; None: the gate could not run
    duration_s: int | float | None = None
    baseline_release: str | None = None  # the release compared with; None: the floors alone decided
    baseline: dict | None = None  # {"release", "note"}: which baseline, or why none

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


# --- the bench's measurement (hostside/bench.py's stdout; GateResult.measurement) ------------------------------------

@document
class Summary(Document):
    """One metric over the samples (bench.summary): its median and how much the samples spread."""
    median: int | float
    min: int | float
    max: int | float
    n: int
    values: list
    spread_pct: int | float  # (max - min) / median, in %
    cv_pct: int | float  # the coefficient of variation, in %


@document
class Sample(Document):
    """One single-stream request (bench.Client.generate), measured on the client's clock."""
    kind: str  # the prompt's content class: prose, code, chat
    completion_tokens: int
    e2e_s: int | float
    ttft_s: int | float
    decode_tok_s: int | float
    accept_length: int | float | None  # SGLang's spec_accept_length; None: no speculation
    server_e2e_s: int | float | None  # SGLang's e2e_latency; None: not reported
    correct_drafts_histogram: list | None = None  # None: no speculation, or measured before 2026-12-02
    # Its place in the bench's round (0 .. samples - 1: the prompt, PROMPTS[position % 6]); the gate's further rounds
    # measure the same positions again (gate.paired_ratios pairs by it). None: measured before 2026-12-06, one round,
    # its index in the list.
    position: int | None = None


@document
class BenchConfig(Document):
    """The bench's own arguments."""
    samples: int
    warmup: int
    max_new_tokens: int
    concurrency: int
    aggregate_rounds: int


@document
class Measurement(Document):
    """What `python3 -m hostside.bench` prints: the samples, a Summary of each metric and the request errors."""
    FILE: ClassVar[str] = MEASUREMENT
    url: str | None  # the server measured; None: a failed run (failed())
    simulated: bool | None  # the server says it is simulated; None: a failed run
    sglang_version: str | None  # /server_info's version; None: unreadable
    config: BenchConfig | None  # None: a failed run stored before 2026-12-04 (its errors alone)
    samples: list[Sample]  # the single-stream samples that completed
    decode_tok_s: Summary | None  # None: no sample completed
    ttft_s: Summary | None
    accept_length: Summary | None  # None: no sample reported one (speculation off)
    aggregate_tok_s: Summary | None  # None: concurrency 1, or no round completed
    errors: list  # each failed request (or the run itself), a sentence
    duration_s: int | float | None  # None: a failed run stored before 2026-12-04
    acceptance: dict | None = None  # acceptance.summary; None: no histogram (or measured before 2026-12-02)

    @classmethod
    def failed(cls, errors, url=None, config=None, duration_s=None):
        """A run that gave no measurement (the bench timed out, exited or printed nothing readable): its errors."""
        return cls(url=url, simulated=None, sglang_version=None, config=config, samples=[], decode_tok_s=None,
                   ttft_s=None, accept_length=None, aggregate_tok_s=None, errors=list(errors), duration_s=duration_s)

    @classmethod
    def from_dict(cls, data, source=None):
        if isinstance(data, dict) and set(data) - {"format"} == {"errors"} and isinstance(data["errors"], list):
            return cls.failed(data["errors"])  # the gate's failed run as stored before 2026-12-04
        return super().from_dict(data, source)

    @property
    def decode_median(self):
        """Single-stream decode tok/s, the median; None: no sample."""
        return self.decode_tok_s.median if self.decode_tok_s else None

    @property
    def tau_median(self):
        """The acceptance length, the median; None: none reported."""
        return self.accept_length.median if self.accept_length else None

    @property
    def ttft_median(self):
        return self.ttft_s.median if self.ttft_s else None

    @property
    def aggregate_median(self):
        return self.aggregate_tok_s.median if self.aggregate_tok_s else None

    @property
    def concurrency(self):
        """The aggregate rounds' streams; None: unknown (a failed run)."""
        return self.config.concurrency if self.config else None


# --- the output check (hostside/lib/output_check.py; GateResult.output, its counts in the tune's results) ----------------

@document
class OutputRow(Document):
    """One prompt's answer and what the check found in it."""
    id: str  # the prompt's id in the prompt set
    text: str | None = None  # the answer, its first 2000 characters; None: no answer (error)
    finish_reason: str | None = None  # SGLang's; None: no answer, or none reported
    error: str | None = None  # why there is no answer; None: answered
    degenerate: str | None = None  # how the answer degenerates; None: it does not
    wrong: str | None = None  # what is wrong with the known answer; None: right (or no answer)
    first_divergence: int | None = None  # the first word differing from the baseline's; None: agrees, or not compared


@document
class OutputCheck(Document):
    """The output check of one server: its verdict, why, the counts and each prompt's row."""
    FILE: ClassVar[str] = OUTPUT_CHECK
    verdict: str  # pass, fail, inconclusive
    reasons: list  # why it failed: wrong or degenerate answers
    inconclusive: list  # why it could not tell: prompts without an answer, little agreement with the baseline
    prompts_digest: str  # the prompt set's sha256: a baseline of another set is not compared
    prompts_version: int | None  # the prompt set's version; None: the set names none
    known_right: int
    total: int  # the prompts asked
    degenerate: int  # answers that repeat or ramble
    agreement: float | None  # the share of compared prompts that agree with the baseline; None: none compared
    compared: int  # prompts compared with the baseline's answers
    results: list[OutputRow]  # each prompt's, in the prompt set's order

    def counts(self) -> OutputCounts:
        """Its verdict and counts: what the tune keeps of a candidate's check (session.TuneItemResult.output)."""
        return OutputCounts(verdict=self.verdict, known_right=self.known_right, total=self.total,
                            degenerate=self.degenerate, prompts_digest=self.prompts_digest)


@document
class OutputCounts(Document):
    """An output check's verdict and counts, without its rows (OutputCheck.counts): the tune's item results carry it.
    Every version of the tune wrote these five (since 2026-12-01), so each is required."""
    verdict: str
    known_right: int
    total: int
    degenerate: int
    prompts_digest: str


# --- the bound on decode: releases/<id>/roofline.json ----------------------------------------------------------------

@document
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


# --- what a release ships beside its unit: resolved.json and profile.json --------------------------------------------

@document
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


@document
class ProfileService(Document):
    """The profile's service section (sglang_deploy/profile/sections.py ServiceSection, the validator)."""
    name: str
    user: str
    host: str
    port: int
    start_timeout_s: int
    auth: str | None = None  # None: a profile from before 2026-11-30 20:00 (the command line says: store.release_auth)
    relax: list = field(default_factory=list)


@document
class ProfileSnapshot(Document):
    """profile.json, the validated profile as the controller read it (release_plan.profile_snapshot). The host reads
    its service section; the other sections are the controller's (its pydantic model validates them)."""
    FILE: ClassVar[str] = PROFILE_FILE
    OTHERS: ClassVar[bool] = True
    service: ProfileService


# --- the doctor's report: releases/<id>/doctor.json ------------------------------------------------------------------

@document
class DoctorBound(Document):
    """The bandwidth roofline the doctor computed (hostside/lib/roofline.roofline, with where the bandwidth came from):
    the perf watch prefers a measured bandwidth to the datasheet's."""
    verify_gb_per_gpu: float
    draft_step_gb_per_gpu: float
    cycle_gb_per_gpu: float
    cycle_ms_at_roofline: float
    tau: float
    steps: int
    bandwidth_gbs: float
    roofline_tok_s: float
    at_75pct_mbu_tok_s: float
    bandwidth_source: str  # "measured (probe, ...)" or "datasheet (<gpu>)"
    draft_model: bool = False  # a separate draft model's pass counted; reports from before DFLASH: none
    measured_tok_s: float | None = None  # None: no measurement to compare
    mbu: float | None = None

    @property
    def measured(self) -> bool:
        return self.bandwidth_source.startswith("measured")


@document
class DoctorReport(Document):
    """What the perf doctor found for a release (sglang_deploy/doctor/diagnosis.py diagnose, and doctor.py's release, errors,
    probe and sandbox): the perf watch reads its roofline, the tune orders its axes by its suspects."""
    FILE: ClassVar[str] = DOCTOR_FILE
    roofline: DoctorBound | None  # None: no checkpoint or no bandwidth to bound by
    suspects: list  # doctor.Suspect as dicts, ranked
    notes: list
    simulated: bool
    release: str
    errors: list
    # Defaults: reports written before these parts existed (2026-11-30 to 12-01) found none of them.
    opportunities: list = field(default_factory=list)
    allreduce: dict | None = None  # the all-reduce path (doctor/levers.py allreduce_path)
    memory: dict | None = None  # the memory budget per GPU; None: not computed
    probe: dict | None = None  # the GPU probe's answer; None: not asked (--probe)
    sandbox: dict | None = None  # the preflight's view without its GPU steps

    def measured_bandwidth(self):
        """(GB/s, source) when the doctor's probe measured this host's bandwidth, else None."""
        bound = self.roofline
        return (bound.bandwidth_gbs, bound.bandwidth_source) if bound and bound.measured and bound.bandwidth_gbs \
            else None


# --- the tune's results and the doctor's A/B: releases/<id>/tune-results.json, ab-results.json -----------------------

@document
class TuneEntry(Document):
    """One measured candidate (tune/search.Measured.to_json; Measured.from_json reads it back for a resumed tune)."""
    id: str
    axis: str
    flags: dict
    env: dict
    valid: bool
    repeats: list  # each repeat's medians (tune_runner.summarize)
    duration_s: int | float
    # Defaults: results saved before these parts existed read as "none recorded".
    draft: dict | None = None  # a drafter candidate's speculative.draft
    by_kind: dict = field(default_factory=dict)
    invalid_reason: str | None = None
    error: str | None = None
    restart_s: int | float | None = None
    release_id: str | None = None
    decode_score: int | float | None = None
    aggregate_score: int | float | None = None
    tau: int | float | None = None
    decode_spread_pct: int | float | None = None
    aggregate_spread_pct: int | float | None = None
    allreduce: dict | None = None


@document
class TuneRestore(Document):
    """What the session's end did (tune_runner.Session.restore): the original release back, temporaries removed."""
    needed: bool  # something else was installed
    ready: bool  # the original is running (or never left)
    stage: str | None = None  # the readiness stage reached; None: no restart
    detail: str | None = None  # why not ready
    elapsed_s: int | float | None = None
    removed: list = field(default_factory=list)  # the temporary releases removed


@document
class TuneResults(Document):
    """A tune of the active release (tune/controller.py document, written after each candidate and at the end):
    a later tune reuses its measurements under the same settings (tune/results.py), the doctor reads its control
    candidates (hostside/doctor_collect.last_tune)."""
    FILE: ClassVar[str] = TUNE_RESULTS_FILE
    host: str
    service: str
    profile: str
    original: str  # the release tuned
    session: str
    stamp: str
    signature: str  # the measurement settings (tune/results.settings_signature)
    settings: dict
    elapsed_s: int | float
    results: list[TuneEntry]
    stopped: str | None = None  # why the search stopped early; None: it did not
    unreached: list = field(default_factory=list)
    confirmation: dict | None = None  # the winner measured again beside the original
    winner: str | None = None  # its id; None: none (yet)
    # Written at the end only (report): a document saved after each candidate has none of these.
    restore: TuneRestore | None = None  # the session's end (its session.json's restore)
    tuned_profile: str | None = None
    table: str | None = None
    by_kind: str | None = None


@document
class ABResults(Document):
    """The doctor's A/B on request, kept beside the active release (sglang_deploy/doctor/ab.py host_document): the
    active release as the original and its no-speculation control, in the tune's entries, so a later doctor reads it
    as it reads the last tune (hostside/doctor_collect.last_tune)."""
    FILE: ClassVar[str] = AB_RESULTS_FILE
    kind: str  # "ab"
    stamp: str
    original: str  # the active release measured
    results: list[TuneEntry]


# --- the perf watch's history: releases/<id>/watch.jsonl, one entry a line -------------------------------------------

@document
class WatchOutput(Document):
    """The short output check of a watch run (hostside/lib/output_check.run, its verdict and counts)."""
    verdict: str  # pass, fail, inconclusive
    reasons: list
    inconclusive: list
    known_right: int
    total: int
    degenerate: int  # answers that repeat or ramble


@document
class WatchEntry(Document):
    """One run of the perf watch (hostside/watch.py): a measurement, a skipped run, a restart or a withheld one.
    The watch reads its own history back (the drift streak, the day's restarts, the last success for the
    metrics); `hostside.store history` lists it (history.py)."""
    FILE: ClassVar[str] = WATCH_HISTORY_FILE
    status: str  # ok, error; busy, no-listener, no-metrics (skipped); restarted, restart-failed, capped
    at: str
    unix: int | float  # the restarts of the last day are counted by it
    release: str
    event: str = "measure"  # measure, after-restart, restart, restart-withheld; the first entries had none
    detail: str | None = None  # why skipped, restarted or withheld
    running: int | float | None = None  # the requests running when a run was skipped as busy
    samples: int | None = None  # measured: the samples, their medians
    decode_tok_s: int | float | None = None
    accept_length: int | float | None = None
    ttft_s: int | float | None = None
    errors: list = field(default_factory=list)
    output: WatchOutput | None = None  # the short output check; None: not run
    drift: list = field(default_factory=list)  # why this measurement drifts; empty: it does not
    roofline_tok_s: int | float | None = None  # the bound at the measured acceptance; None: an input is missing
    roofline_fraction: int | float | None = None
    bandwidth_source: str | None = None

    @classmethod
    def lines(cls, text, source):
        """The entries of a watch.jsonl text; a torn line (not JSON) is skipped, an object that is not an entry is a
        DocumentError naming source:line."""
        entries = []
        for number, line in enumerate((text or "").splitlines(), 1):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            entries.append(cls.from_dict(data, f"{source}:{number}"))
        return entries

    def line(self) -> str:
        """The entry's JSONL line: the fields it has (a line carries no format; WatchEntry reads format 1). A
        measurement keeps its `drift` and `errors` lists even when empty ("measured: no drift"), as the watch wrote
        them before the entry was typed; a skipped run leaves them out."""
        measured = self.samples is not None
        return json.dumps({key: value for key, value in self.to_dict().items()
                           if value is not None and (value != [] or measured and key in ("drift", "errors"))},
                          sort_keys=True) + "\n"


# --- a release's set of files: what the deploy and the tune write into releases/<id>/ ---------------------------

UNIT_FILE = "sglang.service"  # the unit the switch installs
ENV_FILE = "sglang.env"  # its environment file (0600: the switch installs it beside the unit)


@dataclass(frozen=True)
class ReleaseFiles:
    """The files the controller renders for a release: the deploy's stage writes them (roles/release.stage), the
    tune sends a temporary candidate's in its queue item (tune/host.stage_files: TuneItem.files, by name) and the
    host's runner writes those (tune_runner.Session.stage). Written in ORDER, meta.json last: a directory without
    it is not a release. (packages.json, the venv's record, is copied on the host by the deploy's stage alone.)"""
    ORDER: ClassVar[tuple] = (UNIT_FILE, ENV_FILE, PROFILE_FILE, GateConfig.FILE, Resolution.FILE, Roofline.FILE,
                              ReleaseMeta.FILE)
    OPTIONAL: ClassVar[frozenset] = frozenset({Roofline.FILE})  # the perf watch's: a tune's candidate has none
    MODES: ClassVar[dict] = {ENV_FILE: 0o600}  # every other file 0644
    unit: str
    env: str
    profile: str  # profile.json: the validated profile as the controller read it (release_plan.profile_snapshot)
    gate_config: GateConfig
    resolution: Resolution
    meta: ReleaseMeta
    roofline: Roofline | None = None  # None: not written

    def by_name(self) -> dict:
        """Each file's content by its name, in ORDER (what a tune's queue item carries)."""
        contents = {UNIT_FILE: self.unit, ENV_FILE: self.env, PROFILE_FILE: self.profile,
                    GateConfig.FILE: self.gate_config.dump(), Resolution.FILE: self.resolution.dump(),
                    Roofline.FILE: self.roofline.dump() if self.roofline else None, ReleaseMeta.FILE: self.meta.dump()}
        return {name: contents[name] for name in self.ORDER if contents[name] is not None}

    def members(self) -> list:
        """(name, content, mode) of each file, in ORDER."""
        return self.written(self.by_name())

    @classmethod
    def written(cls, files: dict, source: str = "a release's files") -> list:
        """(name, content, mode) of files by name (a queue item's), in ORDER: a file missing or one no release has
        is an error naming it (nothing is written then)."""
        missing = [name for name in cls.ORDER if name not in files and name not in cls.OPTIONAL]
        unknown = sorted(set(files) - set(cls.ORDER))
        if missing or unknown:
            raise DocumentError(f"{source}: " + (f"{missing[0]} is missing" if missing else
                                                 f"{unknown[0]} is not a release's file ({', '.join(cls.ORDER)})"))
        return [(name, files[name], cls.MODES.get(name, 0o644)) for name in cls.ORDER if name in files]
