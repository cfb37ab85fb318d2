"""The deploy's stages, in the order deploy.py runs them.

settings -> plan -> snapshots -> facts -> refusals -> prepare host -> weights -> secrets -> decide ->
preflight -> stage -> switch -> prune -> watch.

Everything up to the refusals only reads: a bad profile, bad host data or a host that must not be touched
stops the deploy there with "nothing was changed". What a stage decides comes from sglang_deploy/ (pure,
tested without a host: plan.py, release_plan.py, plan.refusals); a stage queues pyinfra operations through
the roles. A multi-node server is handled in `decide` and `switch` (roles/multinode.py). A GPU host and the
simulated host differ only through the plan's target (roles/target.py), chosen once in `plan`: no stage branches
on `simulated` (tests/test_roles_target.py holds it so).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host, inventory, logger, state
from pyinfra.api.exceptions import DeployError

from roles import multinode, release, secrets as secrets_role, service_user, target, watch as watch_role
from roles import recover as recover_role, weights as weights_role
from roles.facts import DeployState
from roles.settings import host_settings, of
from sglang_deploy.drafter import draft_weights, offered_weights
from sglang_deploy.hostside.contract.files import ReleaseFiles
from sglang_deploy.hostside.contract.release import Resolution
from sglang_deploy.layout import ServicePaths, host_package, venv_path
from sglang_deploy.plan import Plan, PlanError, plan_for_host, refusals
from sglang_deploy.release_plan import Decision, build_meta, decide as decide_release, profile_snapshot, with_peers
from sglang_deploy.render import recover_path, render_recover, render_watch, watch_paths
from sglang_deploy.roofline import release_inputs
from sglang_deploy.settings import DeployArgs
from sglang_deploy.switch_options import SwitchOptions
from sglang_deploy.token_map.part import shipped as shipped_maps
from sglang_deploy.validate.validator_env import ValidatorEnvError
from sglang_deploy.weights import Weights, profile_weights

FIRST_START_TIMEOUT_S = 3600  # a cold first start on CT129: weights, FlashInfer/Triton JIT for sm_86, graph capture
NOTHING_CHANGED = "nothing was changed on the host."


def groups() -> dict:
    """The inventory's groups as (host name, host data) lists, for a multi-node profile and its peers."""
    return {name: [(h.name, h.data) for h in members] for name, members in inventory.groups.items()}


def plan() -> Plan:
    """The profile checked by SGLang's own resolution under this host's GPUs, and the unit rendered: before any
    change. A real host reports its GPU count and interconnect; the rules use those, not a guess. The host's
    variant (a GPU host or the simulated one, roles/target.py) is chosen here, once, and travels in the plan."""
    settings = host_settings()
    variant = target.of(settings)
    try:
        return plan_for_host(settings, detected=variant.detected_hardware(host), groups=groups(), host_name=host.name,
                             target=variant)
    except PlanError as error:
        raise DeployError(f"{host.name}: {NOTHING_CHANGED}\n{error}") from None


@dataclass(frozen=True)
class Snapshots:
    """The weights the release serves, its draft and the tune's offered drafters, each fetched or pushed and
    verified against its manifest; hub_python fetches the hf:// ones."""
    weights: Weights | None
    draft: Weights | None
    offered: tuple[Weights, ...]
    hub_python: str | None

    def each(self, facts: dict):
        """(snapshot, its status in the facts) for the draft and the offered drafters."""
        return ([(self.draft, facts["draft"])] if self.draft else []) + list(zip(self.offered, facts["offered"]))


def snapshots(plan: Plan) -> Snapshots:
    """The profile's pinned source, or the target's fallback for a profile without one (the simulated host's
    synthetic checkpoint); the draft (speculative.draft) and tune.drafters, each snapshot once."""
    profile = plan.profile
    weights = profile_weights(profile) or plan.target.fallback_weights(profile)
    draft = draft_weights(profile)
    offered = []
    for snapshot in offered_weights(profile):
        if snapshot.path not in {w.path for w in (weights, draft, *offered) if w}:
            offered.append(snapshot)
    hub_python = None
    if any(w and w.source.kind == "hf" for w in (weights, draft, *offered)):
        # the tool's own hub client, never the release venv (root runs the fetch: layout.RELEASE_PYTHON)
        hub_python = host_settings().hub_python or weights_role.HUB_VENV + "/bin/python"
    return Snapshots(weights, draft, tuple(offered), hub_python)


