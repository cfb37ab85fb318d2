"""The regression bisect, the pure part: two releases' profiles decomposed into single differences, each as a
candidate on top of the good release, and the verdict from their measurements.

`doctor.py --data bisect=<release>` (bisect_run.py) measures the good release (the active one), the refused
release as it is, and the good release with each difference alone, as temporary releases in the tune's host
session; `verdict` names the difference that costs the speed. Nothing here touches a host.

A difference is what a user edits in the profile: a flag, an environment variable, the drafter, the weights.
Values SGLang validates together travel together (one difference, so each candidate is a valid release):
  - the speculative counts (--speculative-num-steps, --speculative-eagle-topk, --speculative-num-draft-tokens:
    with topk 1 draft tokens must be steps + 1);
  - the drafter (--speculative-algorithm and speculative.draft, with the counts when the algorithm changes:
    DFLASH takes none);
  - the decode batch (--max-running-requests and --cuda-graph-max-bs-decode: the rule decode-graph-covers-batch).
What does not change the server (description, gate, watch, tune, waivers, the served name) is listed as ignored;
what cannot run beside the good release's install (another SGLang version, another node count) is named, not
measured.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .tune import edit as tune_edit, search as tune

SPEC_COUNTS = tune.SPEC_COUNT_FLAGS
COUPLED = (("--max-running-requests", "--cuda-graph-max-bs-decode"),)
WEIGHTS_KEYS = ("path", "source", "manifest", "config", "architecture", "hybrid")
NOT_THE_SERVER = ("description", "gate", "watch", "tune", "waivers")
UNMEASURABLE = {("sglang", "version"): "another SGLang version needs its own virtualenv: deploy it to measure it",
                ("sglang", "launcher"): "another launcher is another SGLang entry point: deploy it to measure it",
                ("sglang", "extras"): "other extras are another virtualenv: deploy it to measure it",
                ("sglang", "pins"): "other pins are another virtualenv: deploy it to measure it",
                ("nodes",): "another node count is another server: deploy it to measure it",
                ("multinode",): "the nodes' rendezvous: deploy it to measure it"}


class BisectError(ValueError):
    pass


@dataclass(frozen=True)
class Difference:
    name: str  # what it is: "speculation", "--max-running-requests", "NCCL_PROTO", "drafter", "weights"
    kind: str  # flags | environment | drafter | weights | install
    changes: tuple  # ((what, good's value, refused's value), ...), shown as `what: good -> refused`
    candidate: tune.Candidate | None = None  # the good release with this difference alone; None: not measurable
    model: tuple = ()  # weights: ((model key, refused's value), ...)
    drop_draft: bool = False  # the refused release has no speculative.draft where the good one has one
    why_not: str | None = None  # why it is not measured alone

    def text(self) -> str:
        return ", ".join(f"{what}: {shown(old)} -> {shown(new)}" for what, old, new in self.changes)


def shown(value) -> str:
    if value is None:
        return "(absent)"
    if value is True:
        return "on"
    if isinstance(value, dict):
        return json.dumps(value.get("value", value)) if set(value) <= {"value", "reason"} else json.dumps(value,
                                                                                                          sort_keys=True)
    return str(value)


def _value_of(variable):
    """An environment entry's value: a string, or {"value", "reason"} (a declared workaround)."""
    return variable.get("value") if isinstance(variable, dict) else variable


def _env_value(value):
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


def _candidate(name: str, flags: dict, env: dict | None = None, draft: dict | None = None) -> tune.Candidate:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()[:40] or "change"
    return tune.Candidate(f"alone-{slug}", "bisect", tuple(sorted(flags.items())),
                          tuple(sorted((k, _env_value(v)) for k, v in (env or {}).items())),
                          tuple(sorted((k, v) for k, v in (draft or {}).items() if v is not None)))


