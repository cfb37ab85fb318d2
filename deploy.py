"""Deploy the SGLang server described by the host's profile, as a new release when anything changed.

    pyinfra inventory/sim.py deploy.py [--data profile=profiles/X.yaml] [--dry --diff]

validate (nothing changes on failure) -> [provision: driver, CUDA, NCCL, venv on real hosts] -> service
user -> [simulator on simulated hosts] -> weights (fetched or pushed, verified against the manifest) ->
secrets -> stage release -> switch (restart, staged readiness, the gate, automatic rollback on failure) ->
prune (releases, then snapshots no retained release uses).
"""

from pathlib import Path

from pyinfra import host, inventory, logger
from pyinfra.api.exceptions import DeployError

from roles import multinode, provision, release, secrets, service_user, simulator, watch
from roles import weights as weights_role
from roles.facts import DeployState, GpuHost
from sglang_deploy.hostfacts import detected_hardware
from sglang_deploy.layout import SIMULATED_MARKER, ServiceLayout, venv_path
from sglang_deploy.hostdata import host_flag
from sglang_deploy.plan import PlanError, host_problems, plan_for_host
from sglang_deploy.gate import gate_config
from sglang_deploy.release_plan import build_meta, decide, profile_snapshot, with_peers
from sglang_deploy.render import render_watch, watch_paths
from sglang_deploy.roofline import release_gpu, release_inputs
from sglang_deploy.hostdata import origin
from sglang_deploy.weights import profile_weights
from sglang_deploy.drafter import draft_weights, offered_weights

FIRST_START_TIMEOUT_S = 3600  # a cold first start on CT129: weights, FlashInfer/Triton JIT for sm_86, graph capture

# A real host reports its GPU count and interconnect; the validation rules use those, not a guess.
detected = None if host_flag(host.data, "simulated") else detected_hardware(host.get_fact(GpuHost))
groups = {name: [(h.name, h.data) for h in members] for name, members in inventory.groups.items()}
try:
    plan = plan_for_host(host.data, detected=detected, groups=groups, host_name=host.name)
except PlanError as error:
    raise DeployError(f"{host.name}: nothing was changed on the host.\n{error}") from None

profile = plan.profile
service = profile.service.name
programs = release.program_shipment()
sim_server = str(host.data.get("sim_server"))  # default: group_data/all.py
sim_shipment = simulator.simulator_shipment(profile, sim_server) if plan.simulated else None
layout = ServiceLayout(service)
watch_units = render_watch(profile)
# The weights the release serves: the profile's pinned source, or (a simulated host, a profile without one) the
# synthetic checkpoint, pushed and verified the same way.
weights = profile_weights(profile) or (simulator.synthetic_weights(profile) if plan.simulated else None)
draft = draft_weights(profile)  # speculative.draft: a second snapshot, fetched or pushed and verified the same way
offered = []  # tune.drafters, each snapshot once (not the weights' or the draft's again)
for snapshot in offered_weights(profile):
    if snapshot.path not in {w.path for w in (weights, draft, *offered) if w}:
        offered.append(snapshot)
hub_python = None
hf_token_file = host.data.get("hf_token_file")  # checked with hf_endpoint and hf_token_endpoint by the plan
if any(w and w.source.kind == "hf" for w in (weights, draft, *offered)):
    hub_python = host.data.get("hub_python") or (weights_role.HUB_VENV + "/bin/python" if plan.simulated
                                                 else f"{venv_path(profile)}/bin/python")
facts = host.get_fact(DeployState, service=service,
                      manifests=(programs.manifest,) + ((sim_shipment.manifest,) if sim_shipment else ()),
                      paths=(profile.watch.textfile_dir,),
                      user=profile.service.user,
                      files=(layout.config_dir, layout.secrets_path, *watch_paths(service)),
                      timers=(f"{service}-watch.timer",),
                      weights=(weights.host_manifest, weights.path, hub_python) if weights else (),
                      draft=(draft.host_manifest, draft.path, None if weights else hub_python) if draft else (),
                      offered=tuple((w.host_manifest, w.path) for w in offered))
# The service user must be a dedicated system account and the unit the tool's own: read before any change.
refused = host_problems(plan, facts["account"], facts["units"], ssh_user=host.data.get("ssh_user"))
if refused:
    raise DeployError(f"{host.name}: nothing was changed on the host.\n" + "\n".join(refused))
host_is_simulated = facts["simulated"]
if plan.simulated != host_is_simulated:
    raise DeployError(
        f"{host.name}: the inventory says simulated={plan.simulated} but the host "
        f"{'has' if host_is_simulated else 'lacks'} {SIMULATED_MARKER}; refusing to deploy")
