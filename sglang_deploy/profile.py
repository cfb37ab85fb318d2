"""Serving profiles: YAML files under profiles/ describing one SGLang server configuration.

Loading checks the structure (pydantic, unknown keys are errors) and reports every problem with the
file, the field path and the line. Whether the flags make sense is the job of ``validate``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic import ValidationError, field_validator, model_validator

from . import safety
from .hostside.store import secret_name
from .hardening import DIRECTIVES
from .rules import RULES

# Flags the tool derives from other sections; a profile must not set them under sglang.flags.
DERIVED_FLAGS = {
    "--model-path": "model.path",
    "--served-model-name": "model.served_name",
    "--host": "service.host",
    "--port": "service.port",
    "--api-key": "the host's API key secret (see docs/host.md: secrets)",
    "--config": "nothing: the tool owns --config (it carries the API key)",
    "--nnodes": "nodes",
    "--node-rank": "the host's place in the inventory group `nodes` (rank order)",
    "--dist-init-addr": "multinode.dist_init_port and the rank 0 host's address",
    "--speculative-draft-model-path": "speculative.draft.source (the verified draft snapshot)",
    "--speculative-draft-model-revision": "speculative.draft.source (its manifest pins every file)",
}
# Fields a profile no longer has, with where their value belongs now.
REMOVED_FIELDS = {
    ("model", "mirror"): "not a profile field: the Hub endpoint is the host's, host data `hf_endpoint` (a profile "
                         "could send the host's Hugging Face token anywhere); remove it",
}
ENVIRONMENT_PREFIXES = ("NCCL_", "SGLANG_", "CUDA_", "PYTORCH_", "TORCH_", "TRITON_", "HF_", "OMP_")
# Every pattern is applied with fullmatch (Python's `$` also matches before a final newline).
FLAG_NAME = safety.FLAG_NAME
VERSION_PIN = safety.VERSION_PIN

MIN_WATCH_INTERVAL_S = 600  # the watch benchmarks production: at most every 10 minutes

FlagScalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]
FlagValue = Union[FlagScalar, list[Union[StrictInt, StrictFloat, StrictStr]]]


class ProfileError(ValueError):
    """A profile that cannot be used; ``problems`` are lines of the form 'file:line: field: message'."""

    def __init__(self, path: Path | str, problems: list[str]):
        self.path = str(path)
        self.problems = problems
        super().__init__("\n".join(problems))


class Strict(BaseModel):
    # inf and nan are no numbers a profile means (YAML's .inf/.nan would pass every "at least" check)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSection(Strict):
    path: StrictStr | None = Field(
        None, description="Absolute path of a checkpoint directory the tool does not manage (no source, nothing "
                          "verified); with model.source the path is derived and must not be set.")
    source: StrictStr | None = Field(
        None, description="hf://ORG/NAME@<40-hex commit> or file:///dir on the controller: the weights are part of "
                          "the release, verified on the host against the manifest before the switch.")
    manifest: StrictStr | None = Field(
        None, description="The frozen manifest of model.source (relative to the repository; default "
                          "manifests/<org>--<name>/<revision>.json), made by `sglang-deploy manifest`.")
    served_name: StrictStr = Field(description="Model name the API reports (--served-model-name).")
    hybrid: StrictBool = Field(False, description="Hybrid linear-attention model (e.g. Gated DeltaNet + attention).")
    architecture: StrictStr | None = Field(
        None, description="The checkpoint's config.json architectures[0], e.g. Qwen3_5ForConditionalGeneration; "
                          "when model.config is given, it must agree with it.")
    config: StrictStr | None = Field(
        None, description="The checkpoint's config.json (relative to the repository, or absolute): an input of SGLang's "
                          "resolution (its ModelConfig reads it). Required by the full check and every deploy.")

    @field_validator("config")
    @classmethod
    def json_file(cls, value: str | None) -> str | None:
        if value is not None and not value.endswith(".json"):
            raise ValueError(f"must name the checkpoint's config.json (a .json file), got {value!r}")
        return value

    @field_validator("architecture")
    @classmethod
    def python_identifier(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
            raise ValueError(f"must be a model class name such as Qwen3_5ForConditionalGeneration, got {value!r}")
        return value

    @field_validator("path")
    @classmethod
    def absolute(cls, value: str | None) -> str | None:
        problem = safety.model_path_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("source")
    @classmethod
    def weights_source(cls, value: str | None) -> str | None:
        from .weights import source_problem

        problem = source_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def derived_path(self) -> "ModelSection":
        from .weights import WeightsSourceError, weights_for

        if self.source is None:
            if self.path is None:
                raise ValueError("model.source or model.path is required: model.source "
                                 "(hf://ORG/NAME@<commit> or file:///dir) for weights the tool provisions and verifies, "
                                 "model.path for a checkpoint managed outside the tool")
            if self.manifest is not None:
                raise ValueError("model.manifest belongs to model.source; set model.source")
            return self
        if self.path is not None:
            raise ValueError(f"model.path is derived from model.source ({self.source}); remove model.path")
        try:
            weights = weights_for(self.source, self.manifest)
        except WeightsSourceError as error:
            raise ValueError(f"model.source/model.manifest: {error}") from None
        object.__setattr__(self, "path", weights.path)
        return self

    @field_validator("served_name")
    @classmethod
    def served_name_chars(cls, value: str) -> str:
        problem = safety.served_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class SGLangSection(Strict):
    version: StrictStr = Field(description="Exact SGLang release, e.g. 0.5.23.")
    launcher: Literal["serve", "launch_server"] = Field(
        "serve", description="'serve' runs `sglang serve`; 'launch_server' runs `python -m sglang.launch_server`.")
    extras: list[StrictStr] = Field(default_factory=list, description="pip extras of the sglang package.")
    pins: list[StrictStr] = Field(
        default_factory=list,
        description="Exact pins installed next to sglang, e.g. 'nvidia-nccl-cu13==2.28.9' for the NCCL PyTorch loads.")
    flags: dict[str, FlagValue] = Field(
        default_factory=dict,
        description="Full flag names -> values; true renders a bare flag, false omits it, a list repeats values.")

    @field_validator("version")
    @classmethod
    def pinned(cls, value: str) -> str:
        if not VERSION_PIN.fullmatch(value):
            raise ValueError(f"must be an exact release such as '0.5.23', got {value!r}")
        return value

    @field_validator("pins")
    @classmethod
    def exact_pins(cls, pins: list[str]) -> list[str]:
        for pin in pins:
            problem = safety.pin_problem(pin)
            if problem:
                raise ValueError(problem)
        return pins

    @field_validator("extras")
    @classmethod
    def pep508_extras(cls, extras: list[str]) -> list[str]:
        for extra in extras:
            problem = safety.extra_problem(extra)
            if problem:
                raise ValueError(problem)
        return extras

    @field_validator("flags")
    @classmethod
    def flag_names(cls, flags: dict[str, Any]) -> dict[str, Any]:
        for name, value in flags.items():
            if not FLAG_NAME.fullmatch(name):
                raise ValueError(f"flag {name!r} must be written as a full long option such as '--tp-size'")
            if name in DERIVED_FLAGS:
                raise ValueError(f"flag {name} is set by the tool from {DERIVED_FLAGS[name]}; remove it from sglang.flags")
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, float) and not math.isfinite(item):
                    raise ValueError(f"value of {name} is {item}: not a number a flag takes")
                problem = safety.control_message(item) if isinstance(item, str) else None
                if problem:
                    raise ValueError(f"value of {name} {problem}")
        return flags


class EnvSetting(Strict):
    value: Union[StrictStr, StrictInt, StrictFloat]
    reason: StrictStr = Field(description="Why this setting is needed (required for NCCL debugging knobs).")


class ServiceSection(Strict):
    name: StrictStr = Field("sglang", description="systemd unit name (without .service).")
    user: StrictStr = Field("sglang", description="Dedicated system user the server runs as.")
    host: StrictStr = Field("127.0.0.1", description="Bind address (--host): loopback or a wildcard address.")
    port: Annotated[StrictInt, Field(ge=1024, le=65535)] = Field(
        30000, description="Bind port (--port); 1024 and up (the unit has no capability to bind a privileged port).")
    start_timeout_s: Annotated[StrictInt, Field(ge=10, le=7200)] = Field(
        1800, description="Seconds from restart until the server must answer /health (weights + CUDA graphs).")
    auth: Literal["api-key", "none"] = Field(
        "api-key", description="api-key: the host's API key is required (a missing key file fails the plan); "
                               "none: the server runs without authentication, on purpose.")
    relax: list[Literal[DIRECTIVES]] = Field(  # type: ignore[valid-type]
        default_factory=list, description="Sandbox directives left out of the unit (each listed in a comment).")

    @field_validator("name")
    @classmethod
    def unit_name(cls, value: str) -> str:
        problem = safety.service_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("user")
    @classmethod
    def system_account(cls, value: str) -> str:
        problem = safety.service_user_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("host")
    @classmethod
    def local_address(cls, value: str) -> str:
        problem = safety.listen_host_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def no_open_unauthenticated_server(self) -> "ServiceSection":
        import ipaddress

        if self.auth == "none" and not ipaddress.ip_address(self.host).is_loopback:
            raise ValueError(f"auth: none with host {self.host} serves without authentication on every interface; "
                             "accepted: auth: none only with a loopback host (127.0.0.1, ::1)")
        return self


class MultinodeSection(Strict):
    """Tensor parallelism over several hosts (nodes > 1): SGLang's --nnodes/--node-rank/--dist-init-addr."""

    dist_init_port: Annotated[StrictInt, Field(ge=1024, le=65535)] = Field(
        50000, description="Port of rank 0's torch.distributed rendezvous (--dist-init-addr <rank 0>:<port>).")
    socket_ifname: StrictStr | None = Field(
        None, description="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME: the interface the nodes talk over (eth0, "
                          "^docker,lo); host data nccl_socket_ifname overrides it per host.")

    @field_validator("socket_ifname")
    @classmethod
    def interface_names(cls, value: str | None) -> str | None:
        if value is not None and not safety.SOCKET_IFNAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an interface list; accepted: names such as eth0 or ens1f0, "
                             "comma-separated, optionally prefixed with ^ (exclude) or = (exact)")
        return value