def facts(plan: Plan, snaps: Snapshots) -> dict:
    """Everything the deploy decides from, in one round trip (roles.facts.DeployState)."""
    profile, service = plan.profile, plan.profile.service.name
    layout = ServicePaths(service)
    weights, draft = snaps.weights, snaps.draft
    return host.get_fact(
        DeployState, service=service,
        manifests=(host_package().manifest, *plan.target.manifests(profile)),
        paths=(profile.watch.textfile_dir,), user=profile.service.user,
        files=(layout.config_dir, layout.secrets_path, *watch_paths(service), recover_path(service),
               weights_role.MANIFESTS_DIR,
               *(w.host_manifest for w in (weights, draft, *snaps.offered) if w),
               *(part.host_path for part in shipped_maps(profile))),
        timers=(f"{service}-watch.timer", recover_role.unit_name(service)),  # enablement and state of each
        secrets=layout.secrets_path,
        weights=(weights.host_manifest, weights.path, snaps.hub_python) if weights else (),
        draft=(draft.host_manifest, draft.path, None if weights else snaps.hub_python) if draft else (),
        offered=tuple((w.host_manifest, w.path) for w in snaps.offered))


def fetched(snaps: Snapshots, facts: dict) -> list[Weights]:
    """The hf:// snapshots not yet verified on the host."""
    pairs = ((snaps.weights, facts["weights"]), (snaps.draft, facts["draft"]), *zip(snaps.offered, facts["offered"]))
    return [w for w, status in pairs if w and w.source.kind == "hf" and not status["verified"]]


def refuse(plan: Plan, facts: dict, snaps: Snapshots) -> None:
    """What the host reports that stops the deploy before any change (plan.refusals)."""
    needs_hub_client = bool(fetched(snaps, facts)) and not any(
        status and status["hub_client"] for status in (facts["weights"], facts["draft"]))
    stop(refusals(plan, facts, host_settings(), needs_hub_client=needs_hub_client))


def stop(refused: list[str]) -> None:
    """The one way a verb stops before any change (the deploy's refusals, the rollback's): each reason on a line."""
    if refused:
        raise DeployError(f"{host.name}: {NOTHING_CHANGED}\n" + "\n".join(refused))


def announce(plan: Plan, facts: dict) -> None:
    profile = plan.profile
    for announcement in plan.target.announcements(profile):
        logger.warning(f"[{host.name}] {announcement}")
    logger.info(f"[{host.name}] profile {profile.name}: SGLang {profile.sglang.version}, "
                f"{profile.model.served_name} on port {plan.port}")
    if plan.node is not None:
        logger.info(f"[{host.name}] {multinode.describe(plan.node)}")
    for note in plan.hardware_notes:
        logger.info(f"[{host.name}] {note}")
    for skipped in plan.skipped_rules:
        logger.warning(f"[{host.name}] rule skipped: {skipped}")
    for problem in facts["store"].problems:
        logger.warning(f"[{host.name}] {problem}")
    upgrade_diff(plan, facts["store"])
    if of(DeployArgs).skip_gate:
        logger.warning(f"[{host.name}] skip_gate: the release is marked good when ready, WITHOUT measuring it")


def upgrade_diff(plan: Plan, store) -> None:
    """With --diff, when the profile's SGLang release differs from the active release's: the resolved arguments of
    this profile under each release, by each release's own resolution (sglang_deploy/validate/upgrade.py)."""
    active = store.release(store.state.active) if store.state.active else None
    if not state.config.DIFF or active is None or active.sglang_version == plan.profile.sglang.version \
            or not plan.resolution:
        return
    # deferred: 1.2 ms (validate.upgrade) on every deploy, only with --diff and another SGLang release
    from sglang_deploy.validate import upgrade

    try:
        lines = upgrade.for_profile(plan.profile, active.sglang_version, plan.resolution, port=plan.port,
                                    node=plan.node)
    except ValidatorEnvError as error:
        lines = [f"Diff: resolved arguments: SGLang {active.sglang_version} (the active release) could not resolve "
                 f"this profile: {error}"]
    for line in lines:
        logger.info(f"[{host.name}] {line}")


