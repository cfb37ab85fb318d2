"""The tune's `vocab` axis: a hot-vocabulary draft head (FR-Spec), SGLang's --speculative-token-map set to a map of
N token ids for each size the profile offers (`tune.vocab_sizes`).

A map is a candidate only when the profile ships it as a release part (tune.token_maps or speculative.token_map,
token_map/part.py) or it is a file a verified snapshot's manifest lists (the rule token-map-verified): either way the
host checks its sha256 before the switch; its size is read from the file where the controller has it (a file://
snapshot) and otherwise from its name, `<model>-<N>.pt` as `sglang-deploy token-map` names it
(token_map/size.py). A size with no such map is a row of the table, "not built", with the command that builds it.
Whether the map applies is SGLang's answer: the resolution of the profile's command line with the flag set may
refuse it (its error) or drop it (its resolved speculative_token_map differs); at run time SGLang's EAGLE3 worker
ignores it and says so in its start log (eagle_worker_v2.py:328, "Ignoring the specified token map"): the host reads
that line (hostside/evidence.py) and such a candidate is labelled "map ignored by SGLang", never a gain
(label_ignored). A DFLASH drafter never reads a map and says nothing: the measurement shows it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..token_map.file import verified_snapshots
from ..token_map.part import map_flag, shipped
from ..token_map.size import size_from_file, size_from_name
from .candidate import Candidate, Measured, spec_settings

FLAG = "--speculative-token-map"
AXIS = "vocab"


def build_hint(size: int) -> str:
    return (f"not built: run `sglang-deploy token-map CORPUS --model DIR --size {size}` and offer the map in "
            "tune.token_maps (its file and sha256)")


@dataclass
class VocabOffer:
    """size -> the map's path on the host (accepted by SGLang's resolution), and the sizes that are not candidates
    with why (not built, refused or dropped by the resolution)."""

    maps: dict = field(default_factory=dict)
    invalid: dict = field(default_factory=dict)
    why_none: str | None = None  # no size was even asked about: why, and what would give the axis a candidate

    def summary(self) -> str:
        parts = [f"{FLAG}: {len(self.maps)} candidate(s) " + (", ".join(str(s) for s in self.maps) or "-")]
        parts += [f"{size}: {why}" for size, why in self.invalid.items()]
        if self.why_none:
            parts.append(self.why_none)
        return "; ".join(parts)


NO_MAP = ("no token map to measure: the profile offers none (tune.token_maps, speculative.token_map), no verified "
          "snapshot's manifest lists one and tune.vocab_sizes is empty; to give this axis a candidate, build a map "
          "from your own traffic or corpus: `sglang-deploy token-map PROMPTS.jsonl --model <checkpoint dir> --size "
          "32768` and add the file and sha256 it prints under tune.token_maps")


def snapshot_maps(profile) -> dict:
    """size -> host path of each token map the profile ships as a release part (speculative.token_map,
    tune.token_maps: token_map/part.py) or a verified snapshot's manifest lists (a .pt file whose size its content
    or its name gives)."""

    found = {}
    for part in shipped(profile):
        size = part.size()
        if size:
            found.setdefault(size, part.host_path)
    for weights in verified_snapshots(profile):
        local = getattr(weights.source, "local_dir", None)
        for entry in weights.manifest.get("files") or []:
            relative = str(entry.get("path") or "")
            if not relative.endswith(".pt"):
                continue
            size = None
            if local and os.path.isfile(os.path.join(local, relative)):
                size = size_from_file(os.path.join(local, relative))
            size = size or size_from_name(relative)
            if size:
                found.setdefault(size, f"{weights.path.rstrip('/')}/{relative}")
    return found


def offer(profile, flags: dict, ask) -> VocabOffer:
    """The sizes of tune.vocab_sizes (empty: every map the snapshots list), each map asked of SGLang's resolution
    (`ask(extra_argv) -> (error or None, resolved)`, levers.asker)."""

    result = VocabOffer()
    if not spec_settings(flags):
        result.why_none = "no draft head to shrink: the profile does not speculate"
        return result
    maps = snapshot_maps(profile)
    sizes = list(profile.tune.vocab_sizes) or sorted(maps)
    if not sizes:
        result.why_none = NO_MAP

    current = flags.get(FLAG) or map_flag(profile)  # the profile's own map (speculative.token_map): the original
    for size in sizes:
        path = maps.get(size)
        if path is None:
            result.invalid[size] = build_hint(size)
            continue
        if path == current:
            continue  # the profile's own map: the original
        error, resolved = ask([FLAG, path])
        if error:
            result.invalid[size] = f"refused by SGLang's resolution: {error}"
        elif resolved.get("speculative_token_map") != path:
            result.invalid[size] = (f"dropped by SGLang's resolution (speculative_token_map="
                                    f"{resolved.get('speculative_token_map')!r}, algorithm "
                                    f"{resolved.get('speculative_algorithm')})")
        else:
            result.maps[size] = path
    return result


def candidate_id(size: int) -> str:
    return f"{AXIS}-{size}"


def candidates(offered: VocabOffer | None) -> list:
    return [Candidate(candidate_id(size), AXIS, ((FLAG, path),)) for size, path in (offered.maps if offered else {})
            .items()]


def not_candidates(offered: VocabOffer | None) -> list:
    """The table's rows for the sizes that are not candidates: invalid, never started, with why."""

    return [Measured(Candidate(candidate_id(size), AXIS), valid=False, invalid_reason=why)
            for size, why in (offered.invalid if offered else {}).items()]


def label_ignored(measured, line: str | None):
    """A vocab candidate whose server's start log says SGLang ignores the map (its EAGLE3 worker): labelled "map
    ignored by SGLang" and not valid, so its speed (kept in its repeats) is never taken for the map's gain."""
    if not line or measured.candidate.axis != AXIS:
        return measured
    measured.valid = False
    measured.invalid_reason = f"map ignored by SGLang (its start log: {line})"
    return measured
