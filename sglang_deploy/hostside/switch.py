"""Switch the service to a release, under the store's lock: install, restart, readiness, the gate, and
the automatic rollback to the last good release.

    python3 -m hostside.switch --service S --release ID --probe-url URL --timeout T [--gate] [--auto-rollback] ...

Writes last_switch.json (redacted) and its progress to stderr and switch.log. SIGHUP is ignored, so a
dropped SSH connection or a killed controller does not stop a switch half-way; the flock dies with
the process. Exit codes: 0 active, 1 failed and rolled back (or nothing to roll back to), 2 refused,
3 the rollback failed too, 4 locked by another deploy, rollback or the perf watch.
"""

import argparse
import errno
import os
import signal
import sys
import threading
import time

from . import evidence
from .lib import forensics, gate
from .weights import manifest as weights_manifest
from .contract.document import Document, DocumentError
from .contract.paths import SIMULATED_MARKER, ServicePaths
from .contract.gate import GateConfig, GateResult
from .contract.release import GateMark
from .contract.store import Switching
from .contract.switch import SwitchOutcome
from .lib.client import LOOPBACK_URL, loopback_url, read_api_key
from .lib.listener import foreign_listener, guard_unit
from .lib.readiness import wait_ready, wait_running
from .lib.service import cmdline_matches, service_status, systemctl
from .store import Lock, Locked, Store, atomic_write, auth_change, last_used, log, now, release_auth, service_name

EXIT_FAILED_ROLLED_BACK = 1
EXIT_LOCKED = 4
EXIT_ROLLBACK_FAILED = 3


class StderrShield:
    """Progress of the switch and of the programs it starts (gate, bench) goes to a pipe this process drains
    into a log file and, while it is still there, to the controller's stderr. A dropped SSH connection then
    breaks only that copy: no program gets a BrokenPipeError, so a good release is not rolled back for it."""

    def __init__(self, log_path):
        self.original = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        self.log = open(log_path, "wb")  # the last switch's progress
        self.thread = threading.Thread(target=self._pump, args=(read_end,), daemon=True)
        self.thread.start()

    def _pump(self, read_end):
        forward = True
        while True:
            data = os.read(read_end, 65536)
            if not data:
                break
            self.log.write(data)
            self.log.flush()
            if forward:
                try:
                    os.write(self.original, data)
                except OSError:
                    forward = False  # the controller is gone; keep logging
        os.close(read_end)

    def close(self):
        try:
            sys.stderr.flush()
        except OSError:
            pass
        os.dup2(self.original, 2)  # closes the pipe's last write end: the pump sees EOF
        self.thread.join(timeout=5)
        self.log.close()


# The switch's fault-injection points (docs/testing.md): with SGLANG_DEPLOY_TEST_DIE_AFTER=<point> in its
# environment the switch dies (exit 9, lock and "switching" left behind) at that point: unit-written, right after
# install() wrote the new unit and environment, before systemd reloads (tests/test_releases_sim.py makes the next
# deploy converge from it). On a simulated host (SIMULATED_MARKER) alone, the file PAUSE_FILE (in /run: a boot
# empties it) holding "pause:<point>" makes the switch stop at that point, touch PAUSED_FILE and wait there: the
# power-cut sweep (tests/test_powercut_sim.py, benchmarks/powercut_sweep.py) cuts the host's power while it waits.
# Points: switching (state.json says so; nothing installed yet), unit-written, readiness (the new release starting),
# gate (ready, before the measurement), rollback (the automatic rollback's unit written, its restart next).
# Nothing sets either outside those tests.
FAULT_INJECTION = "SGLANG_DEPLOY_TEST_DIE_AFTER"
PAUSE_FILE = "/run/sglang-deploy-test-fault"
PAUSED_FILE = "/run/sglang-deploy-test-paused"


