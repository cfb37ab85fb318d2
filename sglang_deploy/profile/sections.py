"""The sections of a serving profile as typed models: model, sglang, speculative, tune, service, gate, watch, multinode.

Each field says what it accepts and refuses a value that would reach a unit, a shell or a path unchecked
(safety.py); unknown keys are errors. The whole profile and its loading are in load.py.
"""

import ipaddress
import math
import os
import re
import stat
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic import AfterValidator, field_validator, model_validator

from .. import safety
from ..hardening import DIRECTIVES
from ..weights import REPO_ROOT, WeightsSourceError, manifest_path_problem, parse_source, source_problem, weights_for
from .parts import TokenMapPart

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
# Every pattern is applied with fullmatch (Python's `$` also matches before a final newline).
FLAG_NAME = safety.FLAG_NAME
VERSION_PIN = safety.VERSION_PIN

MIN_WATCH_INTERVAL_S = 600  # the watch benchmarks production: at most every 10 minutes
MAX_WATCH_INTERVAL_S = 7 * 86400  # and at least weekly: a longer span is a watch that never runs
MAX_WATCH_DELAY_S = 86400  # RandomizedDelaySec= of the watch's timer: a day at most, and never past the interval
# An acceptance floor below this passes a drafter that accepts fewer than one draft token in five: it guards nothing.
MIN_ACCEPT_FLOOR = 1.2


def span_seconds(value: str) -> int:
    """A systemd time span of safety.TIME_SPAN (90s, 30min, 6h, 1d) in seconds."""
    number, unit = re.fullmatch(r"([0-9]+)([a-z]+)", value).groups()
    return int(number) * {"s": 1, "min": 60, "h": 3600, "d": 86400}[unit]

FlagScalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]
FlagValue = Union[FlagScalar, list[Union[StrictInt, StrictFloat, StrictStr]]]


def Checked(base, problem):
    """`base` refused where `problem(value)` names a problem (its message is the error), as settings_types.Text is."""
    def check(value):
        message = problem(value)
        if message:
            raise ValueError(message)
        return value
    return Annotated[base, AfterValidator(check)]


def each(problem):
    """`problem` over a list: the first item's refusal (the error names the list, as one check of it would)."""
    return lambda values: next(filter(None, map(problem, values)), None)


def accept_floor_problem(value: float) -> str | None:
    if value >= MIN_ACCEPT_FLOOR:
        return None
    if value <= 1:
        return (f"{value} can never fail: the acceptance length is at least 1 by definition (the verified token); "
                f"accepted: a floor of {MIN_ACCEPT_FLOOR} or more, such as the proven profile's 2.8")
    return (f"{value} fails only a drafter that accepts fewer than {value - 1:.3g} draft tokens per step: it guards "
            f"nothing (tau is at least 1 by definition); accepted: a floor of {MIN_ACCEPT_FLOOR} or more, such as the "
            "proven profile's 2.8")


AcceptFloor = Checked(Annotated[float, Field(strict=True)], accept_floor_problem)


CONFIG_MAX_BYTES = 1 << 20  # a checkpoint's config.json is a few KiB


def config_json(whose: str, problem=lambda value: None):
    """A config.json field (model.config, a draft's config): a .json file, then `problem`'s own check."""
    return Checked(StrictStr, lambda value: problem(value) if value.endswith(".json") else
                   f"must name {whose} config.json (a .json file), got {value!r}")


def config_file_problem(value: str) -> str | None:
    """model.config follows the manifest path rules (under manifests/, or a weights directory of the controller) and
    is a regular file of at most 1 MiB (a FIFO would hang the check). A missing file is the resolution's to name."""
    problem = manifest_path_problem(value)
    if problem:
        return problem.replace("model.manifest", "model.config").replace("a relative manifest", "a relative config")
    try:
        status = os.stat(value if os.path.isabs(value) else REPO_ROOT / value)
    except OSError:
        return None
    if not stat.S_ISREG(status.st_mode) or status.st_size > CONFIG_MAX_BYTES:
        return f"{value} is not a regular file of at most {CONFIG_MAX_BYTES >> 20} MiB"
    return None


