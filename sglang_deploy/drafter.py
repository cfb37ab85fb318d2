"""A draft model as part of the release: the profile's `speculative.draft`, its frozen manifest, the derived
`--speculative-draft-model-path` and the draft's config.json, an input of SGLang's resolution.

    speculative:
      draft:
        source: file:///srv/drafters/qwen3.6-27b-dflash     # or hf://ORG/NAME@<40-hex commit>
        manifest: manifests/local--qwen3.6-27b-dflash.json  # `sglang-deploy manifest file:///srv/drafters/...`

The draft is weights like the target's (weights.py): pushed or fetched, verified on the host against the manifest
before the switch, served from /srv/models/<org>--<name>/<revision> (local--<dir>/<manifest hash>), kept while a
retained release uses it. SGLang reads a separate draft model for DFLASH, DSPARK, EAGLE, EAGLE3 and
STANDALONE (srt/arg_groups/speculative_hook.py); NEXTN drafts with the checkpoint's own MTP heads.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .hostside.contract.paths import MODELS_ROOT
from .weights import (Weights, WeightsSourceError, default_manifest_path, local_dir_problem, manifest_path_problem,
                      parse_source, resolve_manifest_path, weights_for)

DRAFT_ALGORITHMS = ("DFLASH", "DSPARK", "EAGLE", "EAGLE3", "STANDALONE")  # may read a separate draft model
# ... and need one named: SGLang fills in EAGLE's draft path for checkpoints with MTP layers (DeepSeek-V3, GLM-MoE,
# _handle_eagle_family) and finds DSPARK drafts bundled in some checkpoints.
NEEDS_DRAFT = ("DFLASH", "EAGLE3", "STANDALONE")
SELF_DRAFTING = ("NEXTN", "NGRAM")  # the checkpoint's own heads, or n-grams of the prompt: no draft model
UNFROZEN = "unfrozen"  # the path segment of a draft whose manifest does not exist yet (check reports it)


@dataclass(frozen=True)
class DraftProblem:
    field: tuple  # within the profile, e.g. ("speculative", "draft", "manifest")
    message: str


def algorithm(profile) -> str | None:
    value = profile.sglang.flags.get("--speculative-algorithm")
    return value.upper() if isinstance(value, str) else None


def draft_weights(profile) -> Weights | None:
    """The draft's verified-weights record; raises WeightsSourceError while its manifest is missing or wrong."""
    draft = profile.speculative.draft
    if draft is None:
        return None
    return weights_for(draft.source, draft.manifest)


def offered_weights(profile) -> list[Weights]:
    """The drafters the profile offers the tune (tune.drafters), deployed and verified with every release."""
    return [weights_for(draft.source, draft.manifest) for draft in profile.tune.drafters]


def draft_path(profile) -> str | None:
    """--speculative-draft-model-path: the served snapshot; a placeholder path while the manifest is not frozen
    (the check then refuses the profile, naming the command that freezes it)."""
    draft = profile.speculative.draft
    if draft is None:
        return None
    try:
        return draft_weights(profile).path
    except WeightsSourceError:
        source = parse_source(draft.source)
        name = source.repo.replace("/", "--") if source.kind == "hf" else f"local--{Path(source.local_dir).name}"
        return f"{MODELS_ROOT}/{name}/{UNFROZEN}"


def config_copy(manifest_file: Path) -> Path:
    """Where `sglang-deploy manifest` puts a copy of the snapshot's config.json: beside the manifest."""
    return manifest_file.with_name(manifest_file.name[:-len(".json")] + ".config.json")


def config_file(profile, draft=None) -> Path | None:
    """Where the controller reads the draft's config.json: speculative.draft.config, else the copy beside the
    manifest, else a file:// source's own directory."""
    draft = draft or profile.speculative.draft
    if draft is None:
        return None
    if draft.config is not None:
        return resolve_manifest_path(draft.config)
    source = parse_source(draft.source)
    copy = config_copy(resolve_manifest_path(draft.manifest or default_manifest_path(source)))
    if copy.exists() or source.kind == "hf":
        return copy
    return Path(source.local_dir) / "config.json"


