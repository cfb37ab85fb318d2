"""What the tune measures: a candidate (its changes against the original profile) and its measurement (the repeats
from the host, scored robustly). Below the axes (axes.py, vocab.py) and the search (search.py), which make and rank
them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..hostside.contract.findings import TuneEntry

ROBUST_K = 1.4826  # MAD -> standard deviation for normal noise (vLLM's tune_speculative_k scores the same way)


@dataclass(frozen=True)
class Candidate:
    """Changes against the original profile: flags and environment variables (None removes one)."""

    id: str
    axis: str
    flags: tuple = ()  # ((name, value or None), ...)
    env: tuple = ()  # ((name, value or {"value", "reason"} or None), ...)
    draft: tuple = ()  # speculative.draft of a drafter candidate: (("source", ...), ("manifest", ...), ...)

    @property
    def flag_changes(self) -> dict:
        return dict(self.flags)

    @property
    def env_changes(self) -> dict:
        return {name: (dict(value) if isinstance(value, tuple) else value) for name, value in self.env}

    def merged(self, other: "Candidate", new_id: str | None = None) -> "Candidate":
        """This candidate's changes with another's on top (the search carries the best so far forward)."""
        flags = {**self.flag_changes, **other.flag_changes}
        env = {**dict(self.env), **dict(other.env)}
        return Candidate(new_id or other.id, other.axis, tuple(sorted(flags.items())), tuple(sorted(env.items())),
                         other.draft or self.draft)


BASELINE = Candidate("original", "baseline")


def spec_settings(flags: dict) -> tuple[int, int, int] | None:
    """(steps, topk, draft tokens) as the profile declares them; None without speculative decoding."""
    if not flags.get("--speculative-algorithm"):
        return None
    steps = int(flags.get("--speculative-num-steps") or 3)
    topk = int(flags.get("--speculative-eagle-topk") or 1)
    drafts = int(flags.get("--speculative-num-draft-tokens") or (steps + 1))
    return steps, topk, drafts


def mad(values: list[float]) -> float:
    median = statistics.median(values)
    return statistics.median([abs(v - median) for v in values])


def robust_score(values: list[float]) -> float | None:
    """median - 1.4826 x MAD: a candidate is only as fast as its repeats reliably are."""
    values = [v for v in values if v]
    if not values:
        return None
    return statistics.median(values) - ROBUST_K * mad(values)


def spread_pct(values: list[float]) -> float | None:
    """1.4826 x MAD relative to the median, in % (the noise check)."""
    values = [v for v in values if v]
    if not values:
        return None
    return ROBUST_K * mad(values) / statistics.median(values) * 100


@dataclass
class Measured:
    candidate: Candidate
    valid: bool = True
    invalid_reason: str | None = None
    error: str | None = None
    repeats: list = field(default_factory=list)  # repeat summaries from the host (tune_runner.repeat_summary)
    duration_s: float = 0.0
    restart_s: float | None = None
    release_id: str | None = None
    resumed: bool = False
    allreduce: dict | None = None  # the all-reduce path the server reported (hostside/evidence.allreduce_path)

    def values(self, key: str) -> list[float]:
        return [r.get(key) for r in self.repeats if r.get(key)]

    def median(self, key: str) -> float | None:
        values = self.values(key)
        return statistics.median(values) if values else None

    @property
    def decode(self) -> float | None:
        return robust_score(self.values("decode_tok_s"))

    @property
    def median_decode(self) -> float | None:
        return self.median("decode_tok_s")

    @property
    def aggregate(self) -> float | None:
        return robust_score(self.values("aggregate_tok_s"))

    @property
    def tau(self) -> float | None:
        return self.median("accept_length")

    def by_kind(self) -> dict:
        """Median single-stream decode per content class of the prompt mix (prose, code, chat) over the repeats."""
        values: dict = {}
        for repeat in self.repeats:
            for kind, value in (repeat.get("by_kind") or {}).items():
                if value:
                    values.setdefault(kind, []).append(value)
        return {kind: statistics.median(v) for kind, v in sorted(values.items())}

    @property
    def measured(self) -> bool:
        return self.valid and not self.error and bool(self.values("decode_tok_s"))

    def noise(self, key: str = "decode_tok_s") -> float | None:
        return spread_pct(self.values(key))

    def entry(self) -> TuneEntry:
        """The measurement as the tune's results document keeps it (hostside/contract/findings.TuneEntry: the one
        description of its fields; to_json is its dict)."""
        return TuneEntry(id=self.candidate.id, axis=self.candidate.axis, flags=self.candidate.flag_changes,
                         env=self.candidate.env_changes, valid=self.valid, repeats=self.repeats,
                         duration_s=self.duration_s, draft=dict(self.candidate.draft) or None, by_kind=self.by_kind(),
                         invalid_reason=self.invalid_reason, error=self.error, restart_s=self.restart_s,
                         release_id=self.release_id, decode_score=self.decode, aggregate_score=self.aggregate,
                         tau=self.tau, decode_spread_pct=self.noise(),
                         aggregate_spread_pct=self.noise("aggregate_tok_s"), allreduce=self.allreduce)

    def to_json(self) -> dict:
        return self.entry().to_dict()

    @classmethod
    def from_entry(cls, entry: TuneEntry) -> "Measured":
        """A saved measurement (a resumed tune's, the doctor's last tune or A/B); the scores are computed again from
        its repeats."""
        env = tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in entry.env.items()))
        candidate = Candidate(entry.id, entry.axis, tuple(sorted(entry.flags.items())), env,
                              tuple(sorted((entry.draft or {}).items())))
        return cls(candidate, entry.valid, entry.invalid_reason, entry.error, entry.repeats, entry.duration_s or 0.0,
                   entry.restart_s, entry.release_id, resumed=True, allreduce=entry.allreduce)

    @classmethod
    def from_json(cls, document: dict) -> "Measured":
        """from_entry of a JSON entry, read strictly (a DocumentError names a missing or unknown field)."""
        return cls.from_entry(TuneEntry.from_dict(document))