def prepare_host(plan: Plan, facts: dict) -> list:
    """Every host: the service user, the host package; then the target's own preparation (a real host: driver,
    CUDA, NCCL and the venv; the simulated host: its simulator). Returns the operations whose change restarts the
    server (a changed simulator)."""
    profile = plan.profile
    state_dir = ServicePaths(profile.service.name).state_dir
    if not service_user.in_place(facts["user"], profile.service.user, state_dir):  # first: the venv's checks run as it
        service_user.install(user=profile.service.user, home=state_dir)
    runtime_ops = plan.target.prepare(profile, host_settings(), facts)
    release.install_programs(installed_digest=facts["manifests"][host_package().manifest] or "")
    units = render_recover(profile)  # before any switch: a cut during the next one is recovered at boot
    if not recover_role.in_place(facts["files"], facts["timers"], units, profile.service.name):
        recover_role.install(rendered=units, service=profile.service.name)
    return runtime_ops


def weights(plan: Plan, facts: dict, snaps: Snapshots) -> None:
    """In place and verified against their manifests before anything is staged or switched; the token maps the
    profile ships."""
    settings = host_settings()
    if fetched(snaps, facts) and not any(s and s["hub_client"] for s in (facts["weights"], facts["draft"])):
        weights_role.hub_client(wheelhouse=settings.hub_wheelhouse)  # from the wheelhouse, else the host's index
    pairs = ([(snaps.weights, facts["weights"])] if snaps.weights else []) + snaps.each(facts)
    for snapshot, status in pairs:
        weights_role.ensure(weights=snapshot, verified=status["verified"], python=snaps.hub_python,
                            endpoint=settings.hf_endpoint, local_dir=snapshot.source.local_dir,
                            token_file=settings.hf_token_file,
                            manifest_found=weights_role.manifest_in_place(facts["files"], snapshot))
    for part in shipped_maps(plan.profile):  # each checked against its digest by the check, again before the switch
        weights_role.token_map(part=part, found=facts["files"].get(part.host_path))


def secrets(plan: Plan, facts: dict, runtime_ops: list) -> bool:
    """The secrets file; True when the server must restart for it (or for a changed simulator)."""
    service, user = plan.profile.service.name, plan.profile.service.user
    restart = secrets_role.content_changed(facts.get("secrets_digest"), plan.rendered.secrets) \
        or any(op.will_change for op in runtime_ops)
    if not secrets_role.in_place(facts["files"], plan.rendered.secrets, service, user, facts.get("secrets_digest")):
        secrets_role.configure_secrets(secrets=plan.rendered.secrets, service=service, user=user)
    return restart


def decide(plan: Plan, facts: dict, restart_needed: bool) -> Decision:
    """A new release, an existing one to switch to, or nothing. A multi-node server: the other nodes' stores and
    renders make one release id name the release on every node, and make this node restart when another one
    will (the nodes restart together)."""
    service = plan.profile.service.name
    peers, server = multinode.peers_of(plan, groups(), service) if plan.node is not None else ({}, None)
    return with_peers(decide_release(plan, facts["store"], restart_needed=restart_needed, peers=peers,
                                     server=server), peers)


def preflight(plan: Plan, decision: Decision) -> None:
    """Can this release's server start here? Asked before the store or the running server changes, for a release
    that would switch, and in provision_mode=verify for the active one too."""
    if not (decision.switch or host_settings().provision_mode == "verify"):
        return
    if of(DeployArgs).skip_preflight:
        logger.warning(f"[{host.name}] skip_preflight: the release is switched to WITHOUT its preflight (recorded)")
        return
    check_release(Candidate(service=plan.profile.service.name, release_id=decision.release_id,
                            unit=plan.rendered.unit, env=plan.rendered.env, target=plan.target,
                            venv=venv_path(plan.profile), exec_start=plan.rendered.exec_start,
                            resolved=(plan.resolution or {}).get("resolved"),
                            nnodes=plan.node.nnodes if plan.node is not None else 1))


@dataclass(frozen=True)
class Candidate:
    """A release about to be started, as its preflight sees it: the deploy's (from the plan) or a rollback's target
    (from its meta.json and files on the host, roles/rollback_stages.py)."""
    service: str
    release_id: str
    unit: str
    env: str
    target: target.Target  # the host's variant: the preflight's interpreter and its options
    venv: str
    exec_start: list
    resolved: dict | None  # SGLang's resolution of its command line (resolved.json)
    nnodes: int


