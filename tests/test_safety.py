"""What a value may be before it reaches a unit, a shell, a path or a URL (sglang_deploy/safety.py): every pattern on
input runs in linear time, and where model.path may be."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


# --- every pattern on input runs in linear time (security review 2, finding 11) -------------------------------

LONG = "Qwen3.6-27B-FP8-Instruct-2507-AWQ-" + "a1-" * 300
LINEAR_CASES = [
    ("model-path-trailing-space", f"safety.model_path_problem('/srv/models/{LONG} ')", "must be a normalized"),
    ("model-path-one-long-part", "safety.model_path_problem('/' + 'a' * 20000 + '!')", "must be a normalized"),
    ("model-path-many-parts", "safety.model_path_problem('/a' * 5000 + '/ ')", "must be a normalized"),
    ("textfile-dir", f"safety.abs_path_problem('/var/lib/' + 'a.' * 30 + '/{LONG} ')", "must be a normalized"),
    ("served-name", f"safety.served_name_problem('{LONG} ')", "must be letters"),
    ("extra", "safety.extra_problem('a' + '.-' * 5000 + '!')", "not a PEP 508 extra name"),
    ("socket-ifname", "str(safety.SOCKET_IFNAME.fullmatch('eth0,' * 3000 + '!'))", "None"),
    ("file-source", f"weights.source_problem('file:///srv/{LONG}/x ')", "file://"),
    ("hub-endpoint", "safety.hub_endpoint_problem('https://' + 'a.' * 5000 + '/' + 'b/' * 5000 + ' ')", "https://"),
]


@pytest.mark.parametrize("case, call, message", LINEAR_CASES, ids=[c[0] for c in LINEAR_CASES])
def test_a_long_value_with_a_late_mismatch_is_refused_at_once(case, call, message):
    """Each check in its own interpreter with a deadline of a few seconds (the MODEL_PATH pattern used to run for
    minutes on a trailing space; the deadline is not a measurement, only a bound that backtracking would pass)."""
    code = f"from sglang_deploy import safety, weights\nprint({call})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20,
                            cwd=Path(__file__).resolve().parent.parent)
    assert result.returncode == 0 and message in result.stdout, result.stdout + result.stderr


# --- model.path: where it may be (security review 2, finding 9) -----------------------------------------

MODEL_PATH_CASES = {  # model.path, service -> the refusal's words (None: accepted)
    "the managed store": ("/srv/models/Qwen3.6-27B-FP8", "sglang", None),
    "a shared memory directory": ("/dev/shm/models/qwen", "sglang", "is under /dev/shm, which other local users"),
    "the shared /tmp": ("/tmp/qwen", "sglang", "is under /tmp"),
    "the shared /var/tmp": ("/var/tmp/qwen", "sglang", "is under /var/tmp"),
    "a user's runtime directory": ("/run/user/1000/qwen", "sglang", "is under /run/user"),
    "the service user's hub cache": ("/var/cache/sglang/huggingface/hub/models--Qwen", "sglang",
                                     "the service user writes (sglang.service's state or cache directory)"),
    "the service user's state directory": ("/var/lib/sglang/weights", "sglang", "is under /var/lib/sglang"),
    "another service's state directory": ("/var/lib/sglang/weights", "qwen", None),
    "a name that only starts like /tmp": ("/tmpfs-models/qwen", "sglang", None),
}


@pytest.mark.parametrize("path, service, refusal", MODEL_PATH_CASES.values(), ids=MODEL_PATH_CASES)
def test_model_path_in_a_directory_others_write_is_refused(path, service, refusal):
    from sglang_deploy import safety

    problem = safety.model_path_location_problem(path, service)
    assert (problem is None, refusal is None or refusal in problem) == (refusal is None, True), problem
