"""A tune session's runner: the transient unit (`tune_session.py run`) that holds the release store's lock for the
whole session, stages each candidate the controller queued as a temporary release, switches to it (the switch's
activate), checks and measures it, and always restores the original release (see tune_session's docstring).

Also its files (Paths) and the pure helpers the controller's tests import. Standard library only.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from .. import evidence
from . import gate, output_check
from .client import read_api_key
from ..contract.document import DocumentError
from ..contract.files import ReleaseFiles
from ..contract.findings import TuneRestore
from ..contract.gate import GateConfig, Measurement
from ..contract.session import TuneClose, TuneItem, TuneItemResult, TuneStatus
from ..contract.store import Switching
from ..contract.switch import SwitchOutcome
from .listener import foreign_listener
from .service import cmdline_matches, service_status
from ..store import RELEASE_ID, Lock, Locked, Store, atomic_write, content_hash, now
from ..switch import activate

# The bench client runs as `python -m <this package>.bench` from the directory that holds the package.
PROGRAMS_PACKAGE = __package__.rpartition(".")[0]  # the host package (hostside): its programs run with -m
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # where -m finds it
EXIT_LOCKED = 4


class Abort(Exception):
    """The session must stop now and restore the original release (the reason is the message)."""


# --- pure helpers (imported by the controller's tests) --------------------------------------------

def heartbeat_stale(last_beat, now, heartbeat_s):
    return now - last_beat > heartbeat_s


def bench_command(probe_url, secrets_path, settings, warmup):
    """The gate's client (bench.py) for one repeat: single-stream samples, then one aggregate round.
    settings: the queued item's TuneMeasure (contract/session.py)."""
    return [sys.executable, "-m", f"{PROGRAMS_PACKAGE}.bench", "--url", probe_url, "--api-key-file", secrets_path,
            "--samples", str(settings.samples), "--warmup", str(warmup),
            "--max-new-tokens", str(settings.max_new_tokens), "--concurrency", str(settings.concurrency),
            "--aggregate-rounds", str(settings.aggregate_rounds)]


