"""Wall-clock of provisioning a bare container (the LXC stand-in of tests/test_provision_sim.py).

    python benchmarks/provision_timing.py [--runs 5] [--ssh-port 2234]

Boots a fresh bare Debian container, serves the signed stand-in for NVIDIA's repository on 127.0.0.1,
and times `provision.py`: the first run (repository, driver user space, CUDA toolkit, NCCL), then
no-op re-runs (facts only), then a user-space change after the host's kernel module moved. The packages
are small stand-ins, so the install times are apt/dpkg/SSH overhead, not download time. Prints medians.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from aptrepo import AptRepo, cuda_toolkit_package, driver_packages, nccl_package  # noqa: E402
from testbed.simhost import SimHost  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ssh-port", type=int, default=2234)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="provision-timing-") as scratch:
        scratch = Path(scratch)
        repo = AptRepo(scratch / "apt")
        repo.publish([*driver_packages("580.65.06"), *driver_packages("580.95.05"),
                      cuda_toolkit_package("13.0", "13.0.88"), nccl_package("2.28.3", "13.0")])
        url = repo.serve()
        host = SimHost(state_dir=scratch / "host", ssh_port=args.ssh_port, machine="provision-timing", simulated=False)
        data = {**host.ssh_data(), "cuda_repo_url": url + "{distro}/{arch}/", "cuda_repo_key_url": str(repo.key_file),
                "cuda_repo_origin": "127.0.0.1", "nccl_version": "2.28.3", "skip_python_env": True}
        inventory = scratch / "inventory.py"
        inventory.write_text(f"bare = [('bare', {data!r})]\n")

        def provision() -> float:
            started = time.perf_counter()
            result = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(inventory), "provision.py"],
                                    cwd=REPO, capture_output=True, text=True)
            if result.returncode != 0:
                sys.exit(f"provision.py failed:\n{(result.stdout + result.stderr)[-3000:]}")
            return time.perf_counter() - started

        host.up(fresh=True)
        try:
            host.ssh("mv /etc/apt/sources.list /etc/apt/sources.list.disabled")
            host.set_kernel_module("580.95.05")
            first = provision()
            noop = [provision() for _ in range(args.runs)]
            changes = []
            for version in ["580.65.06", "580.95.05"] * ((args.runs + 1) // 2):
                host.set_kernel_module(version)
                changes.append(provision())
        finally:
            host.down()
            repo.close()
            subprocess.run(["rm", "-rf", str(host.rootfs)], check=False)
    print(f"{'first run (repository + 5 packages)':<50} {first:6.2f} s")
    print(f"{f'no-op re-run, median of {len(noop)}':<50} {statistics.median(noop):6.2f} s  "
          f"(range {min(noop):.2f}-{max(noop):.2f})")
    print(f"{f'user space follows the host module, median of {len(changes)}':<50} {statistics.median(changes):6.2f} s  "
          f"(range {min(changes):.2f}-{max(changes):.2f})")
    print(f"no-op / first: {statistics.median(noop) / first:.2f}")


if __name__ == "__main__":
    main()