class GateSection(Strict):
    min_decode_tok_s: Annotated[float, Field(strict=True, gt=0)] | None = Field(
        None, description="Floor for single-stream decode tokens/s (median).")
    min_accept_length: Annotated[float, Field(strict=True, ge=1)] | None = Field(
        None, description="Floor for the speculative acceptance length tau (median).")
    max_regression_pct: Annotated[float, Field(strict=True, gt=0, lt=100)] = Field(
        10.0, description="Fail when slower than the last good release by more than this.")
    samples: Annotated[StrictInt, Field(le=100)] = Field(
        5, description="Measured requests per metric; at least 3 (the comparison with the baseline pairs them).")
    warmup: Annotated[StrictInt, Field(ge=0, le=20)] = Field(1, description="Unmeasured requests first.")
    max_new_tokens: Annotated[StrictInt, Field(ge=16, le=4096)] = Field(256, description="Tokens per measured request.")
    concurrency: Annotated[StrictInt, Field(ge=1, le=256)] = Field(4, description="Parallel streams for the aggregate figure.")
    on_inconclusive: Literal["rollback", "keep"] = Field(
        "rollback", description="What to do when the measurement is too noisy or requests fail.")

    @field_validator("samples")
    @classmethod
    def enough_pairs(cls, value: int) -> int:
        if value < 3:
            raise ValueError(
                f"{value} is too few: at least 3 are accepted. The comparison with the baseline pairs the samples "
                "by prompt and bounds their mean with Student's t, whose 95 % quantile is 6.3 for 2 pairs: two prompts "
                "whose ratios differ by 10 % already give an interval of 0.73-1.37 x their mean, so nearly every "
                "comparison would be inconclusive")
        return value


