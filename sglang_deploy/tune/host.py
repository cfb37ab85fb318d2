"""The tune's host session, the controller's side: the store checks, the session that holds the release lock on the
host (hostside/tune_session.py), each candidate validated and staged as a temporary release, queued and measured
there, the budget. Shared by the tune (controller.py: the search and its report) and the doctor's regression bisect
(../bisect_run.py: one release's differences, each measured alone).
"""

from __future__ import annotations

import os
import shlex
import signal
import time
from datetime import datetime, timezone
from pathlib import Path

from . import edit as tune_edit, search as tune
from ..drafter import draft_weights
from ..settings_types import PROFILE_DIRS_VARIABLE
from .vocab import label_ignored
from ..gate import gate_config
from ..results import RESULTS_DIR
from ..hostside.contract.document import DocumentError
from ..hostside.contract.answers import StoreReport
from ..hostside.contract.paths import ServicePaths
from ..hostside.contract.files import ReleaseFiles
from ..hostside.contract.release import Resolution, TuneMark
from ..hostside.contract.session import TuneItem, TunePoll, TuneSession
from ..hostside.store import content_hash, next_release_id
from ..layout import host_program
from ..plan import PlanError, plan_for_host
from ..release_plan import build_meta, profile_snapshot

POLL_S = 1.5
# A poll waits on the host up to this long for a result or the session's end (tune_session.py poll --wait-s), the
# log lines written meanwhile coming with the answer: one host process per POLL_WAIT_S instead of one every POLL_S;
# a Ctrl-C is seen within it.
POLL_WAIT_S = 5.0


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



def allow_candidates(directory: Path) -> None:
    """The tune's own candidate profiles (written by this process under results/) are profiles host data may name:
    the directory is added to $SGLANG_DEPLOY_PROFILE_DIRS for this process, as an operator names theirs."""
    named = [p for p in os.environ.get(PROFILE_DIRS_VARIABLE, "").split(":") if p]
    if str(directory.resolve()) not in named:
        os.environ[PROFILE_DIRS_VARIABLE] = ":".join(named + [str(directory.resolve())])