def version_problem(value: str) -> str | None:
    return None if VERSION_PIN.fullmatch(value) else f"must be an exact release such as '1.2.3', got {value!r}"


def architecture_problem(value: str) -> str | None:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
        return None
    return f"must be a model class name such as Qwen3_5ForConditionalGeneration, got {value!r}"


def socket_ifname_problem(value: str) -> str | None:
    if safety.SOCKET_IFNAME.fullmatch(value):
        return None
    return (f"{value!r} is not an interface list; accepted: names such as eth0 or ens1f0, comma-separated, "
            "optionally prefixed with ^ (exclude) or = (exact)")


def model_source_problem(value: str) -> str | None:
    """model.source: a pinned source, and a file:// directory under a weights directory (weights.source_problem)."""
    return source_problem(value)


def draft_source_problem(value: str) -> str | None:
    """A draft's source: a pinned source (weights.parse_source); drafter.py checks a file:// directory's place."""
    try:
        parse_source(value)
    except WeightsSourceError as error:
        return str(error)
    return None


class Strict(BaseModel):
    # inf and nan are no numbers a profile means (YAML's .inf/.nan would pass every "at least" check)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSection(Strict):
    path: Checked(StrictStr, safety.model_path_problem) | None = Field(
        None, description="Absolute path of a checkpoint directory the tool does not manage (no source, nothing "
                          "verified); with model.source the path is derived and must not be set.")
    source: Checked(StrictStr, model_source_problem) | None = Field(
        None, description="hf://ORG/NAME@<40-hex commit> or file:///dir on the controller: the weights are part of "
                          "the release, verified on the host against the manifest before the switch.")
    manifest: StrictStr | None = Field(
        None, description="The frozen manifest of model.source (relative to the repository; default "
                          "manifests/<org>--<name>/<revision>.json), made by `sglang-deploy manifest`.")
    served_name: Checked(StrictStr, safety.served_name_problem) = Field(
        description="Model name the API reports (--served-model-name).")
    hybrid: StrictBool = Field(False, description="Hybrid linear-attention model (e.g. Gated DeltaNet + attention).")
    architecture: Checked(StrictStr, architecture_problem) | None = Field(
        None, description="The checkpoint's config.json architectures[0], e.g. Qwen3_5ForConditionalGeneration; "
                          "when model.config is given, it must agree with it.")
    config: config_json("the checkpoint's", config_file_problem) | None = Field(
        None, description="The checkpoint's config.json (relative to the repository, or absolute): an input of SGLang's "
                          "resolution (its ModelConfig reads it). Required by the full check and every deploy.")

    @model_validator(mode="after")
    def derived_path(self) -> "ModelSection":
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


class SGLangSection(Strict):
    version: Checked(StrictStr, version_problem) = Field(description="Exact SGLang release, one of sglang_deploy/releases/ (`sglang-deploy sglang add <version>` adds one).")
    launcher: Literal["serve", "launch_server"] = Field(
        "serve", description="'serve' runs `sglang serve`; 'launch_server' runs `python -m sglang.launch_server`.")
    extras: Checked(list[StrictStr], each(safety.extra_problem)) = Field(
        default_factory=list, description="pip extras of the sglang package.")
    pins: Checked(list[StrictStr], each(safety.pin_problem)) = Field(
        default_factory=list,
        description="Exact pins installed next to sglang, e.g. 'nvidia-nccl-cu13==2.28.9' for the NCCL PyTorch loads.")
    flags: dict[str, FlagValue] = Field(
        default_factory=dict,
        description="Full flag names -> values; true renders a bare flag, false omits it, a list repeats values.")

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
    value: Union[StrictStr, StrictInt, StrictFloat] = Field(description="The variable's value.")
    reason: Checked(StrictStr, safety.reason_problem) = Field(
        description="Why this setting is needed (required for NCCL debugging knobs); real words (at least 2 words, "
                    "8 letters).")


