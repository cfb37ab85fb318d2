"""A release's set of files: what the deploy's stage and a tune's candidate write into releases/<id>/, in order,
meta.json last. Standard library only: shipped to the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .document import DocumentError
from .gate import GateConfig
from .release import PROFILE_FILE, ReleaseMeta, Resolution, Roofline


# --- a release's set of files: what the deploy and the tune write into releases/<id>/ ---------------------------

UNIT_FILE = "sglang.service"  # the unit the switch installs
ENV_FILE = "sglang.env"  # its environment file (0600: the switch installs it beside the unit)


@dataclass(frozen=True)
class ReleaseFiles:
    """The files the controller renders for a release: the deploy's stage writes them (roles/release.stage), the
    tune sends a temporary candidate's in its queue item (tune/host.stage_files: TuneItem.files, by name) and the
    host's runner writes those (tune_runner.Session.stage). Written in ORDER, meta.json last: a directory without
    it is not a release. (packages.json, the venv's record, is copied on the host by the deploy's stage alone.)"""
    ORDER: ClassVar[tuple] = (UNIT_FILE, ENV_FILE, PROFILE_FILE, GateConfig.FILE, Resolution.FILE, Roofline.FILE,
                              ReleaseMeta.FILE)
    OPTIONAL: ClassVar[frozenset] = frozenset({Roofline.FILE})  # the perf watch's: a tune's candidate has none
    MODES: ClassVar[dict] = {ENV_FILE: 0o600}  # every other file 0644
    unit: str
    env: str
    profile: str  # profile.json: the validated profile as the controller read it (release_plan.profile_snapshot)
    gate_config: GateConfig
    resolution: Resolution
    meta: ReleaseMeta
    roofline: Roofline | None = None  # None: not written

    def by_name(self) -> dict:
        """Each file's content by its name, in ORDER (what a tune's queue item carries)."""
        contents = {UNIT_FILE: self.unit, ENV_FILE: self.env, PROFILE_FILE: self.profile,
                    GateConfig.FILE: self.gate_config.dump(), Resolution.FILE: self.resolution.dump(),
                    Roofline.FILE: self.roofline.dump() if self.roofline else None, ReleaseMeta.FILE: self.meta.dump()}
        return {name: contents[name] for name in self.ORDER if contents[name] is not None}

    def members(self) -> list:
        """(name, content, mode) of each file, in ORDER."""
        return self.written(self.by_name())

    @classmethod
    def written(cls, files: dict, source: str = "a release's files") -> list:
        """(name, content, mode) of files by name (a queue item's), in ORDER: a file missing or one no release has
        is an error naming it (nothing is written then)."""
        missing = [name for name in cls.ORDER if name not in files and name not in cls.OPTIONAL]
        unknown = sorted(set(files) - set(cls.ORDER))
        if missing or unknown:
            raise DocumentError(f"{source}: " + (f"{missing[0]} is missing" if missing else
                                                 f"{unknown[0]} is not a release's file ({', '.join(cls.ORDER)})"))
        return [(name, files[name], cls.MODES.get(name, 0o644)) for name in cls.ORDER if name in files]