def by_kind(samples):
    """Median decode tok/s per content class of the prompt mix (acceptance, and so a drafter's gain, depends on it).
    samples: release.Sample."""
    kinds = {}
    for sample in samples:
        if sample.kind and sample.decode_tok_s:
            kinds.setdefault(sample.kind, []).append(sample.decode_tok_s)
    return {kind: sorted(values)[len(values) // 2] if len(values) % 2 else
            sum(sorted(values)[len(values) // 2 - 1:len(values) // 2 + 1]) / 2 for kind, values in kinds.items()}


def repeat_summary(measurement):
    """One repeat (a release.Measurement) reduced to the numbers the controller scores (medians over the
    repeat's samples)."""
    return {"decode_tok_s": measurement.decode_median, "aggregate_tok_s": measurement.aggregate_median,
            "accept_length": measurement.tau_median, "ttft_s": measurement.ttft_median,
            "samples": [s.decode_tok_s for s in measurement.samples],
            "by_kind": by_kind(measurement.samples),
            "errors": measurement.errors, "duration_s": measurement.duration_s}


def bench_measurement(done):
    """A repeat's measurement from the bench's completed process: its answer through the class, or
    Measurement.failed naming why there is none (an exit status, or the answer and the field it cannot read)."""
    if done.returncode != 0:
        return Measurement.failed([f"bench.py exited with {done.returncode}"])
    try:
        return Measurement.loads(done.stdout, Measurement.FILE)
    except DocumentError as error:
        return Measurement.failed([f"bench.py's answer cannot be read: {error}"])


# --- files ----------------------------------------------------------------------------------------

class Paths:
    """A tune session's files, in its directory (contract/paths.py ServicePaths.tune_dir; their documents:
    contract/session.py)."""
    def __init__(self, service, session):
        self.store = Store(service)
        self.root = self.store.paths.tune_dir(session)
        self.status = os.path.join(self.root, TuneStatus.FILE)
        self.heartbeat = os.path.join(self.root, "heartbeat")
        self.queue = os.path.join(self.root, "queue")
        self.results = os.path.join(self.root, "results")
        self.log = os.path.join(self.root, "session.log")
        self.close = os.path.join(self.root, TuneClose.FILE)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return default


def read_close(paths):
    """The controller's close request (TuneClose), or None: none yet, or one torn mid-write (read again next time)."""
    try:
        return TuneClose.load(paths.root)
    except (FileNotFoundError, ValueError):  # DocumentError included: the controller's tool wrote it, same version
        return None


def read_status(path):
    """A session's session.json (TuneStatus), or None: not written yet, or not readable as one."""
    try:
        with open(path) as f:
            text = f.read()
        return TuneStatus.loads(text, path)
    except (FileNotFoundError, ValueError):
        return None


def write_json(path, document):
    atomic_write(path, json.dumps(document, indent=1) + "\n", 0o600)


class Session:
    def __init__(self, args):
        self.args = args
        self.paths = Paths(args.service, args.session)
        self.store = self.paths.store
        self.status = TuneStatus(session=args.session, service=args.service, state="starting", pid=os.getpid(),
                                 started=now())
        self.restoring = False
        self.created = []  # temporary release directories this session staged
        self.current = None
        self.original = None
        self.original_meta = None
        self.log_handle = open(self.paths.log, "a")

    def log(self, message):
        line = f"[{time.strftime('%H:%M:%S')}] {message}"
        self.log_handle.write(line + "\n")
        self.log_handle.flush()
        print(f"[tune] {message}", file=sys.stderr, flush=True)

    def save_status(self, **changes):
        self.status = self.status.but(**changes, updated=now())
        atomic_write(self.paths.status, self.status.dump(), 0o600)

    # the watchdog: a stale heartbeat or an abort request interrupts whatever the main thread does
    def watchdog(self):
        while not self.restoring:
            reason = None
            try:
                beat = os.path.getmtime(self.paths.heartbeat)
            except OSError:
                beat = 0
            if heartbeat_stale(beat, time.time(), self.args.heartbeat_s):
                reason = f"no poll from the controller for {self.args.heartbeat_s:.0f} s (SSH connection lost?)"
            close = read_close(self.paths)
            if close is not None and close.abort:
                reason = f"aborted by the controller ({close.why or 'interrupted'})"
            if reason:
                self.abort_reason = reason
                os.kill(os.getpid(), signal.SIGUSR1)
                return
            time.sleep(0.5)

    def on_signal(self, signum, _frame):
        if self.restoring:
            return
        reason = getattr(self, "abort_reason", None) if signum == signal.SIGUSR1 else f"signal {signum}"
        raise Abort(reason or f"signal {signum}")

    # --- the session ---------------------------------------------------------------------------
    def consistent_original(self):
        state = self.store.state()
        active = state.active
        if not active or active not in self.store.ids():
            return None, "no active release to return to: deploy first"
        if state.switching:
            switching = state.switching
            return None, (f"a switch was interrupted (to {switching.to} from {switching.previous}, since "
                          f"{switching.since}): deploy first, so the host converges")
        meta = self.store.meta(active)
        unit, env = self.store.read(self.store.unit_path), self.store.read(self.store.env_path)
        installed = content_hash(unit, env) if unit is not None and env is not None else None
        running = service_status(self.args.service)
        if installed != meta.content_hash or running["active_state"] != "active" or not \
                cmdline_matches(running["cmdline"], meta.exec_start):
            return None, (f"the host is not consistent with its active release {active} (unit, environment or running "
                          "process differ, or the service is down): deploy first")
        return active, meta

    def run(self):
        try:
            with Lock(self.store, self.args.owner):
                return self.locked()
        except Locked as locked:
            info = locked.args[0]
            self.save_status(state="failed", message=f"the release store is locked by {info.owner} "
                                                      f"(pid {info.pid}, since {info.since})")
            return EXIT_LOCKED

    def locked(self):
        original, meta = self.consistent_original()
        if original is None:
            self.save_status(state="failed", message=meta)
            return 2
        self.original, self.original_meta, self.current = original, meta, original
        try:
            last_switch = SwitchOutcome.load(self.store.root)
        except (OSError, DocumentError):  # none yet, or unreadable: no estimate
            last_switch = None
        start_estimate = (last_switch.readiness.elapsed_s if last_switch and last_switch.release == original
                          and last_switch.readiness else None)
        for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        os.makedirs(self.paths.queue, exist_ok=True)
        os.makedirs(self.paths.results, exist_ok=True)
        self.save_status(state="ready", original=original, current=original, start_estimate_s=start_estimate,
                         probe_url=meta.probe_url, message=f"holding the lock; original release {original}")
        threading.Thread(target=self.watchdog, daemon=True).start()
        outcome, code = "closed", 0
        try:
            self.loop()
        except Abort as why:
            outcome, code = "aborted", 5
            self.log(f"ABORT: {why}")
            self.save_status(message=str(why))
        except Exception as error:  # noqa: BLE001 - whatever happens, the original comes back
            outcome, code = "failed", 1
            self.log(f"the session failed: {type(error).__name__}: {error}")
            self.save_status(message=f"{type(error).__name__}: {error}")
        finally:
            self.restoring = True
            self.restore()
        self.save_status(state=outcome)
        return code

    def loop(self):
        while True:
            close = read_close(self.paths)
            pending = sorted(name for name in os.listdir(self.paths.queue) if name.endswith(".json"))
            if pending:
                path = os.path.join(self.paths.queue, pending[0])
                with open(path) as handle:
                    text = handle.read()
                os.unlink(path)
                item = TuneItem.loads(text, path)  # unreadable: the session fails, naming the field; original back
                self.save_status(state="running", item=item.seq)
                result = TuneItemResult.from_dict(self.measure_item(item), f"candidate {item.id}'s result")
                write_json(os.path.join(self.paths.results, f"{item.seq:04d}.json"), result.to_dict())
                self.save_status(state="ready", item=None, done=[*self.status.done, item.seq])
                continue
            if close is not None:
                return
            time.sleep(0.2)

    def stage(self, item):
        release_id = item.release_id
        if not RELEASE_ID.match(release_id):
            raise ValueError(f"not a release id: {release_id!r}")
        if release_id in self.store.ids():
            return release_id
        directory = self.store.release_dir(release_id)
        os.makedirs(directory, exist_ok=True)
        self.created.append(release_id)
        for name, content, mode in ReleaseFiles.written(item.files, f"queue item {item.seq}'s files"):
            atomic_write(os.path.join(directory, name), content, mode)  # meta.json last
        return release_id

    def switch_to(self, release_id, start_timeout=None):
        self.store.save_state(self.store.state().but(switching=Switching(
            to=release_id, previous=self.original, since=now(), reason=f"tune session {self.args.session} (temporary)")))
        self.current = release_id
        self.save_status(current=release_id)
        meta = self.store.meta(release_id)
        timeout = min(float(meta.start_timeout_s or 1800), float(start_timeout or 1e9))
        return activate(self.store, release_id, meta.probe_url or self.original_meta.probe_url,
                                 timeout, 2.0)

    def config_check(self, release_id):
        """The gate's effective-configuration check against SGLang's resolution of the candidate."""
        directory = self.store.release_dir(release_id)
        expect = GateConfig.load(directory).expect
        meta = self.store.meta(release_id)
        probe_url = meta.probe_url or self.original_meta.probe_url
        api_key = read_api_key(self.store.secrets_path)
        status = service_status(self.args.service)
        stranger = foreign_listener(self.args.service, probe_url)
        if stranger:
            return [stranger]
        try:
            server_info = gate.get_json(probe_url + "/server_info", api_key)
        except Exception as error:  # noqa: BLE001
            return [f"could not read /server_info: {error}"]
        environ = evidence.process_environment(status["main_pid"])
        findings = evidence.log_findings(evidence.journal_since_start(self.args.service))
        costly = evidence.costly_undeclared(environ, expect.environment,
                                            evidence.environment_sources(self.args.service))
        problems = gate.config_problems(server_info, environ, cmdline_matches(status["cmdline"],
                                        meta.exec_start), status["cmdline"], expect, findings, costly)
        # the all-reduce path the server reports (a custom all-reduce that fell back is named, not assumed)
        self.allreduce = evidence.redact(evidence.allreduce_path(server_info, environ, findings), [api_key])
        # a token map SGLang says it ignores (EAGLE3): the candidate is labelled, not measured as a gain
        self.map_ignored = evidence.redact(findings.get("token_map_ignored"), [api_key])
        return evidence.redact(problems, [api_key])

    def measure_item(self, item):
        started = time.monotonic()
        settings = item.settings
        result = {"seq": item.seq, "id": item.id, "release_id": item.release_id, "ok": False, "at": now()}
        release_id = self.stage(item) if item.release_id != self.original else self.original
        restart_s = None
        if release_id != self.current or item.restart:
            self.log(f"candidate {item.id}: switching to temporary release {release_id}")
            ready = self.switch_to(release_id, item.start_timeout_s) if release_id != self.original \
                else self.back_to_original()
            restart_s = ready.get("elapsed_s")
            result["readiness"] = {k: ready.get(k) for k in ("ready", "stage", "detail", "elapsed_s")}
            if not ready["ready"]:
                self.log(f"candidate {item.id}: not ready at stage {ready['stage']}: {ready.get('detail')}")
                result.update(error=f"not ready at stage {ready['stage']}: {ready.get('detail')}",
                              duration_s=round(time.monotonic() - started, 1))
                return result
            self.log(f"candidate {item.id}: ready after {restart_s} s")
        self.allreduce = self.map_ignored = None
        problems = self.config_check(release_id)
        result["allreduce"] = self.allreduce
        result["map_ignored"] = self.map_ignored
        if problems:
            self.log(f"candidate {item.id}: the running server differs from the release: {problems[0]}")
            result.update(error="the running server differs from the release", config_problems=problems,
                          duration_s=round(time.monotonic() - started, 1))
            return result
        meta = self.store.meta(release_id)
        probe_url = meta.probe_url or self.original_meta.probe_url
        # the gate's output check first: a candidate that answers wrong is never measured, so never adopted
        expect = GateConfig.load(self.store.release_dir(release_id)).expect
        output = output_check.run(probe_url, read_api_key(self.store.secrets_path), expect.served_name or "default")
        result["output"] = output.counts().to_dict()
        if output.verdict == "fail":
            self.log(f"candidate {item.id}: output check FAILED: {output.reasons[0]}")
            result.update(error=f"output check failed: {output.reasons[0]}",
                          duration_s=round(time.monotonic() - started, 1))
            return result
        self.log(f"candidate {item.id}: output check {output.verdict}: {output.known_right} of "
                 f"{output.total} known answers right")
        repeats = []
        for index in range(settings.repeats):
            warmup = settings.warmup if index == 0 else 0
            command = bench_command(probe_url, self.store.secrets_path, settings, warmup)
            with open(self.paths.log, "a") as progress:
                done = subprocess.run(command, stdout=subprocess.PIPE, stderr=progress, text=True, cwd=PACKAGE_PARENT,
                                      timeout=120 + (settings.samples + 2) * (60 + settings.max_new_tokens))
            summary = repeat_summary(bench_measurement(done))
            repeats.append(summary)
            decode, aggregate = summary["decode_tok_s"], summary["aggregate_tok_s"]
            self.log(f"candidate {item.id}: repeat {index + 1}/{settings.repeats}: "
                     + (f"{decode:.1f} tok/s single stream" if decode else "no decode rate")
                     + (f", {aggregate:.1f} tok/s at concurrency {settings.concurrency}" if aggregate else "")
                     + (f", errors: {summary['errors'][0]}" if summary["errors"] else ""))
        result.update(ok=all(r["decode_tok_s"] for r in repeats), repeats=repeats, restart_s=restart_s,
                      simulated=bool(meta.simulated),
                      duration_s=round(time.monotonic() - started, 1))
        return result

    def back_to_original(self):
        meta = self.original_meta
        ready = activate(self.store, self.original, meta.probe_url, float(meta.start_timeout_s or 1800), 2.0)
        if ready.get("ready"):
            self.store.save_state(self.store.state().but(switching=None))
            self.current = self.original
            self.save_status(current=self.original)
        return ready

    def restore(self):
        """The original release back, if anything else was installed; temporary releases removed."""
        needed = self.current not in (None, self.original)
        restore = TuneRestore(needed=needed, ready=not needed)
        try:
            if needed:
                self.log(f"restoring the original release {self.original}")
                ready = self.back_to_original()
                restore = restore.but(ready=bool(ready.get("ready")), stage=ready.get("stage"),
                                      detail=ready.get("detail"), elapsed_s=ready.get("elapsed_s"))
                self.log(f"original release {self.original} " + ("is running again" if ready.get("ready")
                                                                  else f"FAILED to start: {ready.get('detail')}"))
            for release_id in self.created:
                if release_id != self.original:
                    shutil.rmtree(self.store.release_dir(release_id), ignore_errors=True)
            restore = restore.but(removed=list(self.created))
        except Exception as error:  # noqa: BLE001
            restore = restore.but(ready=False, detail=f"{type(error).__name__}: {error}")
            self.log(f"restoring FAILED: {type(error).__name__}: {error}")
        self.save_status(restore=restore, current=self.current)
