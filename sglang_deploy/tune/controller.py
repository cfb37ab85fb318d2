"""Tune, the controller's side: validate candidates, run them through the host's tune session, keep the budget.

Called by the tune.py verb inside a pyinfra python.call (so `remote` wraps a live pyinfra host); the
search and the scores are in search.py (pure), the candidate's profile text in edit.py, the report's tables
in report.py, what saved results are reused in results.py, the host session (store checks, staging,
queueing, the budget) in host.py, the order, the budget's report and the winner's second measurement in
discipline.py, the temporary releases and the restore in hostside/tune_session.py (on the
host, under the lock).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from . import (axes as tune_axes, discipline as tune_discipline, edit as tune_edit, report as tune_report,
               results as tune_results, vocab as tune_vocab)
from . import search as tune
from ..settings import SettingsError, TuneArgs, origin
from ..settings_types import int_list
from ..hostside.contract.document import DocumentError
from ..hostside.contract.paths import ServicePaths
from ..hostside.contract.findings import DoctorReport, TuneResults
from ..hostside.contract.release import DOCTOR_FILE, TUNE_RESULTS_FILE
from ..sim import hardware
from .host import HostSession, Overlay, TuneError, allow_candidates  # noqa: F401 - the verb's and tests' names
from .levers import asker, starter


@dataclass(frozen=True)
class Settings:
    axes: tuple
    budget_s: float
    repeats: int
    samples: int
    max_new_tokens: int
    concurrency: int
    heartbeat_s: float
    steps: tuple
    topks: tuple
    resume: bool
    objective: tune.Objective
    attention: tuple | None = None  # tune_attention: None for every backend SGLang's resolution accepts

    def measurement(self) -> dict:
        return {"repeats": self.repeats, "samples": self.samples, "max_new_tokens": self.max_new_tokens,
                "concurrency": self.concurrency, "aggregate_rounds": 1, "warmup": 1}


def settings_from(data, profile) -> Settings:
    """The tune's settings: its one-run arguments (settings.TuneArgs, from host data) and the profile's gate."""
    try:
        args = TuneArgs.of(data)
    except SettingsError as error:
        raise TuneError("\n".join(error.problems)) from None
    axes = tuple(tune.AXES) if args.space.strip() == "all" else tuple(p.strip() for p in args.space.split(","))
    steps, topks = int_list(args.steps), int_list(args.topk)
    for key, values, allowed in (("tune_steps", steps, tune.STEPS_RANGE), ("tune_topk", topks, tune.TOPKS)):
        bad = [value for value in values if value not in allowed]
        if bad:
            raise TuneError(f"{origin(data, key)}: {key}: {bad} not in the search space {list(allowed)}")
    return Settings(
        axes=axes, budget_s=args.budget_s, repeats=args.repeats, samples=args.samples,
        max_new_tokens=args.max_new_tokens, concurrency=args.concurrency or profile.gate.concurrency,
        heartbeat_s=args.heartbeat_s, steps=steps, topks=topks, resume=args.resume,
        attention=None if args.attention.strip() == "all" else tuple(p.strip() for p in args.attention.split(",")),
        objective=tune.Objective(min_aggregate_fraction=args.min_aggregate, noise_max_pct=args.noise_pct,
                                 min_gain_pct=args.min_gain_pct),
    )


class Runner(HostSession):
    """One tune: a session on the host (host.HostSession), the search, the report."""

    def run(self):
        self.prepare(lambda: setattr(self, "settings", settings_from(self.data, self.profile)))
        self.saved = self.load_saved() if self.settings.resume else {}
        flags, env = self.original_flags, self.original_env
        gains = tune_discipline.expected_gains(self.last_doctor())
        order = tune_discipline.axis_order(self.settings.axes, gains)
        self.search = tune.Search(flags, env, self.settings.axes, self.settings.concurrency,
                                  self.data.get("gpu_topology") or (self.detected or {}).get("gpu_topology"),
                                  self.measure, self.settings.objective, self.settings.steps, self.settings.topks,
                                  drafters=[d.model_dump() for d in self.profile.tune.drafters],
                                  choices=self.lever_choices(), order=order, assumed=self.assumed())
        self.search.on_invalid = self.record  # the vocab axis's sizes that are not candidates: rows of the table
        self.say("axes, largest expected gain first (the doctor's estimates): " + ", ".join(
            f"{axis} (+{gains[axis]:.0f} %)" if axis in gains else f"{axis} (control)" for axis in self.search.axes))
        self.say(f"tune {self.profile.name} on {self.host_name}: original release {self.active}; space "
                 f"{','.join(self.settings.axes)}; budget {tune.eta_text(self.settings.budget_s)}; "
                 f"{self.settings.repeats} repeats x {self.settings.samples} samples x {self.settings.max_new_tokens} "
                 f"tokens, aggregate at concurrency {self.settings.concurrency}; up to {self.search.planned()} "
                 "candidates" + (f"; {len(self.saved)} saved result(s) to resume from" if self.saved else ""))
        winner, closed = self.in_session(lambda: self.confirm(self.search.run()))
        return self.report(winner, closed)

    confirming = False
    confirmation = None

    def reserved_s(self) -> float:
        """While the search runs, the budget keeps room for the winner's second measurement beside the original."""
        return 0.0 if self.confirming else 2 * self.estimate_s()

    def last_doctor(self) -> DoctorReport | None:
        """The doctor's report for the active release (doctor.json), whose estimates order the axes."""
        ok, stdout, _ = self.remote.run(shlex.join(["cat", ServicePaths(self.service).release_file(self.active,
                                                                                                       DOCTOR_FILE)]))
        try:  # read as the doctor wrote it (hostside/contract/findings.DoctorReport); an unreadable one orders nothing
            return DoctorReport.loads(stdout) if ok and stdout.strip() else None
        except DocumentError as error:
            self.say(f"the doctor's report is not used: {error}")
            return None

    def confirm(self, winner):
        """The winner measured again right beside the original before it is written (discipline.confirmed):
        the original, then the winner, in this session; a winner that does not hold its gain is not written."""
        baseline = self.search.baseline
        if winner is None or baseline is None or winner is baseline or winner.candidate.id == tune.BASELINE.id:
            return winner
        self.confirming = True
        self.say(f"the winner {winner.candidate.id}: measuring it again beside the original before it is written")
        item, problem = self.stage_files(winner.candidate)
        results = []
        try:
            if item is None:
                raise tune.BudgetExhausted(f"the winner no longer validates: {problem}")
            results.append(self.run_item(tune.Candidate("original (again)", "confirm"),
                                         {"release_id": self.active, "files": None}, restart=False))
            results.append(self.run_item(tune.Candidate(f"{winner.candidate.id} (again)", "confirm"), item,
                                         restart=False))
            ok, why = tune_discipline.confirmed(results[1], results[0], self.settings.objective)
        except tune.BudgetExhausted as exhausted:
            ok, why = False, f"not measured again beside the original ({exhausted}): not written"
        self.confirmation = {"winner": winner.candidate.id, "confirmed": ok, "why": why,
                             "results": [m.to_json() for m in results]}
        self.say(f"the winner {winner.candidate.id}: {why}")
        return winner if ok else baseline

    def assumed(self):
        """On a simulated host: candidate -> the simulator's assumed factors it rests on (sim/hardware.py: factors
        nobody measured on that card and engine), so the search never adopts a gain the simulator invented; None on
        a real host, where every figure is measured."""
        if not self.plan.simulated:
            return None
        env = self.profile.env_values()
        machine = hardware.load_data(env.get("SGLANG_SIM_MACHINE", "2xa6000-pcie"))
        model = hardware.load_data(env.get("SGLANG_SIM_MODEL", "qwen3.6-27b-fp8"))
        original = self.original_flags

        def assumed(candidate):
            flags = {**original, **candidate.flag_changes}
            return hardware.assumed_factors(machine, {k: v for k, v in flags.items() if k in candidate.flag_changes},
                                            model)

        return assumed

    def planned(self) -> int:
        return self.search.planned()

    def reference(self):
        return self.search.baseline

    def lever_choices(self) -> dict:
        """The kv, attention and graphs axes' values: what SGLang's resolution accepts (axes.accepted_values); the
        vocab axis's maps (vocab.offer)."""
        flags = [flag for flag, axis in tune_axes.AXIS_OF.items() if axis in self.settings.axes]
        if not flags and "vocab" not in self.settings.axes:
            return {}
        ask, choices = asker(self.plan, self.data, self.detected)
        start = starter(self.plan, self.data, self.detected)
        out = {}
        if "vocab" in self.settings.axes:  # the maps the snapshots hold, each asked of SGLang's resolution
            out[tune_vocab.FLAG] = tune_vocab.offer(self.profile, self.original_flags, ask)
            self.say(f"SGLang's resolution: {out[tune_vocab.FLAG].summary()}")
        for flag in flags:
            if tune_axes.LEVERS[flag].with_spec and not tune.spec_settings(self.original_flags):
                continue
            wanted = self.settings.attention if tune_axes.AXIS_OF[flag] == "attention" else None  # tune_attention
            try:
                out[flag] = tune_axes.accepted_values(flag, choices(flag), ask, wanted, start)
            except ValueError as error:
                raise TuneError(f"{flag}: {error}") from None
            self.say(f"SGLang's resolution: {out[flag].summary()}")
        return out

    def measure(self, candidate: tune.Candidate) -> tune.Measured:
        saved = self.saved.get(tune_results.candidate_key(candidate))
        if saved is not None:
            self.say(f"[{len(self.all_results) + 1}] {candidate.id}: resumed from saved results "
                     f"({saved.decode or 0:.1f} tok/s)")
            self.all_results.append(saved)
            return saved
        if candidate.id == tune.BASELINE.id:
            item = {"release_id": self.active, "files": None}
        else:
            item, problem = self.stage_files(candidate)
            if item is None:
                self.say(f"[{len(self.all_results) + 1}] {candidate.id}: INVALID, never started: {problem}")
                measured = tune.Measured(candidate, valid=False, invalid_reason=problem)
                self.record(measured)
                return measured
        measured = self.run_item(candidate, item, restart=False)
        noise = measured.noise()
        if measured.measured and noise is not None and noise > self.settings.objective.noise_max_pct:
            self.say(f"    {candidate.id}: spread {noise:.1f} % > {self.settings.objective.noise_max_pct:g} %: "
                     "measuring again")
            try:
                again = self.run_item(candidate, {"release_id": item["release_id"], "files": None}, restart=False)
                measured.repeats += again.repeats
                measured.duration_s += again.duration_s
            except tune.BudgetExhausted:
                pass
        self.record(measured)
        return measured

    # --- saved results (resumption) ---------------------------------------------------------------
    def results_path(self) -> Path:
        return self.results_dir / f"tune-{self.active}.json"

    def load_saved(self) -> dict:
        texts = []
        try:
            texts.append(self.results_path().read_text())
        except (OSError, ValueError):
            pass
        ok, stdout, _ = self.remote.run(shlex.join(["cat", ServicePaths(self.service).release_file(self.active,
                                                                                                       TUNE_RESULTS_FILE)]))
        if ok:
            texts.append(stdout)
        return tune_results.saved_results(texts, tune_results.settings_signature(self.settings.measurement()),
                                          self.active)

    def document(self, winner=None) -> dict:
        return {"host": self.host_name, "service": self.service, "profile": str(self.profile.source),
                "original": self.active, "session": self.session, "stamp": self.stamp,
                "signature": tune_results.settings_signature(self.settings.measurement()),
                "settings": {**self.settings.measurement(), "axes": list(self.settings.axes),
                             "budget_s": self.settings.budget_s,
                             "objective": self.settings.objective.__dict__},
                "elapsed_s": round(self.elapsed(), 1), "stopped": self.search.stopped,
                "unreached": tune_discipline.unreached(self.search, self.search.stopped_axis, self.search.stopped),
                "confirmation": self.confirmation,
                "winner": winner.candidate.id if winner else None,
                "results": [m.to_json() for m in self.all_results]}

    def record(self, measured: tune.Measured):
        self.all_results.append(measured)
        path = self.results_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(TuneResults.from_dict(self.document()).dump())

    # --- the report -------------------------------------------------------------------------------
    def report(self, winner: tune.Measured | None, closed) -> dict:
        baseline = self.search.baseline
        results = self.all_results
        text = tune_report.table(results, baseline, winner, self.settings.objective, self.original_flags,
                                 self.search.assumed)
        unreached = tune_discipline.unreached(self.search, self.search.stopped_axis, self.search.stopped)
        notes = self.search.axis_notes()
        if notes:
            text += "\naxes:\n" + "\n".join(f"  {line}" for line in notes)
        if unreached:
            text += "\nnot reached within tune_budget_s:\n" + "\n".join(f"  {line}" for line in unreached)
        if self.confirmation:
            text += f"\nwinner measured again: {self.confirmation['why']}"
        front = tune_report.pareto_table(results)
        kinds = tune_report.kind_table(results, baseline)
        self.say("tune results (decode/aggr: robust score median - 1.4826 MAD over repeats, tok/s):")
        for block in (text, front, kinds):
            for line in block.splitlines():
                self.say(f"    {line}")
        if self.search.stopped:
            self.say(f"search stopped early: {self.search.stopped}")
        document = self.document(winner)
        document["restore"] = closed.restore.to_dict() if closed.restore else None  # session.TuneSession
        tuned_path = None
        if winner is not None and baseline is not None and winner is not baseline and winner.candidate.flags + \
                winner.candidate.env:
            tuned_path = self.write_tuned(winner, baseline)
            self.say(f"winner {winner.candidate.id}: {winner.decode:.1f} tok/s single stream vs {baseline.decode:.1f} "
                     f"({(winner.decode / baseline.decode - 1) * 100:+.1f} %); written to {tuned_path}")
            self.say(f"deploy it with: pyinfra inventory/<host>.py deploy.py --data profile={tuned_path}")
        else:
            self.say("no candidate beat the original release within the objective: no tuned profile written")
        document["tuned_profile"] = str(tuned_path) if tuned_path else None
        document["table"] = text
        document["by_kind"] = kinds
        path = self.results_path()
        text = TuneResults.from_dict(document).dump()  # the fields the doctor and a later tune read, checked
        path.write_text(text)
        (self.work / "table.txt").write_text(text + ("\n" + front if front else "") + ("\n" + kinds if kinds else "")
                                             + "\n")
        self.remote.put(text,
                        ServicePaths(self.service).release_file(self.active, TUNE_RESULTS_FILE))
        plot = tune_report.steps_plot(results, self.original_flags, self.work / "steps.png")
        self.say(f"results: {path} (and releases/{self.active}/tune-results.json on the host); table: "
                 f"{self.work / 'table.txt'}" + (f"; plot: {plot}" if plot else ""))
        return document

    def write_tuned(self, winner: tune.Measured, baseline: tune.Measured) -> Path:
        comments = tune_report.tuned_comments(winner, baseline, self.original_flags, self.original_env)
        description = (f"TUNED on {self.host_name} {self.stamp} from {Path(self.profile.source).name} "
                       f"(release {self.active}): {winner.candidate.id}, {winner.decode:.1f} vs {baseline.decode:.1f} "
                       "tok/s single stream")
        text = tune_edit.apply_changes(self.profile_text, winner.candidate, comments, description=description)
        source = Path(self.profile.source)
        path = source.with_name(source.name.removesuffix(".yaml") + ".tuned.yaml")
        header = (f"# Written by `tune.py` on {self.host_name} at {self.stamp}: measured with the gate's client, "
                  f"{self.settings.repeats} repeats per candidate;\n# results: {self.results_path()}\n")
        path.write_text(header + text)
        return path