def fault_point(name):
    """Die (SGLANG_DEPLOY_TEST_DIE_AFTER) or wait for the power cut (PAUSE_FILE, simulated hosts) at this point."""
    if os.environ.get(FAULT_INJECTION) == name:
        log(f"TEST HOOK: dying at {name}")
        os._exit(9)
    if not os.path.exists(SIMULATED_MARKER) or not os.path.exists(PAUSE_FILE):
        return
    with open(PAUSE_FILE) as f:
        if f.read().strip() != f"pause:{name}":
            return
    log(f"TEST HOOK: waiting at {name} for the power cut")
    with open(PAUSED_FILE, "w") as f:
        f.write(name + "\n")
    while True:
        time.sleep(60)


def install(store, release_id, phase="switch"):
    """Put a release's unit and environment in place (atomic renames) and make systemd see them (unless the fault
    injection point FAULT_INJECTION stops the switch in between)."""
    source = store.release_dir(release_id)
    os.makedirs(os.path.dirname(store.env_path), exist_ok=True)
    atomic_write(store.env_path, store.read(os.path.join(source, "sglang.env")), 0o600)
    atomic_write(store.unit_path, store.read(os.path.join(source, "sglang.service")), 0o644)
    fault_point("unit-written" if phase == "switch" else phase)
    systemctl("daemon-reload")
    systemctl("enable", f"{store.service}.service")


def activate(store, release_id, probe_url, timeout, settle, phase="switch"):
    install(store, release_id, phase)
    log(f"restarting {store.service}.service on release {release_id}")
    systemctl("reset-failed", f"{store.service}.service")  # the unit's start limit counts failures, not switches
    systemctl("restart", f"{store.service}.service")
    RESTARTED.append(release_id)
    if phase == "switch":
        fault_point("readiness")
    meta = store.meta(release_id)
    if not meta.serves_http:  # a multi-node rank > 0: no HTTP server of its own
        return wait_running(store, settle)
    return wait_ready(store, probe_url, timeout, settle, auth=release_auth(meta))


def switch(args):
    store = Store(args.service)
    if args.release not in store.ids():
        message = f"release {args.release} is not in {store.releases_dir}; retained: {', '.join(store.ids()) or 'none'}"
        log(message)
        return 2
    try:
        with Lock(store, args.owner):
            return switch_locked(store, args)
    except Locked as locked:
        log(locked.args[0].refusal())
        return EXIT_LOCKED
    except OSError as error:
        if error.errno not in WRITE_FAILURES:
            raise
        log(write_failure(store, args.release, error))
        return EXIT_WRITE_FAILED


# A file system that is full or read-only (the store's, /etc's): the switch stops where the write failed.
WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
EXIT_WRITE_FAILED = 5
RESTARTED = []  # the releases this switch restarted the service on (activate), for write_failure's sentence


def write_failure(store, release_id, error):
    """The sentence for a switch stopped by a full or read-only file system: where, and what is serving now."""
    what = "full" if error.errno in (errno.ENOSPC, errno.EDQUOT) else "read-only"
    where = f"writing {error.filename} failed: {error.strerror}" if error.filename else f"a write failed: {error}"
    if RESTARTED:
        serving = (f"the service was restarted on release {RESTARTED[-1]}, which is not committed: the next boot's "
                   "recovery (or the next deploy) returns the host to the last good release")
    else:
        serving = "the service was not restarted: the release that was running keeps serving"
    return (f"SWITCH TO {release_id} STOPPED: {where} (a {what} file system); {serving}. Free space (or remount it "
            "read-write) and deploy again.")


