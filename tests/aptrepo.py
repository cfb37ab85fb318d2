"""A local stand-in for NVIDIA's CUDA apt repository, built by the tests.

Real .deb packages (dpkg-deb) with NVIDIA's package names and version formats, a flat repository like
NVIDIA's (`Suites: /`) with Packages and an InRelease signed by a throwaway GnuPG key, served over
HTTP on 127.0.0.1. The packages' contents are placeholders: a libcuda.so.VERSION that carries the
user-space driver version, an nvcc that reports its release, an nvidia-smi that finds no GPU (there is
none), a libnccl.so.VERSION. Enough for apt, dpkg and the provisioning facts to behave as on a real host.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import os
import platform
import subprocess
import threading
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

from sglang_deploy.provision import REPO_ARCH

ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
LIBDIR = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}.get(ARCH, f"{ARCH}-linux-gnu")


@dataclass
class Package:
    name: str
    version: str
    files: dict[str, str]  # path -> content ("->target" makes a symlink)
    postinst: str = ""


def driver_packages(version: str, revision: str = "1") -> list[Package]:
    deb = f"{version}-{revision}"
    return [
        Package("libcuda1", deb, {f"usr/lib/{LIBDIR}/libcuda.so.{version}": f"test fixture: libcuda {version}\n",
                                  f"usr/lib/{LIBDIR}/libcuda.so.1": f"->libcuda.so.{version}"}),
        Package("libnvidia-ml1", deb, {f"usr/lib/{LIBDIR}/libnvidia-ml.so.{version}": f"test fixture: NVML {version}\n",
                                       f"usr/lib/{LIBDIR}/libnvidia-ml.so.1": f"->libnvidia-ml.so.{version}"}),
        Package("nvidia-smi", deb, {"usr/bin/nvidia-smi": "#!/bin/sh\necho 'No devices were found'\nexit 6\n"}),
    ]


def cuda_toolkit_package(cuda: str, build: str) -> Package:
    home = f"usr/local/cuda-{cuda}"
    nvcc = (f"#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
            f"echo 'Cuda compilation tools, release {cuda}, V{build}'\n")
    return Package(f"cuda-toolkit-{cuda.replace('.', '-')}", f"{build}-1", {f"{home}/bin/nvcc": nvcc},
                   postinst=f"#!/bin/sh\nln -sfn /{home} /usr/local/cuda\n")


def nccl_package(version: str, cuda: str) -> Package:
    return Package("libnccl2", f"{version}-1+cuda{cuda}",
                   {f"usr/lib/{LIBDIR}/libnccl.so.{version}": f"test fixture: NCCL {version}\n"})


def toolchain_packages(python: str = "3.11") -> list[Package]:
    """Stand-ins for Debian's gcc, g++ and python3-dev (what the first JIT compile needs; the tests compile nothing)."""
    return [Package("gcc", "4:12.2.0-3", {"usr/bin/gcc": "#!/bin/sh\necho 'test fixture: gcc' >&2\nexit 1\n"}),
            Package("g++", "4:12.2.0-3", {"usr/bin/g++": "#!/bin/sh\necho 'test fixture: g++' >&2\nexit 1\n"}),
            Package("python3-dev", "3.11.2-1+b1", {f"usr/include/python{python}/Python.h": "/* test fixture */\n"})]


def build_deb(package: Package, out: Path) -> Path:
    root = out / f"build-{package.name}-{package.version}"
    (root / "DEBIAN").mkdir(parents=True)
    for path, content in package.files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if content.startswith("->"):
            target.symlink_to(content[2:])
        else:
            target.write_text(content)
            target.chmod(0o755 if content.startswith("#!") else 0o644)
    (root / "DEBIAN/control").write_text(
        f"Package: {package.name}\nVersion: {package.version}\nArchitecture: {ARCH}\n"
        f"Maintainer: sglang-deploy tests <tests@invalid>\n"
        f"Description: test fixture standing in for NVIDIA's {package.name}\n")
    if package.postinst:
        (root / "DEBIAN/postinst").write_text(package.postinst)
        (root / "DEBIAN/postinst").chmod(0o755)
    deb = out / f"{package.name}_{package.version.replace(':', '%3a')}_{ARCH}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
                   check=True, capture_output=True)
    return deb


class AptRepo:
    """Build, sign and serve the repository; add packages later (a "new upstream release") with publish()."""

    def __init__(self, directory: Path, path: str = f"debian12/{REPO_ARCH.get(platform.machine(), platform.machine())}"):
        """path: where the repository lies under the server's root, as on NVIDIA's server."""
        self.directory = directory
        self.root = directory / "www"
        self.pool = self.root / path
        self.pool.mkdir(parents=True)
        self.gnupg = directory / "gnupg"
        self.gnupg.mkdir(mode=0o700)
        self.env = {**os.environ, "GNUPGHOME": str(self.gnupg)}
        subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key",
                        "sglang-deploy test repository <tests@invalid>", "ed25519", "sign", "never"],
                       env=self.env, check=True, capture_output=True)
        self.key_file = directory / "repo-key.asc"
        self.key_file.write_bytes(subprocess.run(["gpg", "--armor", "--export"], env=self.env, check=True,
                                                 capture_output=True).stdout)
        self.server = None

    def publish(self, packages: list[Package]) -> None:
        for package in packages:
            build_deb(package, self.pool)
        stanzas = []
        for deb in sorted(self.pool.glob("*.deb")):
            control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
            data = deb.read_bytes()
            stanzas.append(control.rstrip("\n") + f"\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                           f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
        index = "\n".join(stanzas).encode()
        (self.pool / "Packages").write_bytes(index)
        (self.pool / "Packages.gz").write_bytes(gzip.compress(index))
        sums = "".join(f" {hashlib.sha256((self.pool / name).read_bytes()).hexdigest()} "
                       f"{(self.pool / name).stat().st_size} {name}\n" for name in ("Packages", "Packages.gz"))
        (self.pool / "Release").write_text(f"Origin: sglang-deploy tests\nLabel: test CUDA repository\n"
                                           f"Date: {formatdate(usegmt=True)}\nArchitectures: {ARCH}\nSHA256:\n{sums}")
        (self.pool / "InRelease").unlink(missing_ok=True)
        subprocess.run(["gpg", "--batch", "--yes", "--clearsign", "-o", str(self.pool / "InRelease"),
                        str(self.pool / "Release")], env=self.env, check=True, capture_output=True)
        for build in self.pool.glob("build-*"):
            subprocess.run(["rm", "-rf", str(build)], check=True)

    def serve(self) -> str:
        """The server's root URL; the repository is at ROOT/<path>/."""
        handler = functools.partial(QuietHandler, directory=str(self.root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self) -> None:
        if self.server:
            self.server.shutdown()
        # gpg started an agent for this key ring; it would outlive the test (one per worker and run).
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=self.env, capture_output=True, check=False)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