class ServiceSection(Strict):
    name: Checked(StrictStr, safety.service_name_problem) = Field(
        "sglang", description="systemd unit name (without .service).")
    user: Checked(StrictStr, safety.service_user_problem) = Field(
        "sglang", description="Dedicated system user the server runs as.")
    host: Checked(StrictStr, safety.listen_host_problem) = Field(
        "127.0.0.1", description="Bind address (--host): loopback or a wildcard address.")
    port: Annotated[StrictInt, Field(ge=1024, le=65535)] = Field(
        30000, description="Bind port (--port); 1024 and up (the unit has no capability to bind a privileged port).")
    start_timeout_s: Annotated[StrictInt, Field(ge=10, le=7200)] = Field(
        1800, description="Seconds from restart until the server must answer /health (weights + CUDA graphs).")
    auth: Literal["api-key", "none"] = Field(
        "api-key", description="api-key: the host's API key is required (a missing key file fails the plan); "
                               "none: the server runs without authentication, on purpose.")
    relax: list[Literal[DIRECTIVES]] = Field(  # type: ignore[valid-type]
        default_factory=list, description="Sandbox directives left out of the unit (each listed in a comment).")

    @model_validator(mode="after")
    def no_open_unauthenticated_server(self) -> "ServiceSection":
        if self.auth == "none" and not ipaddress.ip_address(self.host).is_loopback:
            raise ValueError(f"auth: none with host {self.host} serves without authentication on every interface; "
                             "accepted: auth: none only with a loopback host (127.0.0.1, ::1)")
        return self


class MultinodeSection(Strict):
    """Tensor parallelism over several hosts (nodes > 1): SGLang's --nnodes/--node-rank/--dist-init-addr."""

    dist_init_port: Annotated[StrictInt, Field(ge=1024, le=65535)] = Field(
        50000, description="Port of rank 0's torch.distributed rendezvous (--dist-init-addr <rank 0>:<port>).")
    socket_ifname: Checked(StrictStr, socket_ifname_problem) | None = Field(
        None, description="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME: the interface the nodes talk over (eth0, "
                          "^docker,lo); host data nccl_socket_ifname overrides it per host.")


