"""`sglang-deploy check` on a fresh machine: the wheel installed into an empty virtualenv, an empty cache.

    python benchmarks/fresh_check.py [--runs 3]

Prints the install time, the size of the virtualenv, the median wall time of `check` on the proven
profile (light path: the option table in the wheel) and what it left in the cache. pip may take its
wheels from this machine's pip cache; the download itself is not measured.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from testbed import wheel as testbed_wheel  # noqa: E402


def size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        wheel = testbed_wheel.build(work)
        started = time.perf_counter()
        testbed_wheel.install(wheel, work / "venv")
        install_s = time.perf_counter() - started
        cache = work / "cache"
        env = {**os.environ, "SGLANG_DEPLOY_CACHE": str(cache)}
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            result = subprocess.run([str(work / "venv/bin/sglang-deploy"), "check", str(REPO / "profiles/qwen3.6-27b-mtp-2xa6000.yaml"),
                                     "--gpus", "2", "--topology", "pcie"], capture_output=True, text=True, cwd=work, env=env)
            times.append(time.perf_counter() - started)
            if result.returncode != 0:
                sys.exit(result.stderr)
        print(f"wheel: {wheel.name} ({wheel.stat().st_size / 1e3:.0f} kB)")
        print(f"install into a fresh venv: {install_s:.1f} s; venv size {size_mb(work / 'venv'):.0f} MB")
        print(f"check (light, empty cache): median {statistics.median(times):.2f} s over {args.runs} "
              f"(min {min(times):.2f}, max {max(times):.2f}); cache afterwards {size_mb(cache) if cache.exists() else 0:.1f} MB")
        print(f"first check on a fresh machine: {install_s + times[0]:.1f} s; output: {result.stdout.strip()}")


if __name__ == "__main__":
    main()
