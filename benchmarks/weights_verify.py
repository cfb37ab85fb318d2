"""Re-verifying a 27B-sized weights snapshot against its manifest (hostside/weights/).

    python benchmarks/weights_verify.py [--runs 20] [--dir /var/tmp/weights-bench]

The snapshot is the synthetic Qwen3.6-27B FP8 checkpoint at its full size (sim/synthetic_checkpoint.py: real
headers, data regions as holes: about 31 GB apparent, a few KB on disk), its manifest made by hashing it.
Prints the first verification (every byte hashed, as after a download), then the median, min and max of
no-op re-verifies: `python3 -m hostside.weights verify` as the host runs it (interpreter start included) and the
in-process check a deploy's fact and the switch make (`is_verified`). Nothing is hashed when a file's size and
mtime are unchanged.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglang_deploy.hostside.weights import manifest as weights_manifest  # noqa: E402
from sglang_deploy.sim.synthetic_checkpoint import write  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--dir", help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="weights-bench-"))
    models = scratch / "models"
    snapshot = models / "Qwen--Qwen3.6-27B-FP8" / ("0" * 40)
    shutil.rmtree(scratch, ignore_errors=True)
    write(str(snapshot), header_only=False, architecture="Qwen3_5ForConditionalGeneration")
    weights_manifest.MODELS_ROOT = str(models)
    env = dict(os.environ, SGLANG_DEPLOY_MODELS=str(models))
    files = sorted(p for p in snapshot.iterdir())
    total = sum(p.stat().st_size for p in files)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        digests = list(pool.map(weights_manifest.sha256_file, files))
    manifest = {"format": 1, "files": [{"path": p.name, "size": p.stat().st_size, "sha256": digest}
                                       for p, digest in zip(files, digests)]}
    manifest_s = time.perf_counter() - started
    manifest_file = scratch / "manifest.json"
    manifest_file.write_text(json.dumps(manifest))

    started = time.perf_counter()
    problems, stats = weights_manifest.verify(str(snapshot), manifest)
    first_s = time.perf_counter() - started
    assert not problems and stats["hashed_files"] == len(files), problems

    command = [sys.executable, "-m", "hostside.weights", "verify", "--manifest", str(manifest_file),
               "--dir", str(snapshot)]
    cli, inline = [], []
    for _ in range(args.runs):
        started = time.perf_counter()
        result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO / "sglang_deploy")
        cli.append(time.perf_counter() - started)
        report = json.loads(result.stdout)
        assert result.returncode == 0 and report["hashed_files"] == 0, result.stdout + result.stderr
        started = time.perf_counter()
        assert weights_manifest.is_verified(str(snapshot), manifest)
        inline.append(time.perf_counter() - started)

    def line(name, values):
        return (f"{name:44} median {statistics.median(values) * 1000:8.1f} ms   min {min(values) * 1000:8.1f}   "
                f"max {max(values) * 1000:8.1f}   ({len(values)} runs)")

    print(f"snapshot: {len(files)} files, {total / 1e9:.1f} GB (apparent; synthetic Qwen3.6-27B FP8 sizes)")
    print(f"manifest by hashing every byte: {manifest_s:.1f} s ({total / manifest_s / 1e9:.2f} GB/s)")
    print(f"first verify (every byte hashed, {min(8, os.cpu_count() or 1)} threads): {first_s:.1f} s "
          f"({total / first_s / 1e9:.2f} GB/s)")
    print(line("no-op re-verify, `-m hostside.weights verify` process", cli))
    print(line("no-op re-verify, in process (is_verified)", inline))
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