def check_release(candidate: Candidate, fresh: bool = False) -> None:
    """The preflight of a release before its restart (roles/release.preflight), for every verb that starts one.
    fresh: resolve again, trusting no acceptance cached in the service user's directory (a rollback)."""
    settings = host_settings()
    release.preflight(service=candidate.service, release_id=candidate.release_id, unit=candidate.unit,
                      env=candidate.env, variant_args=candidate.target.preflight_args(settings.preflight_stack),
                      gpus=release.preflight_gpus(candidate.resolved, candidate.nnodes),
                      interpreter=candidate.target.interpreter(candidate.venv),
                      exec_start=candidate.exec_start, resolved=candidate.resolved,
                      container_id=settings.container_id, resolve=settings.preflight_stack, fresh=fresh)


def stage(plan: Plan, decision: Decision, snaps: Snapshots) -> None:
    """releases/<id>/ for a new release (meta.json last)."""
    service = plan.profile.service.name
    logger.info(f"[{host.name}] release {decision.release_id}: {decision.reason}")
    release.show_changes(service=service, unit=plan.rendered.unit, env=plan.rendered.env)
    if not decision.is_new:
        return
    # deferred: 13 ms (gate) on every deploy, only for a new release
    from sglang_deploy.gate import gate_config

    gpu = plan.target.gpu(plan.rendered.environment, host)
    meta = build_meta(plan, decision.release_id, weights=snaps.weights, draft=snaps.draft, offered=list(snaps.offered),
                      preflight="skipped (skip_preflight)" if of(DeployArgs).skip_preflight else "passed")
    release.stage(service=service, release_id=decision.release_id, release_files=ReleaseFiles(
        unit=plan.rendered.unit, env=plan.rendered.env, profile=profile_snapshot(plan), gate_config=gate_config(plan),
        resolution=Resolution.from_dict(plan.resolution), meta=meta,
        roofline=release_inputs(plan.resolution["resolved"], plan.profile.model.path, gpu)))


def start_timeout(plan: Plan, store) -> int:
    """A host that never ran a good release starts cold: weights, every JIT kernel and the graph captures with
    empty caches. Its first start gets at least FIRST_START_TIMEOUT_S (later starts reuse the persisted caches)."""
    timeout = plan.profile.service.start_timeout_s
    if not store.state.last_good and timeout < FIRST_START_TIMEOUT_S:
        logger.info(f"[{host.name}] first start on this host (empty JIT and graph caches): readiness waits up to "
                    f"{FIRST_START_TIMEOUT_S} s instead of the profile's {timeout} s")
        return FIRST_START_TIMEOUT_S
    return timeout


def switch(plan: Plan, decision: Decision, facts: dict) -> None:
    """Restart, staged readiness, the gate, automatic rollback on failure (on the host: hostside/switch.py). Only
    rank 0 of a multi-node server serves HTTP: the gate runs there; another rank is good once its process runs."""
    args = of(DeployArgs)
    gated = not args.skip_gate and (plan.node is None or plan.node.serves_http)
    options = SwitchOptions(service=plan.profile.service.name, release_id=decision.release_id,
                            probe_url=plan.probe_url, timeout=start_timeout(plan, facts["store"]), reason="deploy",
                            max_auto_rollbacks=host_settings().max_auto_rollbacks, force=args.force, gate=gated,
                            mark_good=not gated, on_inconclusive=plan.profile.gate.on_inconclusive)
    if plan.node is None:
        release.switch(options=options)
    else:
        multinode.switch_server(options, plan.node, groups()[host_settings().node_group],
                                previous=facts["store"].state.active)


def prune(plan: Plan) -> None:
    release.prune(service=plan.profile.service.name, keep=host_settings().keep_releases)


def watch(plan: Plan, facts: dict) -> None:
    """After the switch: the perf watch measures the active release (its first run must not meet the gate's)."""
    profile, service = plan.profile, plan.profile.service.name
    units = render_watch(profile)
    if not watch_role.in_place(facts["files"], facts["timers"], units, service, profile.watch.enabled,
                               facts["paths"][profile.watch.textfile_dir]):
        watch_role.install(rendered=units, service=service, textfile_dir=profile.watch.textfile_dir,
                           enabled=profile.watch.enabled)



def announce_unchanged(decision: Decision) -> None:
    logger.info(f"[{host.name}] release {decision.release_id} is active and unchanged: nothing to switch")
