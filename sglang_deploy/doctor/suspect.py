"""One of the doctor's findings: what was seen, the expected gain and the profile change that tests it.
diagnosis.py and levers.py both make them; diagnosis.py ranks them (correctness first, then by gain)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Suspect:
    id: str
    title: str
    evidence: str
    expected_gain: str
    gain_pct: float  # midpoint, for ranking
    fix: str
    severity: str = "perf"  # "correctness" ranks above any perf suspect

    def rank_key(self):
        return (0 if self.severity == "correctness" else 1, -self.gain_pct)
