"""A local stand-in for NVIDIA's CUDA apt repository, built by the tests.

Real .deb packages (dpkg-deb) with NVIDIA's package names and version formats, a flat repository like
NVIDIA's (`Suites: /`) with Packages and an InRelease signed by a throwaway GnuPG key, served over
HTTP on 127.0.0.1. The packages' contents are placeholders: a libcuda.so.VERSION that carries the
user-space driver version, an nvcc that reports its release, an nvidia-smi that finds no GPU (there is
none), a libnccl.so.VERSION. Enough for apt, dpkg and the provisioning facts to behave as on a real host.

The driver's packages carry the relations of the real ones (tests/fixtures/apt/: Debian 12's nvidia-graphics-drivers
at two versions and what it pulls in), renumbered to the version a test asks for, so apt resolves them as it would
NVIDIA's: libcuda1 (= V) needs nvidia-alternative (= V) and libnvidia-ptxjitcompiler1 (= V), and so on.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import os
import platform
import shutil
import subprocess
import re
import tempfile
import threading
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from urllib.parse import urlsplit

from sglang_deploy.provision import REPO_ARCH

ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
LIBDIR = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}.get(ARCH, f"{ARCH}-linux-gnu")


@dataclass
class Package:
    name: str
    version: str
    files: dict[str, str]  # path -> content ("->target" makes a symlink)
    postinst: str = ""
    relations: dict[str, str] = field(default_factory=dict)  # Source, Depends, Breaks, Provides, ... as in a real one
    architecture: str = ""  # "all" where the real package is; else this machine's


# The real packages' relations (tests/fixtures/apt/nvidia-graphics-drivers-bookworm.control).
DRIVER_CONTROL = Path(__file__).parent / "fixtures" / "apt" / "nvidia-graphics-drivers-bookworm.control"
DRIVER_SOURCE = "nvidia-graphics-drivers"
# The two real versions recorded there; driver_packages() renumbers one of them to the version a test needs.
DRIVER_TEMPLATES = {"old": "535.261.03-1", "new": "535.309.01-0+deb12u1"}
RELATION_FIELDS = ("Source", "Multi-Arch", "Pre-Depends", "Depends", "Recommends", "Breaks", "Conflicts", "Replaces", "Provides")


def control_stanzas(path: Path = DRIVER_CONTROL) -> list[dict[str, str]]:
    """The fixture's stanzas (comment lines skipped), as field -> value (continuation lines joined)."""
    stanzas = []
    for block in re.split(r"\n\s*\n", "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))):
        fields: dict[str, str] = {}
        for line in block.strip().splitlines():
            if line[:1].isspace():
                fields[key] += " " + line.strip()
            else:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields:
            stanzas.append(fields)
    return stanzas


def driver_files(name: str, version: str) -> dict[str, str]:
    """What the stand-ins hold: the libraries carry their version (the facts read it), nvidia-smi finds no GPU."""
    return {
        "libcuda1": {f"usr/lib/{LIBDIR}/libcuda.so.{version}": f"test fixture: libcuda {version}\n",
                     f"usr/lib/{LIBDIR}/libcuda.so.1": f"->libcuda.so.{version}"},
        "libnvidia-ml1": {f"usr/lib/{LIBDIR}/libnvidia-ml.so.{version}": f"test fixture: NVML {version}\n",
                          f"usr/lib/{LIBDIR}/libnvidia-ml.so.1": f"->libnvidia-ml.so.{version}"},
        "nvidia-smi": {"usr/bin/nvidia-smi": "#!/bin/sh\necho 'No devices were found'\nexit 6\n"},
    }.get(name, {})


def from_stanza(fields: dict[str, str], files: dict[str, str] | None = None) -> Package:
    return Package(fields["Package"], fields["Version"], files or {},
                   relations={key: fields[key] for key in RELATION_FIELDS if key in fields},
                   architecture="all" if fields.get("Architecture") == "all" else "")


def driver_packages(version: str, revision: str = "1", template: str = "old") -> list[Package]:
    """The user-space driver at VERSION-REVISION: every package of the source the fixture records at the template's
    version, its relations renumbered (535.261.03-1 -> VERSION-REVISION, 535.261.03 -> VERSION), and once the
    packages of other sources it pulls in (nvidia-support, glx-alternatives, pciutils) as recorded."""
    real = DRIVER_TEMPLATES[template]
    upstream = real.split("-")[0]
    packages = []
    for fields in control_stanzas():
        if fields.get("Source", fields["Package"]).split()[0] != DRIVER_SOURCE:
            packages.append(from_stanza(fields))
        elif fields["Version"] == real:
            renumbered = {key: value.replace(real, f"{version}-{revision}").replace(upstream, version)
                          for key, value in fields.items()}
            packages.append(from_stanza(renumbered, driver_files(fields["Package"], version)))
    return packages


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
    relations = "".join(f"{key}: {value}\n" for key, value in package.relations.items())
    (root / "DEBIAN/control").write_text(
        f"Package: {package.name}\nVersion: {package.version}\nArchitecture: {package.architecture or ARCH}\n"
        f"Maintainer: sglang-deploy tests <tests@invalid>\n{relations}"
        f"Description: test fixture standing in for NVIDIA's {package.name}\n")
    if package.postinst:
        (root / "DEBIAN/postinst").write_text(package.postinst)
        (root / "DEBIAN/postinst").chmod(0o755)
    deb = out / f"{package.name}_{package.version.replace(':', '%3a')}_{package.architecture or ARCH}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
                   check=True, capture_output=True)
    return deb