class GateSection(Strict):
    min_decode_tok_s: Annotated[float, Field(strict=True, ge=1)] | None = Field(
        None, description="Floor for single-stream decode tokens/s (median); at least 1; required with speculation.")
    min_accept_length: AcceptFloor | None = Field(
        None, description="Floor for the speculative acceptance length tau (median); above 1 (tau is at least 1 by "
                          "definition); required with speculation.")
    max_regression_pct: Annotated[float, Field(strict=True, gt=0, le=50)] = Field(
        10.0, description="Fail when slower than the last good release by more than this (at most 50).")
    samples: Annotated[StrictInt, Field(le=100)] = Field(
        5, description="Measured requests per metric; at least 3 (the comparison with the baseline pairs them).")
    warmup: Annotated[StrictInt, Field(ge=0, le=20)] = Field(1, description="Unmeasured requests first.")
    max_new_tokens: Annotated[StrictInt, Field(ge=16, le=4096)] = Field(256, description="Tokens per measured request.")
    concurrency: Annotated[StrictInt, Field(ge=1, le=256)] = Field(4, description="Parallel streams for the aggregate figure.")
    on_inconclusive: Literal["rollback", "keep"] = Field(
        "rollback", description="What to do when the measurement is too noisy or requests fail.")
    max_rounds: Annotated[StrictInt, Field(ge=1, le=8)] = Field(
        4, description="Measurement rounds at most: while the comparison with the baseline straddles the threshold, "
                       "the gate measures the same prompts again (1: one round, decide or stay inconclusive). The "
                       "error rates hold over all rounds (docs/releases-and-gate.md).")
    rounds_budget_s: Annotated[float, Field(ge=0, le=3600)] = Field(
        300.0, description="Seconds the rounds after the first may take in all; a round that would not fit is not "
                           "started.")

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
    drift_min_accept_length: AcceptFloor | None = Field(
        None, description="Acceptance length below this is drift (default: gate.min_accept_length); above 1.")
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
    textfile_dir: Checked(StrictStr, safety.abs_path_problem) = Field(
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
        seconds = span_seconds(value)
        if seconds == 0:
            raise ValueError("must be longer than 0")
        if seconds < MIN_WATCH_INTERVAL_S:
            raise ValueError(f"{value} is too often: each run benchmarks the production server; accepted: "
                             f"{MIN_WATCH_INTERVAL_S // 60}min or longer")
        if seconds > MAX_WATCH_INTERVAL_S:
            raise ValueError(f"{value} is a watch that practically never runs; accepted: at most "
                             f"{MAX_WATCH_INTERVAL_S // 86400}d")
        return value

    @field_validator("randomized_delay")
    @classmethod
    def delay_bounded(cls, value: str) -> str:
        if span_seconds(value) > MAX_WATCH_DELAY_S:
            raise ValueError(f"{value} lets the timer fire that much later than its interval: an enabled watch that "
                             f"need never run; accepted: at most {MAX_WATCH_DELAY_S // 3600}h")
        return value

    @model_validator(mode="after")
    def delay_within_interval(self) -> "WatchSection":
        if span_seconds(self.randomized_delay) > span_seconds(self.interval):
            raise ValueError(f"watch.randomized_delay {self.randomized_delay} is longer than watch.interval "
                             f"{self.interval}; accepted: a delay up to the interval")
        return self


class DraftSection(Strict):
    source: Checked(StrictStr, draft_source_problem) = Field(
        description="The draft model SGLang's DFLASH/EAGLE3/STANDALONE decoding reads: hf://ORG/NAME@<40-hex commit> or "
                    "file:///dir on the controller (a drafter you trained: `sglang-deploy manifest file:///dir` "
                    "freezes it), verified on the host like model.source; the tool derives "
                    "--speculative-draft-model-path from it.")
    manifest: StrictStr | None = Field(
        None, description="The frozen manifest of the draft source (relative to the repository; default "
                          "manifests/<org>--<name>/<revision>.json, or manifests/local--<dir>.json).")
    config: config_json("the draft model's") | None = Field(
        None, description="The draft's config.json (relative to the repository) for SGLang's resolution, which reads "
                          "the DFLASH block size from it; default: config.json of a file:// source's directory. Must be "
                          "the file the manifest lists.")

class OfferedDraft(DraftSection):
    algorithm: Literal["DFLASH", "DSPARK", "EAGLE3", "STANDALONE"] = Field(
        "DFLASH", description="The --speculative-algorithm the tune runs this drafter with.")


class TuneSection(Strict):
    drafters: list[OfferedDraft] = Field(
        default_factory=list,
        description="Draft models the tune may switch to (its `drafter` axis), each measured against the profile's own "
                    "speculation on prose, code and chat; deployed and verified with the release, so the tune and a "
                    "rollback find them on the host.")
    vocab_sizes: list[Annotated[StrictInt, Field(ge=1, le=1 << 20)]] = Field(
        default_factory=list,
        description="Hot-vocabulary draft heads the tune's `vocab` axis tries (--speculative-token-map), one per size "
                    "N: the map of N ids (built by `sglang-deploy token-map CORPUS --model DIR --size N`, named "
                    "<model>-<N>.pt) must be a file the verified snapshot's manifest lists; a size with no such map "
                    "is listed as not built. Empty: every map the snapshots' manifests list.")

    token_maps: list[TokenMapPart] = Field(
        default_factory=list,
        description="Token maps the tune's `vocab` axis may try, each shipped with the release like "
                    "speculative.token_map (verified on the host, kept while a retained release names it); a size "
                    "of tune.vocab_sizes is a candidate when one of these (or a file a verified snapshot's manifest "
                    "lists) holds that many ids.")

    @field_validator("vocab_sizes")
    @classmethod
    def distinct_sizes(cls, value: list[int]) -> list[int]:
        repeated = sorted({size for size in value if value.count(size) > 1})
        if repeated:
            raise ValueError(f"{repeated} given more than once; accepted: distinct sizes")
        return value


class SpeculativeSection(Strict):
    draft: DraftSection | None = Field(
        None, description="A draft model as part of the release (DFLASH, EAGLE3, STANDALONE); NEXTN drafts with the "
                          "checkpoint's own MTP heads and takes none.")
    token_map: TokenMapPart | None = Field(
        None, description="A hot-vocabulary draft head as part of the release: the tool ships the map, checks its "
                          "digest on the host before the switch and derives --speculative-token-map; SGLang's "
                          "resolution decides where it applies (EAGLE/NEXTN, not EAGLE3).")
