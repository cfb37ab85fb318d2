"""The bench client's measurement (hostside/bench.py's answer), typed once.

bench.py builds it through these classes and prints `Measurement.dump()`; the gate (measure_builtin, evaluate), the
perf watch, the tune's runner, the switch's gate summary, the store's history, the doctor and the router's gate read
it with `Measurement.loads(text, source)` or from the gate's result (documents.GateResult.measurement) and use
attributes, never `json.loads(...)["key"]`: a renamed field is an error naming the measurement and the field, never
a median read as None ("no sample").

A passed gate's stored measurement is the next gate's baseline, so the reader takes what earlier versions of this
tool stored on hosts: the fields added later have defaults saying what their absence meant (acceptance and each
sample's correct_drafts_histogram, 2026-12-02), and a failed run that the gate stored as its errors alone (before
2026-12-04) reads as `Measurement.failed`. A field every version wrote is required.

Its own module, beside documents.py and outputs.py, which import it for the gate result's and the doctor's
collection's field of its type. Standard library only: shipped to the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .document import Document

SOURCE = "hostside.bench's measurement"
AGGREGATE_ROUNDS = 2  # bench.py --aggregate-rounds' default (the gate, the watch and the doctor leave it)


@dataclass(frozen=True)
class Summary(Document):
    """One metric over the samples (bench.summary): its median and how much the samples spread."""
    median: int | float
    min: int | float
    max: int | float
    n: int
    values: list
    spread_pct: int | float  # (max - min) / median, in %
    cv_pct: int | float  # the coefficient of variation, in %


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class BenchConfig(Document):
    """The bench's own arguments."""
    samples: int
    warmup: int
    max_new_tokens: int
    concurrency: int
    aggregate_rounds: int


@dataclass(frozen=True)
class Measurement(Document):
    """What `python3 -m hostside.bench` prints: the samples, a Summary of each metric and the request errors."""
    FILE: ClassVar[str] = SOURCE
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