# The driver's packages the provisioning tests check: the step's (libcuda1 libnvidia-ml1 nvidia-smi) and the siblings
# their exact-version relations pull in, all of one source package.
DRIVER_SIBLINGS = ("libcuda1", "libnvidia-ml1", "nvidia-smi", "nvidia-alternative", "libnvidia-ptxjitcompiler1",
                   "libnvidia-pkcs11-openssl3", "nvidia-legacy-check")
# What provisioning writes to keep them there (roles/provision.py, sglang_deploy/provision.py).
HOLDS = "/etc/apt/preferences.d/sglang-deploy-holds"
DRIVER_PIN = "/etc/apt/preferences.d/sglang-deploy-driver"


def provisioning_packages() -> list[Package]:
    """What the provisioning tests' repository holds at first: the driver at 580.65.06 and, newest, 580.95.05 (so that
    installing the older one needs the source pin), CUDA 13.0's toolkit, NCCL 2.28.3, the toolchain's stand-ins."""
    return [*driver_packages("580.65.06"), *driver_packages("580.95.05", template="new"),
            cuda_toolkit_package("13.0", "13.0.88"), nccl_package("2.28.3", "13.0"), *toolchain_packages()]


def installed_versions(sh, *packages: str) -> dict[str, str]:
    """{package: version} of those installed on a host; sh runs a command there and returns its output."""
    out = sh("dpkg-query -W -f='${Package} ${Version} ${db:Status-Status}\\n' " + " ".join(packages) + " 2>/dev/null; true")
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if line.endswith(" installed")}


