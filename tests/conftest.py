"""Shared fixtures. Tests marked `simhost` boot a fresh simulated CT129 container for the session."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # testbed/ (the simulated host, the local simulator) is not an installed package
    sys.path.insert(0, str(REPO))
PROFILES = REPO / "profiles"
PROVEN = PROFILES / "qwen3.6-27b-mtp-2xa6000.yaml"
INCIDENT = PROFILES / "qwen3.6-27b-mtp1-2xa6000.yaml"

# Under pytest-xdist each worker (gw0, gw1, ...) boots its own simulated hosts. The containers share this
# machine's network namespace, so every worker gets its own ports and machine names, derived from a base.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
WORKER_INDEX = int(XDIST_WORKER[2:]) if XDIST_WORKER.startswith("gw") else 0
# The bases are distinct from the demo's ports (2222 / 30000) so tests and a running demo do not collide.
# SSH ports step by 2: the simulated CT129 takes the even one, the bare container (test_provision_sim) the odd.
BASE_SSH_PORT = int(os.environ.get("SGLANG_DEPLOY_TEST_SSH_PORT", "2232"))
TEST_SSH_PORT = BASE_SSH_PORT + 2 * WORKER_INDEX
TEST_BARE_SSH_PORT = int(os.environ.get("SGLANG_DEPLOY_TEST_BARE_SSH_PORT", BASE_SSH_PORT + 1)) + 2 * WORKER_INDEX
TEST_SERVICE_PORT = int(os.environ.get("SGLANG_DEPLOY_TEST_SERVICE_PORT", "30100")) + WORKER_INDEX
# systemd-nspawn machine names are machine-wide: two suites running side by side need distinct ones.
TEST_MACHINE = os.environ.get("SGLANG_DEPLOY_TEST_MACHINE", "ct129-test") + (f"-{XDIST_WORKER}" if XDIST_WORKER else "")
TEST_BARE_MACHINE = TEST_MACHINE + "-bare"
# The simulated fleet (test_fleet_sim.py, one module, so one worker): 3 hosts on ports above every worker's
# (CI: SSH 2252-2254, GPU servers 30110-30112, node_exporter 9252-9254).
FLEET_SSH_PORT = int(os.environ.get("SGLANG_DEPLOY_TEST_FLEET_SSH_PORT", BASE_SSH_PORT + 20))
FLEET_SERVICE_PORT = int(os.environ.get("SGLANG_DEPLOY_TEST_FLEET_SERVICE_PORT",
                                        int(os.environ.get("SGLANG_DEPLOY_TEST_SERVICE_PORT", "30100")) + 10))
FLEET_MACHINE = os.environ.get("SGLANG_DEPLOY_TEST_MACHINE", "ct129-test") + "-fleet"
# The plan fits this many workers: their SSH pairs stay below the fleet's base (+20), their service ports below the
# fleet's (+10); more would share ports, so pytest_configure refuses them.
MAX_WORKERS = 10
# A port of this worker's alone (above every worker's and the fleet's), for a test that moves the service.
TEST_SPARE_PORT = TEST_SERVICE_PORT + 50


# The controller (pyinfra, with the flag validation it runs) at a lower CPU priority than the servers it deploys
# and measures: on a real deployment they do not share CPUs, and here several of each run at once, so a busy
# controller must not slow down a simulated server that a gate or a timing test is measuring.
CONTROLLER = ["nice", "-n", "10", sys.executable]


def write_profile(tmp_path: Path, text: str, name: str = "profile.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def proven_with(tmp_path: Path, old: str, new: str, name: str = "variant.yaml") -> Path:
    """The proven profile with one textual change (asserting the change applied)."""
    text = PROVEN.read_text()
    assert old in text, f"{old!r} not in the proven profile"
    return write_profile(tmp_path, text.replace(old, new, 1), name)


def release_meta(**fields):
    """A complete meta.json (hostside/contract/release.ReleaseMeta) as a deploy writes it, with `fields` changed."""
    from sglang_deploy.hostside.contract.release import ReleaseMeta

    written = {"id": "0001-aaaaaaaa", "created": "2026-11-01T00:00:00+00:00", "deployed_by": "test@controller",
               "git": {"revision": None, "dirty": False}, "profile": "test", "sglang_version": "0.5.23",
               "venv": "/opt/sglang-deploy/venvs/test", "content_hash": "0" * 64, "exec_start": ["sglang"],
               "simulated": True, "service": "sglang", "probe_url": "http://127.0.0.1:30000", "start_timeout_s": 60}
    return ReleaseMeta.from_dict({**written, **fields}, "a test's meta.json")


def snapshot_mark(**fields):
    """A weights snapshot as meta.json records it (hostside/contract/release.SnapshotMark; weights.Weights.meta), with
    `fields` changed: a dict, as the release's meta.json holds it."""
    written = {"source": "hf://org/m@" + "a" * 40, "revision": "a" * 40, "manifest_sha256": "1" * 64,
               "manifest": "/opt/sglang-deploy/manifests/m.json", "path": "/srv/models/org--m/" + "a" * 40,
               "bytes": 1000, "files": 2}
    return {**written, **fields}


