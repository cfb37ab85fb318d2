"""What host programs answer the controller, typed once: the preflight's report, the doctor's collection, the store's
history, the tune session's answers, the weights' error line and the venv's hooks.

Typed like the store's documents (documents.py: the strict reader naming the answer and the field; "format" in the
text). The host program builds its answer through the class (a field renamed in the writer fails at the write), the
controller reads it with `Class.loads(text, source)` and attributes, never `json.loads(...)["key"]`: a renamed field
is an error naming the answer and the field, never a value read as None. Each answer is written and read by one
checkout (the host package is this checkout's: roles/release.install_programs, roles/facts.inline_host), so every
field the writer always writes is required.

Kept out of documents.py and reports.py: those are imported by every no-op deploy (the store's state fact), and each
frozen dataclass costs import time on both sides; import this module only where an answer is written or read.
Standard library only: shipped to the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .documents import Document


# --- the preflight's report: /run/sglang-deploy/preflight/<service>.json (hostside/preflight/runner.py) ----------

@dataclass(frozen=True)
class PreflightFinding(Document):
    """One finding (preflight/findings.finding): a step's status, what was found and the fix."""
    step: str  # sandbox, devices, shm, toolchain, caches, resolution, driver, port, torch, p2p, triton, limits, probe
    status: str  # ok, info, warn, fail, skip
    detail: str
    fix: str | None  # None: nothing to do


@dataclass(frozen=True)
class PreflightReport(Document):
    """The runner's --json (roles/release.py reads it after a deploy's preflight; doctor_collect.sandbox_view after
    the doctor's)."""
    FILE: ClassVar[str] = "preflight/<service>.json"
    findings: list[PreflightFinding]
    seconds: int | float
    facts: dict | None  # the probe's raw facts; None: the probe gave none (a timeout, a sandbox that failed)
    ok: bool  # no finding failed
    host: dict  # the runner's own: uid_map, unprivileged, nesting
    sandbox: list  # the unit's directives against what this host enforces (findings.sandbox_enforcement)

    def warnings(self) -> list:
        return [item for item in self.findings if item.status == "warn"]
