"""Controller-side release decisions: which release a deploy or rollback switches to, and the listing.

The host side owns the store (hostside/store.py) and the switch (hostside/switch.py); this module only reads
the store's state (as reported by `python3 -m hostside.store state`) and decides. Pure and unit-tested.
"""

from __future__ import annotations

import getpass
import json
import socket
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from typing import TYPE_CHECKING

from .hostside.contract.answers import StoreReport
from .hostside.contract.paths import ServicePaths
from .hostside.contract.release import ReleaseMeta
from .hostside.store import content_hash, flag_differences, last_used, next_release_id
from .hostside.weights.manifest import snapshot_change
from .layout import venv_path

if TYPE_CHECKING:  # listing and rollback verbs import this module without pydantic and jinja
    from .plan import Plan

REPO_ROOT = Path(__file__).resolve().parent.parent


def release_dir(service: str, release_id: str) -> str:
    return ServicePaths(service).release_dir(release_id)


@dataclass(frozen=True)
class Decision:
    release_id: str
    is_new: bool  # the release directory must be staged
    switch: bool  # the service must be switched (restart + readiness)
    reason: str


def controller_identity() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def git_revision() -> dict:
    def git(*args):
        result = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else None

    return {"revision": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def build_meta(plan: Plan, release_id: str, weights=None, preflight: str | None = None, draft=None,
               offered=()) -> ReleaseMeta:
    # deferred: 29 ms (token_map.part) on releases.py and history.py, for a new release's meta only
    from .token_map.part import offered_maps, served as served_map

    profile = plan.profile
    return ReleaseMeta.from_dict({
        "id": release_id,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "deployed_by": controller_identity(),
        "git": git_revision(),
        "profile": profile.name,
        "sglang_version": profile.sglang.version,
        "venv": venv_path(profile),
        "content_hash": content_hash(plan.rendered.unit, plan.rendered.env),
        "exec_start": plan.rendered.exec_start,
        "simulated": plan.simulated,
        "service": profile.service.name,
        "probe_url": plan.probe_url,
        "auth": plan.auth,
        "start_timeout_s": profile.service.start_timeout_s,
        "weights": weights.meta() if weights else None,
        "draft": draft.meta() if draft else None,  # the draft model (speculative.draft), verified like the weights
        "offered_drafts": [w.meta() for w in offered],  # tune.drafters: on the host for the tune, kept by prune
        # the token maps the deploy ships (token_map/part.py), verified on the host before the switch, kept by prune
        "token_map": served_map(profile).meta() if served_map(profile) else None,
        "offered_token_maps": [part.meta() for part in offered_maps(profile)],
        "waivers": dict(profile.waivers),  # rule -> reason: each rule the profile switched off, shown by the listing
        "verdict": None,
        "gate": None,
        # "passed" or "skipped (skip_preflight)": whether the release's server checks ran on the host before its switch
        "preflight": preflight,
        # A multi-node server: this host's rank; only rank 0 serves HTTP (the switch waits for the process
        # alone on the others, hostside/switch.py activate).
        **({"node": {"rank": plan.node.rank, "nnodes": plan.node.nnodes, "dist_init_addr": plan.node.dist_init_addr},
            "serves_http": plan.node.serves_http} if plan.node is not None else {}),
    })


def profile_snapshot(plan: Plan) -> str:
    return json.dumps(plan.profile.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"


@dataclass(frozen=True)
class Peer:
    """Another node of a multi-node server as this node's deploy sees it: its store (the ReleaseStore fact) and
    the content digest of its render (its own plan, made here from its host data)."""
    store: StoreReport
    digest: str
    restart: bool = False  # its secrets' content changes: it restarts although its release does not


def server_digest(digests_by_rank) -> str:
    """The hash part of a multi-node server's release ids: every node's content digest in rank order, so one id
    names one state of the whole server (nodes differ in --node-rank, and may in --port or the NCCL interface)."""
    return content_hash("\n".join(digests_by_rank), "multi-node")


def decide(plan: Plan, store: StoreReport, restart_needed: bool = False, peers: dict[str, Peer] | None = None,
           server: str | None = None) -> Decision:
    """New release when the content differs from every retained one; switch when anything is off.

    peers and server (a multi-node server: the other nodes, and server_digest() of all of them): one id must
    name the release on every node, so that a rollback by id reaches them all. Every node decides the same
    from the same inputs: a retained release is reused only when its id carries the server's digest and every
    node retains it with its own content (the one active on every node first, else the newest); a new one is
    numbered past the releases of every node. Nodes whose histories differ converge on one id, with one
    restart."""
    digest = content_hash(plan.rendered.unit, plan.rendered.env)
    releases = store.releases
    active = store.state.active
    same = [r.id for r in releases if r.content_hash == digest
            and (server is None or r.id.split("-", 1)[-1] == server[:8])]
    known = [r.id for r in releases]
    for peer in (peers or {}).values():
        theirs = peer.store.releases
        same = [i for i in same if any(r.id == i and r.content_hash == peer.digest for r in theirs)]
        known += [r.id for r in theirs]
    everywhere = all(peer.store.state.active == active for peer in (peers or {}).values())
    if active in same and everywhere:
        release_id, is_new = active, False
    elif same:
        release_id, is_new = same[-1], False
    else:
        release_id, is_new = next_release_id(known, server or digest), True
    if release_id != active:
        reason = "new release" if is_new else f"switch to retained release {release_id}"
    elif not store.consistent:
        reason = ("host not consistent with its active release: "
                  + ("; ".join(store.inconsistent) or "interrupted switch, or service not running as declared"))
    elif restart_needed:
        reason = "secrets or server program changed: restart"
    else:
        return Decision(release_id, False, False, "unchanged")
    return Decision(release_id, is_new, True, reason)


def with_peers(decision: Decision, peers: dict[str, Peer]) -> Decision:
    """A multi-node server restarts as a whole: this node switches too when another node will (it is not
    consistent, does not run the release id that decide() chose for every node, or its secrets change)."""
    if decision.switch:
        return decision
    for name, peer in peers.items():
        active = peer.store.state.active or ""
        why = ("is not consistent with its active release" if not peer.store.consistent
               else f"runs {active or 'nothing'}" if active != decision.release_id
               else "restarts for its changed secrets" if peer.restart else None)
        if why:
            return Decision(decision.release_id, False, True,
                            f"node {name} {why}: the nodes of this server restart together")
    return decision


def rollback_target(store: StoreReport, requested: str | None = None) -> str:
    """The requested retained release, else the most recently used good release other than the active one."""
    releases = store.releases
    ids = [r.id for r in releases]
    active = store.state.active
    if requested:
        if requested not in ids:
            raise ValueError(f"release {requested} is not retained on the host; retained: {', '.join(ids) or 'none'}")
        return requested
    good = [r.id for r in releases if r.verdict == "good" and r.id != active]
    if not good:
        raise ValueError("no good release to roll back to (retained: " + (", ".join(
            f"{r.id} {r.verdict or 'unverified'}" for r in releases) or "none") + ")")
    by_id = {r.id: r for r in releases}
    return max(good, key=lambda release_id: last_used(by_id[release_id]))


def weights_label(meta: ReleaseMeta) -> str:
    revision = meta.weights and meta.weights.revision
    if not revision:
        return "-"
    return revision[:12] if not revision.startswith("sha256:") else revision[:19]


def weights_change(release: ReleaseMeta, active: ReleaseMeta, key: str = "weights") -> str | None:
    """'weights: <active's> -> <release's>' when the two serve other weights (source or manifest); key "draft":
    'draft: A -> B' for their draft models (hostside/weights/manifest.py snapshot_change compares)."""
    change = snapshot_change(getattr(release, key), getattr(active, key), "(unmanaged)" if key == "weights" else "(none)")
    return f"{key}: {change[0]} -> {change[1]}" if change else None


def map_label(meta) -> str:
    """The token maps a release ships (token_map/part.py): 'map 32768 sha256:5f0c1e2d3a4b', then the tune's."""
    def one(entry):
        return f"{entry.size or '?'} sha256:{entry.sha256[:12]}"

    parts = [f"map {one(meta.token_map)}"] if meta.token_map else []
    if meta.offered_token_maps:
        parts.append("tune maps " + ", ".join(one(entry) for entry in meta.offered_token_maps))
    return "; ".join(parts)


def listing(store: StoreReport) -> list[str]:
    """One line per retained release, newest first: id, time, SGLang, verdict, gate, flags vs active."""
    state = store.state
    active = store.release(state.active)
    lines = [f"{'':2}{'release':14} {'created':25} {'sglang':8} {'weights':12} {'profile':28} {'verdict':9} {'gate':28} "
             "flags vs active"]
    for release in reversed(store.releases):
        marks = ("*" if release.id == state.active else " ") + ("g" if release.id == state.last_good else " ")
        gate_text = (release.gate.summary or release.gate.verdict) if release.gate else "-"
        diffs = flag_differences(release.exec_start, active.exec_start) if active else []
        changes = [change for change in (weights_change(release, active, key) for key in ("weights", "draft"))
                   if change] if active else []
        if changes:
            diffs = changes + [d for d in diffs if not d.startswith(("--model-path:", "--speculative-draft-model-path:"))]
        waived = f" WAIVED: {','.join(sorted(release.waivers))}" if release.waivers else ""
        maps = f"  [{map_label(release)}]" if map_label(release) else ""
        lines.append(f"{marks}{release.id:14} {release.created:25} {release.sglang_version:8} {weights_label(release):12} "
                     f"{release.profile[:28]:28} {release.verdict or 'unverified':9} {gate_text[:28]:28} "
                     f"{' '.join(diffs) if diffs else ('(active)' if release is active else 'same flags')}{maps}{waived}")
    lines.append("(* active, g last good)")
    if state.recovered:  # the last boot that found an interrupted switch or foreign installed files
        lines.append(f"boot recovery {state.recovered.at}: {state.recovered.action}: {state.recovered.reason}")
    return lines


def service_of(settings) -> str:
    """The service a rollback or listing addresses (settings.HostSettings): host data `service`, else the host's
    profile's."""
    # deferred: 62 ms (plan, profile: pydantic) on releases.py and history.py, only where host data names no `service`
    from .plan import resolve_profile_path
    from .profile import ProfileError, load_profile

    if settings.service:
        return settings.service
    if not settings.profile:
        return "sglang"
    try:
        return load_profile(resolve_profile_path(settings.profile)).service.name
    except ProfileError as error:
        raise SystemExit("the service to address is named in the profile, which is invalid:\n"
                         + "\n".join(error.problems) + "\nfix the profile, or name the service: --data service=NAME"
                         ) from None