weights_status, draft_status = facts["weights"], facts["draft"]
fetched = [w for w, status in ((weights, weights_status), (draft, draft_status), *zip(offered, facts["offered"]))
           if w and w.source.kind == "hf" and not status["verified"]]
if fetched and not any(status and status["hub_client"] for status in (weights_status, draft_status)):
    wheelhouse = host.data.get("hub_wheelhouse")
    if wheelhouse and not any(Path(str(wheelhouse)).glob("*.whl")):
        raise DeployError(f"{origin(host.data, 'hub_wheelhouse')}: hub_wheelhouse: {wheelhouse!r} is not a directory of "
                          "wheels (huggingface_hub and its dependencies: pip download huggingface_hub==1.33.0 -d DIR); "
                          "nothing was changed")
    if plan.simulated or wheelhouse:
        weights_role.hub_client(wheelhouse=host.data.get("hub_wheelhouse"))
if plan.simulated:
    logger.warning(f"[{host.name}] SIMULATED HOST: " + (
        f"the GPU server is SGLang {profile.sglang.version}'s own front end with a modelled Scheduler (a hardware "
        "model of 2x RTX A6000)" if sim_server == "sglang" else
        "the GPU server is the model-only simulator sglang_deploy.sim (a hardware model of 2x RTX A6000), not "
        "SGLang") + "; systemd, SSH and HTTP are real.")
logger.info(f"[{host.name}] profile {profile.name}: SGLang {profile.sglang.version}, "
            f"{profile.model.served_name} on port {plan.port}")
if plan.node is not None:
    logger.info(f"[{host.name}] node {plan.node.rank} of {plan.node.nnodes} (--dist-init-addr "
                f"{plan.node.dist_init_addr})" + ("" if plan.node.serves_http else
                                                  ": joins rank 0 and serves no HTTP; gated through rank 0"))
for note in plan.hardware_notes:
    logger.info(f"[{host.name}] {note}")
for skipped in plan.skipped_rules:
    logger.warning(f"[{host.name}] rule skipped: {skipped}")

store = facts["store"]
for problem in store.get("problems") or []:
    logger.warning(f"[{host.name}] {problem}")
if store["lock"]:
    holder = store["lock"]
    raise DeployError(f"{host.name}: another deploy or rollback is running: {holder.get('owner')} "
                      f"(pid {holder.get('pid')}, since {holder.get('since')}); nothing was changed")

if not plan.simulated and host_flag(host.data, "provision", default=True):
    provision_mode = host.data.get("provision_mode")  # default: group_data/all.py; checked by safety
    provision.nvidia_stack(mode=provision_mode, python=f"{venv_path(profile)}/bin/python")
    provision.python_env(profile=profile, mode=provision_mode)
if not service_user.in_place(facts["user"], profile.service.user, layout.state_dir):
    service_user.install(user=profile.service.user, home=layout.state_dir)
runtime_ops = simulator.install(profile=profile, installed_digest=facts["manifests"].get(sim_shipment.manifest),
                               sim_server=sim_server) \
    if plan.simulated else []
release.install_programs(installed_digest=facts["manifests"][programs.manifest] or "")
# The weights: in place and verified against the manifest before anything is staged or switched.
if weights:
    weights_role.ensure(weights=weights, verified=weights_status["verified"], python=hub_python,
                        endpoint=host.data.get("hf_endpoint"),
                        local_dir=weights.source.local_dir, token_file=hf_token_file)
for snapshot, status in ([(draft, draft_status)] if draft else []) + list(zip(offered, facts["offered"])):
    weights_role.ensure(weights=snapshot, verified=status["verified"], python=hub_python,
                        endpoint=host.data.get("hf_endpoint"), local_dir=snapshot.source.local_dir,
                        token_file=hf_token_file)
secrets_changed = not secrets.in_place(facts["files"], plan.rendered.secrets, service, profile.service.user)
if secrets_changed:
    secrets.configure_secrets(secrets=plan.rendered.secrets, service=service, user=profile.service.user)

skip_gate = host_flag(host.data, "skip_gate")
# Only rank 0 of a multi-node server serves HTTP: the gate runs there; another rank is good once its process runs.
gated_here = not skip_gate and (plan.node is None or plan.node.serves_http)
if skip_gate:
    logger.warning(f"[{host.name}] skip_gate: the release is marked good when ready, WITHOUT measuring it")
