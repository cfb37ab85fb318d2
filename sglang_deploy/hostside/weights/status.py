"""`hostside.weights status`'s answer, typed once: is a snapshot in place and unchanged since it was verified.

Written by `weights status` (__main__.run_locked) and by hostside/deploy_facts.py (one section per snapshot of a
deploy's facts) through SnapshotStatus; the controller reads it with `SnapshotStatus.loads(text, SOURCE)` and its
attributes (roles/facts.WeightsStatus). A renamed field is an error naming the answer and the field, never a
snapshot read as "not verified". Written and read by one checkout (the fact sends the host modules inline), so every
field the writers always write is required.

Its own module, one frozen dataclass: deploy_facts runs on every deploy, no-op included, and each dataclass costs
import time; the other weights answers are in outputs.py. Standard library only: shipped to the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..documents import Document

SOURCE = "hostside.weights status's answer"


@dataclass(frozen=True)
class SnapshotStatus(Document):
    FILE: ClassVar[str] = SOURCE
    verified: bool  # in place and unchanged since verified (sizes and mtimes against the host's record)
    path: str  # the snapshot's directory
    error: str | None = None  # the manifest could not be read (deploy_facts): why; None: read, or no manifest