class WatchSection(Strict):
    """The perf watch: a systemd timer on the host measures the active release between deploys (hostside/watch.py)."""

    enabled: StrictBool = Field(True, description="Install and enable the watch timer (false: disable it).")
    interval: StrictStr = Field("6h", description="Time between measurements (systemd time span: 90s, 30min, 6h, 1d).")
    randomized_delay: StrictStr = Field("15min", description="Random extra delay per run (systemd time span; 0 for none).")
    samples: Annotated[StrictInt, Field(ge=1, le=20)] = Field(3, description="Measured requests per run (the gate's prompts).")
    max_running_requests: Annotated[StrictInt, Field(ge=0, le=1024)] = Field(
        0, description="Measure only when sglang:num_running_reqs is at most this; else the run records 'busy, skipped'.")
    on_drift: Literal["record", "restart"] = Field(
        "record", description="record: history and metrics only; restart: also restart the service after "
                              "`drift_runs` drifting measurements in a row.")
    drift_min_accept_length: Annotated[float, Field(strict=True, ge=1)] | None = Field(
        None, description="Acceptance length below this is drift (default: gate.min_accept_length).")
    drift_runs: Annotated[StrictInt, Field(ge=1, le=100)] = Field(
        2, description="Drifting measurements in a row (acceptance below the threshold, decode below "
                       "gate.min_decode_tok_s, or a failed output check) before on_drift acts.")
    output_prompts: Annotated[StrictInt, Field(ge=0, le=8)] = Field(
        3, description="Known-answer prompts of the gate's output check asked each run (0: none); a wrong or "
                       "degenerate answer counts as drift.")
    max_restarts_per_day: Annotated[StrictInt, Field(ge=0, le=24)] = Field(
        3, description="on_drift: restart restarts at most this often in 24 h; past it a drift is recorded "
                       "(restart-withheld, a journal warning), not acted on.")
    history_lines: Annotated[StrictInt, Field(ge=10, le=100000)] = Field(
        500, description="Lines kept in the release's watch.jsonl (oldest dropped).")
    textfile_dir: StrictStr = Field(
        "/var/lib/prometheus/node-exporter",
        description="node_exporter's --collector.textfile.directory (Debian's default).")

    @field_validator("interval", "randomized_delay")
    @classmethod
    def time_span(cls, value: str) -> str:
        if not safety.full(safety.TIME_SPAN, value):
            raise ValueError(f"must be a systemd time span such as 90s, 30min, 6h or 1d, got {value!r}")
        return value

    @field_validator("interval")
    @classmethod
    def not_too_often(cls, value: str) -> str:
        number, unit = re.fullmatch(r"([0-9]+)([a-z]+)", value).groups()
        seconds = int(number) * {"s": 1, "min": 60, "h": 3600, "d": 86400}[unit]
        if seconds == 0:
            raise ValueError("must be longer than 0")
        if seconds < MIN_WATCH_INTERVAL_S:
            raise ValueError(f"{value} is too often: each run benchmarks the production server; accepted: "
                             f"{MIN_WATCH_INTERVAL_S // 60}min or longer")
        return value

    @field_validator("textfile_dir")
    @classmethod
    def textfile_directory(cls, value: str) -> str:
        problem = safety.abs_path_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class DraftSection(Strict):
    source: StrictStr = Field(
        description="The draft model SGLang's DFLASH/EAGLE3/STANDALONE decoding reads: hf://ORG/NAME@<40-hex commit> or "
                    "file:///dir on the controller (a drafter you trained: `sglang-deploy manifest file:///dir` "
                    "freezes it), verified on the host like model.source; the tool derives "
                    "--speculative-draft-model-path from it.")
    manifest: StrictStr | None = Field(
        None, description="The frozen manifest of the draft source (relative to the repository; default "
                          "manifests/<org>--<name>/<revision>.json, or manifests/local--<dir>.json).")
    config: StrictStr | None = Field(
        None, description="The draft's config.json (relative to the repository) for SGLang's resolution, which reads "
                          "the DFLASH block size from it; default: config.json of a file:// source's directory. Must be "
                          "the file the manifest lists.")

    @field_validator("source")
    @classmethod
    def draft_source(cls, value: str) -> str:
        from .weights import WeightsSourceError, parse_source

        try:
            parse_source(value)
        except WeightsSourceError as error:
            raise ValueError(str(error)) from None
        return value

    @field_validator("config")
    @classmethod
    def json_file(cls, value: str | None) -> str | None:
        if value is not None and not value.endswith(".json"):
            raise ValueError(f"must name the draft model's config.json (a .json file), got {value!r}")
        return value