def differences(good: dict, refused: dict) -> tuple[list[Difference], list[str]]:
    """The refused release's single differences from the good one (both a Profile's model_dump(mode="json"), as each
    release keeps it in profile.json), and the names of what differs without changing the server. Raises
    BisectError when the two are releases of different services."""
    if (good.get("service") or {}).get("name") != (refused.get("service") or {}).get("name"):
        raise BisectError(f"the releases serve different services ({(good.get('service') or {}).get('name')} and "
                          f"{(refused.get('service') or {}).get('name')}): nothing to compare")
    out: list[Difference] = []
    ignored = [key for key in NOT_THE_SERVER if good.get(key) != refused.get(key)]
    ignored += [f"service.{k}" for k in sorted(set(good.get("service") or {}) | set(refused.get("service") or {}))
                if (good.get("service") or {}).get(k) != (refused.get("service") or {}).get(k)]
    if (good.get("model") or {}).get("served_name") != (refused.get("model") or {}).get("served_name"):
        ignored.append("model.served_name")

    for path, why in UNMEASURABLE.items():
        old, new = good, refused
        for key in path:
            old, new = (old or {}).get(key), (new or {}).get(key)
        if old != new:
            out.append(Difference(".".join(path), "install", ((".".join(path), old, new),), why_not=why))

    gm, rm = good.get("model") or {}, refused.get("model") or {}
    weights = [(f"model.{k}", gm.get(k), rm.get(k)) for k in WEIGHTS_KEYS if gm.get(k) != rm.get(k)]
    if weights:
        out.append(Difference("weights", "weights", tuple(weights), _candidate("weights", {}),
                              model=tuple((what.removeprefix("model."), new) for what, _, new in weights)))

    gf, rf = (good.get("sglang") or {}).get("flags") or {}, (refused.get("sglang") or {}).get("flags") or {}
    gf = {k: v for k, v in gf.items() if v is not False}
    rf = {k: v for k, v in rf.items() if v is not False}
    changed = sorted(k for k in set(gf) | set(rf) if gf.get(k) != rf.get(k))
    gd = (good.get("speculative") or {}).get("draft")
    rd = (refused.get("speculative") or {}).get("draft")
    taken: set = set()
    if "--speculative-algorithm" in changed or gd != rd:
        group = [k for k in changed if k == "--speculative-algorithm" or
                 (k in SPEC_COUNTS and "--speculative-algorithm" in changed)]
        changes = tuple((k, gf.get(k), rf.get(k)) for k in group)
        if gd != rd:
            changes += (("speculative.draft", (gd or {}).get("source"), (rd or {}).get("source")),)
        algorithm_off = "--speculative-algorithm" in group and rf.get("--speculative-algorithm") is None
        out.append(Difference("drafter" if not algorithm_off else "speculation off", "drafter", changes,
                              _candidate("drafter", {k: rf.get(k) for k in group}, draft=rd if gd != rd else None),
                              drop_draft=bool(gd) and not rd))
        taken |= set(group)
    for coupled in ((SPEC_COUNTS, "speculation"),) + tuple((c, " + ".join(c)) for c in COUPLED):
        group = [k for k in changed if k in coupled[0] and k not in taken]
        if group:
            out.append(Difference(coupled[1], "flags", tuple((k, gf.get(k), rf.get(k)) for k in group),
                                  _candidate(coupled[1], {k: rf.get(k) for k in group})))
            taken |= set(group)
    for flag in changed:
        if flag not in taken:
            out.append(Difference(flag, "flags", ((flag, gf.get(flag), rf.get(flag)),),
                                  _candidate(flag, {flag: rf.get(flag)})))

    ge, re_ = good.get("environment") or {}, refused.get("environment") or {}
    for name in sorted(set(ge) | set(re_)):
        old, new = ge.get(name), re_.get(name)
        if _value_of(old) != _value_of(new):
            out.append(Difference(name, "environment", ((name, old, new),), _candidate(name, {}, {name: new})))
        elif old != new:
            ignored.append(f"environment.{name} (its reason only)")
    return out, ignored


def profile_text(good_text: str, difference: Difference) -> str:
    """The good release's profile YAML with this one difference applied (its comments kept)."""
    text = tune_edit.apply_changes(good_text, difference.candidate)
    lines = text.splitlines()
    if difference.drop_draft and not difference.candidate.draft:
        found = tune_edit._block(lines, re.compile(r"^()speculative:\s*(#.*)?$"))
        if found:
            lines = lines[:found[0]] + lines[found[1]:]
    if difference.model:
        block = tune_edit._block(lines, re.compile(r"^()model:\s*(#.*)?$"))
        if not block:
            raise BisectError("the good release's profile has no top-level `model:` section")
        lines = tune_edit._set_entries(lines, block, dict(difference.model), tune_edit.yaml_scalar, {})
    return "\n".join(lines) + "\n"


