"""Where the controller keeps what it measured and read: results/ in the repository, one folder per host; and
where it keeps what it builds to reuse: the cache ($SGLANG_DEPLOY_CACHE, cache_dir).

The gate's, the doctor's, the bisect's, the A/B's and the router's documents (save_result), the tune's results and
tuned profiles, facts.py's facts.json, history.py's files and a rollout's summaries all land under RESULTS_DIR.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from .hostside.store import RELEASE_ID

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


def cache_dir() -> Path:
    """The controller's cache, read from the environment when asked: validator envs, parser answers, the simulated
    host's rootfs, wheels, the unit templates' compiled code, the carried host programs."""
    return Path(os.environ.get("SGLANG_DEPLOY_CACHE", Path.home() / ".cache" / "sglang-deploy"))


def save_result(host_name: str, document: dict, kind: str = "switch", results_dir: Path = RESULTS_DIR) -> Path:
    """Keep a document locally: results/<host>/<release>-<kind>-<UTC time>.json (kind: switch, doctor)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    release = str(document.get("release"))  # from the host: a release id, or the file is named "unknown"
    release = release if RELEASE_ID.match(release) else "unknown"
    path = results_dir / host_name / f"{release}-{kind}-{stamp}.json"
    if results_dir.resolve() not in path.resolve().parents:
        raise ValueError(f"{path} is not under {results_dir}: host name {host_name!r} is not a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path
