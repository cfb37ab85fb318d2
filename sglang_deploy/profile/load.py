"""Serving profiles: YAML files under profiles/ describing one SGLang server configuration.

The whole profile (its sections are in sections.py) and its loading: loading checks the structure
(pydantic, unknown keys are errors) and reports every problem with the file, the field path and the line
(yaml_lines.py). Whether the flags make sense is the job of ``validate``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import Field, StrictFloat, StrictInt, StrictStr, ValidationError, field_validator, model_validator

from .. import safety
from ..hostside.store import secret_name
from .sections import (EnvSetting, GateSection, ModelSection, MultinodeSection, ServiceSection,
                               SGLangSection, SpeculativeSection, Strict, TuneSection, WatchSection)
from .yaml_lines import UniqueKeyLoader, control_problems, line_index, pydantic_problems
from ..rules import RULES

ENVIRONMENT_PREFIXES = ("NCCL_", "SGLANG_", "CUDA_", "PYTORCH_", "TORCH_", "TRITON_", "HF_", "OMP_")


class ProfileError(ValueError):
    """A profile that cannot be used; ``problems`` are lines of the form 'file:line: field: message'."""

    def __init__(self, path: Path | str, problems: list[str]):
        self.path = str(path)
        self.problems = problems
        super().__init__("\n".join(problems))


class Profile(Strict):
    description: StrictStr = Field("", description="Free text; the only field besides a variable's reason that may "
                                                   "span lines (it reaches no file on the host).")
    model: ModelSection = Field(description="The checkpoint: its pinned source (or a path the tool does not manage).")
    sglang: SGLangSection = Field(description="The SGLang release and the server's command line flags.")
    speculative: SpeculativeSection = Field(default_factory=SpeculativeSection,
                                            description="A draft model as part of the release.")
    tune: TuneSection = Field(default_factory=TuneSection, description="What the tune may try beyond the flags.")
    environment: dict[str, Union[StrictStr, StrictInt, StrictFloat, EnvSetting]] = Field(
        default_factory=dict, description="Variables for the server process (NCCL_*, SGLANG_*, CUDA_*, PYTORCH_*, "
                                          "TORCH_*, TRITON_*, HF_*, OMP_*): a value, or {value, reason}; no secrets "
                                          "(*_TOKEN, *_SECRET, *_PASSWORD, *_API_KEY ... are refused).")
    service: ServiceSection = Field(default_factory=ServiceSection, description="The systemd unit and its listener.")
    gate: GateSection = Field(default_factory=GateSection, description="The post-deploy gate's floors and measurement.")
    watch: WatchSection = Field(default_factory=WatchSection,
                                description="The perf watch (docs/doctor-watch-tune.md).")
    nodes: Annotated[StrictInt, Field(ge=1, le=64)] = Field(
        1, description="Hosts one server spans (tensor parallelism over nodes: --nnodes); the inventory group "
                       "`nodes` lists them in rank order.")
    multinode: MultinodeSection = Field(default_factory=MultinodeSection,
                                        description="A server over several hosts; only with nodes > 1.")
    waivers: dict[StrictStr, StrictStr] = Field(
        default_factory=dict, description="rule id -> reason, to switch off one of the tool's own rules on purpose.")
    # Filled by load_profile, not by the YAML.
    name: str = Field("", exclude=True)
    source: str = Field("", exclude=True)

    @field_validator("environment")
    @classmethod
    def environment_names(cls, env: dict[str, Any]) -> dict[str, Any]:
        for key, value in env.items():
            if not key.startswith(ENVIRONMENT_PREFIXES) or not safety.ENV_NAME.fullmatch(key):
                raise ValueError(
                    f"variable {key!r} is not accepted; names are upper case and start with one of "
                    + ", ".join(ENVIRONMENT_PREFIXES))
            if secret_name(key):
                raise ValueError(
                    f"variable {key!r} looks like a secret; the environment is copied into every release, its "
                    "profile.json (world-readable) and the history, so secrets do not go here: the API key is the "
                    "host's secret (docs/host.md: secrets), a Hugging Face token a root-only file named by host data "
                    "hf_token_file")
            text = value.value if isinstance(value, EnvSetting) else value
            problem = safety.control_message(text) if isinstance(text, str) else None
            if problem:
                raise ValueError(f"value of {key} {problem}")
        return env

    @model_validator(mode="after")
    def model_path_location(self) -> "Profile":
        problem = safety.model_path_location_problem(self.model.path, self.service.name) if self.model.path else None
        if problem:
            raise ValueError(f"model.path: {problem}")  # the shared directories: the field's own validator
        return self

    @model_validator(mode="after")
    def known_waivers(self) -> "Profile":
        for rule in self.waivers:
            if rule not in RULES:
                raise ValueError(f"waivers: unknown rule {rule!r}; rules are: {', '.join(sorted(RULES))}")
            problem = safety.reason_problem(self.waivers[rule])
            if problem:
                raise ValueError(f"waivers.{rule}: {problem}")
        return self

    def env_values(self) -> dict[str, str]:
        """The profile's environment as plain strings, in profile order."""
        return {key: str(value.value if isinstance(value, EnvSetting) else value)
                for key, value in self.environment.items()}

    def env_reason(self, key: str) -> str | None:
        value = self.environment.get(key)
        return value.reason if isinstance(value, EnvSetting) else None

    def content_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


