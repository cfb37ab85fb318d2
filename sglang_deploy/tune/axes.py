"""The tune's lever axes beside spec/drafter/graphs/nccl: `nospec` (the release without speculation, a control),
`kv` (--kv-cache-dtype), `attention` (--attention-backend, and with speculation
--speculative-draft-attention-backend) and `vocab` (--speculative-token-map: tune/vocab.py). Which values are
candidates is SGLang's answer, not a list of ours: every choice of the flag in SGLang's own parser that SGLang's whole resolution accepts for this model under the host's
GPU facts (accepted_values), one per distinct resolved value. The resolution cannot know what only fails on the GPU
(a backend built for another platform): such a candidate fails at start on the host and is reported as failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..rules import TUNE_AXES, Axis
from .candidate import Candidate, Measured, spec_settings
from .vocab import FLAG as VOCAB, candidates, not_candidates

SPEC_FLAGS = ("--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
              "--speculative-num-draft-tokens", "--speculative-token-map", "--speculative-draft-attention-backend")
LEVER_AXES = tuple(axis for axis in TUNE_AXES if axis.levers)  # kv, attention, graphs
LEVERS = {lever.flag: lever for axis in LEVER_AXES for lever in axis.levers}
AXIS_OF = {lever.flag: axis.name for axis in LEVER_AXES for lever in axis.levers}
NOTED = ("kv", "attention")  # the lever axes whose counts end the table (axis_notes)


def resolved_value(resolved: dict, dest: str):
    """A resolved field, or a nested one by its dotted path (cuda_graph_config.decode.backend)."""
    value = resolved
    for key in dest.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


NCCL_PROTOS_PCIE = ("LL", "Simple")  # LL128 only over NVLink (rule nccl-ll128-needs-nvlink)
PCIE_IPC_WORLD_SIZES = (2, 4, 8)  # pcie_ipc_ar.eligible_group


@dataclass
class Accepted:
    """What SGLang's resolution said about each parser choice of one flag."""

    flag: str
    current: str | None  # the value the profile resolves to today
    values: list = field(default_factory=list)  # accepted, one per distinct resolved value, the current one left out
    refused: dict = field(default_factory=dict)  # value -> SGLang's reason
    same_as: dict = field(default_factory=dict)  # value -> the accepted value it resolves to (an alias)
    dropped: dict = field(default_factory=dict)  # value -> why it cannot start (or is not shown to) on the host's card

    def summary(self) -> str:
        parts = [f"{self.flag}: {len(self.values)} candidate(s) {', '.join(self.values) or '-'} (now "
                 f"{self.current or 'unset'})"]
        if self.same_as:
            parts.append("same configuration as another or the original: "
                         + ", ".join(f"{k}={v}" for k, v in self.same_as.items()))
        if self.refused:
            parts.append(f"refused by SGLang's resolution: {', '.join(self.refused)}")
        if self.dropped:
            parts.append(f"{len(self.dropped)} dropped, cannot start (or not shown to) on this card: "
                         + ", ".join(self.dropped))
        return "; ".join(parts)


def accepted_values(flag: str, choices, resolve, wanted=None, start=None) -> Accepted:
    """Ask SGLang's resolution about each choice: `resolve(extra_argv) -> (error or None, resolved dict)`.
    `wanted`: only these choices (tune_attention); a wanted value the parser does not offer is refused.
    `start(resolved) -> start_feasibility.Verdict` (levers.starter): a value that cannot start on the host's card,
    or that the release's code does not show to start there, is dropped with the reason before any deploy; values
    that run the same configuration (the original's own included) are one."""
    lever = LEVERS[flag]
    dest = lever.dest
    error, resolved = resolve([])
    if error:
        raise ValueError(f"the profile itself does not resolve: {error}")
    result = Accepted(flag, resolved_value(resolved, dest))

    # what runs for the flag: auto/bf16/bfloat16 KV on a bf16 checkpoint is one configuration; fa3 with fp8_e5m2 KV
    # runs triton
    def runs(answer):
        value = resolved_value(answer, dest)
        if start is None or lever.runs is None:
            return value, None
        verdict = start(answer)
        return verdict.runs.get(lever.runs) or value, (verdict if verdict.starts is not True else None)

    current, _ = runs(resolved)
    seen = {current} if current is not None else set()
    choices = list(choices or [])
    for value in wanted if wanted is not None else choices:
        if value not in choices:
            result.refused[value] = f"not a choice of {flag} in SGLang's parser ({', '.join(choices)})"
            continue
        error, answer = resolve([flag, value])
        if error:
            result.refused[value] = error
            continue
        effective, cannot = runs(answer)
        if cannot is not None:
            card = getattr(cannot, "card", "this card")
            result.dropped[value] = (f"cannot start on {card}: " if cannot.starts is False
                                     else f"not shown to start on {card}: ") + cannot.summary()
            continue
        if effective in seen:
            if value != result.current:
                result.same_as[value] = f"{effective} (the original's own)" if effective == current else effective
            continue
        seen.add(effective)
        result.values.append(value)
    return result


