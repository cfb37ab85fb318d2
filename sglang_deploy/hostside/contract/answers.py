"""What host programs answer the controller on stdout, typed once: `hostside.store state`, the weights' answers and
the venv's hooks: what every deploy reads (`hostside.store history`'s: history.py; the diagnostic programs' answers:
probes.py; the bench's measurement: gate.py, where the gate stores it; the tune session's: session.py).

The host program builds its answer through the class (a field renamed in the writer fails at the write), the
controller reads it with `Class.loads(text, source)` and attributes, never `json.loads(...)["key"]`: a renamed field
is an error naming the answer and the field, never a value read as None. Each answer is written and read by one
checkout (the host package is this checkout's: roles/release.install_programs, roles/facts.inline_host), so every
field the writer always writes is required. Three writers print their dicts themselves, running alone without the
package (python3 -I): the preflight probe (preflight/probe.py, tests/test_preflight_answer.py holds the keys equal),
the GPU probe and venv_hooks.py (tests/test_outputs.py). Standard library only: shipped to the host.
"""

from __future__ import annotations

from typing import ClassVar

from .document import Document, document
from .release import ReleaseMeta
from .store import LockInfo, StoreState


# --- the store's state: hostside.store state (the controller's ReleaseStore fact) ------------------------------------

@document
class ServiceRun(Document):
    """The unit as systemd runs it (service.service_status)."""
    active_state: str | None
    sub_state: str | None
    result: str | None
    main_pid: int  # 0: no process
    cmdline: list | None  # None: no process, or unreadable
    started_monotonic_us: str | int | None


@document
class StoreReport(Document):
    """`hostside.store state` (store.cmd_state): the ReleaseStore fact the controller decides by (release_plan,
    plan.lock_refusal, fleet, the stages, the rollback, the tune). The inline program is this checkout's."""
    service: str
    state: StoreState
    releases: list[ReleaseMeta]  # oldest first
    lock: LockInfo | None  # None: not held
    installed_hash: str | None  # the installed unit's and environment's content hash; None: none installed
    running: ServiceRun
    consistent: bool  # the host runs its active release as it declares
    inconsistent: list  # why not, each a sentence
    problems: list  # store files set aside, drifts that a restart would not change

    def release(self, release_id):
        """The retained release's meta (ReleaseMeta), or None."""
        return next((meta for meta in self.releases if meta.id == release_id), None)


# --- the weights' answers: hostside.weights' last line (roles/weights.py, roles/facts.WeightsStatus) -----------------

@document
class WeightsFailure(Document):
    """What `hostside.weights fetch|promote|verify|status` prints last when it refuses (weights/__main__.main)."""
    FILE: ClassVar[str] = "hostside.weights' error line"
    ok: bool  # False
    error: str  # why, naming the file or the disk


@document
class WeightsVerified(Document):
    """`hostside.weights verify`: every file against the manifest (hashing only what changed)."""
    FILE: ClassVar[str] = "hostside.weights verify's answer"
    ok: bool  # no problem
    problems: list  # each file that does not match, a sentence
    seconds: int | float
    hashed_files: int  # manifest.verify's stats: the files hashed (the others unchanged since their record)
    hashed_bytes: int
    files: int  # the manifest's


@document
class WeightsPlaced(Document):
    """`hostside.weights fetch` and `promote`: the snapshot verified and in place (weights/fetch.py)."""
    FILE: ClassVar[str] = "hostside.weights fetch|promote's answer"
    ok: bool  # True (a refusal is WeightsFailure)
    changed: bool  # renamed into place now; False: it was there already
    path: str
    hashed_files: int | None = None  # the verification's stats; None: verified in place, nothing hashed
    hashed_bytes: int | None = None
    files: int | None = None


@document
class WeightsPruned(Document):
    """`hostside.weights prune` (weights/prune.py): the snapshots and token maps removed and kept."""
    FILE: ClassVar[str] = "hostside.weights prune's answer"
    ok: bool
    removed: list  # paths
    kept: list
    skipped: str | None = None  # why nothing was pruned (another weights command holds the lock, ...); None: pruned


@document
class SnapshotStatus(Document):
    """`hostside.weights status` (weights/__main__.run_locked) and each snapshot's section of hostside/deploy_facts.py:
    is the snapshot in place and unchanged since it was verified (roles/facts.WeightsStatus reads it)."""
    FILE: ClassVar[str] = "hostside.weights status's answer"
    verified: bool  # in place and unchanged since verified (sizes and mtimes against the host's record)
    path: str  # the snapshot's directory
    error: str | None = None  # the manifest could not be read (deploy_facts): why; None: read, or no manifest


# --- the venv's startup hooks: hostside.venv_hooks's stdout (roles/facts.VenvState) ----------------------------------

@document
class VenvHooks(Document):
    """A release venv read from outside (hostside/venv_hooks.read). venv_hooks.py also runs alone (provision.py
    hooks_command: `python3 -I -c <its source>`, no package), so it prints read()'s dict itself; the test of its
    fields (tests/test_outputs.py) keeps the two spellings one."""
    FILE: ClassVar[str] = "hostside.venv_hooks's output"
    sglang: str | None  # the installed SGLang's version; None: none
    site: str | None  # its site-packages; None: no venv there
    problems: list  # each refused startup hook, a sentence
