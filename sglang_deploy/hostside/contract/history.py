"""`hostside.store history`'s answer on stdout (roles/facts.ReleaseStore view="history", sglang_deploy/history.py):
each retained release's switches, gate floors and medians and perf-watch entries. Apart from answers.py, which every
deploy reads, because it carries the gate's and the perf watch's documents. Standard library only: shipped to the
host.
"""

from __future__ import annotations

from typing import ClassVar

from .document import Document, document
from .findings import WatchEntry
from .release import HistoryEvent
from .store import StoreState


# --- the store's history: hostside.store history (roles/facts.ReleaseStore view="history", history.py) ---------------

@document
class HistoryFloors(Document):
    """The release's gate floors (GateSettings); None: none, or the gate config unreadable."""
    decode_tok_s: int | float | None
    accept_length: int | float | None


@document
class HistoryGate(Document):
    """The release's gate result, its medians."""
    verdict: str
    at: str | None  # meta.json's gate mark; None: none
    decode_tok_s: int | float | None
    accept_length: int | float | None
    ttft_s: int | float | None


@document
class HistoryRelease(Document):
    """One retained release in the history (store.cmd_history)."""
    id: str
    created: str
    history: list[HistoryEvent]
    verdict: str | None
    exec_start: list
    environment: dict  # the release's environment file, secrets masked
    floors: HistoryFloors
    gate: HistoryGate | None  # None: no gate result
    watch: list[WatchEntry]  # the perf watch's last entries


@document
class StoreHistory(Document):
    """`hostside.store history`: every retained release's switches, gate medians and perf-watch entries, oldest
    first (sglang_deploy/history.py draws it)."""
    FILE: ClassVar[str] = "hostside.store history's output"
    service: str
    state: StoreState
    releases: list[HistoryRelease]

    def release(self, release_id):
        return next((release for release in self.releases if release.id == release_id), None)
