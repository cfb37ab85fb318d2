"""Host settings: one typed home for every key the tool reads from host data.

Host data is pyinfra's: `group_data/all.py`, then the host's own data in `inventory/*.py`, then
`--data key=value` (which arrives as a string, or as what pyinfra's parser makes of it: an int, a float,
true/false). Each model here says, for its keys, the type, the accepted values, the default and what the
key means; `Model.of(data)` coerces the values and refuses a bad one with the place it was set
(`--data`, or FILE:LINE of the inventory or group data). The defaults live here and only here:
`group_data/all.py` sets the site's own choices, and `docs/settings.md` is generated from these models
(`python -m sglang_deploy.settings`, checked by tests/test_settings.py).

`HostSettings` holds what describes a host and how it is deployed; each verb's one-run arguments are a
small model of their own (`DeployArgs`, `RollbackArgs`, `DoctorArgs`, `TuneArgs`, `RouterSettings`, ...).
"""


import re
import sys
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import safety
from .provision import DRIVER_PACKAGE_VERSION, NCCL_PACKAGE_VERSION
from .rules import AXES
from .settings_types import (AbArm, CudaVersion, DriverPackageVersion, Flag, GroupName, HostName, Int, NcclPackageVersion,
                             NcclVersion, Number, PackageList, ProvisionMode, ReleaseId, RouterPolicy, SimServer, Text,
                             Topology, api_key_env_problem, attention_problem, axes_problem, int_list_problem,
                             ip_literal_problem, data_file_problem, key_url_problem, profile_path_problem, proxy_problem,
                             hub_python_problem, python_problem, repo_url_problem, results_path_problem)

DEFAULT_API_KEY_ENV = "SGLANG_DEPLOY_API_KEY"


