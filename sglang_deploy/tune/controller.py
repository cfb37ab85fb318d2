"""Tune, the controller's side: validate candidates, run them through the host's tune session, keep the budget.

Called by the tune.py verb inside a pyinfra python.call (so `remote` wraps a live pyinfra host); the
search and the scores are in search.py (pure), the candidate's profile text in edit.py, the report's tables
in report.py, what saved results are reused in results.py, the temporary releases and the restore in
hostside/tune_session.py (on the host, under the lock).
"""

from __future__ import annotations

import json
import shlex
import signal
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import search as tune, edit as tune_edit, report as tune_report, results as tune_results
from ..gate import RESULTS_DIR, gate_config
from ..settings import SettingsError, TuneArgs, origin
from ..settings_types import int_list
from ..hostside import documents
from ..hostside.documents import GateConfig, ReleaseMeta
from ..hostside.store import content_hash, next_release_id
from ..layout import host_program
from ..plan import PlanError, plan_for_host
from ..release_plan import STORE_ROOT, build_meta, profile_snapshot

POLL_S = 1.5


class TuneError(RuntimeError):
    pass


class Overlay:
    """Host data with some keys replaced (the candidate's profile path)."""

    def __init__(self, data, **overrides):
        self.data, self.overrides = data, overrides

    def get(self, key, default=None):
        if key in self.overrides:
            return self.overrides[key]
        value = self.data.get(key) if hasattr(self.data, "get") else None
        return default if value is None else value


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


def allow_candidates(directory: Path) -> None:
    """The tune's own candidate profiles (written by this process under results/) are profiles host data may name:
    the directory is added to $SGLANG_DEPLOY_PROFILE_DIRS for this process, as an operator names theirs."""
    import os

    from ..settings_types import PROFILE_DIRS_VARIABLE

    named = [p for p in os.environ.get(PROFILE_DIRS_VARIABLE, "").split(":") if p]
    if str(directory.resolve()) not in named:
        os.environ[PROFILE_DIRS_VARIABLE] = ":".join(named + [str(directory.resolve())])


