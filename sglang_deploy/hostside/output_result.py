"""The gate's output check's answer (hostside/output_check.evaluate and run), typed once.

output_check.evaluate builds it through these classes; the gate (its table and verdict), the switch (the next gate's
baseline, read back from the stored gate result: documents.GateResult.output), the perf watch (its short check,
reports.WatchOutput), the tune's runner (outputs.TuneItemResult.output) read it by attribute, never
`result["key"]`: a renamed field is an error naming the check and the field, never an answer read as None
("not checked", "nothing to agree with").

A passed gate's stored check is the next gate's baseline, so the reader takes what earlier versions stored: every
field of the check was written by every version (since 2026-12-01), so each is required; a row holds the prompt's id
and either its error or its answer, and its other fields were left out where they did not apply, hence their
defaults.

Its own module, beside documents.py and outputs.py, which import it for the gate result's and the perf watch's field
of its type. Standard library only: shipped to the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .document import Document

SOURCE = "hostside.output_check's result"


@dataclass(frozen=True)
class OutputRow(Document):
    """One prompt's answer and what the check found in it."""
    id: str  # the prompt's id in the prompt set
    text: str | None = None  # the answer, its first 2000 characters; None: no answer (error)
    finish_reason: str | None = None  # SGLang's; None: no answer, or none reported
    error: str | None = None  # why there is no answer; None: answered
    degenerate: str | None = None  # how the answer degenerates; None: it does not
    wrong: str | None = None  # what is wrong with the known answer; None: right (or no answer)
    first_divergence: int | None = None  # the first word differing from the baseline's; None: agrees, or not compared


@dataclass(frozen=True)
class OutputCheck(Document):
    """The output check of one server: its verdict, why, the counts and each prompt's row."""
    FILE: ClassVar[str] = SOURCE
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
        """Its verdict and counts: what the tune keeps of a candidate's check (outputs.TuneItemResult.output)."""
        return OutputCounts(verdict=self.verdict, known_right=self.known_right, total=self.total,
                            degenerate=self.degenerate, prompts_digest=self.prompts_digest)


@dataclass(frozen=True)
class OutputCounts(Document):
    """An output check's verdict and counts, without its rows (OutputCheck.counts): the tune's item results carry it.
    Every version of the tune wrote these five (since 2026-12-01), so each is required."""
    verdict: str
    known_right: int
    total: int
    degenerate: int
    prompts_digest: str
