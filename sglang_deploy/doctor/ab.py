"""The doctor's short A/B on request: `doctor.py --data ab=nospec`.

The active release (deployed from host data `profile`) against the same release without speculation (the tune's
`nospec` candidate, tune/axes.py), measured in the tune's host session like the regression bisect (bisect_run.py):
the lock held, the candidate a temporary release, the active release restored and the temporary one removed at the
end. The measurement settings are the tune's (tune_repeats, tune_samples, tune_max_new_tokens, tune_budget_s).
`verdict` (pure) names speculation slower than none (levers.py nospec_suspect) with both speeds and spreads and
the profile edit that tests it. Output: the table, the verdict, and results/<host>/<release>-ab-<time>.json.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from ..bisect_run import Bisect
from .levers import nospec_suspect
from ..results import save_result
from ..hostside.contract.paths import ServicePaths
from ..hostside.contract.findings import ABResults
from ..hostside.contract.release import AB_RESULTS_FILE
from ..tune import search as tune
from ..tune.axes import nospec_candidate
from ..tune.controller import settings_from
from ..tune.host import HostSession, TuneError

ARMS = ("nospec",)


def verdict(active: tune.Measured, nospec: tune.Measured, objective: tune.Objective = tune.Objective()) -> dict:
    """The A/B's finding: the suspect when no speculation beats the release by more than both spreads; else the
    sentence that says speculation pays (or that the two are inside the noise, or that one could not be measured)."""
    if not active.measured or not nospec.measured:
        failed = "the active release" if not active.measured else "the release without speculation"
        why = (active if not active.measured else nospec)
        return {"suspect": None, "text": f"{failed} could not be measured ({why.error or why.invalid_reason}): "
                                         "no verdict"}
    suspect = nospec_suspect(nospec, active, "the doctor's A/B", objective)
    pct = (nospec.median_decode / active.median_decode - 1) * 100
    both = (f"{active.median_decode:.1f} tok/s (spread {active.noise() or 0:.1f} %, tau {active.tau or 0:.2f}) with "
            f"speculation, {nospec.median_decode:.1f} (spread {nospec.noise() or 0:.1f} %) without ({pct:+.1f} %)")
    if suspect:
        text = f"speculation is slower than none: {both}"
    elif tune.clear_gain(active, nospec, objective):
        text = f"speculation pays: {both}"
    else:
        text = f"inside the noise: {both}; measure longer (tune_samples, tune_repeats) to tell them apart"
    return {"suspect": asdict(suspect) if suspect else None, "text": text, "change_pct": pct}


def host_document(stamp: str, release: str, active: tune.Measured, nospec: tune.Measured) -> dict:
    """The A/B as the release keeps it (ab-results.json): a tune's results document with the active release as the
    original and the nospec control, so the doctor reads it as it reads the last tune."""
    return ABResults(kind="ab", stamp=stamp, original=release, results=[
        active.entry().but(id=tune.BASELINE.id, axis="baseline"), nospec.entry()]).to_dict()


def table(active: tune.Measured, nospec: tune.Measured) -> str:
    rows = [("release", "decode tok/s", "tau")]
    for name, measured in ((f"active {active.release_id}", active), (f"no speculation {nospec.release_id}", nospec)):
        rows.append((name, f"{measured.median_decode:.1f} ±{measured.noise() or 0:.1f}%" if measured.measured
                     else (measured.error or measured.invalid_reason or "not measured"),
                     f"{measured.tau:.2f}" if measured.measured and measured.tau else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows)


class SpecAB(HostSession):
    verb = "ab"

    def __init__(self, host_name, data, remote, say, arm: str, detected=None, **kwargs):
        super().__init__(host_name, data, remote, say, detected, **kwargs)
        if arm not in ARMS:
            raise TuneError(f"ab={arm}: accepted: {', '.join(ARMS)}")
        self.arm = arm

    def planned(self) -> int:
        return 2

    one = Bisect.one  # a measurement of a release id (no restart of the original in between)

    def run(self) -> dict:
        self.prepare(lambda: setattr(self, "settings", settings_from(self.data, self.profile)))
        candidate = nospec_candidate(self.original_flags)
        if candidate is None:
            raise TuneError(f"the active release {self.active} does not speculate (no --speculative-algorithm): "
                            "nothing to compare; nothing was changed")
        problem = self.candidate_problem(candidate)  # refused before the session takes the lock
        if problem:
            raise TuneError(f"the release without speculation is not valid here: {problem}; nothing was changed")
        self.say(f"A/B: the active release {self.active} against itself without speculation "
                 f"({', '.join(name for name, _ in candidate.flags)} removed), {self.settings.repeats} repeats x "
                 f"{self.settings.samples} samples x {self.settings.max_new_tokens} tokens each")

        def measure():
            item, problem = self.stage_files(candidate)  # in the session: its meta.json names it (TuneMark)
            if item is None:
                raise TuneError(f"the release without speculation is not valid here: {problem}")
            try:
                active = self.one(tune.Candidate("active", "ab"), self.active)
                return active, self.one(candidate, item["release_id"], item["files"])
            except tune.BudgetExhausted as why:
                raise TuneError(f"tune_budget_s does not fit the A/B's two measurements ({why})") from None

        (active, nospec), closed = self.in_session(measure)
        found = verdict(active, nospec, self.settings.objective)
        text = table(active, nospec)
        self.say("A/B (decode: median over repeats, ± spread):")
        for line in text.splitlines():
            self.say(f"    {line}")
        self.say(f"VERDICT: {found['text']}")
        if found["suspect"]:
            suspect = found["suspect"]
            self.say(f"suspect: [{suspect['id']}] {suspect['title']}")
            for key, label in (("evidence", "seen"), ("expected_gain", "expected gain"), ("fix", "fix")):
                self.say(f"   {label}: {suspect[key]}")
        document = {"kind": "ab", "arm": self.arm, "release": self.active, "host": self.host_name,
                    "verdict": found, "table": text, "restore": closed.restore.to_dict() if closed.restore else {},
                    "settings": self.settings.measurement(), "elapsed_s": round(self.elapsed(), 1),
                    "active_result": active.to_json(), "nospec_result": nospec.to_json()}
        path = save_result(self.host_name, document, kind="ab", results_dir=self.results_dir.parent)
        # beside the release, in the tune's shape: a later `doctor.py` names the suspect from it (doctor_collect)
        self.remote.put(ABResults.from_dict(host_document(self.stamp, self.active, active, nospec)).dump(),
                        ServicePaths(self.service).release_file(self.active, AB_RESULTS_FILE))
        self.say(f"saved in {path} (and releases/{self.active}/{AB_RESULTS_FILE} on the host)")
        return document