def nospec_candidate(flags: dict):
    """The release without speculation: every speculative flag removed (edit.py drops speculative.draft with
    the algorithm); None when the profile does not speculate."""

    if not spec_settings(flags):
        return None
    changes = tuple(sorted((name, None) for name in SPEC_FLAGS if name in flags))
    return Candidate("nospec", "nospec", changes)


def nccl_candidates(flags: dict, env: dict, topology: str | None) -> list[Candidate]:
    """Custom all-reduce on/off; with it off, SGLang's opt-in PCIe-IPC all-reduce (world size 2, 4 or 8,
    dispatched after custom all-reduce and before NCCL: parallel_state.py); NCCL protocols valid for the topology
    (never LL128 without NVLink). A variable the profile declares with a reason (a verified workaround) is never
    dropped by the tune."""

    out = []
    disabled = bool(flags.get("--disable-custom-all-reduce"))
    out.append(Candidate("custom-allreduce-" + ("on" if disabled else "off"), "nccl",
                         (("--disable-custom-all-reduce", None if disabled else True),)))
    if int(flags.get("--tp-size") or 1) in PCIE_IPC_WORLD_SIZES and "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" not in env:
        out.append(Candidate("custom-allreduce-off+pcie-ipc", "nccl", (("--disable-custom-all-reduce", True),),
                             (("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", (("reason", "tune candidate: PCIe-IPC all-reduce with "
                                                                   "custom all-reduce off, A/B measured"),
                                                                  ("value", "1"))),)))
    declared = env.get("NCCL_PROTO")
    if declared is None:
        for proto in NCCL_PROTOS_PCIE + (("LL128",) if topology == "nvlink" else ()):
            out.append(Candidate(f"nccl-proto-{proto.lower()}", "nccl",
                                 env=(("NCCL_PROTO", (("reason", "tune candidate: forced protocol, A/B measured"),
                                                      ("value", proto))),)))
    elif not isinstance(declared, dict):
        out.append(Candidate("nccl-proto-default", "nccl", env=(("NCCL_PROTO", None),)))
    return out


def lever_candidates(flag: str, flags: dict, choices: dict) -> list:
    """One candidate per value SGLang's resolution accepts for a lever flag beside the current one (choices: flag ->
    Accepted); none for a speculative lever when the profile does not speculate. A `disabled` decode graph backend
    is refused by the rule cuda-graphs-on unless the profile waives it: listed as invalid, never started."""
    lever, accepted = LEVERS[flag], choices.get(flag)
    if accepted is None or (lever.with_spec and not spec_settings(flags)):
        return []
    return [Candidate(f"{lever.prefix}-{value}", AXIS_OF[flag], ((flag, value),)) for value in accepted.values]


def axis_candidates(axis: Axis, flags: dict, choices: dict) -> list:
    """Every lever candidate of an axis, its levers in order."""
    return [c for lever in axis.levers for c in lever_candidates(lever.flag, flags, choices)]


