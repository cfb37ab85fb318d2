"""What the deploy writes into a release's directory, releases/<id>/ of the store (paths.ServicePaths.release_dir),
beside the gate's config (gate.py): its meta.json, SGLang's resolution (resolved.json), the profile snapshot
(profile.json) and the roofline inputs (roofline.json); and the names of a release's other files. The gate's documents
are in gate.py, the reports the doctor, the tune and the perf watch keep beside a release in findings.py, the set of
files a release is made of in files.py. The mechanism: document.py.

The controller builds these objects (sglang_deploy/release_plan.py, roofline.py) and writes `doc.dump()`; the host
(switch, watch, store, doctor, tune) reads them with `Class.load(directory)` and uses attributes, never string keys.
A no-op deploy's host program reads meta.json alone of a release's files: this module is all it loads of them.
Standard library only: shipped to the host.
"""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from .document import Document, document

# A release's files that are not typed below, and the reports' file names: named once.
PROFILE_FILE = "profile.json"  # the validated profile, as the controller read it
RESOLVED_FILE = "resolved.json"  # SGLang's own resolution of the unit's command line (sglang_deploy.resolution)
DOCTOR_FILE = "doctor.json"  # the doctor's report for the active release (doctor.py)
TUNE_RESULTS_FILE = "tune-results.json"  # the tune's table of candidates (tune.py)
AB_RESULTS_FILE = "ab-results.json"  # the doctor's A/B on request (doctor/ab.py), in the tune's shape
WATCH_HISTORY_FILE = "watch.jsonl"  # the perf watch's measurements (hostside/watch.py)
PACKAGES_FILE = "packages.json"  # the venv's packages and their hashes, copied in at stage time


# --- a release: releases/<id>/meta.json (written last: a directory without it is not a release) ----------------------

@document
class ReleaseMeta(Document):
    """What a release is and what became of it. The controller writes the first ten fields and the ones below
    them (release_plan.build_meta); the host's switch and watch add the verdict and the history."""
    FILE: ClassVar[str] = "meta.json"
    id: str
    created: str
    deployed_by: str
    git: dict
    profile: str
    sglang_version: str
    venv: str
    content_hash: str
    exec_start: list
    simulated: bool
    service: str
    probe_url: str
    start_timeout_s: int | float
    # Defaults below: releases written before the field existed (2026-11-30 to 12-01) mean exactly this.
    auth: str | None = None  # None: from the command line (store.release_auth)
    weights: SnapshotMark | None = None  # None: weights not managed (no snapshot to verify)
    draft: SnapshotMark | None = None  # None: no separate draft model
    offered_drafts: list[SnapshotMark] = field(default_factory=list)  # tune.drafters: kept by the weights' prune
    token_map: TokenMapMark | None = None  # speculative.token_map, shipped content-addressed; None: no map
    offered_token_maps: list[TokenMapMark] = field(default_factory=list)  # tune.token_maps, for the vocab axis
    waivers: dict = field(default_factory=dict)
    preflight: str | None = None  # "passed", "skipped (skip_preflight)"; None: from before the preflight
    node: NodeMark | None = None  # a multi-node server: this host's rank in it; None: one host
    serves_http: bool = True  # False: a multi-node rank > 0 (no HTTP server of its own)
    tune: TuneMark | None = None  # a tune's temporary candidate; None: a deploy's release
    verdict: str | None = None  # good, bad, inconclusive; None: unverified
    verdict_by: str | None = None  # gate, skip_gate, readiness, rank 0
    gate: GateMark | None = None  # the last gate's verdict; None: never gated
    history: list[HistoryEvent] = field(default_factory=list)  # activations, failures, restarts

    def with_event(self, at, event, **changes):
        """This meta with one more history entry (and the changes)."""
        return self.but(history=[*self.history, HistoryEvent(at=at, event=event)], **changes)


@document
class HistoryEvent(Document):
    at: str
    event: str  # "activated (deploy)", "marked bad (rollback)", "restarted by the watch (...)", ...


@document
class GateMark(Document):
    """The last gate's verdict in a release's meta.json (switch.switch_locked): what the baseline choice, the
    release list and the perf watch read; the whole result is the release's gate-result.json (GateResult)."""
    verdict: str  # pass, fail, inconclusive
    summary: str  # "pass 50.1 tok/s tau 2.91"
    at: str  # when it was measured
    simulated: bool | None = None  # measured a simulated server; None: the gate could not run
    baseline: str | None = None  # the release compared with; None: none (and releases from before 2026-12-01)