def store_report(*releases, active=None, last_good=None, consistent=True, lock=None, inconsistent=(), running=None,
                 **fields):
    """The ReleaseStore fact (hostside/contract/answers.StoreReport) of a host retaining `releases` (each the fields of a
    release_meta, or a ReleaseMeta), as `hostside.store state` reports it."""
    from sglang_deploy.hostside.contract.answers import StoreReport
    from sglang_deploy.hostside.contract.release import ReleaseMeta

    return StoreReport.from_dict({
        "service": "sglang", "state": {"active": active, "last_good": last_good},
        "releases": [r.to_dict() if isinstance(r, ReleaseMeta) else release_meta(**r).to_dict() for r in releases],
        "lock": lock, "installed_hash": None, "consistent": consistent, "inconsistent": list(inconsistent),
        "problems": [], "running": {"active_state": "active", "sub_state": "running", "result": "success",
                                    "main_pid": 100, "cmdline": None, "started_monotonic_us": "1", **(running or {})},
        **fields}, "a test's store state")


def watch_entry(**fields):
    """One perf-watch run (hostside/contract/findings.WatchEntry) as the watch stamps it, with `fields` changed."""
    from sglang_deploy.hostside.contract.findings import WatchEntry

    return WatchEntry.from_dict({"status": "ok", "at": "2026-12-01T00:00:00+00:00", "unix": 0,
                                 "release": "0001-aaaaaaaa", **fields}, "a test's watch entry")


def gate_document(**settings):
    """A complete gate-config.json (hostside/contract/gate.GateConfig): the profile's default gate section with
    `settings` changed, and plain expectations."""
    from sglang_deploy.hostside.contract.gate import GateConfig
    from sglang_deploy.profile.sections import GateSection

    return GateConfig.from_dict({"settings": GateSection(**settings).model_dump(mode="json"), "expect": {
        "decode_graphs": True, "custom_all_reduce": False, "environment": {}, "venv": "/opt/sglang-deploy/venvs/test",
        "model_path": "/models/test", "served_name": "default"}}, "a test's gate-config.json")


DFLASH = PROFILES / "qwen3.6-27b-dflash-2xa6000.yaml"
DFLASH_CONFIG = REPO / "manifests" / "local--qwen3.6-27b-dflash.config.reconstructed.json"


def bench_measurement(rates=(52.0,), taus=None, errors=(), kinds=None, aggregates=(), concurrency=4, **fields):
    """The bench client's answer (hostside/contract/gate.Measurement) as bench.py builds it: one sample per decode
    rate (tau 3.2 each unless given, kinds cycling prose/code/chat), the summaries by bench.summary, `fields`
    changed."""
    from sglang_deploy.hostside import bench
    from sglang_deploy.hostside.contract.gate import BenchConfig, Sample

    taus = list(taus) if taus is not None else [3.2] * len(rates)
    kinds = kinds or [bench.PROMPTS[index % len(bench.PROMPTS)][0] for index in range(len(rates))]
    samples = [Sample(kind=kind, completion_tokens=256, e2e_s=5.0, ttft_s=0.1, decode_tok_s=rate, accept_length=tau,
                      server_e2e_s=None) for kind, rate, tau in zip(kinds, rates, taus)]
    config = BenchConfig(samples=len(rates), warmup=1, max_new_tokens=256, concurrency=concurrency, aggregate_rounds=2)
    measured = bench.measurement("http://127.0.0.1:30000", {"version": "0.5.23"}, config, samples, list(aggregates),
                                 list(errors), 12.5)
    return measured.but(**fields)


def doctor_collection(**fields):
    """The doctor collector's answer (hostside/contract/probes.DoctorCollection) as the doctor reads it: nothing
    collected unless `fields` say (typed values: a Measurement for gate, a TuneResults for last_tune, ...)."""
    from sglang_deploy.hostside.contract.probes import DoctorCollection, SandboxView

    empty = {"active": None, "errors": [], "meta": None, "gate": None, "environ": {}, "log_findings": {},
             "costly_env": [], "server_info": {}, "checkpoint_path": None, "checkpoint": None, "draft_checkpoint": None,
             "offered_drafts": [], "last_tune": None, "last_ab": None, "clock_reasons": {}, "card_memory_mib": [],
             "sandbox": SandboxView()}
    return DoctorCollection(**{**empty, **fields})