def switch_locked(store, args):
    state = store.state()
    previous = state.active
    if args.auto_rollback and state.auto_rollbacks_in_row >= args.max_auto_rollbacks and not args.force:
        return finish(store, {"ok": False, "release": args.release, "error": (
            f"{state.auto_rollbacks_in_row} automatic rollbacks in a row (cap {args.max_auto_rollbacks}); "
            "fix the cause, or deploy with --data force=true")}, 2)
    meta = store.meta(args.release)
    problem = weights_manifest.release_problem(meta)  # the weights must be in place and verified: else no switch
    if problem:
        return finish(store, {"ok": False, "release": args.release, "error": problem}, 2)
    if args.stop_only:  # a multi-node server: every node stops (these checks passed) before any starts
        result = systemctl("stop", f"{store.service}.service")
        loaded = systemctl("show", "-p", "LoadState", "--value", f"{store.service}.service").stdout.strip()
        if result.returncode != 0 and loaded != "not-found":  # no unit yet (a first deploy): nothing to stop
            log(f"systemctl stop {store.service}.service failed: {result.stderr.strip()}")
            return 2
        log(f"{store.service}.service stopped for the switch to {args.release} (the nodes restart together)")
        return 0
    state = state.but(switching=Switching(to=args.release, previous=previous, since=now(), reason=args.reason))
    store.save_state(state)
    fault_point("switching")
    change = auth_change(store.meta(previous) if previous in store.ids() else None, meta)
    if change:
        log(change)
    timeout, moved = args.timeout, None
    if args.reason.startswith("rollback"):  # a manual rollback, a rank following rank 0 back: nothing the service
        # user wrote is carried over (security review 3, finding 6)
        moved = forensics.before_start(store, previous, args.release, "rollback")
        timeout = max(timeout, forensics.COLD_START_TIMEOUT_S) if moved else timeout
    result = activate(store, args.release, args.probe_url, timeout, args.settle)
    document = {"release": args.release, "previous": previous, "reason": args.reason, "readiness": result,
                "auth": release_auth(meta)}
    if moved:
        document["forensics"] = moved
    if change:
        document["auth_change"] = change
    if not result["ready"]:
        log(f"release {args.release} failed at stage {result['stage']}: {result.get('detail')}")
        return fail_and_roll_back(store, state, meta, document, args, f"failed to start: {result.get('detail')}")

    verdict = "good" if args.mark_good_on_ready else meta.verdict
    if args.gate:
        fault_point("gate")
        try:
            gate_result = run_gate(store, args, meta, state)
        except Exception as error:  # noqa: BLE001 - a broken gate must not leave the switch half-done
            gate_result = GateResult(verdict="inconclusive", reasons=[], rows=[], config_problems=[],
                                     inconclusive=[f"the gate could not run: {type(error).__name__}: {error}"])
        document["gate"] = gate_result
        meta = meta.but(gate=GateMark(verdict=gate_result.verdict, summary=gate_summary(gate_result), at=now(),
                                      simulated=gate_result.simulated, baseline=gate_result.baseline_release))
        if gate_result.verdict == "fail" or (gate_result.verdict == "inconclusive"
                                             and args.on_inconclusive == "rollback"):
            return fail_and_roll_back(store, state, meta, document, args,
                                      f"gate {gate_result.verdict}: " + "; ".join(
                                          gate_result.reasons + gate_result.inconclusive),
                                      verdict="bad" if gate_result.verdict == "fail" else "inconclusive")
        verdict = "good" if gate_result.passed else "inconclusive"
    # What decided the verdict: "gate" (measured; meta.gate says how), "skip_gate" (marked good when ready,
    # not measured now: whatever meta.gate holds is an older measurement), or an earlier decision.
    meta = meta.with_event(now(), f"activated ({args.reason})" + (", marked good without the gate (skip_gate)"
                                                                  if args.mark_good_on_ready and not args.gate else ""),
                           verdict=verdict,
                           verdict_by="gate" if args.gate else "skip_gate" if args.mark_good_on_ready else meta.verdict_by)
    store.write_meta(args.release, meta)
    if args.mark_previous_bad and previous and previous != args.release and previous in store.ids():
        # A rank > 0 following rank 0 back: the release it leaves failed on rank 0 (one release id, all nodes).
        store.write_meta(previous, store.meta(previous).with_event(now(), f"marked bad ({args.reason})",
                                                                   verdict="bad", verdict_by="rank 0"))
        if state.last_good == previous:  # the good release it had before, most recently used first
            good = [i for i in store.ids() if i != previous and (i == args.release and verdict == "good"
                                                                 or store.meta(i).verdict == "good")]
            state = state.but(last_good=max(good, key=lambda i: last_used(store.meta(i)), default=None))
    if verdict == "good":
        state = state.but(last_good=args.release, auto_rollbacks_in_row=0)
    state = state.but(active=args.release, switching=None)
    store.save_state(state)
    document.update(ok=True, active=args.release, verdict=verdict)
    return finish(store, document, 0)


