"""Everything a deploy decides before it touches a host: profile, validation, rendered files.

Pure: takes the host's settings (settings.HostSettings, or host data to make them from) and returns a Plan or raises PlanError whose message
names the file, field or flag. deploy.py calls it before any operation is queued, so a bad profile
changes nothing on the host and the running release keeps running.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from .layout import SIMULATED_MARKER
from .profile import Profile, ProfileError, line_of, load_profile
from . import safety
from .safety import account_problem, unit_problem
from .settings import DEFAULT_API_KEY_ENV, HostSettings, SettingsError, origin
from .render import ADMIN_KEY_PREFIX, RenderError, Rendered, render
from .validate.check import check_profile
from .validate.gpu_facts import GpuFactsError, from_host_gpus, model
from .validate.validator_env import ValidatorEnvError

REPO_ROOT = Path(__file__).resolve().parent.parent
MIN_API_KEY_LENGTH = 16


class PlanError(RuntimeError):
    pass


@dataclass(frozen=True)
class Plan:
    profile: Profile
    rendered: Rendered
    port: int
    simulated: bool
    skipped_rules: tuple[str, ...]
    hardware_notes: tuple[str, ...] = ()
    resolution: dict | None = None  # what SGLang resolves for the unit's command line (validate/resolution.py)
    node: object = None  # multinode.Node of a multi-node profile (nodes > 1), else None
    # The GPU-or-simulated variant the deploy's stages call (roles/target.py), chosen once from the same settings'
    # `simulated`; None for a plan no stage runs (provision, tune, the router, tests).
    target: object = None

    def __post_init__(self):
        if self.target is not None and self.target.simulated != self.simulated:
            raise ValueError(f"the plan's target is simulated={self.target.simulated}, its settings "
                             f"simulated={self.simulated}")

    @property
    def probe_url(self) -> str:
        """Readiness and the gate always connect over loopback: the API key never leaves the host."""
        return safety.probe_url(self.profile.service.host, self.port)

    @property
    def auth(self) -> str:
        return self.profile.service.auth


def _key_problem(key: str, where: str) -> str | None:
    if len(key) < MIN_API_KEY_LENGTH:
        return f"the API key in {where} is shorter than {MIN_API_KEY_LENGTH} characters"
    if any(not char.isprintable() or char.isspace() for char in key):
        return f"the API key in {where} contains whitespace or control characters"
    if key.startswith("-"):
        # SGLang merges the --config file into its argv as `--api-key <key>`; argparse takes a leading '-' for an
        # option and exits 2 ("argument --api-key: expected one argument") on every start.
        return (f"the API key in {where} starts with '-', which SGLang's parser reads as an option (it refuses to "
                "start); accepted: a key starting with a letter, digit or another printable character")
    return None


def resolve_api_key(settings, auth: str = "api-key", where: str = "service.auth") -> str | None:
    """The API key comes from a file (host data api_key_file) or an environment variable of the controller.

    With auth `api-key` (the default) a missing, empty or unsafe key fails the plan: a server without
    authentication must be asked for with `service.auth: none`."""
    if auth == "none":
        return None
    settings = host_settings(settings)
    key_file, env_name = settings.api_key_file, settings.api_key_env or DEFAULT_API_KEY_ENV
    hint = (f"set host data api_key_file or the controller's ${env_name}, or write `auth: none` in the profile's "
            "service section to run without authentication")
    if key_file:
        path = Path(key_file) if Path(key_file).is_absolute() else REPO_ROOT / key_file
        if not path.is_file():
            raise PlanError(f"{origin(settings, 'api_key_file')}: api_key_file: {key_file} does not exist (no API key: the "
                            f"server would run without authentication); create it (chmod 600), or {hint}")
        if path.stat().st_mode & 0o077:
            raise PlanError(f"{origin(settings, 'api_key_file')}: api_key_file: {key_file} is readable by group/others; "
                            "chmod 600 it")
        key = path.read_text().strip()
        problem = _key_problem(key, key_file) if key else f"{key_file} is empty"
        if problem:
            raise PlanError(f"{origin(settings, 'api_key_file')}: api_key_file: {problem}; {hint}")
        return key
    key = (os.environ.get(env_name) or "").strip()
    if not key:
        raise PlanError(f"{where}: no API key (api_key_file is not set and ${env_name} is empty); {hint}")
    problem = _key_problem(key, f"${env_name}")
    if problem:
        raise PlanError(f"{origin(settings, 'api_key_env')}: api_key_env: {problem}")
    return key


def host_settings(data) -> HostSettings:
    """The host's typed settings (settings.HostSettings); a bad value is refused before anything runs, naming
    where it was set."""
    if isinstance(data, HostSettings):
        return data
    try:
        return HostSettings.of(data)
    except SettingsError as error:
        raise PlanError("invalid host data:\n" + "\n".join(error.problems)) from None



def resolve_profile_path(profile_path) -> Path:
    """Relative paths are tried from the working directory, then from the repository."""
    path = Path(profile_path)
    if not path.is_absolute() and not path.exists():
        path = REPO_ROOT / path
    return path


def reconcile_hardware(data, detected: dict | None, declared_by: str = "inventory",
                       labels: dict | None = None) -> tuple[int | None, str | None, list[str]]:
    """GPU count and topology for the validation rules: the host's own facts where it is reachable,
    the inventory's values otherwise. Both present and different is an error naming both."""
    notes = []
    values = {}
    for name in ("gpus", "gpu_topology"):
        declared, found = data.get(name), (detected or {}).get(name)
        label = (labels or {}).get(name, name)
        if declared is not None and found is not None and str(declared) != str(found):
            raise PlanError(f"{declared_by} says {label} {declared} but the host reports {found} "
                            f"(nvidia-smi); correct {declared_by}, or leave out {label} to use what the host reports")
        if declared is None and found is not None:
            notes.append(f"{label} {found} from the host's facts")
        values[name] = declared if declared is not None else found
    gpus = values["gpus"]
    return (int(gpus) if gpus is not None else None), values["gpu_topology"], notes


