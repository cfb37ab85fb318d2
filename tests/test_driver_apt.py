"""The driver's user space against the real dependency graph, with real apt and no host.

tests/aptrepo.py builds stand-ins with the relations of Debian 12's real nvidia-graphics-drivers packages
(tests/fixtures/apt/) at two versions; ScratchApt resolves against them with its own state, so what is asserted is
apt's own answer: the install command provisioning used to run fails as on a real container, and the script that
pins the whole source package first (sglang_deploy.provision.apt_install_script) resolves at exactly the module's
version, follows a host driver upgrade or downgrade, and refuses a version the repository lacks before any change.
"""

import shutil

import pytest

from aptrepo import AptRepo, Package, ScratchApt, base_status, cuda_toolkit_package, driver_packages, nccl_package
from sglang_deploy.provision import (DRIVER_PIN_FILE, HOLDS_FILE, NVIDIA_REPO_PREFERENCES_FILE, apt_install_script,
                                     driver_step, nvidia_repo_preferences)

OLD, NEW = "580.65.06", "580.95.05"
pytestmark = pytest.mark.skipif(not all(map(shutil.which, ("apt-get", "dpkg-deb", "gpg"))),
                                reason="needs apt-get, dpkg-deb, gpg")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    directory = tmp_path_factory.mktemp("driver-apt")
    repo = AptRepo(directory / "repo")
    repo.old, repo.new = driver_packages(OLD), driver_packages(NEW, revision="0+deb12u1", template="new")
    # and what a repository of NVIDIA's also carries: CUDA, NCCL, and a package of the distribution's at a newer build
    repo.publish([*repo.old, *repo.new, cuda_toolkit_package("13.0", "13.0.88"), nccl_package("2.28.3", "13.0"),
                  Package("python3-dev", "3.11.9-1nvidia", {})])
    yield repo
    repo.close()


@pytest.fixture
def apt(repo, tmp_path):
    return ScratchApt(tmp_path / "apt", repo, base_status(repo.old + repo.new))


def lxc_step(kernel: str, libcuda=()):
    return driver_step({"gpus": [], "kernel_driver": kernel, "container": "lxc", "libcuda": list(libcuda)}, 13, 580,
                       "install")


def simulate(apt, kernel: str, libcuda=(), extra=()):
    step = lxc_step(kernel, libcuda)
    check, _ = apt_install_script(list(extra), step.hold, step, kernel, libcuda[-1] if libcuda else None)
    return apt.run(check)


def installs(result) -> dict[str, str]:
    """`Inst name [old] (new ...)` lines -> name: new version."""
    found = {}
    for line in result.stdout.splitlines():
        if line.startswith("Inst "):
            name, rest = line.split()[1], line.split("(", 1)[1]
            found[name] = rest.split()[0]
    return found


def test_the_fixture_is_the_real_graph_renumbered():
    libcuda = next(p for p in driver_packages(NEW, revision="0+deb12u1", template="new") if p.name == "libcuda1")
    assert libcuda.relations["Source"] == "nvidia-graphics-drivers"
    for sibling in ("nvidia-alternative", "libnvidia-ptxjitcompiler1", "libnvidia-pkcs11-openssl3"):
        assert f"{sibling} (= {NEW}-0+deb12u1)" in libcuda.relations["Depends"]
    assert libcuda.relations["Pre-Depends"] == "nvidia-legacy-check (>= 495)"
    assert "535." not in str([p.relations for p in driver_packages(NEW)])


def test_the_old_install_command_fails_against_the_real_graph(apt):
    """What provisioning ran before pinning the source: the exact versions of three packages, their siblings left to
    the candidate (the repository's newest)."""
    old = apt.run("apt-get install -s -q --no-install-recommends --allow-downgrades "
                  + " ".join(f"'{p}={OLD}-*'" for p in ("libcuda1", "libnvidia-ml1", "nvidia-smi")))
    assert old.returncode != 0
    assert f"libcuda1 : Depends: nvidia-alternative (= {OLD}-1) but {NEW}-0+deb12u1 is to be installed" in old.stdout


@pytest.mark.parametrize("kernel, version", [(OLD, f"{OLD}-1"), (NEW, f"{NEW}-0+deb12u1")])
def test_pinning_the_source_installs_every_sibling_at_the_module_version(apt, kernel, version):
    result = simulate(apt, kernel)
    assert result.returncode == 0, result.stderr
    planned = installs(result)
    for name in ("libcuda1", "libnvidia-ml1", "nvidia-smi", "nvidia-alternative", "libnvidia-ptxjitcompiler1",
                 "libnvidia-pkcs11-openssl3", "nvidia-legacy-check"):
        assert planned[name] == version, planned
    assert "nvidia-kernel-dkms" not in planned  # recommended by libcuda1, never installed in a container