def fail_and_roll_back(store, state, meta, document, args, event, verdict="bad"):
    meta = meta.with_event(now(), event, verdict=verdict, verdict_by="gate" if "gate" in document else "readiness")
    store.write_meta(args.release, meta)
    document.update(ok=False, failure=event)
    target = state.last_good
    if not args.auto_rollback or not target or target == args.release:
        store.save_state(state.but(active=args.release if target != args.release else None, switching=None))
        document["rolled_back_to"] = None
        return finish(store, document, EXIT_FAILED_ROLLED_BACK)
    log(f"automatic rollback to the last good release {target}")
    change = auth_change(meta, store.meta(target))
    if change:
        log(change)
        document["rollback_auth_change"] = change
    # The target's own port and start timeout: a deploy that changed the port must not probe the new one.
    target_meta = store.meta(target)
    # its snapshot, as before any switch: no start on changed weights
    problem = weights_manifest.release_problem(target_meta)
    if problem:
        back = {"ready": False, "stage": "weights", "elapsed_s": 0.0, "journal": "",
                "detail": f"not rolled back to {target}: {problem}"}
        log(back["detail"])
        store.save_state(state.but(active=None, switching=None, auto_rollbacks_in_row=state.auto_rollbacks_in_row + 1))
        document.update(rolled_back_to=target, rollback_readiness=back)
        return finish(store, document, EXIT_ROLLBACK_FAILED)
    target_url = target_meta.probe_url if LOOPBACK_URL.fullmatch(str(target_meta.probe_url)) else None
    timeout = (args.rollback_timeout if args.rollback_timeout_given
               else float(target_meta.start_timeout_s or args.timeout))
    # The failed release ran as the service user: what it wrote (HOME, JIT caches, the preflight's cached acceptance)
    # is moved aside before the good release starts (security review 3, finding 6).
    moved = forensics.before_start(store, args.release, target, "auto-rollback")
    if moved:
        document["forensics"] = moved
        timeout = timeout if args.rollback_timeout_given else max(timeout, forensics.COLD_START_TIMEOUT_S)
    back = activate(store, target, target_url or args.probe_url, timeout, args.settle, "rollback")
    if back["ready"]:
        store.write_meta(target, store.meta(target).with_event(now(), "activated (automatic rollback)"))
    store.save_state(state.but(active=target if back["ready"] else None, switching=None,
                               auto_rollbacks_in_row=state.auto_rollbacks_in_row + 1))
    document.update(rolled_back_to=target, rollback_readiness=back)
    return finish(store, document, EXIT_FAILED_ROLLED_BACK if back["ready"] else EXIT_ROLLBACK_FAILED)


def baseline_weights_note(mine, baseline):
    """A sentence when the release serves other weights than its baseline did (the comparison then measures
    the weights too), else None. mine, baseline: meta.json `weights` (None: weights not managed)."""
    change = weights_manifest.snapshot_change(mine, baseline, "unmanaged weights")
    return f"the weights changed: {change[0]} -> {change[1]}" if change else None


