"""A tune session's files and answers (<store root>/tune/<session>/: paths.ServicePaths.tune_dir): the queue the
controller writes (queue/<seq>.json), what the host's runner measured (results/<seq>.json), the session's state
(session.json) and the controller's request to end it (close), and `hostside.tune_session`'s answers (open, close,
poll). Written and read within one session by one checkout (the host package is this checkout's), so every field the
writer always writes is required. Standard library only: shipped to the host.
"""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from .document import Document, document
from .findings import TuneRestore
from .gate import OutputCounts
from .switch import Readiness


# --- the queue: <session>/queue/<seq>.json ---------------------------------------------------------------------------

@document
class TuneMeasure(Document):
    """How each candidate is measured (tune/controller.Settings.measurement): written whole by the controller."""
    repeats: int
    samples: int
    max_new_tokens: int
    concurrency: int
    aggregate_rounds: int
    warmup: int


@document
class TuneItem(Document):
    """A candidate the controller queued for the host's session (tune/host.py run_item; hostside/lib/tune_runner.py
    stages, switches and measures it). Written and read within one session by one checkout: every field is written."""
    FILE: ClassVar[str] = "queue/<seq>.json"
    seq: int
    id: str  # the candidate's id
    release_id: str  # a retained release, or a temporary one staged from files
    restart: bool  # restart although it is the release running
    settings: TuneMeasure
    files: dict | None  # a temporary release's files by name (meta.json among them); None: retained
    start_timeout_s: int | float  # the budget's share: a candidate that hangs at start must not outlive it


# --- a measured item: <session>/results/<seq>.json -------------------------------------------------------------------

@document
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
    readiness: Readiness | None = None  # the switch's readiness (ready, stage, detail, elapsed_s); None: no restart
    error: str | None = None  # why not measured
    allreduce: dict | None = None  # the all-reduce path the server reports; None: not checked (never ready)
    map_ignored: str | None = None  # SGLang's line saying it ignores the token map; None: none
    config_problems: list = field(default_factory=list)  # the running server against the release
    output: OutputCounts | None = None  # the output check's verdict and counts (release.OutputCounts); None: not run
    repeats: list = field(default_factory=list)  # each repeat's medians (tune_runner.repeat_summary)
    restart_s: int | float | None = None
    simulated: bool | None = None  # measured a simulated server; None: not measured


# --- the session's own files: session.json and close -----------------------------------------------------------------

@document
class TuneStatus(Document):
    """The session's state (tune_runner.Session.save_status), read by its open, poll and close commands
    (tune_session.py), a later session's clean-up, and the controller (tune/host.py)."""
    FILE: ClassVar[str] = "session.json"
    session: str
    service: str
    state: str  # starting, ready, running, closed, aborted, failed
    pid: int
    started: str
    updated: str | None = None
    original: str | None = None  # the release restored at the end; None: not known yet
    current: str | None = None  # the release running now
    message: str | None = None
    done: list = field(default_factory=list)  # the queue items measured (seq)
    item: int | None = None  # the item being measured
    start_estimate_s: int | float | None = None  # the last switch's readiness time, when it was to the original
    probe_url: str | None = None
    restore: TuneRestore | None = None  # None: the session has not ended

    @property
    def ended(self) -> bool:
        return self.state in ("closed", "aborted", "failed")


@document
class TuneClose(Document):
    """The controller's request to end the session (tune_session.py close): the watchdog reads it."""
    FILE: ClassVar[str] = "close"
    abort: bool  # restore now, before the queue is done
    at: str
    why: str | None = None


# --- hostside.tune_session's answers, its last line (sglang_deploy/tune/host.py) -------------------------------------

@document
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
        """What the session's end did (release.TuneRestore), or None: not ended, or no session."""
        return self.status.restore if self.status else None


@document
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