def load_config(profile, draft=None) -> dict | None:
    path = config_file(profile, draft)
    if path is None:
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def freeze_command(profile, draft=None) -> str:
    draft = draft or profile.speculative.draft
    output = draft.manifest or default_manifest_path(parse_source(draft.source))
    return f"sglang-deploy manifest {draft.source} --output {output}"


def problems(profile) -> list[DraftProblem]:
    """The draft model against the algorithm, its manifest and its config.json (what SGLang's resolution reads),
    and the same for each drafter the profile offers the tune."""
    draft, name = profile.speculative.draft, algorithm(profile)
    found = []
    for index, offered in enumerate(profile.tune.drafters):
        found += draft_problems(profile, offered, ("tune", "drafters", index))
    if draft is None:
        if name in NEEDS_DRAFT:
            found.append(DraftProblem(("sglang", "flags", "--speculative-algorithm"),
                                      f"{name} decodes with a separate draft model: add speculative.draft.source "
                                      "(hf://ORG/NAME@<commit> or file:///dir, with its manifest); the tool derives "
                                      "--speculative-draft-model-path from it"))
        return found
    if name not in DRAFT_ALGORITHMS:
        return found + [DraftProblem(("speculative", "draft"),
                                     f"speculative.draft is set but --speculative-algorithm is {name or 'not set'}: "
                                     + ("NEXTN drafts with the checkpoint's own MTP heads" if name in SELF_DRAFTING
                                        else "no speculative decoding reads it")
                                     + f"; accepted with a draft model: {', '.join(DRAFT_ALGORITHMS)}")]
    return found + draft_problems(profile, draft, ("speculative", "draft"))


def draft_problems(profile, draft, where: tuple) -> list[DraftProblem]:
    """One draft model: where it may come from, its frozen manifest, and the config.json the resolution reads being
    the one it pins."""
    source = parse_source(draft.source)
    problem = local_dir_problem(source.local_dir) if source.kind == "dir" else None
    if problem:  # a file:// draft is pushed from the controller: only from the operator's weights directories
        return [DraftProblem(where + ("source",), problem)]
    problem = manifest_path_problem(draft.config) if draft.config else None
    if problem:
        return [DraftProblem(where + ("config",), problem.replace("model.manifest", "speculative.draft.config"))]
    found = []
    try:
        weights = weights_for(draft.source, draft.manifest)
    except WeightsSourceError as error:
        weights = None
        manifest = resolve_manifest_path(draft.manifest or default_manifest_path(parse_source(draft.source)))
        message = (f"the drafter is not frozen yet: {manifest} does not exist; freeze it with "
                   f"`{freeze_command(profile, draft)}`" if not manifest.exists() else str(error))
        found.append(DraftProblem(where + ("manifest" if draft.manifest else "source",), message))
    path = config_file(profile, draft)
    config = load_config(profile, draft)
    if config is None:
        found.append(DraftProblem(where + ("config" if draft.config else "source",),
                                  f"{path}: not a readable config.json (expected the draft model's config, a JSON "
                                  "object)"))
        return found
    if weights is not None:
        listed = {entry["path"]: entry for entry in weights.manifest["files"]}.get("config.json")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if listed is None:
            found.append(DraftProblem(where + ("manifest",),
                                      f"{weights.manifest_file} lists no config.json: not a model directory"))
        elif listed["sha256"] != digest:
            found.append(DraftProblem(where + ("config",),
                                      f"{path} is not the config.json the manifest pins (sha256 {digest[:12]} vs "
                                      f"{listed['sha256'][:12]}): the resolution would read another draft than the "
                                      "host serves; remove the config line (the freeze wrote the drafter's "
                                      f"own copy, {config_copy(weights.manifest_file).name}) or point it at that file"))
    return found


def resolution_config(profile) -> dict | None:
    """The draft's config.json for SGLang's resolution (None without a draft model)."""
    return load_config(profile) if profile.speculative.draft is not None else None