def choose_baseline(candidates, last_good, current):
    """The measurement to compare a release with: (release id or None, a sentence saying which and why).

    candidates: [(release id, meta, its GateResult's verdict or None)], oldest first. A baseline is a
    measurement that passed its gate (meta's gate verdict and the stored result both "pass"). A release
    marked good without passing (skip_gate: never measured, or measured and failed) is no baseline: the
    last good release when it passed, else the release whose gate passed last, else none (the verdict
    then rests on the floors). The release being measured is never its own baseline. meta: ReleaseMeta.
    """
    def passed(meta, stored_verdict):
        return meta.gate is not None and meta.gate.verdict == "pass" and stored_verdict == "pass"

    eligible = [(release_id, meta) for release_id, meta, stored in candidates
                if release_id != current and passed(meta, stored)]
    last_good_meta = next((meta for release_id, meta, _ in candidates if release_id == last_good), None)
    why_not = None
    if last_good and last_good != current and last_good_meta is not None:
        if any(release_id == last_good for release_id, _ in eligible):
            return last_good, f"release {last_good}, the last good release (gate passed {last_good_meta.gate.at})"
        gate = last_good_meta.gate and last_good_meta.gate.verdict
        why_not = (f"the last good release {last_good} is no baseline: it was marked good without passing its gate ("
                   + ("never measured" if not gate else f"gate {gate}" if gate != "pass" else "no stored passed result")
                   + ")")
    if eligible:
        release_id, meta = max(eligible, key=lambda item: item[1].gate.at)
        note = f"release {release_id}, the last release that passed its gate ({meta.gate.at})"
        return release_id, (f"{note}; {why_not}" if why_not else note)
    return None, ("no passed baseline, the verdict rests on the floors (no other release on this host passed its gate"
                  + (f"; {why_not})" if why_not else ")"))


def run_gate(store, args, meta, state):
    directory = store.release_dir(args.release)
    config = GateConfig.load(directory)
    candidates, stored = [], {}
    for release_id in store.ids():
        try:
            stored[release_id] = GateResult.load(store.release_dir(release_id))
        except FileNotFoundError:
            stored[release_id] = None
        except (OSError, DocumentError) as error:  # a damaged result is no baseline
            log(f"release {release_id}'s gate result is no baseline: {error}")
            stored[release_id] = None
        candidates.append((release_id, store.meta(release_id), stored[release_id] and stored[release_id].verdict))
    baseline_release, note = choose_baseline(candidates, state.last_good, args.release)
    baseline = stored[baseline_release].measurement if baseline_release else None
    # the greedy outputs are compared only on the same weights (another snapshot answers otherwise)
    baseline_output = stored[baseline_release].output if baseline_release else None
    if baseline_release:
        change = baseline_weights_note(meta.weights, store.meta(baseline_release).weights)
        if change:
            note = f"{note}; {change}"
            baseline_output = None
    status = service_status(store.service)
    log(f"gate: checking the running server against release {args.release}, then measuring; baseline: {note}")
    environ = evidence.process_environment(status["main_pid"])
    found = {"environ": environ, "findings": evidence.log_findings(evidence.journal_since_start(store.service)),
             "costly_env": evidence.costly_undeclared(environ, config.expect.environment,
                                                      evidence.environment_sources(store.service))}
    api_key = read_api_key(store.secrets_path)
    stranger = foreign_listener(store.service, args.probe_url)
    if stranger:
        return GateResult(verdict="fail", reasons=[stranger], rows=[], config_problems=[], inconclusive=[])
    result = gate.run(args.probe_url, store.secrets_path, api_key, status["main_pid"],
                      cmdline_matches(status["cmdline"], meta.exec_start), status["cmdline"], config,
                      baseline, found, baseline_output=baseline_output)
    result = GateResult.from_dict(evidence.redact(result.to_dict(), [api_key])).but(
        baseline_release=baseline_release, baseline={"release": baseline_release, "note": note})
    atomic_write(os.path.join(directory, GateResult.FILE), result.dump(), 0o644)
    log("gate result:\n" + gate.table(result))
    return result