class HostSession:
    """Temporary releases measured on the host under the lock, the original always restored. `remote` has
    run(command) -> (ok, stdout, stderr) and put(text, path); `say` prints a line. A subclass sets `settings` (the
    tune's Settings: the measurement and the budget) and gives planned() and reference()."""

    verb = "tune"

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
        self.all_results: list[tune.Measured] = []

    def planned(self) -> int:
        """An upper bound of the measurements this run makes (for the ETA)."""
        return len(self.all_results) + 1

    def reserved_s(self) -> float:
        """Budget kept back from the next measurement (the tune's winner confirmation)."""
        return 0.0

    def reference(self) -> tune.Measured | None:
        """The measurement each new one is compared with in its progress line."""
        return None

    # --- host calls -------------------------------------------------------------------------------
    def sh(self, *argv, check=True):
        """Run a host program: argv[0] is its module in the host package (tune_session, store)."""
        ok, stdout, stderr = self.remote.run(host_program(*argv))
        if check and not ok:
            raise TuneError(f"{argv[0]} {argv[1]} failed on {self.host_name}:\n{(stderr or stdout)[-2000:]}")
        return ok, stdout

    def session_cmd(self, command, *extra, check=True):
        """The session command's answer, its output's last line: poll's a TunePoll (None: no answer, an empty or torn
        output: polled again), open's and close's a TuneSession (state "unreadable" when there is none, or it
        cannot be read as one: the message says why, naming the field). A poll answer that is JSON but not a
        TunePoll is a TuneError naming the field."""
        ok, stdout = self.sh("tune_session", command, "--service", self.service, "--session", self.session, *extra,
                             check=check)
        answer, source = (TunePoll if command == "poll" else TuneSession), f"tune_session {command}'s answer"
        try:
            return answer.loads(stdout.strip().splitlines()[-1] if stdout.strip() else "", source)
        except DocumentError as error:
            torn = str(error).startswith(f"{source}: not JSON")
            if command == "poll" and torn:
                return None
            if command == "poll":
                raise TuneError(str(error)) from None
            return TuneSession(state="unreadable", message=stdout[-500:] if torn else str(error), status=None)


    # --- the start: the profile, the store, the session -------------------------------------------
    def prepare(self, configure=lambda: None):
        """The running profile's plan, configure() (the caller's settings, before anything reaches the host) and the
        store's state; refuses (TuneError, nothing changed) when the store is locked, or the active release was not
        deployed from host data `profile`, or the host is not consistent."""
        try:
            plan = plan_for_host(self.data, detected=self.detected)
        except PlanError as error:
            raise TuneError(f"nothing was changed on the host.\n{error}") from None
        self.plan, self.profile = plan, plan.profile
        self.service = self.profile.service.name
        self.profile_text = Path(self.profile.source).read_text()
        configure()
        _, stdout = self.sh("store", "state", "--service", self.service)
        try:
            store = StoreReport.loads(stdout, "the release store's state (hostside.store state)")
        except DocumentError as error:
            raise TuneError(f"{error}; nothing was changed") from None
        active = store.state.active
        if store.lock:
            raise TuneError(f"the release store is locked by {store.lock.owner} (since {store.lock.since}); "
                            "nothing was changed")
        active_meta = store.release(active)
        if not active_meta:
            raise TuneError(f"no active release of {self.service}: deploy {self.profile.source} first")
        if active_meta.content_hash != content_hash(plan.rendered.unit, plan.rendered.env):
            raise TuneError(f"the active release {active} was not deployed from {self.profile.source} (its unit or "
                            f"environment differ): {self.verb} starts from the running profile; deploy it first, or "
                            f"pass --data profile=<the profile of {active}>")
        if not store.consistent:
            raise TuneError(f"the host is not consistent with its active release {active}: deploy first")
        self.active, self.store = active, store
        self.release_ids = [r.id for r in store.releases]
        self.by_hash = {r.content_hash: r.id for r in store.releases}
        self.stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.work = self.results_dir / f"{self.verb}-{active}-{self.stamp}"
        (self.work / "candidates").mkdir(parents=True, exist_ok=True)
        allow_candidates(self.work / "candidates")
        self.original_flags = {k: v for k, v in self.profile.sglang.flags.items() if v is not False}
        self.original_env = {k: (v.model_dump() if hasattr(v, "model_dump") else v)
                             for k, v in self.profile.environment.items()}
        return store

    def in_session(self, body):
        """Open the host session (it takes the lock), run body(), close it (restoring the original release, also on
        Ctrl-C and on any error): (body's result, the session's closing status)."""
        self.started = time.monotonic()
        self.session = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        previous = signal.signal(signal.SIGINT, self.on_sigint)
        outcome = result = None
        try:
            opened = self.session_cmd("open", "--heartbeat-s", str(self.settings.heartbeat_s), "--owner",
                                      f"sglang-deploy {self.verb} {self.session}", check=False)
            if opened.state != "ready":
                raise TuneError(f"the {self.verb} session did not start: {opened.message}")
            self.restart_estimate = opened.status.start_estimate_s if opened.status else None
            self.say(f"{self.verb} session {self.session} holds the release lock on the host (unit "
                     f"{opened.unit}); the original release is restored at the end, on Ctrl-C, or when this "
                     f"controller stops polling for {self.settings.heartbeat_s:.0f} s")
            result = body()
            outcome = "done"
        finally:
            closed = self.close(abort=outcome is None)
            signal.signal(signal.SIGINT, previous)
        return result, closed

    def poll_wait_s(self) -> float:
        """How long one poll waits on the host for news: POLL_WAIT_S, and at most a quarter of the heartbeat (the
        poll touches it only as it starts, so a poll that outlives this controller holds the session that long)."""
        return min(POLL_WAIT_S, self.settings.heartbeat_s / 4)

    def on_sigint(self, *_):
        self.interrupted = True

    def close(self, abort: bool) -> TuneSession:
        """The session's closing answer (its restore: TuneSession.restore); state "none" when no session was opened."""
        if not self.session:
            return TuneSession(state="none", message="no session was opened", status=None)
        self.say("closing the tune session: " + ("ABORT, " if abort else "") + f"restoring release {self.active}")
        status = self.session_cmd("close", *(["--abort", "--why", "interrupted on the controller"] if abort else []),
                                  check=False)
        self.drain_log()
        restore = status.restore
        if restore and restore.needed:
            self.say(f"original release {self.active} " + ("running again" if restore.ready else
                                                            f"FAILED TO START: {restore.detail}")
                     + (f" after {restore.elapsed_s} s" if restore.elapsed_s else ""))
        elif status.state in ("closed", "aborted"):
            self.say(f"original release {self.active} was never stopped")
        else:
            self.say(f"tune session state: {status.state}: {status.message}")
        return status

    def drain_log(self):
        try:
            document = self.session_cmd("poll", "--log-offset", str(self.log_offset), "--results-from", "999999",
                                        check=False)
        except TuneError as error:  # while closing: said, the close's own answer decides
            self.say(f"the session's log could not be read: {error}")
            return
        self.show_log(document)

    def show_log(self, document: TunePoll | None):
        if document is None:  # no answer this time
            return
        for line in document.log.splitlines():
            self.say(f"    host: {line}")
        self.log_offset = document.log_offset

    # --- one candidate ----------------------------------------------------------------------------
    def candidate_text(self, candidate: tune.Candidate) -> str:
        """The candidate's profile: the running profile's text with its changes (comments kept)."""
        return tune_edit.apply_changes(self.profile_text, candidate)

    def candidate_plan(self, candidate: tune.Candidate):
        """Validate the candidate (SGLang's parser, its resolution, the rules): (its plan, None) or (None, why not)."""
        text = self.candidate_text(candidate)
        path = self.work / "candidates" / f"{candidate.id.replace('+', '_')}.yaml"
        path.write_text(text)
        try:
            plan = plan_for_host(Overlay(self.data, profile=str(path)), detected=self.detected)
        except PlanError as error:
            lines = [line.replace(str(path), path.name) for line in str(error).splitlines() if line.strip()]
            return None, " | ".join(lines[1:3] or lines[:1])
        # A combination SGLang would run as another (fa3 with fp8_e5m2 KV runs triton: check's sglang-swap) is not
        # measured under a label it does not run; nor one the release's code does not show to start on this card.
        for note in plan.hardware_notes:
            if note.endswith(("[sglang-swap]", "[start-not-shown]")):
                return None, note.replace(str(path), path.name).removeprefix("warning: ")
        return plan, None

    def candidate_problem(self, candidate: tune.Candidate) -> str | None:
        """Why the candidate is not valid here (candidate_plan), without staging anything; None: it is."""
        return self.candidate_plan(candidate)[1]

    def stage_files(self, candidate: tune.Candidate):
        """Validate the candidate and render its release, a temporary one of this session (its meta.json's tune
        part names the session: stage inside in_session)."""
        plan, problem = self.candidate_plan(candidate)
        if plan is None:
            return None, problem
        digest = content_hash(plan.rendered.unit, plan.rendered.env)
        if digest in self.by_hash:
            return {"release_id": self.by_hash[digest], "files": None}, None
        release_id = next_release_id(self.release_ids, digest)
        self.release_ids.append(release_id)
        self.by_hash[digest] = release_id
        # the candidate's draft model, recorded like a deploy's: a switch to it checks the snapshot, prune keeps it
        meta = build_meta(plan, release_id, draft=draft_weights(plan.profile)).but(
            tune=TuneMark(session=self.session, temporary=True, candidate=candidate.id))
        files = ReleaseFiles(unit=plan.rendered.unit, env=plan.rendered.env, profile=profile_snapshot(plan),
                             gate_config=gate_config(plan), resolution=Resolution.from_dict(plan.resolution), meta=meta)
        return {"release_id": release_id, "files": files.by_name()}, None

    def estimate_s(self) -> float:
        measured = [d for d in self.durations if d]
        if measured:
            return sorted(measured)[len(measured) // 2] * 1.1
        per_request = self.settings.max_new_tokens / 30 + 1.0
        per_repeat = self.settings.samples * per_request + per_request * 1.2
        return self.settings.repeats * per_repeat + (self.restart_estimate or 10)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


    def run_item(self, candidate, item, restart) -> tune.Measured:
        if self.interrupted:
            raise TuneError("interrupted (Ctrl-C)")
        estimate = self.estimate_s()
        left = self.settings.budget_s - self.elapsed() - self.reserved_s()
        if estimate > left:
            raise tune.BudgetExhausted(f"budget: the next candidate ({candidate.id}) needs about "
                                       f"{tune.eta_text(estimate)}, {tune.eta_text(left)} left")
        self.seq += 1
        seq = self.seq
        # A candidate that hangs at start must not outlive the budget (the profile's start timeout may be 30 min).
        document = TuneItem.from_dict({  # the fields the host's session reads (hostside/contract/session.py)
            "seq": seq, "id": candidate.id, "release_id": item["release_id"], "restart": restart,
            "settings": self.settings.measurement(), "files": item.get("files"),
            "start_timeout_s": max(60.0, min(float(self.profile.service.start_timeout_s), left - estimate / 2))})
        queue = f"{ServicePaths(self.service).tune_dir(self.session)}/queue"
        self.remote.put(document.dump(), f"{queue}/{seq:04d}.tmp")
        ok, _, stderr = self.remote.run(shlex.join(["mv", f"{queue}/{seq:04d}.tmp", f"{queue}/{seq:04d}.json"]))
        if not ok:
            raise TuneError(f"could not queue candidate {candidate.id}: {stderr}")
        remaining = max(0, self.planned() - len(self.all_results) - 1)
        eta = min(remaining * estimate, max(0.0, left - estimate)) + estimate
        self.say(f"[{len(self.all_results) + 1}/<={self.planned()}] {candidate.id} "
                 f"(release {item['release_id']}): measuring; elapsed {tune.eta_text(self.elapsed())}, ETA "
                 f"{tune.eta_text(eta)}, budget left {tune.eta_text(left)}")
        while True:
            if self.interrupted:
                raise TuneError("interrupted (Ctrl-C): the host restores the original release")
            document = self.session_cmd("poll", "--log-offset", str(self.log_offset), "--results-from", str(seq),
                                        "--wait-s", f"{self.poll_wait_s():.1f}", check=False)
            self.show_log(document)
            if document is not None and document.unreadable:
                raise TuneError(f"the tune session's result could not be read: {document.unreadable[0]}")
            result = document.result(seq) if document is not None else None
            if result:
                break
            status = document.status if document is not None else None
            if status is not None and status.state in ("aborted", "failed", "closed", "missing"):
                raise TuneError(f"the tune session ended: {status.state}: {status.message}")
            if document is None:  # a torn answer came at once: the host did not wait
                time.sleep(POLL_S)
        duration = result.duration_s or 0.0
        self.durations.append(duration)
        measured = tune.Measured(candidate, error=None if result.ok else (result.error or "failed"),
                                 repeats=result.repeats, duration_s=duration, restart_s=result.restart_s,
                                 release_id=item["release_id"], allreduce=result.allreduce)
        if result.config_problems:
            measured.error = "effective config differs: " + result.config_problems[0]
        measured = label_ignored(measured, result.map_ignored)
        if measured.invalid_reason:
            self.say(f"    {candidate.id}: {measured.invalid_reason}")
        elif measured.measured:
            baseline = self.reference()
            vs = (f", {(measured.decode / baseline.decode - 1) * 100:+.1f} % vs original"
                  if baseline and baseline.decode else "")
            self.say(f"    {candidate.id}: {measured.decode:.1f} tok/s single stream (spread {measured.noise():.1f} %), "
                     f"{measured.aggregate or 0:.1f} tok/s aggregate, tau {measured.tau or 0:.2f}{vs}; took "
                     f"{duration:.0f} s")
        else:
            self.say(f"    {candidate.id}: {measured.error}")
        return measured