class OfferedDraft(DraftSection):
    algorithm: Literal["DFLASH", "DSPARK", "EAGLE3", "STANDALONE"] = Field(
        "DFLASH", description="The --speculative-algorithm the tune runs this drafter with.")


class TuneSection(Strict):
    drafters: list[OfferedDraft] = Field(
        default_factory=list,
        description="Draft models the tune may switch to (its `drafter` axis), each measured against the profile's own "
                    "speculation on prose, code and chat; deployed and verified with the release, so the tune and a "
                    "rollback find them on the host.")


class SpeculativeSection(Strict):
    draft: DraftSection | None = Field(
        None, description="A draft model as part of the release (DFLASH, EAGLE3, STANDALONE); NEXTN drafts with the "
                          "checkpoint's own MTP heads and takes none.")


class Profile(Strict):
    description: StrictStr = ""
    model: ModelSection
    sglang: SGLangSection
    speculative: SpeculativeSection = Field(default_factory=SpeculativeSection)
    tune: TuneSection = Field(default_factory=TuneSection)
    environment: dict[str, Union[StrictStr, StrictInt, StrictFloat, EnvSetting]] = Field(
        default_factory=dict, description="Variables for the server process (NCCL_*, SGLANG_*, CUDA_*, ...).")
    service: ServiceSection = Field(default_factory=ServiceSection)
    gate: GateSection = Field(default_factory=GateSection)
    watch: WatchSection = Field(default_factory=WatchSection)
    nodes: Annotated[StrictInt, Field(ge=1, le=64)] = Field(
        1, description="Hosts one server spans (tensor parallelism over nodes: --nnodes); the inventory group "
                       "`nodes` lists them in rank order.")
    multinode: MultinodeSection = Field(default_factory=MultinodeSection)
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

