"""The token map as a release part of its own, like a drafter: the profile names the map file and its frozen sha256,
the deploy ships it to a content-addressed place on the host, the host checks its digest before the switch, prune
keeps it while a retained release names it, and `releases.py` shows it.

    speculative:
      token_map:                                   # the release's map: the unit gets --speculative-token-map
        file: manifests/token-maps/qwen-32768.pt   # `sglang-deploy token-map` wrote it and its .sha256
        sha256: 5f0c...                            # 64 hex: the digest in qwen-32768.pt.sha256
    tune:
      token_maps: [{file: ..., sha256: ...}]       # maps the tune's vocab axis may try, shipped with every release

On the host: /srv/models/token-maps/<sha256>.pt (root-owned, 0644). SGLang's own resolution still decides where the
map applies (EAGLE/NEXTN, not EAGLE3): tune/vocab.py asks it. The host side of the check is
hostside/weights/manifest.py map_problem (before every switch) and prune.py (unused maps).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..hostside.weights.manifest import map_path, sha256_file
from ..profile.problem import Problem, flag_field
from ..weights import manifest_path_problem, resolve_manifest_path
from .size import map_size

FLAG = "--speculative-token-map"


@dataclass(frozen=True)
class MapPart:
    written: str  # the profile's `file`: relative to the repository (under manifests/) or under a weights directory
    file: Path  # on the controller
    sha256: str
    field: tuple  # within the profile, e.g. ("speculative", "token_map")

    @property
    def host_path(self) -> str:
        return map_path(self.sha256)

    def size(self) -> int | None:
        """The number of token ids (the torch.save'd list, else the file's name <model>-<N>.pt)."""
        return map_size(str(self.file))[0]

    def meta(self) -> dict:
        """What a release records (meta.json `token_map`, `offered_token_maps`)."""
        return {"sha256": self.sha256, "path": self.host_path, "size": self.size(), "file": self.file.name}


def _part(entry, field: tuple) -> MapPart:
    return MapPart(entry.file, resolve_manifest_path(entry.file), entry.sha256, field)


def release_map(profile) -> MapPart | None:
    """speculative.token_map: the map the release serves."""
    entry = profile.speculative.token_map
    return _part(entry, ("speculative", "token_map")) if entry is not None else None


def offered_maps(profile) -> list[MapPart]:
    """tune.token_maps: the maps the tune's vocab axis may try, shipped with the release."""
    return [_part(entry, ("tune", "token_maps", index)) for index, entry in enumerate(profile.tune.token_maps)]


def shipped(profile) -> list[MapPart]:
    """Every map the deploy ships, each digest once (the release's first)."""
    out, seen = [], set()
    for part in ([release_map(profile)] if release_map(profile) else []) + offered_maps(profile):
        if part.sha256 not in seen:
            seen.add(part.sha256)
            out.append(part)
    return out


def map_flag(profile) -> str | None:
    """The derived --speculative-token-map: the release map's host path; None when sglang.flags sets the flag (a
    tuned profile naming one of the shipped maps: the rule below refuses any other value beside the part)."""
    part = release_map(profile)
    return part.host_path if part and profile.sglang.flags.get(FLAG) in (None, False) else None


def served(profile) -> MapPart | None:
    """The shipped map the release serves: the one the flag names (sglang.flags, else the derived one)."""
    value = profile.sglang.flags.get(FLAG)
    path = value if value not in (None, False) else map_flag(profile)
    return next((part for part in shipped(profile) if part.host_path == path), None)


# A token map holds one id per kept token (torch.save of an int64 tensor): a whole 1M-token vocabulary is 8 MiB.
MAX_MAP_BYTES = 16 * 1024 * 1024


def part_problem(part: MapPart) -> str | None:
    """The controller's file against its frozen digest: readable, inside the accepted directories, the same bytes."""

    problem = manifest_path_problem(part.written)
    if problem:
        return problem.replace("model.manifest", "the token map").replace("a relative manifest", "a relative map")
    if not part.file.is_file():
        return (f"{part.file}: no such file; build it with `sglang-deploy token-map CORPUS --model DIR --size N` "
                "(it writes the map and its .sha256)")
    size = part.file.stat().st_size
    if size > MAX_MAP_BYTES:  # security review 4, class 3: root hashes it before every switch, under the lock
        return (f"{part.file}: {size} bytes is no token map (one id per kept token: a whole 1M-token vocabulary as "
                f"int64 is 8 MiB); accepted: at most {MAX_MAP_BYTES} bytes")
    actual = sha256_file(part.file)
    if actual != part.sha256:
        return (f"{part.file}: sha256 {actual} differs from the profile's {part.sha256}: the map changed after it "
                f"was frozen; put the digest of {part.file.name}.sha256 in the profile, or rebuild the map")
    return None


def problems(profile) -> list[Problem]:
    """Each shipped map against its digest, and the release map against a --speculative-token-map in sglang.flags
    (two sources of one flag)."""

    found = []
    for part in ([release_map(profile)] if release_map(profile) else []) + offered_maps(profile):
        problem = part_problem(part)
        if problem:
            found.append(Problem("token-map-part", part.field + ("sha256" if "differs" in problem else "file",),
                                 problem))
    value = profile.sglang.flags.get(FLAG)
    if release_map(profile) is not None and value not in (None, False) and str(value) not in shipped_paths(profile):
        found.append(Problem("token-map-part", flag_field(FLAG),
                             f"{FLAG} {value} is set in sglang.flags and speculative.token_map names another map; "
                             "accepted: speculative.token_map alone (it ships and verifies the map: remove the "
                             "flag), or the flag naming a map the profile ships (as a tuned profile does)"))
    return found


def shipped_paths(profile) -> set[str]:
    """The host paths of the maps the profile ships (a --speculative-token-map naming one of them is verified)."""
    return {part.host_path for part in shipped(profile)}

