"""Power cuts at named points of a switch on the simulated host, and the invariants checked after the boot.

The switch waits at a named point (hostside/switch.py fault_point: the file /run/sglang-deploy-test-fault holds
"pause:<point>", honoured on a simulated host alone; /run is emptied by the boot), the harness kills the container's
init and with it every process at once (SimHost.power_cut), boots it again and checks:
  - the service is active and serves /health within the readiness timeout;
  - it runs the release the store calls active, and that release passed its gate (verdict good);
  - the store is consistent (hostside.store state: no `switching`, installed unit and environment the active
    release's, the process's command line the release's ExecStart), and no lock is held;
  - no retained release is lost;
  - the next deploy of the same profile converges (exit 0, store consistent).
Used by tests/test_powercut_sim.py (one point, CI) and benchmarks/powercut_sweep.py (every point).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The switch's named points (hostside/switch.py fault_point), in the order a switch reaches them. "rollback" needs a
# release that fails (its automatic rollback's unit written, its restart next); "gate" a deploy with the gate.
POINTS = ("switching", "unit-written", "readiness", "gate", "rollback")
PAUSE_FILE = "/run/sglang-deploy-test-fault"
PAUSED_FILE = "/run/sglang-deploy-test-paused"


@dataclass
class CutResult:
    point: str
    reached: bool
    healthy_s: float | None = None  # from the boot's start to /health 200
    active: str | None = None
    active_verdict: str | None = None
    consistent: bool = False
    inconsistent: list = field(default_factory=list)
    recovered: dict | None = None
    lost: list = field(default_factory=list)
    next_deploy: str = "-"
    violations: list = field(default_factory=list)


def store_state(session) -> dict:
    return json.loads(session.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))


def wait_paused(session, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if session.sh(f"test -e {PAUSED_FILE} && echo yes; true", check=False).strip() == "yes":
            return True
        time.sleep(0.5)
    return False


def wait_healthy(session, port: int, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        code = session.sh(f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/health; true",
                          check=False).strip()
        if code == "200":
            return time.monotonic() - started
        time.sleep(0.5)
    return None


def cut(session, point: str, profile, port: int, gate: bool = False, pause_timeout: float = 180,
        ready_timeout: float = 120) -> CutResult:
    """Deploy `profile`, cut the power when its switch waits at `point`, boot, check the invariants."""
    before = {release["id"] for release in store_state(session)["releases"]}
    session.sh(f"rm -f {PAUSED_FILE}; echo pause:{point} > {PAUSE_FILE}")
    transcript = tempfile.TemporaryFile()
    controller = subprocess.Popen(session.pyinfra_command(*session.deploy_args(profile=profile, gate=gate)),
                                  cwd=REPO, env=session.env, stdout=transcript, stderr=subprocess.STDOUT)
    try:
        reached = wait_paused(session, pause_timeout)
    finally:
        if not locals().get("reached"):
            session.sh(f"rm -f {PAUSE_FILE}", check=False)
    result = CutResult(point=point, reached=reached)
    session.host.power_cut()
    try:
        controller.wait(60)  # its SSH connection died with the host
    except subprocess.TimeoutExpired:
        controller.kill()
        controller.wait()
    booted = time.monotonic()
    session.host.up()
    healthy = wait_healthy(session, port, ready_timeout)
    result.healthy_s = None if healthy is None else round(time.monotonic() - booted, 1)
    check(session, result, before)
    if not reached:
        transcript.seek(0)
        tail = transcript.read().decode(errors="replace")[-1500:]
        result.violations.insert(0, f"the switch never reached {point} within {pause_timeout:.0f} s; the deploy "
                                    f"printed: ...{tail}")
    transcript.close()
    return result


def check(session, result: CutResult, before: set) -> None:
    store = store_state(session)
    state = store["state"]
    result.active = state["active"]
    result.consistent = store["consistent"]
    result.inconsistent = store["inconsistent"]
    result.recovered = state.get("recovered")
    release = next((r for r in store["releases"] if r["id"] == state["active"]), None)
    result.active_verdict = release and release.get("verdict")
    result.lost = sorted(before - {r["id"] for r in store["releases"]})
    if result.healthy_s is None:
        result.violations.append("the service did not serve /health within the readiness timeout")
    if not store["consistent"]:
        result.violations.append("store inconsistent: " + "; ".join(store["inconsistent"]))
    if result.active_verdict != "good":
        result.violations.append(f"the active release {result.active} is {result.active_verdict or 'unverified'}, "
                                 "not one that passed its gate")
    if store["lock"]:
        result.violations.append(f"the lock is held after the boot: {store['lock']}")
    if result.lost:
        result.violations.append(f"retained releases lost: {result.lost}")


def next_deploy(session, result: CutResult, profile, gate: bool = False, expect=(0,)) -> None:
    """The next deploy of the same profile converges: exit 0 (a failing profile: its automatic rollback, exit 1),
    the store consistent afterwards."""
    deployed = session.deploy(profile=profile, gate=gate)
    store = store_state(session)
    outcome = "ok" if deployed.returncode == 0 else f"exit {deployed.returncode}"
    result.next_deploy = f"{outcome}, {'consistent' if store['consistent'] else 'INCONSISTENT'}"
    if deployed.returncode not in expect:
        result.violations.append(f"the next deploy exited {deployed.returncode}: "
                                 f"...{(deployed.stdout + deployed.stderr)[-1500:]}")
    if not store["consistent"]:
        result.violations.append("the next deploy left the store inconsistent: " + "; ".join(store["inconsistent"]))