def _line_index(node: yaml.Node, path: tuple = (), index: dict | None = None) -> dict[tuple, int]:
    """Map each field path (keys and list indices) to the 1-based line where it appears."""
    index = {} if index is None else index
    index.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            index[path + (key,)] = key_node.start_mark.line + 1
            _line_index(value_node, path + (key,), index)
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            index[path + (position,)] = item.start_mark.line + 1
            _line_index(item, path + (position,), index)
    return index


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):  # `? [a, b]` or `? {a: 1}`: unhashable, and no field name
                raise yaml.constructor.ConstructorError(
                    None, None, "a key must be a plain name, not a list or mapping", key_node.start_mark)
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _format_location(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _clean_loc(loc: tuple) -> tuple:
    # pydantic adds union-member names such as 'str' or 'EnvSetting' to the location; drop them.
    noise = {"str", "int", "float", "bool", "list[union[int,float,str]]", "EnvSetting",
             "function-after[identifier(), str]", "function-after[absolute(), str]", "function-after[pinned(), str]"}
    return tuple(p for p in loc if not (isinstance(p, str) and (p in noise or p.startswith(("list[", "function-")))))


def _pydantic_problems(source: str, error: ValidationError, lines: dict[tuple, int]) -> list[str]:
    problems, seen = [], set()
    for item in error.errors():
        loc = _clean_loc(item["loc"])
        field = _format_location(loc)
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = REMOVED_FIELDS.get(loc, "unknown key (not part of the profile format; see docs/profile.md)")
        elif item["type"] == "missing":
            message = "required field is missing"
        key = (field, message)
        if key in seen:
            continue  # union members repeat the same complaint
        seen.add(key)
        probe = loc
        while probe and probe not in lines:
            probe = probe[:-1]
        problems.append(f"{source}:{lines.get(probe, 1)}: {field}: {message}")
    return problems


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
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f"{mark.line + 1}" if mark else "1"
        problem = getattr(error, "problem", None) or str(error)
        raise ProfileError(path, [f"{source}:{line}: invalid YAML: {problem}"]) from None
    if not isinstance(data, dict):
        raise ProfileError(path, [f"{source}:1: the profile must be a YAML mapping with model, sglang, ... sections"])
    lines = _line_index(node) if node is not None else {}
    problems = _control_problems(source, data, lines)
    stem_problem = safety.control_message(path.stem)
    if stem_problem or "%" in path.stem:
        problems.append(f"{source}:1: (file name): the profile's file name {stem_problem or 'contains %'}; "
                        "accepted: letters, digits, '.', '_' and '-'")
    try:
        profile = Profile.model_validate(data)
    except ValidationError as error:
        reported = [p.split(": ", 2)[1] for p in problems]
        problems += [p for p in _pydantic_problems(source, error, lines)
                     if not any(p.split(": ", 2)[1].startswith(field) or field.startswith(p.split(": ", 2)[1])
                                for field in reported)]
    if problems:
        raise ProfileError(path, problems)
    return profile.model_copy(update={"name": path.stem, "source": source})


# Free text that reaches no unit, shell, path or URL: a YAML block scalar may make it span lines.
_FREE_TEXT = {("description",), ("environment", "*", "reason")}


def _control_problems(source: str, data, lines: dict[tuple, int], path: tuple = ()) -> list[str]:
    """Every key and string value with a control character, named by file, line and field path."""
    problems = []
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = list(enumerate(data))
    else:
        if isinstance(data, str):
            free = any(len(pattern) == len(path) and all(p in ("*", q) for p, q in zip(pattern, path))
                       for pattern in _FREE_TEXT)
            message = safety.control_message(data, safety.TEXT_ALLOWED if free else set())
            if message:
                problems.append(f"{source}:{lines.get(path, 1)}: {_format_location(path)}: {message}")
        return problems
    for key, value in items:
        if isinstance(key, str) and safety.control_message(key):
            problems.append(f"{source}:{lines.get(path + (key,), 1)}: {_format_location(path + (key,))}: "
                            f"the key {safety.control_message(key)}")
            continue
        problems += _control_problems(source, value, lines, path + (key,))
    return problems


def line_of(path: Path | str, field_path: tuple) -> int:
    """Line of a field in a profile file (for rule errors raised after loading); 1 when unknown."""
    text = Path(path).read_text()
    lines = _line_index(yaml.compose(text, Loader=_UniqueKeyLoader))
    while field_path and field_path not in lines:
        field_path = field_path[:-1]
    return lines.get(field_path, 1)