def gate_summary(result):
    measurement = result.measurement  # a Measurement; None: not measured
    decode, tau = (measurement.decode_median, measurement.tau_median) if measurement else (None, None)
    parts = [result.verdict]
    if decode is not None:
        parts.append(f"{decode:.1f} tok/s")
    if tau is not None:
        parts.append(f"tau {tau:.2f}")
    return " ".join(parts)


def describe(outcome):
    """The switch's outcome (SwitchOutcome) for a person (stderr, and pyinfra shows it when the command fails)."""
    ready = outcome.readiness
    if ready is None:
        return f"switch refused: {outcome.error}"
    moved = (f"what the service user wrote was moved aside for forensics: {outcome.forensics}"
             if outcome.forensics else None)
    if outcome.ok:
        return (f"{outcome.auth_change}\n" if outcome.auth_change else "") + (f"{moved}\n" if moved else "") + (
                f"release {outcome.release} is active ({outcome.verdict or 'unverified'}; ready after "
                f"{ready.elapsed_s} s; previous: {outcome.previous})")
    if ready.ready:
        lines = [f"release {outcome.release} FAILED: {outcome.failure}"]
    else:
        lines = [f"release {outcome.release} FAILED at stage '{ready.stage}': {ready.detail} "
                 f"(after {ready.elapsed_s} s)"]
    if ready.journal:
        lines += ["last journal lines of the failed start:", *("  " + l for l in ready.journal.splitlines())]
    if outcome.rollback_auth_change:
        lines.append(outcome.rollback_auth_change)
    if moved:
        lines.append(moved)
    if outcome.rolled_back_to:
        back = outcome.rollback_readiness
        lines.append(f"automatic rollback to {outcome.rolled_back_to}: " + (
            "healthy again" if back and back.ready else f"ALSO FAILED ({back and back.detail})"))
    else:
        lines.append("no good release to roll back to: the service is left as it is")
    return "\n".join(lines)


def finish(store, document, code):
    """Write the outcome (the document's fields, typed and redacted, as SwitchOutcome) and say it."""
    fields = {key: value.to_dict() if isinstance(value, Document) else value for key, value in document.items()}
    outcome = SwitchOutcome.from_dict({**evidence.redact(fields, [read_api_key(store.secrets_path)]),
                                       "exit_code": code, "finished": now()}, "the switch's outcome")
    os.makedirs(store.root, exist_ok=True)
    atomic_write(os.path.join(store.root, SwitchOutcome.FILE), outcome.dump(), 0o644)
    log(describe(outcome))  # the full document is in last_switch.json
    return code


def main(argv=None):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    parser = argparse.ArgumentParser(prog="python3 -m hostside.switch")
    parser.add_argument("--service", required=True, type=service_name)
    parser.add_argument("--release", required=True)
    parser.add_argument("--probe-url", required=True, type=loopback_url)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--rollback-timeout", type=float)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--reason", default="deploy")
    parser.add_argument("--owner", default="unknown")
    parser.add_argument("--auto-rollback", action="store_true")
    parser.add_argument("--mark-good-on-ready", action="store_true")
    parser.add_argument("--max-auto-rollbacks", type=int, default=3)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--gate", action="store_true", help="run the gate (releases/<id>/gate-config.json) once ready")
    parser.add_argument("--on-inconclusive", choices=["rollback", "keep"], default="rollback")
    parser.add_argument("--stop-only", action="store_true",
                        help="run the switch's checks under the lock, then only stop the service (multi-node start order)")
    parser.add_argument("--mark-previous-bad", action="store_true",
                        help="once this release is active, mark the one it replaced bad (a rank > 0 following rank 0)")
    args = parser.parse_args(argv)
    args.rollback_timeout_given = args.rollback_timeout is not None
    if args.rollback_timeout is None:
        args.rollback_timeout = args.timeout
    shield = StderrShield(os.path.join(ServicePaths(args.service).root, "switch.log"))
    guard_unit(args.service)  # every keyed request: only to the unit's own processes
    try:
        return switch(args)
    finally:
        shield.close()


if __name__ == "__main__":
    sys.exit(main())
