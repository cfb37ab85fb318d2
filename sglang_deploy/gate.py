"""Controller side of the gate: what the running server must show, and where results are kept.

The measurement and the verdict run on the host (hostside/gate.py, inside the switch); this module
derives the expectations from the plan and stores the result locally.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from .layout import venv_path
from .plan import Plan

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


def expectations(plan: Plan) -> dict:
    """Declared settings the gate verifies in the running server and process (not in the unit)."""
    flags = plan.profile.sglang.flags
    expect: dict = {
        "decode_graphs": not (flags.get("--disable-cuda-graph") is True
                              or flags.get("--cuda-graph-backend-decode") == "disabled"),
        "custom_all_reduce": int(flags.get("--tp-size", 1)) > 1 and flags.get("--disable-custom-all-reduce") is not True,
        "environment": dict(plan.rendered.environment),
        "venv": venv_path(plan.profile),
        "model_path": plan.profile.model.path,
    }
    if flags.get("--speculative-algorithm"):
        for flag in ("--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
                     "--speculative-num-draft-tokens"):
            if flag in flags:
                expect[flag[2:].replace("-", "_")] = flags[flag]
    return expect


def gate_config(plan: Plan) -> dict:
    return {"settings": plan.profile.gate.model_dump(mode="json"), "expect": expectations(plan)}


def save_result(host_name: str, document: dict, kind: str = "switch", results_dir: Path = RESULTS_DIR) -> Path:
    """Keep a document locally: results/<host>/<release>-<kind>-<UTC time>.json (kind: switch, doctor)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = results_dir / host_name / f"{document.get('release', 'unknown')}-{kind}-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path