@pytest.mark.parametrize("installed, kernel, version", [("old", NEW, f"{NEW}-0+deb12u1"), ("new", OLD, f"{OLD}-1")])
def test_a_host_driver_upgrade_or_downgrade_moves_the_whole_user_space(apt, repo, installed, kernel, version):
    before = repo.old if installed == "old" else repo.new
    apt.installed(before)
    libcuda = next(p.version.split("-")[0] for p in before if p.name == "libcuda1")
    result = simulate(apt, kernel, libcuda=[libcuda])
    assert result.returncode == 0, result.stderr
    planned = installs(result)
    assert {name for name, v in planned.items() if v == version} >= {
        "libcuda1", "libnvidia-ml1", "nvidia-smi", "nvidia-alternative", "libnvidia-ptxjitcompiler1",
        "libnvidia-pkcs11-openssl3", "nvidia-legacy-check"}, planned
    assert not [line for line in result.stdout.splitlines() if line.startswith("Remv ")]


def test_a_version_the_repository_lacks_is_refused_with_the_alternatives_and_nothing_changes(apt):
    preferences = apt.directory / "preferences.d"
    (preferences / "keep").write_text("Package: foo\nPin: version 1\nPin-Priority: 100\n")
    before = sorted((p.name, p.read_text()) for p in preferences.iterdir())
    result = simulate(apt, "580.126.01", libcuda=[OLD])
    assert result.returncode == 1
    assert (f"libcuda1 580.126.01-* is not in the repository (it has: libcuda1: {NEW}-0+deb12u1 {OLD}-1 ); "
            f"the kernel module is 580.126.01, user space here is {OLD}") in result.stderr
    assert "--no-kernel-module" in result.stderr and "/usr/share/lxc/hooks/nvidia" in result.stderr
    assert sorted((p.name, p.read_text()) for p in preferences.iterdir()) == before


def test_apt_refusing_the_simulation_names_the_conflict_and_changes_nothing(apt):
    """A package that cannot be installed alongside (here: one the repository does not have) stops the whole
    transaction at the simulation, before the pin or the holds are written."""
    result = simulate(apt, NEW, extra=["cuda-toolkit-99-9"])
    assert result.returncode == 1
    assert "apt refuses to install cuda-toolkit-99-9 libcuda1=" in result.stderr
    assert "Unable to locate package cuda-toolkit-99-9" in result.stderr
    assert not (apt.directory / "preferences.d" / DRIVER_PIN_FILE).exists()
    assert not (apt.directory / "preferences.d" / HOLDS_FILE).exists()


def test_the_commit_writes_the_source_pin_that_apt_then_follows(apt):
    step = lxc_step(NEW, [OLD])
    check, commit = apt_install_script([], step.hold, step, NEW, OLD)
    # Commit without installing (apt-get install -y needs a real root): stop before the install line.
    staged = apt.run(check + "\n" + commit.split("DEBIAN_FRONTEND")[0])
    assert staged.returncode == 0, staged.stderr
    pin = (apt.directory / "preferences.d" / DRIVER_PIN_FILE).read_text()
    assert pin == f"Package: src:nvidia-graphics-drivers\nPin: version {NEW}-*\nPin-Priority: 1001\n\n"
    policy = apt.run("apt-cache policy nvidia-alternative libnvidia-ptxjitcompiler1")
    assert policy.stdout.count(f"Candidate: {NEW}-0+deb12u1") == 2


