"""The power-cut sweep (issue 50): a cut at every named point of a switch on the simulated CT129, then a boot.

    flock /tmp/sglang-deploy-simtests.lock python benchmarks/powercut_sweep.py [--points switching,unit-written,...]

Boots its own simulated host (the test env's ports and machine name: SGLANG_DEPLOY_TEST_SSH_PORT, ..._SERVICE_PORT,
..._MACHINE), model-only simulator server. For each point: the proven profile deployed (skip_gate: good), then a
release of its own (a profile that differs in --max-running-requests, so it is new and unverified) deployed with the
switch waiting at the point (testbed/powercut.py), the power cut (the container's init and every process killed at
once), the boot, the invariants, and the next deploy of the same profile. The points:
  switching     state.json says a switch is under way; nothing installed yet (after staging)
  unit-written  the new release's unit and environment installed, systemd not yet reloaded
  readiness     the new release's server restarted and starting
  gate          the new release ready, its gate about to measure (a deploy with the gate)
  rollback      a release that crashes at start failed; the automatic rollback's unit written, its restart next
Prints a Markdown table: the point, the release serving after the boot and its verdict, seconds from the boot's
start to /health, the store's consistency, what the boot recovery did, the next deploy, and any violation.
"""

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from conftest import PROVEN, TEST_SERVICE_PORT, SimHostSession, proven_with  # noqa: E402
from testbed.powercut import POINTS, cut, next_deploy, store_state  # noqa: E402


def profile_for(point, index, tmp):
    variant = proven_with(tmp, "--max-running-requests: 16", f"--max-running-requests: {15 - index}", f"{point}.yaml")
    if point == "rollback":  # a release that crashes at start: its automatic rollback is where the cut comes
        text = variant.read_text()
        assert "environment:\n" in text
        variant.write_text(text.replace("environment:\n", 'environment:\n  SGLANG_SIM_CRASH_AT_START: "1"\n', 1))
    return variant


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", default=",".join(POINTS))
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the host goes down (finally) when stopped
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        from sglang_deploy.settings_types import DATA_DIRS_VARIABLE, PROFILE_DIRS_VARIABLE
        from sglang_deploy.validate.validator_env import CACHE_DIR

        for variable, extra in ((DATA_DIRS_VARIABLE, str(CACHE_DIR / "wheelhouse")), (PROFILE_DIRS_VARIABLE, None)):
            os.environ[variable] = ":".join(filter(None, (os.environ.get(variable), tmp, extra)))  # as the tests do
        session = SimHostSession(Path(tmp) / "simhost")
        session.preflight_stack = False  # as the simulated-host tests but test_lxc_sim (tests/conftest.py)
        session.host.up(fresh=True)
        try:
            for index, point in enumerate(args.points.split(",")):
                deployed = session.deploy(profile=PROVEN)
                good = store_state(session)["state"]["active"]
                if deployed.returncode != 0:
                    raise SystemExit(f"the proven profile did not deploy:\n{(deployed.stdout + deployed.stderr)[-3000:]}")
                profile = profile_for(point, index, Path(tmp))
                result = cut(session, point, profile, TEST_SERVICE_PORT, gate=point == "gate")
                serving = "the last good" if result.active == good else "the cut's release"
                next_deploy(session, result, profile, gate=point == "gate", expect=(1,) if point == "rollback" else (0,))
                rows.append((point, result, serving))
                print(f"{point}: {result}", file=sys.stderr, flush=True)
        finally:
            session.host.down()
    print(f"\nsweep: {len(rows)} points in {(time.monotonic() - started) / 60:.1f} min\n")
    print("| cut at | reached | serving after boot | verdict | s to healthy | store consistent | boot recovery | "
          "next deploy | violations |\n|---|---|---|---|---|---|---|---|---|")
    for point, result, serving in rows:
        recovery = (result.recovered or {}).get("action") or "-"
        print(f"| {point} | {'yes' if result.reached else 'NO'} | {serving} ({result.active}) | {result.active_verdict} "
              f"| {result.healthy_s} | {'yes' if result.consistent else 'NO'} | {recovery} | {result.next_deploy} | "
              f"{'; '.join(result.violations) or 0} |")
    violations = sum(len(result.violations) for _, result, _ in rows)
    print(f"\ninvariant violations: {violations}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