def synthetic_draft(directory: Path, **config_changes) -> Path:
    """A DFlash draft checkpoint with the committed profile's (reconstructed) config, header-only safetensors."""
    from sglang_deploy.sim.synthetic_checkpoint import write_draft

    config = {**json.loads(DFLASH_CONFIG.read_text()), **config_changes}
    write_draft(str(directory), config, header_only=True)
    return directory


def dflash_profile(tmp_path: Path, draft_dir: Path, name: str = "dflash.yaml", text: str | None = None) -> Path:
    """The committed DFlash profile with its drafter frozen: `source` the given directory, the manifest (and the
    config copy beside it) written the way `sglang-deploy manifest` writes them."""
    from sglang_deploy.drafter import config_copy
    from sglang_deploy.weights import manifest_from_directory, write_manifest

    manifest = tmp_path / f"{name}.manifest.json"
    write_manifest(manifest_from_directory(draft_dir), manifest)
    config_copy(manifest).write_bytes((draft_dir / "config.json").read_bytes())
    text = (text or DFLASH.read_text()).replace("file:///srv/drafters/qwen3.6-27b-dflash", f"file://{draft_dir}")
    text = text.replace("manifest: manifests/local--qwen3.6-27b-dflash.json", f"manifest: {manifest}")
    lines = [line for line in text.splitlines() if "config.reconstructed.json  # until frozen" not in line]
    return write_profile(tmp_path, "\n".join(lines) + "\n", name)


# Which server a simulated host runs (host data sim_server): SGLang's own front end with the modelled Scheduler for
# the modules in SGLANG_FRONTEND_MODULES (about 25 s and 40 s of CPU per start, 4 GB), the model-only simulator (3 s,
# 0.1 GB) for the rest, which restart servers dozens of times. At most FRONTEND_SLOTS real front ends run at once
# across the workers (a lock file per slot), so that the suite fits the CI machine's 24 GB. The suite is CPU-bound on
# 2 cores and the front end's starts were its largest cost: what only SGLang's own front end can show (its
# processes, its resolution, its auth, a refused start, the key in its journal) is one module of 2 starts.
SGLANG_FRONTEND_MODULES = {"test_frontend_sim.py"}
# The preflight's steps that import SGLang's stack (hostside/preflight/runner.py: the resolution, ~6 s of CPU and 0.9 GB per
# new command line, and torch) run in these modules; elsewhere `--data preflight_stack=false` leaves them out (the
# controller's check resolved the same command line with the same SGLang install moments before). The host's resolution
# reading a pushed checkpoint's config.json runs in test_lxc_sim, under the real LXC container's unit sandbox;
# test_weights_sim's snapshots and test_frontend_sim's checkpoint carry the same synthetic config (their resolutions
# were about 35 and 25 CPU-s of CI for no other reading).
PREFLIGHT_STACK_MODULES = {"test_lxc_sim.py"}
FRONTEND_SLOTS = int(os.environ.get("SGLANG_DEPLOY_TEST_FRONTEND_SLOTS", "2"))
# The modelled GPU start on the tests' simulated hosts (SimHost.start_seconds; the simulator's default, the demo's, is
# 3 s): a run starts a server about 300 times, and each start waited its modelled 3 s in real time, about 900 of the
# suite's 4,200 worker-seconds. With 1 s a start is ready in about 1.5 s (readiness asks /health as soon as the unit is
# active, every 0.5 s). A test whose start must last (a concurrent deploy while one starts, a start timeout) sets SGLANG_SIM_START_SECONDS in its profile.
SIM_START_SECONDS = 1