def gpu_model_for_host(settings: HostSettings, detected: dict | None) -> tuple:
    """The GPU model SGLang's resolution runs under: what the host's nvidia-smi reports, else host data gpu_model."""
    names = (detected or {}).get("gpu_names") or []
    try:
        reported = from_host_gpus([{"name": name} for name in names])
        if reported is not None:
            return reported, f"GPU model {reported.name} from the host's facts"
        return model(str(settings.gpu_model)), None
    except GpuFactsError as error:
        raise PlanError(f"{origin(settings, 'gpu_model')}: gpu_model: {error}") from None


def plan_for_host(data, detected: dict | None = None, need_key: bool = True, groups: dict | None = None,
                  host_name: str | None = None, target=None) -> Plan:
    """need_key=False: for provisioning only (the API key is not needed to install the venv). groups and
    host_name: the inventory's groups ((name, data) lists) and this host, for a multi-node profile. target: the
    deploy's GPU-or-simulated variant (roles/target.py), carried by the plan for the stages."""
    settings = host_settings(data)
    profile_path = settings.profile
    if not profile_path:
        raise PlanError("no profile: set `profile` in the host's inventory data or pass --data profile=PATH")
    path = resolve_profile_path(profile_path)
    try:
        profile = load_profile(path)
    except ProfileError as error:
        raise PlanError("invalid profile:\n" + "\n".join(error.problems)) from None
    gpus, topology, notes = reconcile_hardware({"gpus": settings.gpus, "gpu_topology": settings.gpu_topology}, detected)
    port = settings.port or profile.service.port
    # deferred: 1.5 ms (multinode) on sglang-deploy check, which plans no host
    from .multinode import NodeError, placement

    try:
        node = placement(profile.nodes, profile.multinode.dist_init_port, profile.multinode.socket_ifname,
                         host_name or "", settings, groups or {})
    except NodeError as error:
        raise PlanError(f"{path}:{line_of(path, ('nodes',))}: {error}") from None
    gpu, gpu_note = gpu_model_for_host(settings, detected)
    if gpu_note:
        notes.append(gpu_note)
    try:
        report = check_profile(profile, gpus=gpus, topology=topology, port=port, node=node, gpu=gpu)
    except (ValidatorEnvError, ValueError) as error:
        raise PlanError(f"cannot validate {path}: {error}") from None
    if not report.ok:
        raise PlanError(f"{path} fails validation ({len(report.problems)} problem(s)):\n" + "\n".join(report.lines()))
    notes.extend(report.warning_lines())
    cuda_version = settings.cuda_version
    auth_line = line_of(path, ("service", "auth"))
    api_key = resolve_api_key(settings, profile.service.auth if need_key else "none",
                              where=f"{path}:{auth_line}: service.auth")
    try:
        # the admin key: new for each plan; the host keeps the one it has unless the secrets file changes otherwise
        # (render.secrets_digest), so it is never read back, printed or given to a client
        rendered = render(profile, api_key=api_key, port=port, admin_key=ADMIN_KEY_PREFIX + secrets.token_urlsafe(32),
                          cuda_home=f"/usr/local/cuda-{cuda_version}" if cuda_version else None, node=node,
                          max_jobs=(detected or {}).get("cpus"))
    except RenderError as error:
        raise PlanError(f"{path}: cannot render the unit: {error}") from None
    return Plan(profile=profile, rendered=rendered, port=port, simulated=settings.simulated,
                skipped_rules=tuple(report.skipped), hardware_notes=tuple(notes), resolution=report.resolution,
                node=node, target=target)