class SettingsError(ValueError):
    """Bad host data: `problems` are `ORIGIN: key: message` lines."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


# --- where a value was set ----------------------------------------------------------------------------

def origin(data, key: str, argv: list[str] | None = None) -> str:
    """Where a host data value was set, for error messages: `--data`, or FILE:LINE of the inventory or
    group data file that sets it (the first one found, in pyinfra's precedence)."""
    argv = sys.argv if argv is None else argv
    for position, arg in enumerate(argv):
        value = argv[position + 1] if arg == "--data" and position + 1 < len(argv) else arg.removeprefix("--data=")
        if (arg == "--data" or arg.startswith("--data=")) and value.split("=", 1)[0] == key:
            return "--data"
    root = Path(__file__).resolve().parent.parent
    candidates = [Path(a) for a in argv[1:] if a.endswith(".py") and "inventory" in Path(a).parts]
    candidates += [Path("group_data/all.py"), root / "group_data" / "all.py"]
    patterns = (re.compile(rf"""["']{re.escape(key)}["']\s*:"""), re.compile(rf"^{re.escape(key)}\s*="))
    for path in candidates:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            if any(pattern.search(line) for pattern in patterns):
                return f"{path}:{number}"
    return "host data"


# --- the models -------------------------------------------------------------------------------------

class Settings(BaseModel):
    """A group of host data keys. Subclasses declare fields; `Field(alias=...)` is the host data key when the
    attribute's name is shorter."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True, defer_build=True)
    title: ClassVar[str] = ""

    @classmethod
    def keys(cls) -> dict[str, str]:
        """host data key -> attribute name."""
        return {(field.alias or name): name for name, field in cls.model_fields.items()}

    @classmethod
    def of(cls, data, argv: list[str] | None = None):
        """The settings from host data (a pyinfra HostData or any mapping with .get); a missing or None value
        takes the default. Raises SettingsError naming where each bad value was set."""
        if isinstance(data, Settings):
            data = data.as_data()
        values = {}
        for key in cls.keys():
            value = data.get(key) if hasattr(data, "get") else None
            if value is not None:
                values[key] = value
        try:
            settings = cls.model_validate(values)
        except ValidationError as error:
            problems = []
            for item in error.errors():
                key = str(item["loc"][0]) if item["loc"] else "host data"
                message = str(item.get("ctx", {}).get("error") or item["msg"])
                problems.append(f"{origin(data, key, argv)}: {key}: {message}")
            raise SettingsError(problems) from None
        problems = [f"{origin(data, key, argv)}: {key}: {message}" for key, message in settings.cross_problems()]
        if problems:
            raise SettingsError(problems)
        return settings

    def cross_problems(self) -> list[tuple[str, str]]:
        """(key, message) for rules between keys."""
        return []

    def as_data(self) -> dict[str, Any]:
        """Back to host data keys (for code that takes a mapping)."""
        return {key: getattr(self, name) for key, name in self.keys().items()}


class HostSettings(Settings):
    title: ClassVar[str] = "Host settings (inventory, group_data/all.py, --data)"

    # --- what is deployed, and where ---
    profile: Text(profile_path_problem) = Field(
        None, description="The serving profile deployed to the host: under profiles/ (or a directory the "
        "controller's $SGLANG_DEPLOY_PROFILE_DIRS names); group_data/all.py names the site's default.")
    gpus: Int(1, 64) = Field(None, description="The GPU count the profile is checked against (--tp-size); a real "
                             "host's own report must not contradict it.")
    gpu_topology: Topology = Field(None, description="The GPU interconnect, for the NCCL rules "
                                                   "(a real host reports its own).")
    gpu_model: Text() = Field("a6000", description="The GPU model whose facts SGLang's resolution runs under "
                              "(sglang_deploy/validate/gpu_facts.py: a6000, h100, ...) where the host's nvidia-smi cannot say; "
                              "a host that reports its GPUs is resolved under what it reports.")
    port: Int(1024, 65535) = Field(None, description="The server's port (None: the profile's service.port). "
                                   "The unit may not bind a privileged port.")
    service: Text(safety.service_name_problem) = Field(
        None, description="The unit's name, for verbs that run without a profile (rollback.py, releases.py, "
        "doctor.py); None: the profile's.")
    container_id: Int(100, 999999999) = Field(None, description="The host's Proxmox CT id, for the fixes the "
                                              "preflight and facts.py print (`pct set <id> ...`).")
    simulated: Flag = Field(False, description="True only for the simulated CT129 (the host must carry "
                            "/etc/sglang-deploy-simulated).")
    sim_server: SimServer = Field(
        "sglang", description="On a simulated host, what runs behind <venv>/bin/sglang serve: sglang (SGLang's own "
        "front end, resolution and processes with a modelled Scheduler; about 25 s to start, 4 GB) or model (the "
        "model-only simulator: 3 s, 0.1 GB).")
    # --- the API key ---
    api_key_file: Text(data_file_problem) = Field(
        None, description="The API key: read from this file (mode 0600) under the repository's secrets/ (or a "
        "directory the controller's $SGLANG_DEPLOY_DATA_DIRS names), else from the controller's api_key_env.")
    api_key_env: Text(api_key_env_problem) = Field(DEFAULT_API_KEY_ENV, description="The controller environment "
                                                    "variable holding the API key.")
    # --- releases ---
    keep_releases: Int(1, 100) = Field(5, description="Releases kept on the host (the active and the last good one "
                                       "are never pruned).")
    max_auto_rollbacks: Int(1, 100) = Field(3, description="Automatic rollbacks in a row before deploys are refused "
                                            "(deploy.py --data force=true overrides).")
    preflight_stack: Flag = Field(True, description="False leaves out the preflight's steps that import SGLang's "
                                  "stack: its resolution on the host, and on a simulated host the torch step (the "
                                  "test suite's simulated hosts skip them outside the modules that test them).")
    # --- provisioning (real hosts; skipped on the simulated one) ---
    provision: Flag = Field(True, description="deploy.py provisions real hosts (driver, CUDA, NCCL, venv); False: "
                            "the host is prepared already.")
    provision_mode: ProvisionMode = Field(
        "install", description="install: install what is missing; verify: change nothing, fail with what would "
        "have to change.")
    cuda_major: Int(10, 99) = Field(13, description="The CUDA major the pinned SGLang is built for; CUDA 13 "
                                    "needs the R580 driver branch.")
    cuda_version: CudaVersion = Field(
        "13.0", description="The CUDA toolkit installed (/usr/local/cuda-<version>, the unit's CUDA_HOME).")
    driver_branch: Int(300, 9999) = Field(580, description="The NVIDIA driver branch installed or required.")
    nccl_version: NcclVersion = Field(
        None, description="Pin the system libnccl2; PyTorch in the venv brings its own NCCL.")
    nccl_package_version: NcclPackageVersion = Field(
        NCCL_PACKAGE_VERSION, description="NVIDIA's Debian version of a libnccl2 pin.")
    driver_userspace_packages: PackageList = Field(
        None, description="In a container: the user-space driver packages installed at exactly the host kernel "
        "module's version, with every package of their source packages pinned there. None: by distribution "
        "(Debian: libcuda1 libnvidia-ml1 nvidia-smi; Ubuntu: libnvidia-compute-{branch}|libnvidia-compute "
        "nvidia-utils-{branch}|nvidia-utils, a|b: the first name the repository has at that version).")
    driver_package_version: DriverPackageVersion = Field(
        DRIVER_PACKAGE_VERSION, description="The apt version glob of those packages ({version}: the kernel module's).")
    cuda_repo_url: Text(repo_url_problem(False)) = Field(
        "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/",
        description="NVIDIA's CUDA apt repository (a mirror for air-gapped hosts); {distro} and {arch} are the "
        "host's (debian12, ubuntu2404; x86_64, sbsa).")
    cuda_repo_key_url: Text(key_url_problem) = Field(
        "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/3bf863cc.pub",
        description="Its signing key: an http(s) URL, or a controller file under secrets/ (or "
        "$SGLANG_DEPLOY_DATA_DIRS).")
    cuda_repo_origin: HostName = Field("developer.download.nvidia.com", description="The apt origin of NVIDIA's "
                "repository (the mirror's host name): its packages are pinned at 100, below the distribution's, and "
                "only the driver's, CUDA's and NCCL's names at 600, above it.")
    proxy: Text(proxy_problem) = Field(
        None, description="An HTTP proxy (http://host:port) for a host whose only way out is a proxy (e.g. on the "
        "Proxmox host): passed to apt (Acquire::http(s)::Proxy), the repository key's download, pip/uv and the "
        "Hugging Face client (http_proxy/https_proxy; loopback excluded). No credentials in the URL.")
    wheelhouse: Text(data_file_problem) = Field(
        None, description="A controller directory of wheels for an offline Python env install, under secrets/ "
        "(or $SGLANG_DEPLOY_DATA_DIRS).")
    verify_python: Text(python_problem) = Field(None, description="The python whose torch reports the NCCL it "
                                                 "loads (None: the profile's venv in deploy.py, else python3).")
    # --- model weights ---
    hf_endpoint: Text(safety.hub_endpoint_problem) = Field(
        None, description="An HF-compatible endpoint to fetch hf:// sources from (a mirror; None: the Hub). https "
        "only (plain http only on loopback, for a test Hub). Host data only: a profile never names an endpoint.")
    hub_python: Text(hub_python_problem) = Field(
        None, description="The python whose huggingface_hub fetches the weights on the host, as root (None: the "
        "hub-client venv, installed when needed); python3, /usr/bin/python3 or the hub client's, never a release venv.")
    hub_wheelhouse: Text(data_file_problem) = Field(
        None, description="A controller directory of wheels (huggingface_hub and its dependencies) for that small "
        "venv, offline; under secrets/ (or $SGLANG_DEPLOY_DATA_DIRS).")
    hf_token_file: Text(safety.model_path_problem) = Field(
        None, description="A file ON THE HOST holding a Hugging Face token (root-only), for gated or private "
        "repositories.")
    hf_token_endpoint: Text(safety.hub_endpoint_problem) = Field(
        None, description="The one endpoint the token may go to (None: the Hub); a deploy whose hf_endpoint is "
        "another one is refused.")
    # --- multi-node servers ---
    node_group: GroupName = Field(
        "nodes", description="The inventory group of a multi-node profile's hosts, rank 0 first.")
    worker_address: Text() = Field(None, description="The address other hosts reach this one at (None: "
                                   "ssh_hostname, else the host name).")
    nccl_socket_ifname: Text() = Field(None, description="NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME of a multi-node "
                                       "server (None: the profile's).")
    # --- pyinfra's own keys, read by the tool ---
    ssh_hostname: Text() = Field(None, description="pyinfra's: the address SSH connects to.")
    ssh_user: Text() = Field(None, description="pyinfra's: the SSH user (the service user may not be it).")
    sudo: Flag = Field(False, alias="_sudo", description="pyinfra's: run host commands with sudo.")

    def cross_problems(self) -> list[tuple[str, str]]:
        """The Hugging Face token goes only to the endpoint named with it: hf_token_endpoint (default the Hub),
        which must be the endpoint the download uses (hf_endpoint, default the Hub)."""
        if not self.hf_token_file:
            return []
        used = (self.hf_endpoint or safety.DEFAULT_HUB).rstrip("/")
        named = (self.hf_token_endpoint or safety.DEFAULT_HUB).rstrip("/")
        if used != named:
            return [("hf_token_file", f"the token of hf_token_file is sent only to hf_token_endpoint ({named}), but "
                     f"the weights come from hf_endpoint {used}; accepted: hf_token_endpoint={used} when that "
                     "endpoint may have the token, or no hf_token_file")]
        return []


class DeployArgs(Settings):
    title: ClassVar[str] = "deploy.py (one run: --data key=value)"
    force: Flag = Field(False, description="Deploy although automatic rollbacks in a row reached "
                        "max_auto_rollbacks.")
    skip_gate: Flag = Field(False, description="Deploy without the throughput gate (the release is marked good "
                            "once ready). For emergencies.")
    skip_preflight: Flag = Field(False, description="Switch without the preflight (the release's server checks on "
                                 "the host under its own sandbox). For emergencies; recorded in the release. "
                                 "rollback.py takes it too.")


class RollbackArgs(Settings):
    title: ClassVar[str] = "rollback.py"
    release: ReleaseId = Field(
        None, description="The retained release to go back to (None: the previous good one).")
    skip_preflight: Flag = Field(False, description="Restart without the preflight (recorded).")


class DoctorArgs(Settings):
    title: ClassVar[str] = "doctor.py"
    probe: Flag = Field(False, description="Also run the GPU probe (memory bandwidth, all-reduce) with the "
                        "release's venv.")
    probe_force: Flag = Field(False, description="Run the probe even while the GPUs are in use.")
    bisect: ReleaseId = Field(None, description="Regression bisect: measure each difference between this (slower, "
                              "refused) release and the active one alone, as temporary releases under the lock with "
                              "the tune's measurement settings (tune_repeats, tune_samples, tune_max_new_tokens, "
                              "tune_budget_s), and name the one that costs the speed.")
    ab: AbArm = Field(None, description="A short A/B on request: measure the active release against the same "
                                 "release without speculation (nospec), a temporary release under the lock with the "
                                 "tune's measurement settings; the doctor names speculation slower than none from "
                                 "it.")


class ProvisionArgs(Settings):
    title: ClassVar[str] = "provision.py"
    skip_python_env: Flag = Field(False, description="The NVIDIA stack only, not the profile's virtualenv.")


class FactsArgs(Settings):
    title: ClassVar[str] = "facts.py"
    python: Text(python_problem) = Field("python3", description="The python whose torch reports the CUDA and NCCL "
                                          "it loads.")
    user: Text(safety.service_user_problem) = Field("sglang", alias="service_user", description="The account a "
                                                    "release venv's python runs as (root never starts it).")


class ReleasesArgs(Settings):
    title: ClassVar[str] = "releases.py"
    fleet_summary: Text(results_path_problem) = Field(
        None, description="Also write the fleet summary as JSON to this file, under the repository's results/.")



class RouterSettings(Settings):
    title: ClassVar[str] = "router.py (the router host's data)"
    port: Int(1, 65535) = Field(30080, alias="router_port", description="The router's port.")
    bind: Text(ip_literal_problem) = Field("127.0.0.1", alias="router_bind",
                                            description="The router's listening address (an IP literal).")
    policy: RouterPolicy = Field("cache_aware", alias="router_policy",
                                             description="sglang-router's load-balancing policy.")
    workers_group: GroupName = Field(
        "fleet", alias="router_workers", description="The inventory group whose servers the router sends "
        "requests to.")
    health_interval_s: Int(1, 3600) = Field(10, alias="router_health_interval_s",
                                            description="Seconds between the router's health checks of each worker.")
    health_failures: Int(1, 100) = Field(3, alias="router_health_failures",
                                         description="Failed health checks before the router takes a worker out.")
    gate: Flag = Field(False, alias="router_gate", description="One run: also measure the fleet's gate through the "
                       "router (the workers' floors).")


class TuneArgs(Settings):
    title: ClassVar[str] = "tune.py"
    space: Text(axes_problem) = Field("spec,drafter", alias="tune_space", description=f"What to search: "
                                       f"{', '.join(AXES)}, all, or a comma list.")
    attention: Text(attention_problem) = Field("all", alias="tune_attention", description="The attention axis's "
                                               "backends: all (every --attention-backend choice SGLang's resolution "
                                               "accepts for the profile on the host's GPUs) or a comma list (each "
                                               "still asked of the resolution).")
    budget_s: Number(10, 7 * 24 * 3600) = Field(3600, alias="tune_budget_s", description="The tune's time budget in "
                                                "seconds (candidates that would not fit are not started).")
    repeats: Int(3, 50) = Field(3, alias="tune_repeats", description="Repeats per candidate: the score is "
                                "median - 1.4826 x MAD over them.")
    samples: Int(1, 60) = Field(6, alias="tune_samples", description="Single-stream requests per repeat (the "
                                "gate's 6 prompts, each once).")
    max_new_tokens: Int(16, 4096) = Field(128, alias="tune_max_new_tokens", description="Tokens per request.")
    concurrency: Int(1, 256) = Field(None, alias="tune_concurrency", description="Streams of the aggregate round "
                                     "(None: the profile's gate.concurrency).")
    heartbeat_s: Number(3, 3600) = Field(30, alias="tune_heartbeat_s", description="The host restores the original "
                                         "release when the controller is silent this long.")
    steps: Text(int_list_problem) = Field("1-6", alias="tune_steps", description="Speculative steps to try.")
    topk: Text(int_list_problem) = Field("1,2,4", alias="tune_topk", description="eagle-topk values to try (draft "
                                          "tokens follow).")
    resume: Flag = Field(True, alias="tune_resume", description="Reuse the measurements saved by an interrupted "
                         "tune of the same profile.")
    # The three guards' bounds keep them on (security review 3): no 0 aggregate share, 100 % noise or 0 % gain.
    min_aggregate: Number(0.5, 1) = Field(0.95, alias="tune_min_aggregate", description="The winner's aggregate "
                                          "throughput must stay >= this share of the original's (0.5 to 1).")
    noise_pct: Number(0.1, 25) = Field(5.0, alias="tune_noise_pct", description="A candidate whose repeats spread "
                                       "more than this (% of the median) is rejected as noisy (at most 25).")
    min_gain_pct: Number(0.5, 50) = Field(2.0, alias="tune_min_gain_pct", description="A change must gain at least "
                                           "this much over the original to be written (0.5 to 50 %).")


MODELS = (HostSettings, DeployArgs, RollbackArgs, DoctorArgs, TuneArgs, RouterSettings, ProvisionArgs, FactsArgs,
          ReleasesArgs)


# Environment variables: what reads each, and what it is for. tests/test_settings.py checks that every
# SGLANG_DEPLOY_* name the code, tests and scripts use is here.
ENVIRONMENT = {
    # the controller
    "SGLANG_DEPLOY_PROBE_OWNER": "controller: names the run that starts a shared parser probe, so that its end stops "
                                 "only the probes it started (the test suite sets it; validate/probe_client.py)",
    "SGLANG_DEPLOY_API_KEY": "controller: the API key, when host data api_key_file is not set (api_key_env names "
                             "another SGLANG_DEPLOY_* variable)",
    "SGLANG_DEPLOY_WEIGHTS_DIRS": "controller: the directories (':'-separated) a file:// weights source, drafter or "
                                  "absolute manifest may come from",
    "SGLANG_DEPLOY_DATA_DIRS": "controller: the directories (':'-separated) host data api_key_file, "
                               "cuda_repo_key_url, wheelhouse and hub_wheelhouse may name besides the repository's "
                               "secrets/",
    "SGLANG_DEPLOY_PROFILE_DIRS": "controller: the directories (':'-separated) host data profile may name besides "
                                  "the repository's profiles/",
    "SGLANG_DEPLOY_CACHE": "controller: where the validator env, the simulated host's rootfs and wheelhouses, the "
                           "compiled unit templates and the carried host programs are cached (default "
                           "~/.cache/sglang-deploy)",
    "SGLANG_DEPLOY_VALIDATOR_TORCH": "controller: the torch/torchvision pins of the validator env (default: the "
                                     "release's own, releases/<version>/dependencies.json)",
    "SGLANG_DEPLOY_GPU_FACTS": "set by the controller for SGLang's resolution: the GPU facts the stand-in reports",
    "SGLANG_DEPLOY_GPU_STANDIN": "set by the controller for SGLang's resolution: the stand-in installed into torch",
    "SGLANG_DEPLOY_CT129_USER": "inventory/ct129.py: the SSH user (default root; another one deploys with sudo)",
    # the host package (its paths, for tests that run it outside a host)
    "SGLANG_DEPLOY_STORE": "host: the release store's root (default /var/lib/sglang-deploy)",
    "SGLANG_DEPLOY_MODELS": "host: the weights' root (default /srv/models)",
    "SGLANG_DEPLOY_TEST_DIE_AFTER": "host: the switch's one fault-injection point (docs/testing.md)",
    # the simulated hosts
    "SGLANG_DEPLOY_SIMHOST_DIR": "testbed: the simulated host's state directory (default .simhost)",
    "SGLANG_DEPLOY_SIMHOST_PORT": "testbed: the simulated host's SSH port (default 2222)",
    "SGLANG_DEPLOY_SIMFLEET_DIR": "testbed: the simulated fleet's state directory (default .simfleet)",
    "SGLANG_DEPLOY_SIM_PORT": "inventory/sim.py: the simulated host's service port (default the profile's)",
    "SGLANG_DEPLOY_LXCHOST_DIR": "testbed: the LXC test host's state directory",
    "SGLANG_DEPLOY_DEBIAN_MIRROR": "testbed: the Debian mirror the rootfs is built from (mmdebstrap, or debootstrap)",
    # the test suite (docs/testing.md)
    "SGLANG_DEPLOY_REQUIRE_SIMHOST": "tests: fail, not skip, what needs the simulated host or Chromium (CI)",
    "SGLANG_DEPLOY_TEST_WORKERS": "tests: pytest-xdist workers (default 7)",
    "SGLANG_DEPLOY_TEST_HOSTLESS_WORKER": "tests: a niceness: the last worker then takes only the modules that need no "
                                          "simulated host (opt-in, see docs/testing.md)",
    "SGLANG_DEPLOY_TEST_TIMELINE": "tests: a file each test phase's worker, start and stop are appended to (JSON lines)",
    "SGLANG_DEPLOY_TEST_FRONTEND_SLOTS": "tests: SGLang front ends running at once across the workers (default 2)",
    "SGLANG_DEPLOY_TEST_SSH_PORT": "tests: the workers' SSH port base (default 2232)",
    "SGLANG_DEPLOY_TEST_BARE_SSH_PORT": "tests: the bare containers' SSH port base",
    "SGLANG_DEPLOY_TEST_SERVICE_PORT": "tests: the workers' service port base (default 30100)",
    "SGLANG_DEPLOY_TEST_MACHINE": "tests: the workers' machine name prefix (default ct129-test)",
    "SGLANG_DEPLOY_TEST_FLEET_SSH_PORT": "tests: the simulated fleet's SSH port base",
    "SGLANG_DEPLOY_TEST_FLEET_SERVICE_PORT": "tests: the simulated fleet's service port base",
}


# --- the generated reference page ------------------------------------------------------------------------

def _kind(model: type[Settings], name: str) -> str:
    metadata = [m for m in model.model_fields[name].metadata if isinstance(m, str)]
    return metadata[0] if metadata else "true/false"


def _default(value) -> str:
    return "-" if value is None else f"`{str(value).lower() if isinstance(value, bool) else value}`"


def markdown() -> str:
    """docs/settings.md, from the models."""
    lines = ["# Settings", "",
             "<!-- Generated by `python -m sglang_deploy.settings > docs/settings.md` from sglang_deploy/settings.py;",
             "     tests/test_settings.py checks that it is current. -->", "",
             "Host data comes from pyinfra: `group_data/all.py` (the site's own defaults), then the host's data in",
             "`inventory/*.py`, then `--data key=value` on the command line, which wins. Every key the tool reads is",
             "below, with its type, what it accepts and its default; a bad value is refused before anything runs,",
             "naming where it was set (`--data`, or FILE:LINE). The serving profile's fields are in",
             "[profile.md](profile.md); the environment variables are at the end.", ""]
    for model in MODELS:
        lines += [f"## {model.title}", "", "| key | accepts | default | meaning |", "|---|---|---|---|"]
        for key, name in model.keys().items():
            field = model.model_fields[name]
            lines.append(f"| `{key}` | {_kind(model, name)} | {_default(field.default)} | "
                         f"{(field.description or '').replace('|', '/')} |")
        lines.append("")
    lines += ["## Environment variables", "", "| variable | what reads it, and what for |", "|---|---|"]
    lines += [f"| `{name}` | {meaning} |" for name, meaning in ENVIRONMENT.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