@document
class NodeMark(Document):
    """A multi-node server's release in meta.json: this host's place in it (release_plan.build_meta)."""
    rank: int  # 0 serves HTTP; the others join it
    nnodes: int
    dist_init_addr: str  # rank 0's rendezvous, host:port


@document
class SnapshotMark(Document):
    """A verified weights snapshot in a release's meta.json (its weights, its draft, each of its offered_drafts):
    sglang_deploy/weights.Weights.meta writes it; the switch, the doctor and the weights' prune read it."""
    source: str  # hf://org/name@revision or file://directory
    revision: str | None  # None: a local directory
    manifest_sha256: str
    manifest: str  # the frozen manifest's path on the host
    path: str  # the snapshot's directory on the host
    bytes: int
    files: int


@document
class TokenMapMark(Document):
    """A token map a release ships (meta.json's token_map, each of offered_token_maps): token_map/part.py MapPart.meta
    writes it; the switch's check, the weights' prune and the listing read it."""
    sha256: str
    path: str  # on the host: /srv/models/token-maps/<sha256>.pt
    size: int | None = None  # token ids in the map (None: not recorded)
    file: str | None = None  # the controller's file name (None: not recorded)


@document
class TuneMark(Document):
    """A tune's temporary release in meta.json (tune/host.py stage_files): never marked good, removed at the end."""
    session: str
    temporary: bool
    candidate: str  # the candidate's id


# --- the bound on decode: releases/<id>/roofline.json ----------------------------------------------------------------

@document
class Roofline(Document):
    """What the controller knows of the release's bandwidth bound (sglang_deploy/roofline.release_inputs); the perf
    watch adds the checkpoint's bytes and the measured acceptance length (hostside/watch.roofline_bound)."""
    FILE: ClassVar[str] = "roofline.json"
    gpu: str | None  # None: unknown (no GPU fact)
    bandwidth_gbs: int | float | None  # the datasheet's; None: a GPU without one
    bandwidth_source: str
    tp: int
    algorithm: str | None  # the speculative algorithm; None: none
    steps: int
    model_path: str
    draft_path: str | None  # a separate draft model's path; None: none, or drafted by the target's own layers


# --- what a release ships beside its unit: resolved.json and profile.json --------------------------------------------

@document
class Resolution(Document):
    """SGLang's own resolution of the unit's command line (sglang_deploy/resolution.document): the doctor reads the
    parallelism, the rollback's preflight the resolved fields it compares."""
    FILE: ClassVar[str] = RESOLVED_FILE
    sglang_version: str
    argv: list
    resolved: dict | None  # ServerArgs after resolve_once(); None: SGLang refused the command line (error)
    steps: list = field(default_factory=list)  # Defaults: what releases from before a field existed mean
    step: str | None = None  # the step that refused; None: none did
    error: str | None = None
    log: list = field(default_factory=list)
    full: bool = True  # SGLang's whole resolution ran (not its option table alone)
    skipped: list = field(default_factory=list)
    gpu: dict | None = None  # the GPU facts it resolved for: {"model", "count"}
    model_config: str | None = None  # the checkpoint's config.json it read

    def parallel_gpus(self) -> int:
        """GPUs one server uses: tp x pp (1 when SGLang refused the command line)."""
        resolved = self.resolved or {}
        return int(resolved.get("tp_size") or 1) * int(resolved.get("pp_size") or 1)


@document
class ProfileService(Document):
    """The profile's service section (sglang_deploy/profile/sections.py ServiceSection, the validator)."""
    name: str
    user: str
    host: str
    port: int
    start_timeout_s: int
    auth: str | None = None  # None: a profile from before 2026-11-30 20:00 (the command line says: store.release_auth)
    relax: list = field(default_factory=list)


@document
class ProfileSnapshot(Document):
    """profile.json, the validated profile as the controller read it (release_plan.profile_snapshot). The host reads
    its service section; the other sections are the controller's (its pydantic model validates them)."""
    FILE: ClassVar[str] = PROFILE_FILE
    OTHERS: ClassVar[bool] = True
    service: ProfileService
