"""The rollback's stages, in the order rollback.py runs them: target -> announce -> prepare -> preflight -> switch.

The target stage only reads (one round trip for the store): a locked store or no release to roll back to stops the
rollback there with the deploy's words (stages.stop, plan.lock_refusal). The preflight is the deploy's
(stages.check_release), for the target as its meta.json and files on the host describe it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pyinfra import host, inventory, logger
from pyinfra.facts.files import FileContents

from roles import multinode, release, stages, target as variant
from roles.facts import ReleaseStore
from roles.settings import host_settings, of
from sglang_deploy.hostside.contract.document import DocumentError
from sglang_deploy.hostside.contract.release import ReleaseMeta, Resolution
from sglang_deploy.hostside.store import auth_change
from sglang_deploy.plan import lock_refusal
from sglang_deploy.release_plan import release_dir, rollback_target, service_of
from sglang_deploy.settings import RollbackArgs
from sglang_deploy.switch_options import SwitchOptions


@dataclass(frozen=True)
class Rollback:
    """The release to go back to and the one it replaces, as the host's store holds them."""
    service: str
    target: str
    meta: ReleaseMeta
    active: str | None
    active_meta: ReleaseMeta | None


def text_of(path: str) -> str:
    """A file on the host, as FileContents gives it back (lines), or "" when it is not there."""
    lines = host.get_fact(FileContents, path=path)
    return "\n".join(lines) + "\n" if lines else ""


def target() -> Rollback:
    """The store (one round trip); refused before any change when another holds its lock or there is no release
    to roll back to (the requested one not retained, or no other good one)."""
    service = service_of(host_settings())
    store = host.get_fact(ReleaseStore, service=service)
    stages.stop(lock_refusal(store))
    try:
        release_id = rollback_target(store, of(RollbackArgs).release)
    except ValueError as error:
        stages.stop([str(error)])
    active = store.state.active
    return Rollback(service=service, target=release_id, meta=store.release(release_id), active=active,
                    active_meta=store.release(active))


def announce(rollback: Rollback) -> None:
    meta = rollback.meta
    logger.info(f"[{host.name}] rollback {rollback.service}: {rollback.active or 'nothing active'} -> "
                f"{rollback.target} ({meta.profile}, SGLang {meta.sglang_version}, {meta.verdict or 'unverified'})")
    change = auth_change(rollback.active_meta, meta)
    if change:
        logger.warning(f"[{host.name}] {change}")


def prepare(rollback: Rollback) -> stages.Candidate:
    """The host's programs; the target's unit and environment (with --diff: what the switch will change)."""
    directory = release_dir(rollback.service, rollback.target)
    unit, env = text_of(f"{directory}/sglang.service"), text_of(f"{directory}/sglang.env")
    release.install_programs()
    release.show_changes(service=rollback.service, unit=unit, env=env)
    meta = rollback.meta
    return stages.Candidate(service=rollback.service, release_id=rollback.target, unit=unit, env=env,
                            target=variant.of_release(meta, host_settings().sim_server), venv=meta.venv,
                            exec_start=meta.exec_start, resolved=None, nnodes=meta.node.nnodes if meta.node else 1)


def preflight(rollback: Rollback, candidate: stages.Candidate) -> None:
    """The deploy's preflight for the target, before its restart (a rollback the switch does on its own is never
    delayed by one). It resolves again (fresh): the service user's cache is moved aside at the switch, and not
    trusted before it."""
    if of(RollbackArgs).skip_preflight:
        logger.warning(f"[{host.name}] skip_preflight: restarting on {rollback.target} WITHOUT its preflight")
        return
    path = f"{release_dir(rollback.service, rollback.target)}/{Resolution.FILE}"
    text = text_of(path)
    try:  # no resolved.json (a release from before it): no resolved fields to compare
        resolved = Resolution.loads(text, f"{host.name}: {path}").resolved if text else None
    except DocumentError as error:
        stages.stop([f"rollback to {rollback.target}: {error}"])
    stages.check_release(dataclasses.replace(candidate, resolved=resolved), fresh=True)


def switch(rollback: Rollback) -> None:
    """Restart on the target, readiness; the release that ran comes back on failure. Every node of a multi-node
    server goes together, in the deploy's start order."""
    meta = rollback.meta
    options = SwitchOptions(service=rollback.service, release_id=rollback.target, probe_url=meta.probe_url,
                            timeout=meta.start_timeout_s, reason="rollback", auto_rollback=True, force=True)
    node = meta.node  # a multi-node release: this host's rank (release_plan.build_meta)
    spans = node or (rollback.active_meta and rollback.active_meta.node)  # entering or leaving a multi-node release
    nodes = [h.name for h in inventory.get_group(host_settings().node_group)] if spans else []
    if spans:
        multinode.require_whole_server(nodes, "rolled back")
    if node:
        multinode.switch_in_order(options, node.rank, node.nnodes, nodes)
    else:
        release.switch(options=options)
