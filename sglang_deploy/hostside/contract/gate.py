"""The gate's documents in a release's directory: its config (gate-config.json, which the controller writes) and its
outcome (gate-result.json, which the host's gate writes), with the bench's measurement and the output check it
stores. A passed gate's stored measurement and output check are the next gate's baseline, so the reader takes what
earlier versions stored on hosts: the fields added later have defaults saying what their absence meant, and a failed
bench run that the gate stored as its errors alone (before 2026-12-04) reads as `Measurement.failed`. The
mechanism: document.py. Standard library only: shipped to the host.
"""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from .document import Document, document

MEASUREMENT = "hostside.bench's measurement"  # Measurement's name in messages: bench.py's stdout, or a gate result's
OUTPUT_CHECK = "hostside.output_check's result"  # OutputCheck's
AGGREGATE_ROUNDS = 2  # bench.py --aggregate-rounds' default (the gate, the watch and the doctor leave it)


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