# --- the verdict -----------------------------------------------------------------------------------

def change_pct(measured: tune.Measured | None, good: tune.Measured) -> float | None:
    if measured is None or not measured.measured or not good.median_decode:
        return None
    return (measured.median_decode / good.median_decode - 1) * 100


def costs(measured: tune.Measured | None, good: tune.Measured, objective: tune.Objective) -> bool:
    """Slower than the good release by more than the two measurements' noise (tune.gain_needed_pct)."""
    return bool(measured and measured.measured) and tune.clear_gain(good, measured, objective)


def verdict(good: tune.Measured, refused: tune.Measured, alone: list, objective: tune.Objective) -> dict:
    """`alone`: [(Difference, Measured or None)]. The differences that cost the speed alone, largest cost first, and
    the sentence that names them; whether the refused release's slowdown reproduced in this session."""
    if not good.measured:
        return {"reproduced": None, "culprits": [], "failing": [],
                "text": f"the good release could not be measured ({good.error or good.invalid_reason}): no verdict"}
    slowdown = change_pct(refused, good)
    reproduced = costs(refused, good, objective)
    culprits = sorted(((d, m) for d, m in alone if costs(m, good, objective)), key=lambda dm: change_pct(dm[1], good))
    failing = [(d, m) for d, m in alone if m is not None and not m.measured]
    named = [{"difference": d.name, "changes": d.text(), "decode": m.median_decode, "change_pct": change_pct(m, good)}
             for d, m in culprits]
    refused_text = (f"the refused release runs {refused.median_decode:.1f} tok/s against the good release's "
                    f"{good.median_decode:.1f} ({slowdown:+.1f} %)") if slowdown is not None else \
        f"the refused release could not be measured ({refused.error or refused.invalid_reason})"
    if culprits:
        d, m = culprits[0]
        text = (f"the change that costs the speed: {d.name} ({d.text()}): alone it runs {m.median_decode:.1f} tok/s "
                f"against {good.median_decode:.1f} ({change_pct(m, good):+.1f} %); {refused_text}")
        if len(culprits) > 1:
            text += "; also slower alone: " + ", ".join(f"{d.name} ({change_pct(m, good):+.1f} %)"
                                                        for d, m in culprits[1:])
    elif reproduced:
        unmeasured = [d.name for d, m in alone if m is None or not m.measured]
        text = (f"{refused_text}, but no single difference is slower alone by more than the noise: the cost comes "
                "from their combination" + (f" or from what was not measured alone ({', '.join(unmeasured)})"
                                            if unmeasured else ""))
    else:
        text = f"the slowdown did not reproduce in this session: {refused_text}, inside the noise; nothing to name"
    if failing:
        text += "; fails alone: " + ", ".join(f"{d.name} ({m.error or m.invalid_reason})" for d, m in failing)
    return {"reproduced": reproduced, "slowdown_pct": slowdown, "culprits": named,
            "failing": [d.name for d, _ in failing], "text": text}


def table(good: tune.Measured, refused: tune.Measured, alone: list, objective: tune.Objective) -> str:
    """One line per release and per difference: decode (median, spread), change against the good release, tau."""
    rows = [("release", "decode tok/s", "vs good", "tau", "")]

    def row(name, measured, note=""):
        if measured is None:
            return rows.append((name, "-", "-", "-", note))
        if not measured.measured:
            return rows.append((name, "-", "-", "-", (note + "; " if note else "") +
                                (measured.error or measured.invalid_reason or "not measured")))
        pct = change_pct(measured, good)
        rows.append((name, f"{measured.median_decode:.1f} ±{measured.noise() or 0:.1f}%",
                     "-" if measured is good else f"{pct:+.1f} %", f"{measured.tau:.2f}" if measured.tau else "-",
                     note or ("COSTS THE SPEED" if measured is not good and costs(measured, good, objective) else "")))

    row(f"good {good.release_id} (active)", good)
    row(f"refused {refused.release_id}", refused, "slower" if costs(refused, good, objective) else "")
    for difference, measured in alone:
        label = f"alone: {difference.text()}"
        if measured is None:
            row(label, None, difference.why_not or "not reached (budget)")
        else:
            row(label, measured)
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r[:4])) + ("  " + r[4] if r[4] else "")
                     for r in rows).rstrip()