class Runner:
    """One tune: a session on the host, the search, the report. `remote` has run(command) -> (ok, stdout,
    stderr) and put(text, path); `say` prints a line."""

    def __init__(self, host_name: str, data, remote, say, detected=None, results_dir: Path = RESULTS_DIR):
        self.host_name, self.data, self.remote, self.say = host_name, data, remote, say
        self.detected = detected
        self.results_dir = Path(results_dir) / host_name
        self.interrupted = False
        self.session = None
        self.seq = 0
        self.log_offset = 0
        self.durations: list[float] = []
        self.restart_estimate = None

    # --- host calls -------------------------------------------------------------------------------
    def sh(self, *argv, check=True):
        """Run a host program: argv[0] is its module in the host package (tune_session, store)."""
        ok, stdout, stderr = self.remote.run(host_program(*argv))
        if check and not ok:
            raise TuneError(f"{argv[0]} {argv[1]} failed on {self.host_name}:\n{(stderr or stdout)[-2000:]}")
        return ok, stdout

    def session_cmd(self, command, *extra, check=True):
        ok, stdout = self.sh("tune_session", command, "--service", self.service, "--session", self.session, *extra,
                             check=check)
        try:
            return json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {}
        except ValueError:
            return {"state": "unreadable", "message": stdout[-500:]}

    # --- the tune ---------------------------------------------------------------------------------
    def run(self):
        try:
            plan = plan_for_host(self.data, detected=self.detected)
        except PlanError as error:
            raise TuneError(f"nothing was changed on the host.\n{error}") from None
        self.plan, self.profile = plan, plan.profile
        self.service = self.profile.service.name
        self.settings = settings_from(self.data, self.profile)
        self.profile_text = Path(self.profile.source).read_text()
        _, stdout = self.sh("store", "state", "--service", self.service)
        store = json.loads(stdout)
        active = store["state"].get("active")
        if store.get("lock"):
            holder = store["lock"]
            raise TuneError(f"the release store is locked by {holder.get('owner')} (since {holder.get('since')}); "
                            "nothing was changed")
        active_meta = next((r for r in store["releases"] if r["id"] == active), None)
        if not active_meta:
            raise TuneError(f"no active release of {self.service}: deploy {self.profile.source} first")
        if active_meta.get("content_hash") != content_hash(plan.rendered.unit, plan.rendered.env):
            raise TuneError(f"the active release {active} was not deployed from {self.profile.source} (its unit or "
                            "environment differ): tune starts from the running profile; deploy it first, or pass "
                            f"--data profile=<the profile of {active}>")
        if not store.get("consistent"):
            raise TuneError(f"the host is not consistent with its active release {active}: deploy first")
        self.active, self.store = active, store
        self.release_ids = [r["id"] for r in store["releases"]]
        self.by_hash = {r.get("content_hash"): r["id"] for r in store["releases"]}
        self.stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.work = self.results_dir / f"tune-{active}-{self.stamp}"
        (self.work / "candidates").mkdir(parents=True, exist_ok=True)
        allow_candidates(self.work / "candidates")
        self.saved = self.load_saved() if self.settings.resume else {}
        self.all_results: list[tune.Measured] = []
        flags = {k: v for k, v in self.profile.sglang.flags.items() if v is not False}
        env = {k: (v.model_dump() if hasattr(v, "model_dump") else v) for k, v in self.profile.environment.items()}
        self.original_flags, self.original_env = flags, env
        self.search = tune.Search(flags, env, self.settings.axes, self.settings.concurrency,
                                  self.data.get("gpu_topology") or (self.detected or {}).get("gpu_topology"),
                                  self.measure, self.settings.objective, self.settings.steps, self.settings.topks,
                                  drafters=[d.model_dump() for d in self.profile.tune.drafters],
                                  choices=self.lever_choices())
        self.say(f"tune {self.profile.name} on {self.host_name}: original release {active}; space "
                 f"{','.join(self.settings.axes)}; budget {tune.eta_text(self.settings.budget_s)}; "
                 f"{self.settings.repeats} repeats x {self.settings.samples} samples x {self.settings.max_new_tokens} "
                 f"tokens, aggregate at concurrency {self.settings.concurrency}; up to {self.search.planned()} "
                 "candidates" + (f"; {len(self.saved)} saved result(s) to resume from" if self.saved else ""))
        self.started = time.monotonic()
        self.session = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        previous = signal.signal(signal.SIGINT, self.on_sigint)
        outcome = None
        try:
            opened = self.session_cmd("open", "--heartbeat-s", str(self.settings.heartbeat_s), "--owner",
                                      f"sglang-deploy tune {self.session}", check=False)
            if opened.get("state") != "ready":
                raise TuneError(f"the tune session did not start: {opened.get('message')}")
            self.restart_estimate = opened.get("start_estimate_s")
            self.say(f"tune session {self.session} holds the release lock on the host (unit {opened.get('unit')}); "
                     "the original release is restored at the end, on Ctrl-C, or when this controller stops polling "
                     f"for {self.settings.heartbeat_s:.0f} s")
            winner = self.search.run()
            outcome = "done"
        finally:
            closed = self.close(abort=outcome is None)
            signal.signal(signal.SIGINT, previous)
        return self.report(winner, closed)

    def lever_choices(self) -> dict:
        """The kv and attention axes' values: what SGLang's resolution accepts (tune_axes.accepted_values)."""
        from . import axes as tune_axes
        from .levers import asker

        wanted = {"--kv-cache-dtype": ("kv", None), "--attention-backend": ("attention", self.settings.attention),
                  "--speculative-draft-attention-backend": ("attention", self.settings.attention)}
        flags = [flag for flag, (axis, _) in wanted.items() if axis in self.settings.axes]
        if not flags:
            return {}
        ask, choices = asker(self.plan, self.data, self.detected)
        out = {}
        for flag in flags:
            if flag == "--speculative-draft-attention-backend" and not tune.spec_settings(self.original_flags):
                continue
            try:
                out[flag] = tune_axes.accepted_values(flag, choices(flag), ask, wanted[flag][1])
            except ValueError as error:
                raise TuneError(f"{flag}: {error}") from None
            self.say(f"SGLang's resolution: {out[flag].summary()}")
        return out

    def on_sigint(self, *_):
        self.interrupted = True

    def close(self, abort: bool) -> dict:
        if not self.session:
            return {}
        self.say("closing the tune session: " + ("ABORT, " if abort else "") + f"restoring release {self.active}")
        status = self.session_cmd("close", *(["--abort", "--why", "interrupted on the controller"] if abort else []),
                                  check=False)
        self.drain_log()
        restore = status.get("restore") or {}
        if restore.get("needed"):
            self.say(f"original release {self.active} " + ("running again" if restore.get("ready") else
                                                            f"FAILED TO START: {restore.get('detail')}")
                     + (f" after {restore.get('elapsed_s')} s" if restore.get("elapsed_s") else ""))
        elif status.get("state") in ("closed", "aborted"):
            self.say(f"original release {self.active} was never stopped")
        else:
            self.say(f"tune session state: {status.get('state')}: {status.get('message')}")
        return status

    def drain_log(self):
        document = self.session_cmd("poll", "--log-offset", str(self.log_offset), "--results-from", "999999",
                                    check=False)
        self.show_log(document)

    def show_log(self, document):
        text = document.get("log") or ""
        for line in text.splitlines():
            self.say(f"    host: {line}")
        self.log_offset = document.get("log_offset", self.log_offset)

    # --- one candidate ----------------------------------------------------------------------------
    def stage_files(self, candidate: tune.Candidate):
        """Validate the candidate (SGLang's parser, its resolution, the rules) and render its release."""
        text = tune_edit.apply_changes(self.profile_text, candidate)
        path = self.work / "candidates" / f"{candidate.id.replace('+', '_')}.yaml"
        path.write_text(text)
        try:
            plan = plan_for_host(Overlay(self.data, profile=str(path)), detected=self.detected)
        except PlanError as error:
            lines = [line.replace(str(path), path.name) for line in str(error).splitlines() if line.strip()]
            return None, " | ".join(lines[1:3] or lines[:1])
        digest = content_hash(plan.rendered.unit, plan.rendered.env)
        if digest in self.by_hash:
            return {"release_id": self.by_hash[digest], "files": None}, None
        release_id = next_release_id(self.release_ids, digest)
        self.release_ids.append(release_id)
        self.by_hash[digest] = release_id
        from ..drafter import draft_weights

        # the candidate's draft model, recorded like a deploy's: a switch to it checks the snapshot, prune keeps it
        meta = build_meta(plan, release_id, draft=draft_weights(plan.profile)).but(
            tune={"session": self.session, "temporary": True, "candidate": candidate.id})
        files = {"sglang.service": plan.rendered.unit, "sglang.env": plan.rendered.env,
                 documents.PROFILE_FILE: profile_snapshot(plan),
                 GateConfig.FILE: gate_config(plan).dump(),
                 documents.RESOLVED_FILE: json.dumps(plan.resolution, indent=1, sort_keys=True) + "\n",
                 ReleaseMeta.FILE: meta.dump()}
        return {"release_id": release_id, "files": files}, None

    def estimate_s(self) -> float:
        measured = [d for d in self.durations if d]
        if measured:
            return sorted(measured)[len(measured) // 2] * 1.1
        per_request = self.settings.max_new_tokens / 30 + 1.0
        per_repeat = self.settings.samples * per_request + per_request * 1.2
        return self.settings.repeats * per_repeat + (self.restart_estimate or 10)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

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

    def run_item(self, candidate, item, restart) -> tune.Measured:
        if self.interrupted:
            raise TuneError("interrupted (Ctrl-C)")
        estimate = self.estimate_s()
        left = self.settings.budget_s - self.elapsed()
        if estimate > left:
            raise tune.BudgetExhausted(f"budget: the next candidate ({candidate.id}) needs about "
                                       f"{tune.eta_text(estimate)}, {tune.eta_text(left)} left")
        self.seq += 1
        seq = self.seq
        # A candidate that hangs at start must not outlive the budget (the profile's start timeout may be 30 min).
        document = {"seq": seq, "id": candidate.id, "release_id": item["release_id"], "restart": restart,
                    "settings": self.settings.measurement(), "files": item.get("files"),
                    "start_timeout_s": max(60.0, min(float(self.profile.service.start_timeout_s), left - estimate / 2))}
        queue = f"{STORE_ROOT}/{self.service}/tune/{self.session}/queue"
        self.remote.put(json.dumps(document), f"{queue}/{seq:04d}.tmp")
        ok, _, stderr = self.remote.run(shlex.join(["mv", f"{queue}/{seq:04d}.tmp", f"{queue}/{seq:04d}.json"]))
        if not ok:
            raise TuneError(f"could not queue candidate {candidate.id}: {stderr}")
        remaining = max(0, self.search.planned() - len(self.all_results) - 1)
        eta = min(remaining * estimate, max(0.0, left - estimate)) + estimate
        self.say(f"[{len(self.all_results) + 1}/<={self.search.planned()}] {candidate.id} "
                 f"(release {item['release_id']}): measuring; elapsed {tune.eta_text(self.elapsed())}, ETA "
                 f"{tune.eta_text(eta)}, budget left {tune.eta_text(left)}")
        while True:
            if self.interrupted:
                raise TuneError("interrupted (Ctrl-C): the host restores the original release")
            document = self.session_cmd("poll", "--log-offset", str(self.log_offset), "--results-from", str(seq),
                                        check=False)
            self.show_log(document)
            result = (document.get("results") or {}).get(str(seq))
            if result:
                break
            status = document.get("status") or {}
            if status.get("state") in ("aborted", "failed", "closed", "missing"):
                raise TuneError(f"the tune session ended: {status.get('state')}: {status.get('message')}")
            time.sleep(POLL_S)
        duration = result.get("duration_s") or 0.0
        self.durations.append(duration)
        measured = tune.Measured(candidate, error=None if result.get("ok") else (result.get("error") or "failed"),
                                 repeats=result.get("repeats") or [], duration_s=duration,
                                 restart_s=result.get("restart_s"), release_id=item["release_id"])
        if result.get("config_problems"):
            measured.error = "effective config differs: " + result["config_problems"][0]
        if measured.measured:
            baseline = self.search.baseline
            vs = (f", {(measured.decode / baseline.decode - 1) * 100:+.1f} % vs original"
                  if baseline and baseline.decode else "")
            self.say(f"    {candidate.id}: {measured.decode:.1f} tok/s single stream (spread {measured.noise():.1f} %), "
                     f"{measured.aggregate or 0:.1f} tok/s aggregate, tau {measured.tau or 0:.2f}{vs}; took "
                     f"{duration:.0f} s")
        else:
            self.say(f"    {candidate.id}: {measured.error}")
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
        ok, stdout, _ = self.remote.run(shlex.join(["cat", f"{STORE_ROOT}/{self.service}/releases/{self.active}/"
                                                           + documents.TUNE_RESULTS_FILE]))
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
                "winner": winner.candidate.id if winner else None,
                "results": [m.to_json() for m in self.all_results]}

    def record(self, measured: tune.Measured):
        self.all_results.append(measured)
        path = self.results_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.document(), indent=1) + "\n")

    # --- the report -------------------------------------------------------------------------------
    def report(self, winner: tune.Measured | None, closed: dict) -> dict:
        baseline = self.search.baseline
        results = self.all_results
        text = tune_report.table(results, baseline, winner, self.settings.objective, self.original_flags)
        front = tune_report.pareto_table(results)
        kinds = tune_report.kind_table(results, baseline)
        self.say("tune results (decode/aggr: robust score median - 1.4826 MAD over repeats, tok/s):")
        for block in (text, front, kinds):
            for line in block.splitlines():
                self.say(f"    {line}")
        if self.search.stopped:
            self.say(f"search stopped early: {self.search.stopped}")
        document = self.document(winner)
        document["restore"] = closed.get("restore")
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
        path.write_text(json.dumps(document, indent=1) + "\n")
        (self.work / "table.txt").write_text(text + ("\n" + front if front else "") + ("\n" + kinds if kinds else "")
                                             + "\n")
        self.remote.put(json.dumps(document, indent=1) + "\n",
                        f"{STORE_ROOT}/{self.service}/releases/{self.active}/{documents.TUNE_RESULTS_FILE}")
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
