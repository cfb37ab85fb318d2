"""What the last switch did: <store root>/last_switch.json (paths.ServicePaths), with the start's readiness and the
gate's result. Written by the host's switch alone (hostside/switch.finish); the controller reads it to report a switch
(roles/release.py), the tune for its start estimate. Beside store.py's state and lock, which a no-op deploy reads
without it. Standard library only: shipped to the host.
"""

from __future__ import annotations

from typing import ClassVar

from .document import Document, document
from .gate import GateResult


# --- the last switch: <store root>/last_switch.json ------------------------------------------------------------------

@document
class SwitchOutcome(Document):
    """What the last switch did (hostside/switch.finish), redacted; the controller reads it to report a switch
    (roles/release.py), the tune for its start estimate."""
    FILE: ClassVar[str] = "last_switch.json"
    release: str
    ok: bool
    exit_code: int
    finished: str
    error: str | None = None  # refused before any restart: why (no readiness then)
    previous: str | None = None  # the release active before
    reason: str | None = None  # deploy, rollback, tune, ...
    readiness: Readiness | None = None  # None: refused before the restart
    auth: str | None = None  # the release's authentication (store.release_auth)
    auth_change: str | None = None  # a sentence when the switch changed it
    gate: GateResult | None = None  # None: no gate ran
    failure: str | None = None  # why the release failed (readiness or gate)
    rolled_back_to: str | None = None  # the automatic rollback's target; None: none
    rollback_readiness: Readiness | None = None
    rollback_auth_change: str | None = None
    forensics: str | None = None  # where what the service user wrote was moved aside before a start (forensics.py)
    active: str | None = None  # the release active after a successful switch
    verdict: str | None = None  # its verdict after a successful switch


@document
class Readiness(Document):
    """A start's staged readiness (hostside/lib/readiness.wait_ready, wait_running)."""
    ready: bool
    stage: str  # the stage reached: active, health, listener, generate, auth, weights, ...
    elapsed_s: int | float
    detail: str | None = None  # why not ready
    journal: str = ""  # the failed start's last journal lines
    auth: str | None = None  # the authentication checked (api-key, none, n/a)
