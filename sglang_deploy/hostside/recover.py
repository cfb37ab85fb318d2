"""The boot recovery: a release is pending until its gate commits it; a boot never serves one that did not.

    python3 -m hostside.recover --service S

Run by <service>-recover.service (oneshot, ordered before <service>.service, wanted by it and by multi-user.target:
templates/sglang-recover.service.j2) at every boot, before systemd starts the server. It reads the store:
  - a switch was under way when the host went down (state.json's `switching`: a power cut, a reset, a kernel panic
    during a deploy, rollback, tune candidate, A/B or bisect): its release is kept when it passed its gate before the
    cut (its meta.json says good: the switch writes that before it clears `switching`), else the switch is rolled
    back to the last good release: its unit and environment file are installed again (atomically, durably), what
    the pending release's user wrote is moved aside for forensics, and the pending release is marked
    "interrupted"; when no good release is retained, the one the switch started from.
  - no switch, but the installed unit or environment file is not the active release's: the active release's are
    installed again (when the active release is good; else the last good release's).
Each change is recorded in the releases' history (meta.json: history.py, releases.py show it) and in state.json's
`recovered` (releases.py and the perf watch's metrics show the last one). Then `systemctl daemon-reload`: the
server's start job, queued behind this unit, starts the restored unit. Never `systemctl start/stop/restart` here:
the server's job waits for this unit, so a blocking call would deadlock the boot, and a stop would cancel the start.

Exit 0 whatever it found (the server must still start); a problem is logged to the journal and kept in `recovered`.
Standard library only; under the store's lock (at boot nobody else holds it: a flock does not survive a boot).
"""

import argparse
import os
import sys

from .lib import forensics
from .contract.document import DocumentError
from .contract.store import Recovery
from .lib.service import systemctl
from .store import Lock, Locked, Store, atomic_write, boot_id, content_hash, log, now, service_name

PASSED = "good"  # a release's verdict once its gate (or skip_gate, or an earlier gate on this host) committed it


def verdict(store, release_id):
    """The release's verdict (good, bad, inconclusive, interrupted, None) or None when it is not retained or
    unreadable."""
    if not release_id or release_id not in store.ids():
        return None
    try:
        return store.meta(release_id).verdict
    except (OSError, DocumentError):
        return None


def installed_hash(store):
    unit, env = store.read(store.unit_path), store.read(store.env_path)
    return content_hash(unit, env) if unit is not None and env is not None else None


def install_files(store, release_id):
    """The release's unit and environment file, each written, flushed, renamed and its directory synced."""
    source = store.release_dir(release_id)
    unit, env = store.read(os.path.join(source, "sglang.service")), store.read(os.path.join(source, "sglang.env"))
    if unit is None or env is None:
        raise FileNotFoundError(f"release {release_id} has no sglang.service or sglang.env in {source}")
    os.makedirs(os.path.dirname(store.env_path), exist_ok=True)
    atomic_write(store.env_path, env, 0o600)
    atomic_write(store.unit_path, unit, 0o644)


def plan(store, state):
    """(action, restore, interrupted, reason): what the recovery does; pure but for reading the store.
    action: None (consistent: nothing to do), "committed", "rolled back", "reinstalled", "nothing to restore"."""
    switching = state.switching
    if switching:
        pending = switching.to
        what = f"a {switching.reason or 'switch'} to {pending} (from {switching.previous}, since {switching.since})"
        if verdict(store, pending) == PASSED:
            return "committed", pending, pending, f"{what} was interrupted after {pending} was marked good: it stays"
        for candidate in (state.last_good, switching.previous):
            if candidate and candidate != pending and verdict(store, candidate) == PASSED:
                return ("rolled back", candidate, pending,
                        f"{what} was interrupted before {pending} passed its gate: back to the last good release "
                        f"{candidate}")
        return ("nothing to restore", None, pending,
                f"{what} was interrupted before {pending} passed its gate, and no good release is retained to go "
                "back to: the service is left as it is")
    active = state.active
    if active and active in store.ids():
        if installed_hash(store) == store.meta(active).content_hash:
            return None, active, None, "consistent"
        target = active if verdict(store, active) == PASSED else state.last_good
        if target and verdict(store, target) == PASSED:
            return ("reinstalled", target, None,
                    f"the installed unit or environment file is not the active release {active}'s: {target}'s "
                    "installed again")
        return ("nothing to restore", None, None,
                f"the installed unit or environment file is not the active release {active}'s, and no good release "
                "is retained to install")
    if state.last_good and verdict(store, state.last_good) == PASSED \
            and installed_hash(store) != store.meta(state.last_good).content_hash:
        return ("reinstalled", state.last_good, None,
                f"no active release (an earlier failed rollback?): the last good release {state.last_good} installed")
    return None, None, None, "consistent"


def recover(store, reload=lambda: systemctl("daemon-reload"), move_aside=True):
    """Bring the store and the installed unit to a release that passed its gate. Returns the Recovery (also in
    state.json's `recovered`), or None when everything was consistent."""
    state = store.state()
    action, restore, interrupted, reason = plan(store, state)
    if action is None:
        log(f"boot recovery of {store.service}: {reason}; nothing to do")
        return None
    log(f"boot recovery of {store.service}: {reason}")
    at = now()
    if action in ("rolled back", "reinstalled", "committed") and installed_hash(store) != \
            store.meta(restore).content_hash:
        if action == "rolled back" and move_aside:
            user = forensics.unit_user(store.read(store.unit_path))
            envs = "\n".join(store.read(os.path.join(store.release_dir(r), "sglang.env")) or ""
                             for r in (interrupted, restore) if r in store.ids())
            moved = forensics.move_aside(store.service, user, envs, store.root, "boot-recovery",
                                         release=interrupted) if user else {"dir": None}
            if moved["dir"]:
                log(f"what {user} wrote under {interrupted} was moved aside for forensics: {moved['dir']}")
        install_files(store, restore)
        result = reload()
        if getattr(result, "returncode", 0):
            log(f"systemctl daemon-reload failed: {result.stderr.strip()}")
    if interrupted and action in ("rolled back", "nothing to restore"):
        meta = store.meta(interrupted)
        # unverified until the cut: now "interrupted"; a verdict the switch wrote before it (failed gate) stays
        changes = {"verdict": "interrupted", "verdict_by": "boot recovery"} if meta.verdict is None else {}
        store.write_meta(interrupted, meta.with_event(at, f"interrupted (boot recovery: {reason})", **changes))
    if restore:
        venv = store.meta(restore).venv
        if venv and not os.path.isdir(venv):
            reason += f"; its virtualenv {venv} is missing: the server cannot start (deploy again)"
            log(reason)
    if restore:
        store.write_meta(restore, store.meta(restore).with_event(at, f"activated (boot recovery: {action})"))
    record = Recovery(at=at, boot_id=boot_id(), reason=reason, interrupted=interrupted, restored=restore, action=action)
    changes = {"switching": None, "recovered": record}
    if restore:
        changes.update(active=restore, last_good=restore)
    store.save_state(state.but(**changes))
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m hostside.recover")
    parser.add_argument("--service", required=True, type=service_name)
    args = parser.parse_args(argv)
    store = Store(args.service)
    try:
        with Lock(store, "boot recovery"):
            recover(store)
    except Locked as locked:  # not at boot; run by hand while a switch runs: that switch decides
        log(f"boot recovery skipped: {locked.args[0].refusal()}")
    except (OSError, DocumentError) as error:  # the server starts whatever is installed; say why nothing changed
        log(f"boot recovery of {args.service} FAILED: {type(error).__name__}: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