def host_problems(plan: Plan, account: dict | None, unit_report: dict | None, ssh_user: str | None = None) -> list[str]:
    """What the host reports about the service user and the unit, checked before anything changes:
    `file:line: field: message` lines (empty when the deploy may go on)."""
    profile, service = plan.profile, plan.profile.service
    where = {field: f"{profile.source}:{line_of(profile.source, ('service', field))}: service.{field}"
             for field in ("user", "name")}
    problems = []
    if ssh_user and service.user == ssh_user:
        problems.append(f"{where['user']}: {service.user!r} is the inventory's SSH user; the tool would lock it "
                        "out (nologin shell, new home and groups); use a dedicated name such as 'sglang'")
    account = account or {}
    problem = account_problem(service.user, service.name, account.get("passwd"), account.get("uid_min", 1000))
    if problem:
        problems.append(f"{where['user']}: {problem}")
    problem = unit_problem(service.name, {**(unit_report or {}), "user": service.user})
    if problem:
        problems.append(f"{where['name']}: {problem}")
    return problems


def refusals(plan: Plan, facts: dict, settings: HostSettings, needs_hub_client: bool = False) -> list[str]:
    """What the host reports (roles.facts.DeployState) that stops a deploy before any change: the service user and
    the unit (host_problems), a simulated host the inventory does not call simulated or the reverse, another
    deploy holding the store's lock, a hub_wheelhouse that holds no wheels when the hub client must be
    installed from it, and a weights status the host answered unreadably (roles/facts.WeightsStatus names the
    field). Empty when the deploy may go on."""
    refused = host_problems(plan, facts["account"], facts["units"], ssh_user=settings.ssh_user)
    if plan.simulated != facts["simulated"]:
        refused.append(f"the inventory says simulated={plan.simulated} but the host "
                       f"{'has' if facts['simulated'] else 'lacks'} {SIMULATED_MARKER}; refusing to deploy")
    wheelhouse = settings.hub_wheelhouse
    if needs_hub_client and wheelhouse and not any(Path(wheelhouse).glob("*.whl")):
        refused.append(f"{origin(settings, 'hub_wheelhouse')}: hub_wheelhouse: {wheelhouse!r} is not a directory of "
                       "wheels (huggingface_hub and its dependencies: pip download huggingface_hub==1.33.0 -d DIR)")
    for status in (facts.get("weights"), facts.get("draft"), *(facts.get("offered") or ())):  # not "unverified"
        if status and status.get("unreadable"):
            refused.append(f"the weights' status cannot be read: {status['unreadable']}")
    return refused + lock_refusal(facts["store"])


def lock_refusal(store) -> list[str]:
    """The refusal of any change (a deploy, a rollback) while another holds the store's lock: one sentence
    (hostside/contract/store.LockInfo.refusal), or none. store: the ReleaseStore fact (hostside/contract/answers.StoreReport)."""
    return [store.lock.refusal()] if store.lock else []
