"""Release parts a profile names by file and frozen digest, shipped content-addressed to the host: the token map
(speculative.token_map, tune.token_maps; sglang_deploy/token_map/part.py does the rest)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator


class TokenMapPart(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # as sections.Strict

    file: StrictStr = Field(
        description="The hot-vocabulary map `sglang-deploy token-map` built (relative to the repository, under "
                    "manifests/, or under a weights directory); shipped to /srv/models/token-maps/<sha256>.pt.")
    sha256: StrictStr = Field(
        description="Its frozen digest (64 hex, from FILE.sha256): the check refuses a file that differs, and the "
                    "host checks it before the switch.")

    @field_validator("file")
    @classmethod
    def map_file(cls, value: str) -> str:
        if not value.endswith(".pt"):
            raise ValueError(f"must name a token map (a .pt file `sglang-deploy token-map` wrote), got {value!r}")
        return value

    @field_validator("sha256")
    @classmethod
    def digest(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", value):
            raise ValueError(f"{value!r}: accepted: 64 lower-case hex digits (the first word of FILE.sha256)")
        return value
