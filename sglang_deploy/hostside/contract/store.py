"""The store's own documents, beside its releases (paths.ServicePaths): its state (state.json) and its lock's holder
(lock.json); what the last switch did (last_switch.json, also at the store's root) carries the gate's result and is
in switch.py, so that a no-op deploy's host program, which reads these two, loads none of the gate's documents.
Written by the host alone (switch, tune, recover, the lock's holders); the controller reads them in `hostside.store
state`'s answer (answers.StoreReport). Standard library only: shipped to the host.
"""

from __future__ import annotations

from typing import ClassVar

from .document import Document, document


# --- the store's state: <store root>/state.json ----------------------------------------------------------------------

@document
class StoreState(Document):
    """Written by the host alone (switch, tune); every default is the empty store's."""
    FILE: ClassVar[str] = "state.json"
    active: str | None = None
    last_good: str | None = None
    auto_rollbacks_in_row: int = 0
    switching: Switching | None = None  # while a switch runs; left behind by a crash
    recovered: Recovery | None = None  # the last boot recovery that changed something (hostside/recover.py)


@document
class Switching(Document):
    """A switch under way in state.json (hostside/switch.py, tune_runner.switch_to): left behind, it names the
    interrupted switch, and the release it was installing stays out of prune's reach."""
    KEYS: ClassVar[dict] = {"previous": "from"}
    to: str
    previous: str | None  # the release active before ("from" in the file)
    since: str
    reason: str | None = None  # deploy, rollback, tune session ...


@document
class Recovery(Document):
    """What the boot recovery (hostside/recover.py) found and did: an interrupted switch rolled back to the last good
    release (or committed, when its release passed its gate before the cut), or installed files put back."""
    at: str
    boot_id: str | None  # the boot it ran in (/proc/sys/kernel/random/boot_id)
    reason: str  # what it found, a sentence
    interrupted: str | None  # the release the interrupted switch was installing; None: no switch was under way
    restored: str | None  # the release it installed or kept; None: none to restore
    action: str  # rolled back, committed, reinstalled, nothing to restore


# --- the store's lock: <store root>/lock.json ------------------------------------------------------------------------

@document
class LockInfo(Document):
    """Who holds the store's lock (written by the holder: switch, prune, tune, perf watch); "unknown" when the
    file is gone or unreadable while the lock is held."""
    FILE: ClassVar[str] = "lock.json"
    owner: str
    pid: int | None = None
    since: str | None = None
    boot_id: str | None = None  # the holder's boot: a lock.json of an earlier boot names no holder (store.lock_holder)

    def refusal(self) -> str:
        """The one sentence for a change refused while another holds the lock: the switch on the host, the
        deploy's refusals (plan.refusals) and the rollback on the controller."""
        return f"another deploy or rollback is running: {self.owner} (pid {self.pid}, since {self.since})"
