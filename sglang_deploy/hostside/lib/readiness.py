"""Is the release's server ready, and is it really the release's server? (run inside the switch)

Staged readiness: the unit is active (within the settle time), /health answers 200, the port is held by the
unit's own processes (before the API key is sent), a real /generate returns tokens, and with auth
api-key a request without the key is refused. A failed start is explained from the journal.
"""

import datetime
import json
import re
import time

from .. import evidence
from ..evidence import journal_since
from .client import http, printable, read_api_key
from .listener import foreign_listener
from .service import service_status
from ..store import log

# While a start takes long, the journal's latest line (loading, JIT, graphs) every 30 s, and at least three times
# before a short timeout runs out.
PROGRESS_EVERY_S = 30
SYSTEMD_NOISE = re.compile(r"Failed to kill control group|: Killing process \d+ |remains running after unit stopped")


# --- readiness ------------------------------------------------------------------------------------

def failed_start(service, since, api_key, lines=25):
    """The journal of a failed start, secrets redacted: its last lines and what SGLang's own log says."""
    journal = journal_since(service, since)
    # systemd's own housekeeping while it kills the unit's processes says nothing about why it failed, and its
    # repetitions would push SGLang's error out of the tail
    told = [line for line in journal.splitlines() if not SYSTEMD_NOISE.search(line)]
    tail = evidence.redact("\n".join(told[-lines:]), [api_key])
    findings = evidence.log_findings(journal)
    cause = None
    if "status=226/NAMESPACE" in journal or "Failed to set up mount namespacing" in journal:
        cause = ("the unit's sandbox cannot be set up here (226/NAMESPACE): in an unprivileged Proxmox container "
                 "this is a container without `features: nesting=1` (or relax ProtectKernelTunables and "
                 "ProtectControlGroups); the preflight says so before the switch")
    if findings["graph_capture_failed"]:
        cause = ("decode CUDA graph capture failed and SGLang exited (SGLang has no eager fallback): "
                 + evidence.redact(findings["graph_capture_failed"], [api_key]))
    return tail, cause


def wait_healthy(probe_url, timeout):
    """Only the /health stage: True once /health answers 200 (every 2 s), False after timeout. For the perf watch's
    restart of a release that already passed its switch; a switch waits for the whole staged readiness
    (wait_ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _ = http(probe_url + "/health", timeout=5)
        if status == 200:
            return True
        time.sleep(2)
    return False


def wait_ready(store, probe_url, timeout, settle, auth="api-key"):
    """Stages: unit active (an activating unit may take `settle` seconds) -> /health 200 -> a real /generate returns
    tokens -> with auth api-key, a request without the key is refused (401). /health is asked from the moment the
    unit is active (it used to wait out the settle time first: up to 2 s of every start that is ready sooner); a
    unit that fails or stops at any time is a failed start."""
    start = time.monotonic()
    since = (datetime.datetime.now() - datetime.timedelta(seconds=2)).strftime("%Y-%m-%d %H:%M:%S")
    api_key = read_api_key(store.secrets_path)
    if auth == "api-key" and not api_key:
        return {"ready": False, "stage": "auth", "elapsed_s": 0.0, "journal": "",
                "detail": f"the release requires an API key (auth api-key) but {store.secrets_path} holds none"}
    stage, detail = "active", ""
    every = min(PROGRESS_EVERY_S, max(2.0, timeout / 3))
    next_progress = every
    while time.monotonic() - start < timeout:
        elapsed = time.monotonic() - start
        if elapsed >= next_progress:
            next_progress += every
            latest = (journal_since(store.service, since).splitlines() or ["(nothing in the journal yet)"])[-1]
            log(f"still starting after {elapsed:.0f} s of {timeout:.0f} s (stage {stage}): "
                + evidence.redact(latest, [api_key])[:240])
        status = service_status(store.service)
        state = status["active_state"]
        if state in ("failed", "inactive") or (state != "active" and elapsed > settle):
            tail, cause = failed_start(store.service, since, api_key)
            detail = f"{store.service}.service is {state} ({status['sub_state']}, result {status['result']})"
            return {"ready": False, "stage": "active", "detail": detail + (f": {cause}" if cause else ""),
                    "elapsed_s": round(elapsed, 1), "journal": tail}
        if state != "active":  # activating, within the settle time
            time.sleep(0.3)
            continue
        stage = "health"
        status, body = http(probe_url + "/health", timeout=5)
        if status != 200:
            detail = f"/health answered {status}" + (f" ({printable(body[:200])})" if status is None else "")
            time.sleep(0.5)
            continue
        stage = "listener"
        stranger = foreign_listener(store.service, probe_url)
        if stranger and stranger.startswith("nothing listens"):  # not ready yet (or the listener was swapped)
            detail = stranger
            time.sleep(0.5)
            continue
        if stranger:
            return {"ready": False, "stage": "listener", "detail": stranger, "journal": "",
                    "elapsed_s": round(time.monotonic() - start, 1)}
        stage = "generate"
        status, body = http(probe_url + "/generate", {"text": "Say hello.", "sampling_params": {
            "max_new_tokens": 8, "temperature": 0}}, api_key=api_key, timeout=max(5, timeout - elapsed))
        try:
            tokens = json.loads(body)["meta_info"]["completion_tokens"] if status == 200 else 0
        except (ValueError, KeyError, TypeError):
            tokens = 0
        if tokens > 0 and auth == "api-key":
            status, _ = http(probe_url + "/v1/models", timeout=10)  # no key: must be refused
            if status != 401:
                return {"ready": False, "stage": "auth", "elapsed_s": round(time.monotonic() - start, 1),
                        "journal": "", "detail": f"a request without the API key got {status}, not 401: the "
                                                 "server does not enforce authentication"}
        if tokens > 0:
            return {"ready": True, "stage": "generate", "elapsed_s": round(time.monotonic() - start, 1),
                    "auth": auth}
        detail = f"/generate answered {status}: {printable(body[:200])}"
        time.sleep(0.5)
    tail, cause = failed_start(store.service, since, api_key)
    return {"ready": False, "stage": stage, "detail": f"not ready within {timeout:.0f} s ({cause or detail}); the "
            "timeout is the profile's service.start_timeout_s: a cold first start loads the weights, compiles JIT "
            "kernels and captures CUDA graphs (the caches persist under the service's state and cache directories, "
            "so the next start is faster): raise it, or deploy again",
            "elapsed_s": round(time.monotonic() - start, 1), "journal": tail}


def wait_running(store, settle, hold=3.0):
    """Readiness of a multi-node rank > 0 (it serves no HTTP): active after the settle time and still
    active `hold` seconds later (joining rank 0 failed by then, or it goes on with rank 0)."""
    start = time.monotonic()
    since = (datetime.datetime.now() - datetime.timedelta(seconds=2)).strftime("%Y-%m-%d %H:%M:%S")
    time.sleep(settle + hold)
    status = service_status(store.service)
    if status["active_state"] != "active":
        tail, cause = failed_start(store.service, since, read_api_key(store.secrets_path))
        return {"ready": False, "stage": "active", "elapsed_s": round(time.monotonic() - start, 1), "journal": tail,
                "detail": f"{store.service}.service is {status['active_state']} ({status['sub_state']})"
                          + (f": {cause}" if cause else "")}
    return {"ready": True, "stage": "running (node rank > 0: no HTTP)", "elapsed_s": round(time.monotonic() - start, 1),
            "auth": "n/a"}