# A multi-node server: the other nodes' stores and renders make one release id name the release on every node
# (decide) and make this node restart when another one will (the nodes restart together).
peers, server = multinode.peers_of(plan, groups, service) if plan.node is not None else ({}, None)
restart_needed = secrets.content_changed(secrets.found_hash(facts["files"], service), plan.rendered.secrets) \
    or any(op.will_change for op in runtime_ops)
decision = decide(plan, store, restart_needed=restart_needed, peers=peers, server=server)
decision = with_peers(decision, peers)
# The preflight: can this release's server start here? Asked before the store or the running server changes, for
# a release that would switch, and in provision_mode=verify for the active one too.
skip_preflight = host_flag(host.data, "skip_preflight")
if decision.switch or host.data.get("provision_mode") == "verify":
    if skip_preflight:
        logger.warning(f"[{host.name}] skip_preflight: the release is switched to WITHOUT its preflight (recorded)")
    else:
        release.preflight(service=service, release_id=decision.release_id, unit=plan.rendered.unit,
                          env=plan.rendered.env, simulated=plan.simulated,
                          gpus=release.preflight_gpus((plan.resolution or {}).get("resolved"),
                                                      plan.node.nnodes if plan.node is not None else 1),
                          interpreter=release.preflight_interpreter(plan.simulated, venv_path(profile)),
                          exec_start=plan.rendered.exec_start, resolved=(plan.resolution or {}).get("resolved"),
                          container_id=host.data.get("container_id"),
                          resolve=host_flag(host.data, "preflight_stack", default=True))
if decision.switch:
    logger.info(f"[{host.name}] release {decision.release_id}: {decision.reason}")
    release.show_changes(service=service, unit=plan.rendered.unit, env=plan.rendered.env)
    if decision.is_new:
        release.stage(service=service, release_id=decision.release_id, unit=plan.rendered.unit,
                      env=plan.rendered.env, profile_json=profile_snapshot(plan), gate_config=gate_config(plan),
                      resolution=plan.resolution,
                      meta=build_meta(plan, decision.release_id, weights=weights, draft=draft, offered=offered,
                                      preflight="skipped (skip_preflight)" if skip_preflight else "passed"),
                      roofline=release_inputs(plan.resolution["resolved"], profile.model.path, release_gpu(
                          plan.simulated, plan.rendered.environment, None if plan.simulated else host.get_fact(GpuHost))))
    # A host that never ran a good release starts cold: weights, every JIT kernel and the graph captures with empty
    # caches. Its first start gets at least FIRST_START_TIMEOUT_S (later starts reuse the persisted caches).
    start_timeout = profile.service.start_timeout_s
    if not store["state"].get("last_good") and start_timeout < FIRST_START_TIMEOUT_S:
        logger.info(f"[{host.name}] first start on this host (empty JIT and graph caches): readiness waits up to "
                    f"{FIRST_START_TIMEOUT_S} s instead of the profile's {start_timeout} s")
        start_timeout = FIRST_START_TIMEOUT_S
    switch = dict(service=service, release_id=decision.release_id, probe_url=plan.probe_url,
                  timeout=start_timeout, reason="deploy",
                  max_auto_rollbacks=int(host.data.get("max_auto_rollbacks")),
                  force=host_flag(host.data, "force"), gate=gated_here, mark_good=not gated_here,
                  on_inconclusive=profile.gate.on_inconclusive)
    if plan.node is None:
        release.switch(**switch)
    else:  # the nodes restart together, in their start order
        multinode.switch_in_order(switch, plan.node.rank, plan.node.nnodes,
                                  nodes=[name for name, _ in groups[str(host.data.get("node_group"))]])
    if plan.node is not None and not plan.node.serves_http:
        rank0 = groups[str(host.data.get("node_group"))][0][0]
        multinode.follow_rank0(service=service, rank0=rank0, target=store["state"].get("active"),
                               release_id=decision.release_id, probe_url=plan.probe_url,
                               timeout=start_timeout)
    release.prune(service=service, keep=int(host.data.get("keep_releases")))
else:
    logger.info(f"[{host.name}] release {decision.release_id} is active and unchanged: nothing to switch")
# After the switch: the watch measures the active release, and its first run must not meet the gate's.
if not watch.in_place(facts["files"], facts["timers"], watch_units, service, profile.watch.enabled,
                      facts["paths"][profile.watch.textfile_dir]):
    watch.install(rendered=watch_units, service=service, textfile_dir=profile.watch.textfile_dir,
                  enabled=profile.watch.enabled)
