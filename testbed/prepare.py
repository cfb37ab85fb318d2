"""Build the test bed's caches ahead of the tests: what is missing, nothing else (scripts/test runs it beside pytest).

    python -m testbed.prepare            the simulated host's rootfs (and its unpacked lower layer) and its SGLang
                                         install (the newest reviewed release's validator env, its full-resolution
                                         layer and the front-end layer), side by side
    python -m testbed.prepare --older    every other release's validator env with its full-resolution layer (the
                                         upgrade and bisect tests resolve with them)

On empty caches the tests build the same things on first use, under the same locks (a test that needs one waits for
the build under way). Built here instead, they start at once and side by side: the rootfs's build (mostly waiting on
dpkg) beside the install's (uv), while the workers' first tests wait for both, and the older release's environment
during that wait, not inside the upgrade test once the workers are busy (on 2026-12-06 a CI run that built it there
took 834 s against 701 s). With everything built the run checks the markers and exits, in about a second.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sglang_deploy import releases  # noqa: E402
from sglang_deploy.validate import validator_env  # noqa: E402
from testbed import rootfs, sglang_env  # noqa: E402


def timed(name: str, build) -> str:
    started = time.monotonic()
    build()
    return f"{name} {time.monotonic() - started:.0f} s"


def sglang_install() -> None:
    """The simulated host's SGLang install: the validator env, then its full-resolution layer and the front-end layer
    side by side (from an empty uv cache 34 s and 50 s one after the other, each mostly unpacking wheels)."""
    version = sglang_env.SGLANG_VERSION
    validator_env.ensure_env(version)
    with ThreadPoolExecutor(max_workers=2) as pool:
        for build in [pool.submit(validator_env.ensure_full_layer, version),
                      pool.submit(sglang_env.ensure_frontend_layer, version)]:
            build.result()


def older_envs() -> None:
    for version in releases.versions():
        if version != sglang_env.SGLANG_VERSION:
            validator_env.ensure_full_layer(version, quiet=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--older", action="store_true", help="the other releases' validator envs")
    older = parser.parse_args().older
    builds = {"older releases' validator envs": older_envs} if older else {
        "rootfs": rootfs.shared_lower_rootfs, f"SGLang {sglang_env.SGLANG_VERSION} install": sglang_install}
    with ThreadPoolExecutor(max_workers=len(builds)) as pool:
        done = [pool.submit(timed, name, build) for name, build in builds.items()]
        print("[prepare] ready: " + ", ".join(future.result() for future in done), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
