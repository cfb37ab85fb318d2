"""Multi-node servers: the restart order, and a rank > 0 follows rank 0 back when rank 0's switch failed.

pyinfra runs the switch on every node at once; a node whose switch fails leaves the run (state.failed_hosts).
A rank 0 that failed its readiness or its gate rolls itself back; the other ranks, which only check that their
process runs, would stay on the new release against an old rank 0. This operation, after the switch, sends
them back to the release they ran before (all nodes of one deploy share its release id) and fails them too.
"""

from pyinfra import host, inventory, logger, state
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError, OperationError
from pyinfra.operations import python, server


from roles import release, secrets, target
from roles.facts import ReleaseStore, SecretsDigest
from roles.release import switch_command
from roles.settings import host_settings, sudo
from sglang_deploy.hostside.store import content_hash
from sglang_deploy.layout import ServicePaths
from sglang_deploy.plan import PlanError, plan_for_host
from sglang_deploy.plan import host_settings as host_settings_of
from sglang_deploy.release_plan import Peer, server_digest
from sglang_deploy.switch_options import SwitchOptions


def require_whole_server(names: list[str], verb: str):
    """A multi-node server is deployed and rolled back as a whole: a --limit or --exclude that leaves out one of
    its nodes would restart a rank alone (or decide for a node that the run never reaches). Refused before any
    change."""
    limited = state.limit_hosts
    if limited is None:
        return
    missing = [name for name in names if name not in {h.name for h in limited}]
    if missing:
        group = host_settings().node_group
        raise DeployError(f"{host.name}: this {len(names)}-node server is {verb} as a whole, but --limit/--exclude "
                          f"leaves out {', '.join(missing)} of inventory group {group!r}; nothing was changed. "
                          f"Use --limit {group}")


def peers_of(plan, groups: dict, service: str) -> tuple[dict[str, Peer], str]:
    """The other nodes of this host's multi-node server (their stores, the content each will render from its own
    host data and hardware facts, and whether its secrets file's content will change) and the server's digest:
    what release_plan.decide needs so that every node picks the same release id. A node that cannot be planned
    stops the deploy on this node too."""
    members = groups[host_settings().node_group]
    require_whole_server([name for name, _ in members], "deployed")
    digests, peers = [], {}
    for name, data in members:
        if name == host.name:
            digests.append(content_hash(plan.rendered.unit, plan.rendered.env))
            continue
        other = inventory.get_host(name)
        try:
            data = host_settings_of(data)
            theirs = plan_for_host(data, detected=target.of(data).detected_hardware(other), groups=groups,
                                   host_name=name)
        except PlanError as error:
            raise DeployError(f"{host.name}: node {name} of this server cannot be planned, so this node is not "
                              f"changed either.\n{error}") from None
        digests.append(content_hash(theirs.rendered.unit, theirs.rendered.env))
        found = other.get_fact(SecretsDigest, path=ServicePaths(service).secrets_path)
        peers[name] = Peer(other.get_fact(ReleaseStore, service=service), digests[-1],
                           restart=secrets.content_changed(found, theirs.rendered.secrets))
    return peers, server_digest(digests)


def _follow(options: SwitchOptions, rank0: str, target: str | None):
    if rank0 not in {h.name for h in state.failed_hosts}:
        return
    release_id = options.release_id
    if not target or target == release_id:
        raise OperationError(f"rank 0 ({rank0}) failed its switch to {release_id}; this node has no earlier release "
                             "to go back to and is left as it is")
    host.log(f"rank 0 ({rank0}) failed its switch to {release_id}: this node goes back to {target} with it",
             logger.warning)
    back = options.but(release_id=target, reason="rollback (rank 0 failed)", auto_rollback=False, mark_good=False,
                       max_auto_rollbacks=1000, force=True, gate=False, on_inconclusive="keep",
                       mark_previous_bad=True)
    ok, output = host.run_shell_command(switch_command(back), _sudo=sudo())
    raise OperationError(f"rank 0 ({rank0}) failed its switch to {release_id}; this node went back to {target}"
                         + ("" if ok else " (ITS SWITCH BACK FAILED: see the journal)"))


@deploy("Multi-node: follow rank 0")
def follow_rank0(options: SwitchOptions, rank0: str, target: str | None):
    python.call(name=f"Back to {target} with the other nodes if rank 0 ({rank0}) failed its switch",
                function=_follow, options=options, rank0=rank0, target=target)


def _peers_intact(names, step: str):
    failed = sorted(name for name in names if name in {h.name for h in state.failed_hosts})
    if failed:
        raise OperationError(f"{', '.join(failed)} of this multi-node server failed an earlier step: {step} not run "
                             "here. The nodes that stopped stay stopped; once the cause is fixed, deploy again or "
                             "roll back with `rollback.py --limit <node group> --data release=ID`")


@deploy("Multi-node: stop every node first")
def stop_for_restart(options: SwitchOptions, rank: int, nnodes: int):
    """Before the switch: the server spans the nodes, so restarting one rank ends it on all; stopping every node
    first means the ranks that start next meet each other, not a rank of the old release. The stop runs the
    switch's own refusals first (lock, automatic-rollback cap, weights), under the store's lock."""
    server.shell(name=f"Stop {options.service} on all {nnodes} nodes (they restart together: the joining ranks "
                      "first, rank 0 last)",
                 commands=[switch_command(options.but(stop_only=True))])


@deploy("Multi-node: every node still in")
def require_peers(names: list, step: str):
    python.call(name=f"Every node of the server passed the steps before {step}", function=_peers_intact,
                names=names, step=step)


def switch_in_order(options: SwitchOptions, rank: int, nnodes: int, nodes: list[str]):
    """release.switch for a node of a multi-node server, in the server's start order (pyinfra runs each
    operation on every host before the next, in the order of these lines): every node stops, the joining ranks
    start and wait at the rendezvous, then rank 0 starts, and its readiness and gate see the new release on
    every node (no rank joins a rank 0 of the old release)."""
    stop_for_restart(options=options, rank=rank, nnodes=nnodes)
    if rank > 0:
        require_peers(names=nodes, step="the joining ranks' start")
        release.switch(options=options)
    if rank == 0:
        require_peers(names=nodes, step="rank 0's start")
        release.switch(options=options)


def describe(node) -> str:
    return (f"node {node.rank} of {node.nnodes} (--dist-init-addr {node.dist_init_addr})"
            + ("" if node.serves_http else ": joins rank 0 and serves no HTTP; gated through rank 0"))


def switch_server(options: SwitchOptions, node, members: list, previous: str | None):
    """This node's part of a multi-node server's switch: in the server's start order, then (a rank that serves no
    HTTP) back to `previous` with the others if rank 0 failed its switch."""
    names = [name for name, _ in members]
    switch_in_order(options, node.rank, node.nnodes, nodes=names)
    if not node.serves_http:
        follow_rank0(options=options, rank0=names[0], target=previous)
