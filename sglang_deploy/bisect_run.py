"""The regression bisect, the controller's side: `doctor.py --data bisect=<release>`.

The good release is the active one (after the gate refused a release, the one it rolled back to), deployed from
host data `profile`; the refused release is a retained one, its profile read from its profile.json on the host.
In the tune's host session (tune/host.py HostSession: the lock, temporary releases, the original restored) it
measures the good release, the refused one as it is, and the good one with each single difference alone
(bisect_release.differences; across SGLang releases, the refused one with each changed resolved default pinned back,
from the two releases' resolved.json), with the tune's measurement settings (tune_repeats, tune_samples, ...) and within
tune_budget_s; bisect_release.verdict names the difference that costs the speed. Output: the table, and
results/<host>/<release>-bisect-<time>.json.
"""

from __future__ import annotations

import json
import shlex

from . import bisect_release
from .results import save_result
from .hostside.contract.document import DocumentError
from .hostside.contract.paths import ServicePaths
from .hostside.contract.gate import GateResult
from .hostside.contract.release import PROFILE_FILE, RESOLVED_FILE
from .tune import search as tune
from .tune.controller import settings_from
from .tune.host import HostSession, TuneError


class Bisect(HostSession):
    verb = "bisect"

    def __init__(self, host_name, data, remote, say, release: str, detected=None, **kwargs):
        super().__init__(host_name, data, remote, say, detected, **kwargs)
        self.release = release
        self.differences: list = []

    def planned(self) -> int:
        return 2 + sum(1 for d in self.differences if d.candidate is not None)

    def reference(self):
        return self.good

    def candidate_text(self, candidate):
        difference = next(d for d in self.differences if d.candidate == candidate)
        return bisect_release.profile_text(self.profile_text, difference)

    def read_host_json(self, release: str, name: str):
        ok, stdout, _ = self.remote.run(shlex.join(["cat", ServicePaths(self.service).release_file(release, name)]))
        if not ok:
            return None
        try:
            return json.loads(stdout)
        except ValueError:
            return None

    def gate_result(self, release: str):
        """The release's GateResult, or None when it has none (or one that cannot be read: said, not fatal)."""
        found = self.read_host_json(release, GateResult.FILE)
        try:
            return GateResult.from_dict(found, f"release {release}'s {GateResult.FILE}") \
                if found is not None else None
        except DocumentError as error:
            self.say(f"its gate result is not read: {error}")
            return None

    def run(self) -> dict:
        self.prepare(lambda: setattr(self, "settings", settings_from(self.data, self.profile)))
        if self.release == self.active:
            raise TuneError(f"{self.release} is the active release: the bisect compares a slower release with the "
                            "active (good) one; name the refused release")
        if self.release not in self.release_ids:
            raise TuneError(f"no retained release {self.release} of {self.service} (retained: "
                            f"{', '.join(self.release_ids)}): nothing was changed")
        refused_profile = self.read_host_json(self.release, PROFILE_FILE)
        if not isinstance(refused_profile, dict):
            raise TuneError(f"release {self.release} has no readable {PROFILE_FILE} on the host: its "
                            "differences cannot be named; nothing was changed")
        # across SGLang releases: the fields whose resolved value changed, from each release's own resolution
        resolved = tuple((self.read_host_json(release, RESOLVED_FILE) or {}).get("resolved")
                         for release in (self.active, self.release))
        try:
            self.differences, ignored = bisect_release.differences(self.profile.model_dump(mode="json"),
                                                                   refused_profile,
                                                                   resolved if all(resolved) else None)
        except bisect_release.BisectError as error:
            raise TuneError(str(error)) from None
        gate = self.gate_result(self.release)
        self.say(f"bisect: release {self.release} against the active release {self.active} ({self.profile.source}); "
                 + (f"its gate: {gate.verdict}" + (f" against baseline {gate.baseline_release}"
                                                   if gate.baseline_release else "")
                    + "".join(f"\n    gate: {reason}" for reason in gate.reasons[:4])
                    if gate else "it has no gate result"))
        if gate and gate.baseline_release and gate.baseline_release != self.active:
            self.say(f"note: its gate compared it with {gate.baseline_release}, not the active {self.active}")
        self.say(f"{len(self.differences)} difference(s): " + "; ".join(
            d.text() + (f" [not measured alone: {d.why_not}]" if d.why_not else "") for d in self.differences)
            + (f"; ignored (not the server): {', '.join(ignored)}" if ignored else ""))
        if not self.differences:
            raise TuneError(f"release {self.release} runs the same server as {self.active} (no difference in flags, "
                            "environment, drafter, weights or install): a slowdown between them is the host's, not "
                            "the release's; nothing was measured")
        self.say(f"measuring {self.planned()} server(s), {self.settings.repeats} repeats x {self.settings.samples} "
                 f"samples x {self.settings.max_new_tokens} tokens each, budget "
                 f"{tune.eta_text(self.settings.budget_s)}")
        self.good = None
        (good, refused, alone), closed = self.in_session(self.measure_all)
        verdict = bisect_release.verdict(good, refused, alone, self.settings.objective)
        text = bisect_release.table(good, refused, alone, self.settings.objective)
        self.say("regression bisect (decode: median over repeats, ± spread):")
        for line in text.splitlines():
            self.say(f"    {line}")
        self.say(f"VERDICT: {verdict['text']}")
        restore = closed.restore.to_dict() if closed.restore else {}  # session.TuneSession
        document = {"kind": "bisect", "release": self.release, "good": self.active, "host": self.host_name,
                    "verdict": verdict, "table": text, "ignored": ignored, "restore": restore,
                    "settings": self.settings.measurement(), "elapsed_s": round(self.elapsed(), 1),
                    "good_result": good.to_json(), "refused_result": refused.to_json(),
                    "alone": [{"difference": d.name, "kind": d.kind, "changes": d.text(), "why_not": d.why_not,
                               "result": m.to_json() if m else None} for d, m in alone]}
        path = save_result(self.host_name, document, kind="bisect", results_dir=self.results_dir.parent)
        self.say(f"saved in {path}")
        return document

    def one(self, candidate: tune.Candidate, release_id: str, files=None) -> tune.Measured:
        measured = self.run_item(candidate, {"release_id": release_id, "files": files}, restart=False)
        self.all_results.append(measured)
        return measured

    def measure_all(self):
        """The good release, the refused one, then each difference alone (the budget may stop the last ones)."""
        try:
            self.good = self.one(tune.Candidate("good", "bisect"), self.active)
            refused = self.one(tune.Candidate("refused", "bisect"), self.release)
        except tune.BudgetExhausted as why:
            raise TuneError(f"tune_budget_s does not fit the two releases' own measurements ({why})") from None
        alone = []
        for difference in self.differences:
            if difference.candidate is None:
                alone.append((difference, None))
                continue
            item, problem = self.stage_files(difference.candidate)
            if item is None:
                self.say(f"{difference.name}: INVALID alone, never started: {problem}")
                alone.append((difference, tune.Measured(difference.candidate, valid=False, invalid_reason=problem)))
            elif item["release_id"] == self.release:
                self.say(f"{difference.name}: alone it is the refused release's server ({self.release}): measured above")
                alone.append((difference, refused))
            elif item["release_id"] == self.active:
                alone.append((difference, self.good))
            else:
                try:
                    alone.append((difference, self.one(difference.candidate, item["release_id"], item["files"])))
                except tune.BudgetExhausted as why:
                    self.say(f"{difference.name}: not measured: {why}")
                    alone.append((difference, None))
        return self.good, refused, alone