class SimHostSession:
    def __init__(self, state_dir: Path):
        from testbed.rootfs import shared_lower_rootfs
        from testbed.simhost import SimHost

        self.sim_server = "model"
        self.preflight_stack = True
        self.transcript: list[str] = []  # what every pyinfra run printed (stdout, stderr): key_leaks
        # Each worker's host on an overlay over the rootfs unpacked once (the fleet's lower layer), its writes in its
        # own upper layer: unpacking the tarball (350 MB then) took about 4.5 CPU-s and 9 s per worker, all 7 at the
        # start.
        self.host = SimHost(state_dir=state_dir, ssh_port=TEST_SSH_PORT, machine=TEST_MACHINE,
                            overlay_lower=shared_lower_rootfs(), start_seconds=SIM_START_SECONDS)
        self.env = {**os.environ, "SGLANG_DEPLOY_SIMHOST_DIR": str(state_dir),
                    "SGLANG_DEPLOY_SIM_PORT": str(TEST_SERVICE_PORT), "PYTHONUNBUFFERED": "1"}

    def pyinfra_command(self, *args: str) -> list[str]:
        command = [*CONTROLLER, "-m", "pyinfra", "inventory/sim.py", *args, "--data", f"sim_server={self.sim_server}",
                   "--data", f"preflight_stack={str(self.preflight_stack).lower()}"]
        if "--dry" not in args:
            command.insert(len(CONTROLLER) + 2, "-y")
        return command

    def pyinfra(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        result = subprocess.run(self.pyinfra_command(*args), cwd=REPO, env=self.env, capture_output=True, text=True,
                                timeout=timeout)
        self.transcript.append(f"$ pyinfra {' '.join(args)}\n{result.stdout}{result.stderr}")
        return result

    @staticmethod
    def deploy_args(*extra: str, profile: Path | None = None, gate: bool = False, cap: int = 100) -> list[str]:
        """The throughput gate (about 40 s) runs only where a test asks for it. Tests fail deploys on
        purpose, so the cap on automatic rollbacks in a row is lifted unless a test sets its own."""
        args = ["deploy.py", *extra, "--data", f"max_auto_rollbacks={cap}"] + ([] if gate else ["--data", "skip_gate=true"])
        return args + (["--data", f"profile={profile}"] if profile else [])

    def deploy(self, *extra: str, profile: Path | None = None, gate: bool = False, cap: int = 100,
               **kwargs) -> subprocess.CompletedProcess:
        return self.pyinfra(*self.deploy_args(*extra, profile=profile, gate=gate, cap=cap), **kwargs)

    def sh(self, command: str, check: bool = True) -> str:
        result = self.host.ssh(command, check=False)  # ssh hands the string to the remote shell
        if check and result.returncode != 0:
            raise AssertionError(f"{command!r} failed on the sim host: {result.stderr}")
        return result.stdout

    def start_timestamp(self, service: str = "sglang") -> str:
        return self.sh(f"systemctl show -p ExecMainStartTimestampMonotonic --value {service}").strip()

    def main_pid(self, service: str = "sglang") -> int:
        return int(self.sh(f"systemctl show -p MainPID --value {service}").strip())

    def wait_healthy(self, timeout: float = 90) -> None:
        """Until the server serves /health (after a restart: past the fork/exec window, and ready for a test that
        queries it at once)."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sh(f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{TEST_SERVICE_PORT}/health; true"
                       ).strip() == "200":
                return
            time.sleep(0.5)
        raise AssertionError(f"the server did not serve /health within {timeout} s")

    def checksums(self, *paths: str) -> str:
        return self.sh("sha256sum " + " ".join(paths) + " 2>&1; true")

    def http(self, path: str, key: str | None = None) -> tuple[int, str]:
        """GET a path of the service from inside the host; returns (status, body)."""
        header = f'-H "Authorization: Bearer {key}"' if key else ""
        out = self.sh(f"curl -s -w \"\\n%{{http_code}}\" {header} http://127.0.0.1:{TEST_SERVICE_PORT}{path}")
        body, _, status = out.rpartition("\n")
        return int(status), body

    @property
    def api_key(self) -> str:
        return (self.host.state_dir / "api_key").read_text().strip()


# Parallel runs (scripts/test: pytest-xdist with --dist loadfile --no-loadscope-reorder). A module's tests stay
# together, in order, on one worker (and its simulated host), except in the modules below: each of their tests
# starts by deploying the release it needs, so they are handed out one by one to whichever worker is free.
INDEPENDENT_TESTS = {"test_releases_sim.py", "test_gate_sim.py", "test_doctor_sim.py", "test_drafter_sim.py",
                     "test_tune_sim.py"}
# Longest first, so the long ones start at once and the short ones fill the gaps (a module or one test,
# module::name). The figures: each module's time on its worker in a warm CI run on 6 workers, 2026-12-02
# (SGLANG_DEPLOY_TEST_TIMELINE), and the 25 slowest of later runs; every module not named takes under 5 s.
# pytest-xdist hands a worker its next unit while the worker's last test still runs (it needs the next item to
# start one), so a unit is bound to a worker one unit ahead: the order only approximates "the next free worker".
LONGEST_FIRST = ["test_frontend_sim.py",  # 2 starts of SGLang's own front end, in one chain
                 # the gate's measuring tests (170-230 s, mostly real-time waits) beside the CPU-heavy chains
                 "test_gate_sim.py::test_seed_incident_is_refused_then_forced_and_the_proven_release_passes_again",
                 "test_gate_sim.py::test_hidden_slowdown_is_caught_by_the_comparison_not_the_floor",
                 # the tune's three long runs (105-170 s each, mostly real-time waits): in one chain they were the
                 # suite's critical path (521 s on one worker, 2026-12-04)
                 "test_tune_sim.py::test_the_graphs_and_nccl_axes_run_every_candidate_through_the_switch",
                 "test_tune_sim.py::test_the_lever_axes_run_the_control_and_never_adopt_the_fast_garbage_backend",
                 "test_fleet_sim.py",  # about 250 s
                 # about 125 s alone, 200 s under the suite's load; handed out after the drafter's tests it started at
                 # 385 s and ended 20 s after every other worker (2026-12-06)
                 "test_lxc_sim.py",
                 "test_tune_sim.py::test_tune_from_the_incident_finds_the_optimum_within_its_budget",
                 # the incident's diagnosis and bisect (110-180 s; its A/B, 45-75 s, a test of its own below)
                 "test_doctor_sim.py::test_one_step_speculation_is_the_top_suspect_and_the_bisect_names_it",
                 # an upgrade's round trip (issue 47): 3 gated deploys, a rollback, the bisect across releases
                 "test_upgrade_sim.py",
                 "test_gate_sim.py::test_a_faster_release_that_answers_garbage_never_passes",  # about 110 s
                 "test_watch_sim.py", "test_sim.py",  # 170-190 s
                 "test_drafter_sim.py",  # two tests, 80-100 s each
                 # the local front end's users (about 120 s), in the order that keeps them together
                 # (LOCAL_FRONTEND_MODULES)
                 "test_outside_clients.py", "test_output_check.py::test_sglangs_own_front_end_returns_the_modelled_answers",
                 "test_frontends.py",
                 "test_hostile_input_sim.py", "test_weights_sim.py", "test_releases_sim.py::test_retention_after_four_deploys_keeping_two",
                 "test_provision_sim.py", "test_deploy_sim.py", "test_powercut_sim.py",  # a cut, 2 boots: 65 s
                 "test_doctor_sim.py::test_the_ab_on_request_finds_that_the_proven_speculation_pays",
                 "test_gate_sim.py",  # the rest of it: 25-40 s each, refused before any measurement
                 "test_releases_sim.py", "test_doctor_sim.py", "test_gate_trials.py", "test_tune_sim.py",
                 # The modules without a host that take more than about 5 s (SGLang's own code imported, local
                 # simulators, parser probes), longest first, so that the last units handed out are the short ones:
                 # left in file order the heaviest came last (token_map, upgrade_logic, weights_logic: t-w), and
                 # in a loaded CI run (2026-12-06, 1138 s) the workers' last work spread over 100 s (1014-1116 s),
                 # test_upgrade_logic and test_weights_logic among it. Each module's time with
                 # `pytest -n 2 -m "not simhost" --durations=0` on the shared 2 cores, 2026-12-06.
                 "test_token_map.py",  # 44 s
                 "test_sglang_memory.py",  # 28 s
                 "test_weights_logic.py",  # 21 s
                 "test_start_feasibility.py",  # 17.5 s
                 "test_security_review4.py",  # 14.6 s
                 "test_flag_table.py", "test_cli.py", "test_allow_lists.py", "test_upgrade_logic.py",  # 10.6-12.4 s
                 "test_host_boundaries.py", "test_resolution.py",  # 9.6-10 s
                 "test_gate_sequential.py", "test_render.py", "test_driver_apt.py", "test_history_browser.py",
                 "test_acceptance.py",  # 8-8.5 s
                 "test_multinode.py", "test_suite_order.py", "test_validate.py", "test_flag_identity.py"]  # 5-7 s


def pytest_collection_modifyitems(config, items):
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}

    def position(item):
        test = f"{item.path.name}::{item.originalname}"
        return rank.get(test, rank.get(item.path.name, len(rank)))
    items.sort(key=position)  # stable: the order within a module is kept


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, except for INDEPENDENT_TESTS. (Not xdist_group marks with --dist loadgroup: with
    pytest 9.2 they are silently ignored, pytest-xdist issue 1386.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModulesAndIndependentTests(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if Path(module).name in LOCAL_FRONTEND_MODULES:
                return "local-frontend"  # one worker, so that they share one server (local_frontend)
            return nodeid if Path(module).name in INDEPENDENT_TESTS else module

        def _assign_work_unit(self, node) -> None:
            if HOSTLESS_WORKER_NICE is None:
                return super()._assign_work_unit(node)
            hostless = node.gateway.id == f"gw{len(self.nodes) - 1}"
            # the host-less worker: the first host-less unit, or it retires (no host unit ever runs at its priority);
            # the others: the first host unit while any is left, then whatever comes next
            fits = [scope for scope in self.workqueue if needs_host(scope) != hostless]
            if not fits and hostless:
                node.shutdown()
                return
            if fits:
                self.workqueue.move_to_end(fits[0], last=False)
            return super()._assign_work_unit(node)

    return ModulesAndIndependentTests(config, log)


# SGLANG_DEPLOY_TEST_HOSTLESS_WORKER=NICE (scripts/test sets 19 unless the variable is set; empty: off): the last
# worker takes only the units without a simulated host, longest first (test_sim, test_gate_trials, test_token_map,
# ...), at niceness NICE, while the others take the host units first. Early on, the host workers mostly wait on gates
# and tunes in real time (the 2 cores 0.6-1.5 busy until about 340 s); the real-time host-less modules (about 240 s)
# leave them, and the CPU-bound ones take the CPU the others leave. Fresh clones, warm caches, 2026-12-06: 650 and
# 631 s against 671 s for 7 plain workers (docs/testing.md); at NICE 10 the tune's budgeted test ran out of time.
_hostless = os.environ.get("SGLANG_DEPLOY_TEST_HOSTLESS_WORKER")
if _hostless not in (None, "") and not _hostless.isdigit():
    raise pytest.UsageError(f"SGLANG_DEPLOY_TEST_HOSTLESS_WORKER={_hostless!r}: accepted is a niceness, "
                            "an integer 0 to 19 (or unset)")
HOSTLESS_WORKER_NICE = int(_hostless) if _hostless not in (None, "") else None


# The modules marked simhost (module-wide, `pytestmark = pytest.mark.simhost`): the scheduler sees node ids only.
SIMHOST_MODULES = {path.name for path in (REPO / "tests").glob("test_*.py")
                   if "pytestmark = pytest.mark.simhost" in path.read_text()}


def needs_host(scope: str) -> bool:
    """A scheduling unit (a module, one test of INDEPENDENT_TESTS, or local-frontend) that boots a simulated host, or
    that the host workers keep (the local front end's users: one worker, one server of about 4 GB)."""
    return scope == "local-frontend" or Path(scope.split("::", 1)[0]).name in SIMHOST_MODULES


def pytest_configure(config):
    workerinput = getattr(config, "workerinput", None)
    workers = getattr(config.option, "numprocesses", None)
    if workerinput is None and isinstance(workers, int) and workers > MAX_WORKERS:
        raise pytest.UsageError(f"-n {workers}: at most {MAX_WORKERS} workers (tests/conftest.py MAX_WORKERS: each has "
                                "its own SSH and service ports below the simulated fleet's)")
    if HOSTLESS_WORKER_NICE is not None and workerinput is not None and \
            workerinput["workerid"] == f"gw{int(workerinput['workercount']) - 1}":
        os.nice(HOSTLESS_WORKER_NICE)


# SGLang's own front end on this machine (testbed/local_sglang.py: about 25 s and 40 s of CPU to start, 4 GB), for the
# tests of what a client sees: one server for the modules below, which run on one worker (one xdist scope) with its
# users next to each other (LONGEST_FIRST), started by the first test that asks for it and stopped after the last.
LOCAL_FRONTEND_MODULES = {"test_outside_clients.py", "test_output_check.py", "test_frontends.py"}
LOCAL_FRONTEND_KEY = "sk-local-frontend-0123456789"
LOCAL_FRONTEND_MODEL = "qwen3.6-27b"  # --served-model-name
_local_frontend: dict = {}


@pytest.fixture
def local_frontend(tmp_path_factory):
    """SGLang 0.5.23's own `sglang serve` (only the Scheduler modelled) with the proven profile's flags, an API key
    (LOCAL_FRONTEND_KEY) and no planted fault; shared by the tests of this worker until the last one that uses it."""
    from testbed.calibration import PROVEN as FLAGS
    from testbed.local_sglang import LocalSGLang, model_dir

    server = _local_frontend.get("server")
    if server is None or server.process is None or server.process.poll() is not None:
        checkpoint = model_dir(tmp_path_factory.mktemp("local-frontend-model"))
        server = LocalSGLang(FLAGS + ["--served-model-name", LOCAL_FRONTEND_MODEL, "--api-key", LOCAL_FRONTEND_KEY],
                             {"SGLANG_SIM_FAULT_OUTPUT": ""}, checkpoint)
        try:
            server.start(tmp_path_factory.mktemp("local-frontend") / "sglang.log").wait_ready()
        except BaseException:
            server.stop()
            raise
        _local_frontend["server"] = server
    return server


@pytest.fixture
def probe_sockets(tmp_path, monkeypatch):  # tmp_path first: it is made under tempfile.tempdir
    """A socket directory of this test's own (pytest's tmp_path is too long for a socket's path)."""
    import tempfile

    from sglang_deploy.validate import probe_client, validator_env

    directory = tempfile.mkdtemp(prefix="probe-", dir="/tmp")
    monkeypatch.setattr(tempfile, "tempdir", directory)
    yield Path(directory)
    with contextlib.suppress(FileNotFoundError):
        (Path(directory) / f"sglang-deploy-{os.getuid()}").chmod(0o700)
    for cache in ("/cache-a", "/cache-b", str(validator_env.CACHE_DIR)):
        probe_client.stop_all(Path(cache))
    shutil.rmtree(directory, ignore_errors=True)


# SGLANG_DEPLOY_TEST_TIMELINE=FILE: one JSON line per test phase (worker, test, phase, start, stop), for finding the
# suite's critical path (docs/testing.md); the controller writes it (xdist reports carry the workers' clocks).
TIMELINE = os.environ.get("SGLANG_DEPLOY_TEST_TIMELINE")


def pytest_runtest_logreport(report):
    if TIMELINE and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(TIMELINE, "a") as out:
            out.write(json.dumps({"worker": getattr(report, "node", None) and report.node.gateway.id,
                                  "test": report.nodeid, "phase": report.when, "start": report.start,
                                  "stop": report.stop}) + "\n")


def pytest_sessionstart(session):
    """The shared parser probes this run starts carry its name (the workers and every pyinfra run they start inherit
    it), so that its end stops them and none of another run's (probe_client.OWNER_VARIABLE)."""
    if not hasattr(session.config, "workerinput"):
        from sglang_deploy.validate import probe_client

        os.environ[probe_client.OWNER_VARIABLE] = f"pytest-{os.getpid()}-{time.time():.0f}"


def pytest_sessionfinish(session):
    """The shared parser probes (sglang_deploy/validate/probe_client.py) would leave on their own when idle: the run that
    started them ends them (xdist: the controller, after every worker)."""
    if not hasattr(session.config, "workerinput"):
        from sglang_deploy.validate import probe_client, validator_env

        probe_client.stop_all(validator_env.CACHE_DIR, owner=os.environ.get(probe_client.OWNER_VARIABLE))


def pytest_runtest_teardown(item, nextitem):
    if "local_frontend" in item.fixturenames and (nextitem is None or "local_frontend" not in nextitem.fixturenames):
        server = _local_frontend.pop("server", None)
        if server is not None:
            server.stop()


@pytest.fixture(scope="session", autouse=True)
def _test_data_dirs(tmp_path_factory):
    """Host data names controller files only under the repository's secrets/ and profiles/ or directories the
    controller's environment names (settings_types.controller_path_problem): the tests' profiles and key files live
    in pytest's temporary directory and the hub client's wheels in the cache, so the session names them, as an
    operator names theirs."""
    from sglang_deploy.settings_types import DATA_DIRS_VARIABLE, PROFILE_DIRS_VARIABLE

    from sglang_deploy.validate.validator_env import CACHE_DIR

    base = str(tmp_path_factory.getbasetemp())
    for variable, extra in ((DATA_DIRS_VARIABLE, str(CACHE_DIR / "wheelhouse")), (PROFILE_DIRS_VARIABLE, None)):
        os.environ[variable] = ":".join(filter(None, (os.environ.get(variable), base, extra)))
    yield


# Tests that measure simulator processes they start themselves (the simulator's calibration, the gate's trials):
# the simulator's speed is real time (it sleeps for each decode step), so on a busy machine every late wake-up
# slows it down. These modules run at a real-time CPU priority, inherited by the simulators and the gate's
# client they start; measured with the suite's other workers running beside: 28.6 tok/s for the no-speculation
# row as on an idle machine, against 27.2-27.7 at nice 0 to -20 (band 27-33). The simulators sleep most of
# the time, and the kernel's real-time throttling leaves the rest of the machine its share in any case.
TIMING_SENSITIVE = {"test_sim.py", "test_gate_trials.py"}


@pytest.fixture(scope="module", autouse=True)  # module: before the modules' own server fixtures
def _priority_for_local_servers(request):
    if request.path.name not in TIMING_SENSITIVE or os.geteuid() != 0:
        yield
        return
    policy, param, nice = os.sched_getscheduler(0), os.sched_getparam(0), os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
    except OSError:  # no real-time scheduling here (a restricted container): the next best
        os.setpriority(os.PRIO_PROCESS, 0, -5)
    try:
        yield
    finally:
        os.sched_setscheduler(0, policy, param)
        os.setpriority(os.PRIO_PROCESS, 0, nice)


def simhost_available() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("debootstrap", "systemd-nspawn", "ssh"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


@pytest.fixture(scope="module", autouse=True)
def _simhost_server(request):
    """The modules of SGLANG_FRONTEND_MODULES deploy SGLang's own front end to the simulated host (holding one of
    FRONTEND_SLOTS while they run); afterwards the server is stopped, so its memory is free for the next module."""
    if request.path.name not in SGLANG_FRONTEND_MODULES:
        yield
        return
    # (the resolution step of the preflight: see _preflight_stack)
    import fcntl

    from sglang_deploy.validate.validator_env import CACHE_DIR

    session = request.getfixturevalue("simhost")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    slot = None
    while slot is None:
        for index in range(FRONTEND_SLOTS):
            handle = open(CACHE_DIR / f".test-frontend-slot-{index}", "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                slot = handle
                break
            except BlockingIOError:
                handle.close()
        else:
            import time

            time.sleep(1)
    session.sim_server = "sglang"
    try:
        yield
    finally:
        session.sim_server = "model"
        session.sh("systemctl stop sglang; true", check=False)
        slot.close()


@pytest.fixture(scope="module", autouse=True)
def _preflight_stack(request):
    """The session's simulated host runs the preflight's resolution step only in PREFLIGHT_STACK_MODULES."""
    if "simhost" not in request.fixturenames:
        yield
        return
    session = request.getfixturevalue("simhost")
    session.preflight_stack = request.path.name in PREFLIGHT_STACK_MODULES
    try:
        yield
    finally:
        session.preflight_stack = True


def key_leaks(session: SimHostSession, key: str | None = None) -> list[str]:
    """Where the API key shows, but in the secrets file (0640, root:sglang): in what a pyinfra run of the session
    printed (session.transcript), in a file the tool writes on the host, in the journal, in the local results, the
    parser probe's logs and its answers.
    SGLang returns the key from /server_info and logs it at every start (``server_args=``), as the model-only
    simulator does, so a copy that is not redacted would show."""
    key = key or session.api_key_original
    found = [f"`{entry.splitlines()[0]}` printed it" for entry in session.transcript if key in entry]
    files = session.sh(f"grep -rlF -- '{key}' /var/log /var/lib/sglang-deploy /opt/sglang-deploy /etc/systemd/system "
                       "/etc/sglang-deploy /tmp /root 2>/dev/null | grep -v '^/etc/sglang-deploy/sglang/secrets.yaml$'; "
                       "true").split()
    found += [f"the host's {path} holds it" for path in files]
    if session.sh(f"journalctl --no-pager -o cat | grep -cF -- '{key}'; true").strip() != "0":
        found.append("the host's journal holds it")
    from sglang_deploy.validate import probe_client, validator_env

    # the local results, the shared parser probe's logs, the answers cache
    places = [REPO / "results", probe_client.socket_dir(), validator_env.CACHE_DIR / "answers"]
    local = subprocess.run(["grep", "-rlF", "--", key, *map(str, places)], capture_output=True, text=True)
    found += [f"{path} holds it" for path in local.stdout.split()]
    return found


@pytest.fixture(scope="session")
def simhost(tmp_path_factory):
    reason = simhost_available()
    if reason:
        if os.environ.get("SGLANG_DEPLOY_REQUIRE_SIMHOST") == "1":
            pytest.fail(f"the simulated host is required but unavailable: {reason}")
        pytest.skip(f"simulated host unavailable: {reason}")
    from testbed.simhost import port_in_use

    if port_in_use(TEST_SERVICE_PORT):
        pytest.fail(f"the simulated host's service port 127.0.0.1:{TEST_SERVICE_PORT} is already in use "
                    "(SGLANG_DEPLOY_TEST_SERVICE_PORT sets the base)")
    session = SimHostSession(tmp_path_factory.mktemp("simhost"))
    session.host.up(fresh=True)
    session.api_key_original = session.api_key
    try:
        yield session
        # every pyinfra run of this worker's session, every module's: none printed the key, no file holds it
        leaks = key_leaks(session)
        assert not leaks, "the API key leaked during this worker's session:\n" + "\n".join(leaks)
    finally:
        session.host.down()  # unmounts the overlay
        for directory in (session.host.rootfs, session.host.state_dir / "upper", session.host.state_dir / "work"):
            shutil.rmtree(directory, ignore_errors=True)