class LeverAxes:
    """The search's nospec, kv and attention axes (a base of tune.Search, which holds flags, choices, axes and
    run_one/clear_winner)."""

    def lever_count(self) -> int:
        """How many candidates the nospec, vocab and lever axes may add (for the ETA)."""
        count = int("nospec" in self.axes and nospec_candidate(self.flags) is not None)
        count += sum(len(axis_candidates(axis, self.flags, self.choices)) for axis in LEVER_AXES
                     if axis.name in self.axes)
        if "vocab" in self.axes:
            count += len(candidates(self.choices.get(VOCAB)))
        return count

    def axis_vocab(self, best):
        """Each hot-vocabulary map SGLang's resolution accepts on top of the best so far (tune/vocab.py); the sizes
        that are not candidates (not built, refused) are rows of the table, never started."""
        offered = self.choices.get(VOCAB)
        for measured in not_candidates(offered):
            self.record_invalid(measured.candidate, measured.invalid_reason)
        return self.clear_winner(best, candidates(offered))

    def axis_nospec(self, best):
        """The release without speculation, measured once as a control: not carried into the later axes (the
        table marks every speculative candidate slower than it); it can still win the choice on its own."""
        candidate = nospec_candidate(self.flags)
        if candidate is not None:
            self.run_one(candidate)
        return best

    def record_dropped(self, axis: str):
        """The values dropped before any start (they cannot start, or are not shown to, on the host's card): rows
        of the table with the reason, never deployed."""

        for flag in (flag for flag, of in AXIS_OF.items() if of == axis):
            accepted = self.choices.get(flag)
            for value, why in (accepted.dropped if accepted else {}).items():
                self.record_invalid(Candidate(f"{LEVERS[flag].prefix}-{value}", axis, ((flag, value),)),
                                    f"dropped, never started: {why}")

    def record_invalid(self, candidate: Candidate, why: str):
        """A row of the table without a measurement (dropped values, vocab's sizes that are not candidates)."""
        if candidate.id not in self.results:
            measured = Measured(candidate, valid=False, invalid_reason=why)
            self.results[candidate.id] = measured
            if getattr(self, "on_invalid", None):
                self.on_invalid(measured)

    def axis_notes(self) -> list[str]:
        """Per lever axis searched: how many values were candidates, the same configuration, refused or dropped,
        and for an axis without a candidate why and what would give it one."""
        lines = []
        for flag, axis in [(flag, axis) for flag, axis in AXIS_OF.items() if axis in NOTED] + [(VOCAB, "vocab")]:
            accepted = self.choices.get(flag)
            if axis not in self.axes or accepted is None:
                continue
            if flag == VOCAB:
                lines.append(f"{axis}: {accepted.summary()}")
                continue
            line = (f"{flag}: {len(accepted.values)} candidate(s), {len(accepted.same_as)} the same configuration as "
                    f"another, {len(accepted.refused)} refused by SGLang's resolution, {len(accepted.dropped)} "
                    f"dropped before any start (cannot start, or not shown to, on this card)")
            if not accepted.values:
                line += ("; no candidate: every value SGLang's parser offers is the original's configuration, refused "
                         "or cannot start here (tune_attention names others to try)")
            lines.append(line)
        return lines

    def axis_kv(self, best):
        self.record_dropped("kv")
        return self.clear_winner(best, lever_candidates("--kv-cache-dtype", self.flags, self.choices))

    def axis_attention(self, best):
        """The target's attention backends, then (with speculation) the draft's on top of the best of them."""
        self.record_dropped("attention")
        top = self.clear_winner(best, lever_candidates("--attention-backend", self.flags, self.choices))
        drafts = lever_candidates("--speculative-draft-attention-backend", self.flags, self.choices)
        if top.candidate.axis == "attention":  # with_best would replace the winner's backend: carry it explicitly

            drafts = [Candidate(f"{top.candidate.id}+{c.id}", c.axis, top.candidate.merged(c).flags,
                                top.candidate.env, top.candidate.draft) for c in drafts]
        return self.clear_winner(top, drafts)


def slower_than_nospec(results, nospec_id: str = "nospec") -> dict:
    """candidate id -> the no-speculation control's decode, for each measured speculative candidate slower than it
    (the trap of vllm#35387: MTP at 32.7 tok/s against 57 without speculation)."""
    control = next((m for m in results if m.candidate.id == nospec_id and m.measured), None)
    if control is None:
        return {}
    return {m.candidate.id: control.decode for m in results
            if m.measured and m is not control and m.candidate.axis != "nospec" and m.decode < control.decode}