# --- loading with line numbers -------------------------------------------------------------------

def load_profile(path: Path | str) -> Profile:
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ProfileError(path, [f"{source}: cannot read profile: {error.strerror}"]) from None
    try:
        # An alias (*name) is expanded by the loader: nested ones grow without bound (a "billion laughs"), and a
        # reviewer reading the profile does not see the value where it is used. Refused before anything expands.
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise ProfileError(path, [f"{source}:{event.start_mark.line + 1}: YAML alias *{event.anchor}: aliases "
                                          "are not accepted in a profile; write the value out where it is used"])
        node, data = compose_and_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f"{mark.line + 1}" if mark else "1"
        problem = getattr(error, "problem", None) or str(error)
        raise ProfileError(path, [f"{source}:{line}: invalid YAML: {problem}"]) from None
    if not isinstance(data, dict):
        raise ProfileError(path, [f"{source}:1: the profile must be a YAML mapping with model, sglang, ... sections"])
    lines = text_lines(text, node) if node is not None else {}
    problems = control_problems(source, data, lines)
    stem_problem = safety.control_message(path.stem)
    if stem_problem or "%" in path.stem:
        problems.append(f"{source}:1: (file name): the profile's file name {stem_problem or 'contains %'}; "
                        "accepted: letters, digits, '.', '_' and '-'")
    try:
        profile = Profile.model_validate(data)
    except ValidationError as error:
        reported = [p.split(": ", 2)[1] for p in problems]
        problems += [p for p in pydantic_problems(source, error, lines)
                     if not any(p.split(": ", 2)[1].startswith(field) or field.startswith(p.split(": ", 2)[1])
                                for field in reported)]
    if problems:
        raise ProfileError(path, problems)
    return profile.model_copy(update={"name": path.stem, "source": source})


def compose_and_load(text: str):
    """The document's node tree (for line numbers) and its data from one parse (yaml.compose then yaml.load would
    parse it twice)."""
    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


_LINES: dict[str, dict] = {}  # text_lines: a profile's text -> its line index


def text_lines(text: str, node: yaml.Node | None = None) -> dict:
    """line_index of a profile's text (its node tree when the caller already composed it), made once per text
    however many fields ask for their line (a deploy asks for several after loading)."""
    if text not in _LINES:
        if node is None:
            node = yaml.compose(text, Loader=UniqueKeyLoader)
        if len(_LINES) >= 16:
            _LINES.clear()
        _LINES[text] = line_index(node) if node is not None else {}
    return _LINES[text]


def line_of(path: Path | str, field_path: tuple) -> int:
    """Line of a field in a profile file (for rule errors raised after loading); 1 when unknown."""
    lines = text_lines(Path(path).read_text())
    while field_path and field_path not in lines:
        field_path = field_path[:-1]
    return lines.get(field_path, 1)
