"""The reports kept beside a release, in its directory: the doctor's (doctor.json), the tune's and the A/B's
(tune-results.json, ab-results.json) and the perf watch's history (watch.jsonl). The controller's doctor and tune
write the first three (doctor.py, tune/controller.py); the host's perf watch appends the last (hostside/watch.py).
The mechanism: document.py. Standard library only: shipped to the host.
"""

from __future__ import annotations

import json
from dataclasses import field
from typing import ClassVar

from .document import Document, document
from .release import AB_RESULTS_FILE, DOCTOR_FILE, TUNE_RESULTS_FILE, WATCH_HISTORY_FILE


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