def test_nvidias_repository_serves_only_nvidias_packages_and_the_driver_pin_still_decides(repo, tmp_path):
    """The preferences provisioning writes for NVIDIA's repository (nvidia_repo_preferences), with the host's own
    distribution beside it: a package both carry that is not NVIDIA's comes from the distribution even where NVIDIA's
    build is newer; the driver, CUDA and NCCL come from NVIDIA's even where the distribution's is newer; and the
    driver's source pin (1001) still puts every sibling at the module's version, below the repository's newest."""
    distro = AptRepo(tmp_path / "distro")  # a file: repository: its origin is "", NVIDIA's the server's host
    distro.publish([Package("python3-dev", "3.11.2-1+b1", {}), Package("libnccl2", "2.99.0-1", {})])
    url = repo.serve() + str(repo.pool.relative_to(repo.root)) + "/"
    apt = ScratchApt(tmp_path / "apt", repo, base_status(repo.old + repo.new), sources=[
        f"deb [signed-by={repo.key_file}] {url} /", f"deb [signed-by={distro.key_file}] file:{distro.pool} /"])
    (apt.directory / "preferences.d" / NVIDIA_REPO_PREFERENCES_FILE).write_text(nvidia_repo_preferences("127.0.0.1"))
    policy = apt.run("apt-cache policy python3-dev libnccl2 cuda-toolkit-13-0 libcuda1")
    assert policy.returncode == 0, policy.stderr
    candidates = dict(zip([line.rstrip(":") for line in policy.stdout.splitlines() if not line.startswith(" ")],
                          [line.split()[-1] for line in policy.stdout.splitlines() if "Candidate:" in line]))
    assert candidates == {"python3-dev": "3.11.2-1+b1", "libnccl2": "2.28.3-1+cuda13.0",
                          "cuda-toolkit-13-0": "13.0.88-1", "libcuda1": f"{NEW}-0+deb12u1"}, policy.stdout
    assert "3.11.9-1nvidia 100" in policy.stdout and f"{NEW}-0+deb12u1 600" in policy.stdout  # its priorities
    result = simulate(apt, OLD, extra=["python3-dev", "cuda-toolkit-13-0"])
    assert result.returncode == 0, result.stdout + result.stderr
    # read before the driver's pin, the raised names would shadow it: the install the pin fixed fails again
    (apt.directory / "preferences.d" / NVIDIA_REPO_PREFERENCES_FILE).rename(apt.directory / "preferences.d" / "nvidia")
    shadowed = simulate(apt, OLD)
    assert shadowed.returncode == 1 and f"but {NEW}-0+deb12u1 is to be installed" in shadowed.stderr
    planned = installs(result)
    assert planned["python3-dev"] == "3.11.2-1+b1" and planned["cuda-toolkit-13-0"] == "13.0.88-1"
    for name in ("libcuda1", "nvidia-alternative", "libnvidia-ptxjitcompiler1", "nvidia-smi"):
        assert planned[name] == f"{OLD}-1", planned
    distro.close()


def test_ubuntu_names_580_suffixed_and_from_590_unsuffixed(tmp_path):
    """NVIDIA's Ubuntu repository: per-branch names up to 580 (libnvidia-compute-580, nvidia-utils-580), no suffix
    from 590 on, both in one repository. The transaction picks the name the repository has at the module's version.
    Stand-ins with the names and Provides Canonical's packaging declares (canonical/nvidia-graphics-drivers
    debian/control: libnvidia-compute-N provides libcuda1 and libnvidia-ml1, nvidia-utils-N nvidia-smi); their
    other relations are not recorded here (no real Ubuntu control fixture: only the Debian graph is)."""
    from sglang_deploy.provision import USERSPACE_DRIVER_PACKAGES_UBUNTU

    def compute(name, version):
        return Package(name, version, {}, relations={
            "Provides": f"libnvidia-compute, libcuda1 (= {version}), libnvidia-ml1 (= {version})"})

    def utils(name, version):
        return Package(name, version, {}, relations={"Provides": "nvidia-utils, nvidia-smi", "Conflicts": "nvidia-smi"})

    repo = AptRepo(tmp_path / "ubuntu")
    packages = [compute("libnvidia-compute-580", "580.95.05-0ubuntu1"), utils("nvidia-utils-580", "580.95.05-0ubuntu1"),
                compute("libnvidia-compute", "590.48.01-0ubuntu1"), utils("nvidia-utils", "590.48.01-0ubuntu1")]
    repo.publish(packages)
    try:
        for kernel, names in (("580.95.05", ("libnvidia-compute-580", "nvidia-utils-580")),
                              ("590.48.01", ("libnvidia-compute", "nvidia-utils"))):
            apt = ScratchApt(tmp_path / f"apt-{kernel}", repo, "")
            step = driver_step({"gpus": [], "kernel_driver": kernel, "container": "lxc", "libcuda": []}, 13, 580,
                               "install", userspace_packages=USERSPACE_DRIVER_PACKAGES_UBUNTU)
            check, _ = apt_install_script([], step.hold, step, kernel, None)
            result = apt.run(check)
            assert result.returncode == 0, result.stdout + result.stderr
            assert installs(result) == {name: f"{kernel}-0ubuntu1" for name in names}
        missing = driver_step({"gpus": [], "kernel_driver": "590.44.01", "container": "lxc", "libcuda": []}, 13, 580,
                              "install", userspace_packages=USERSPACE_DRIVER_PACKAGES_UBUNTU)
        refused = apt.run(apt_install_script([], missing.hold, missing, "590.44.01", None)[0])
        assert refused.returncode == 1
        assert ("libnvidia-compute-590 or libnvidia-compute 590.44.01-* is not in the repository (it has: "
                "libnvidia-compute: 590.48.01-0ubuntu1 )") in refused.stderr
    finally:
        repo.close()
