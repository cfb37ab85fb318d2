"""The tune's saved results: which measurements a later tune of the same release may reuse instead of measuring
again (the same original release, the same measurement settings, the same candidate)."""

from __future__ import annotations

import json

from ..hostside.contract.document import DocumentError
from ..hostside.contract.findings import TuneResults
from .search import Candidate, Measured


def settings_signature(settings: dict) -> str:
    """Saved results are reused only for the same measurement settings."""
    keys = ("repeats", "samples", "max_new_tokens", "concurrency", "aggregate_rounds")
    return json.dumps({k: settings.get(k) for k in keys}, sort_keys=True)


def candidate_key(candidate: Candidate) -> str:
    """A candidate by what it changes (its id depends on the order the search reached it in)."""
    key = [candidate.flag_changes, {k: v for k, v in candidate.env_changes.items()}]
    if candidate.draft:  # a drafter candidate is its drafter too (two drafters share their flag changes)
        key.append(dict(candidate.draft))
    return json.dumps(key, sort_keys=True, default=str)


def saved_results(texts: list[str], signature: str, original: str) -> dict[str, Measured]:
    """candidate_key -> the saved measurement, from results documents (JSON texts, the first one's entry wins; an
    unreadable text is passed over) of the original release under the same settings; a measured or invalid
    candidate only (one that failed runs again)."""
    saved = {}
    for text in texts:
        try:
            document = TuneResults.loads(text)
        except DocumentError:
            continue
        if document.signature != signature or document.original != original:
            continue
        for entry in document.results:
            measured = Measured.from_entry(entry)
            if measured.measured or not measured.valid:
                saved.setdefault(candidate_key(measured.candidate), measured)
    return saved