class AptRepo:
    """Build, sign and serve the repository; add packages later (a "new upstream release") with publish()."""

    def __init__(self, directory: Path, path: str = f"debian12/{REPO_ARCH.get(platform.machine(), platform.machine())}"):
        """path: where the repository lies under the server's root, as on NVIDIA's server."""
        self.directory = directory
        self.root = directory / "www"
        self.pool = self.root / path
        self.pool.mkdir(parents=True)
        # a short home of its own: gpg-agent's sockets live in it, and a Unix socket path has at most 107 bytes
        # (a test's tmp_path under a worker's directory can be longer: "can't connect to the agent")
        self.gnupg = Path(tempfile.mkdtemp(prefix="aptrepo-gpg-"))
        self.env = {**os.environ, "GNUPGHOME": str(self.gnupg)}
        subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key",
                        "sglang-deploy test repository <tests@invalid>", "ed25519", "sign", "never"],
                       env=self.env, check=True, capture_output=True)
        self.key_file = directory / "repo-key.asc"
        self.key_file.write_bytes(subprocess.run(["gpg", "--armor", "--export"], env=self.env, check=True,
                                                 capture_output=True).stdout)
        self.server = None

    def publish(self, packages: list[Package]) -> None:
        """Add packages (one of each name and version: two driver versions share their other sources' packages)."""
        for package in {(package.name, package.version): package for package in packages}.values():
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

    def serve(self, address: str = "127.0.0.1") -> str:
        """The server's root URL; the repository is at ROOT/<path>/. address: where a host reaches this machine
        (a container of its own network namespace: this machine's end of its veth)."""
        handler = functools.partial(QuietHandler, directory=str(self.root))
        self.server = http.server.ThreadingHTTPServer((address, 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://{address}:{self.server.server_address[1]}/"

    def host_data(self, url: str) -> dict[str, str]:
        """The host data that point the driver step at this repository served at URL (the role fills {distro} and
        {arch} from the host, as in group_data/all.py's defaults; the key is a controller file, as air-gapped)."""
        return {"cuda_repo_url": url + "{distro}/{arch}/", "cuda_repo_key_url": str(self.key_file),
                "cuda_repo_origin": urlsplit(url).hostname}

    def close(self) -> None:
        if self.server:
            self.server.shutdown()
        # gpg started an agent for this key ring; it would outlive the test (one per worker and run).
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=self.env, capture_output=True, check=False)
        shutil.rmtree(self.gnupg, ignore_errors=True)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def base_status(packages: list[Package]) -> str:
    """A dpkg status for the fast tests: installed stand-ins for everything the packages depend on that they do not
    ship themselves (libc6, libssl3, debconf, dpkg: on any Debian 12), at a version that satisfies every relation."""
    shipped = {package.name for package in packages}
    needed = set()
    for package in packages:
        for key in ("Pre-Depends", "Depends"):
            for clause in filter(None, package.relations.get(key, "").split(",")):
                first = clause.split("|")[0].split("(")[0].split(":")[0].strip()
                if first and first not in shipped:
                    needed.add(first)
    return "".join(f"Package: {name}\nStatus: install ok installed\nVersion: 99:9999\nArchitecture: {ARCH}\n"
                   f"Maintainer: sglang-deploy tests <tests@invalid>\nDescription: base system stand-in\n\n"
                   for name in sorted(needed))


class ScratchApt:
    """apt with its own state (lists, cache, a dpkg status, preferences) reading a repository's directory: real apt
    resolution without a host, for `apt-get install -s` and `apt-cache` (what the provisioning script runs). The
    environment's APT_CONFIG points apt there; nothing of this machine's apt is read or changed."""

    def __init__(self, directory: Path, repo: AptRepo, status: str, sources: list[str] | None = None):
        """sources: sources.list lines instead of the repository's own directory (file:)."""
        self.directory = directory
        for sub in ("lists/partial", "cache/archives/partial", "preferences.d", "sources.list.d", "apt.conf.d"):
            (directory / sub).mkdir(parents=True, exist_ok=True)
        (directory / "status").write_text(status)
        (directory / "sources.list").write_text("".join(line + "\n" for line in sources) if sources
                                                else f"deb [signed-by={repo.key_file}] file:{repo.pool} /\n")
        (directory / "apt.conf").write_text("".join(f'{key} "{value}";\n' for key, value in {
            "Dir::State": directory, "Dir::State::lists": directory / "lists", "Dir::State::status": directory / "status",
            "Dir::Cache": directory / "cache", "Dir::Etc::SourceList": directory / "sources.list",
            "Dir::Etc::SourceParts": directory / "sources.list.d", "Dir::Etc::Preferences": directory / "preferences",
            "Dir::Etc::PreferencesParts": directory / "preferences.d", "Dir::Etc::main": "/dev/null",
            "Dir::Etc::Parts": directory / "apt.conf.d", "APT::Architecture": ARCH, "Acquire::Languages": "none",
            "Debug::NoLocking": "true"}.items()))
        self.env = {**os.environ, "APT_CONFIG": str(directory / "apt.conf"), "LC_ALL": "C"}
        self.run("apt-get update -q")

    def run(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", "-c", command], env=self.env, capture_output=True, text=True, timeout=120)

    def installed(self, packages: list[Package]) -> None:
        """Mark these packages installed (a container provisioned earlier)."""
        with open(self.directory / "status", "a") as status:
            for package in packages:
                relations = "".join(f"{k}: {v}\n" for k, v in package.relations.items() if k != "Source")
                status.write(f"Package: {package.name}\nStatus: install ok installed\nVersion: {package.version}\n"
                             f"Architecture: {package.architecture or ARCH}\n{relations}"
                             f"Maintainer: sglang-deploy tests <tests@invalid>\nDescription: installed earlier\n\n")
