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
what cannot run beside the good release's install (another node count, other extras) is named, not measured.

Across SGLang releases (an upgrade: sglang.version differs), the version alone is the refused release; its other
kind of difference is a **changed resolved default between releases** (kind "default"): a field the profile does not
set whose value differs between the two releases' own resolutions (each release's resolved.json; without them, the
two option tables' defaults). Each is measured the other way round: the refused release (its version, its venv) with
that one default pinned back to the good release's value by the refused release's own flag (`--no-X: true` for a
tri-state switch); the default whose pin brings the speed back is the one that costs it. A value no flag of the
refused release writes (None) is named, not measured.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .validate import flag_table
from .validate.upgrade import SECRET_DESTS
from .tune import edit as tune_edit, search as tune

SPEC_COUNTS = tune.SPEC_COUNT_FLAGS
COUPLED = (("--max-running-requests", "--cuda-graph-max-bs-decode"),)
WEIGHTS_KEYS = ("path", "source", "manifest", "config", "architecture", "hybrid")
NOT_THE_SERVER = ("description", "gate", "watch", "tune", "waivers")
VERSION_ALONE = ("the version alone is the refused release (measured as it is); its changed defaults are pinned back "
                 "one at a time below")
UNMEASURABLE = {("sglang", "version"): VERSION_ALONE,
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
    kind: str  # flags | environment | drafter | weights | install | default (changed between releases)
    changes: tuple  # ((what, good's value, refused's value), ...), shown as `what: good -> refused`
    candidate: tune.Candidate | None = None  # the good release with this difference alone; None: not measurable
    model: tuple = ()  # weights: ((model key, refused's value), ...)
    drop_draft: bool = False  # the refused release has no speculative.draft where the good one has one
    why_not: str | None = None  # why it is not measured alone
    version: str | None = None  # kind default: the release the candidate runs (the refused one), pinned back

    @property
    def pinned(self) -> bool:
        """Measured as the refused release with this one default pinned back (not the good one with it alone)."""
        return self.kind == "default"

    def text(self) -> str:
        show = repr_value if self.kind == "default" else shown  # a resolved None is SGLang's own choice, not absent
        return ", ".join(f"{what}: {show(old)} -> {show(new)}" for what, old, new in self.changes)


def shown(value) -> str:
    if value is None:
        return "(absent)"
    if value is True:
        return "on"
    if isinstance(value, dict):
        return json.dumps(value.get("value", value)) if set(value) <= {"value", "reason"} else json.dumps(value,
                                                                                                          sort_keys=True)
    return str(value)


def repr_value(value) -> str:
    """A resolved value as SGLang's server_args print it (None, False, 16, 'triton')."""
    return repr(value)


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


@dataclass(frozen=True)
class DefaultChange:
    """A field whose resolved value differs between two releases, the profile not setting it."""
    dest: str
    old: object  # the good release's value
    new: object  # the refused release's value
    pin: tuple = ()  # ((flag, value),): the refused release's flags that set `old`; () when none can


def pin_flags(action: dict, value) -> tuple:
    """The flags of one option-table action that make its dest `value`, or () when none does."""
    if value is None or action.get("deprecated"):
        return ()
    options = action["options"]
    canonical = next((o for o in options if not o.startswith("--no-")), options[0])
    negation = next((o for o in options if o.startswith("--no-")), None)
    if action["kind"] in ("store_true", "store_false"):
        if not isinstance(value, bool):
            return ()
        sets = action["kind"] == "store_true"  # what the canonical spelling writes
        if value == sets:
            return ((canonical, True),)
        return ((negation, True),) if negation else ()
    if isinstance(value, bool) or isinstance(value, dict):
        return ()
    if action.get("choices") and not all(str(v) in action["choices"] for v in (value if isinstance(value, list)
                                                                                  else [value])):
        return ()
    return ((canonical, value),)


def changed_defaults(good_version: str, refused_version: str, good_resolved: dict | None = None,
                     refused_resolved: dict | None = None, set_dests: frozenset = frozenset()) -> list[DefaultChange]:
    """The fields whose value differs between the two releases (their resolutions when given, else their option
    tables' defaults), those the profile sets (set_dests) and the secrets left out; each with the refused release's
    flags that pin it back to the good release's value."""
    good_table = flag_table.load(good_version) or {"actions": []}
    refused_table = flag_table.load(refused_version) or {"actions": []}
    actions = {action["dest"]: action for action in refused_table["actions"]}
    if good_resolved is None or refused_resolved is None:
        good_resolved = {a["dest"]: a["default"] for a in good_table["actions"]}
        refused_resolved = {a["dest"]: a["default"] for a in refused_table["actions"]}
    out = []
    for dest in sorted(set(good_resolved) & set(refused_resolved) & set(actions)):
        old, new = good_resolved[dest], refused_resolved[dest]
        if old != new and dest not in set_dests and dest not in SECRET_DESTS:
            out.append(DefaultChange(dest, old, new, pin_flags(actions[dest], old)))
    return out


def flag_dests(flags: dict, version: str) -> frozenset:
    table = flag_table.load(version) or {"actions": []}
    options = {option: action["dest"] for action in table["actions"] for option in action["options"]}
    return frozenset(options[name] for name in flags if name in options)


def differences(good: dict, refused: dict, resolved: tuple[dict, dict] | None = None
                ) -> tuple[list[Difference], list[str]]:
    """The refused release's single differences from the good one (both a Profile's model_dump(mode="json"), as each
    release keeps it in profile.json), and the names of what differs without changing the server. Across SGLang
    releases, also each changed resolved default (`resolved`: the two releases' resolved arguments, good's first;
    without them the option tables' defaults). Raises BisectError when the two are releases of different
    services."""
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

    good_version = (good.get("sglang") or {}).get("version")
    refused_version = (refused.get("sglang") or {}).get("version")
    if good_version and refused_version and good_version != refused_version:
        # the refused release as it is (its version, its flag and environment differences), one default pinned back
        as_refused = {k: rf.get(k) for k in changed}
        env_refused = {name: re_.get(name) for name in sorted(set(ge) | set(re_))
                       if _value_of(ge.get(name)) != _value_of(re_.get(name))}
        set_dests = flag_dests((refused.get("sglang") or {}).get("flags") or {}, refused_version)
        for change in changed_defaults(good_version, refused_version, *(resolved or (None, None)),
                                       set_dests=set_dests):
            changes = ((change.dest, change.old, change.new),)
            if not change.pin:
                out.append(Difference(change.dest, "default", changes, version=refused_version,
                                      why_not=f"no flag of SGLang {refused_version} writes {change.old!r}"))
                continue
            out.append(Difference(change.dest, "default", changes,
                                  _candidate(f"pin {change.dest}", {**as_refused, **dict(change.pin)}, env_refused),
                                  version=refused_version))
    return out, ignored


def profile_text(good_text: str, difference: Difference) -> str:
    """The good release's profile YAML with this one difference applied (its comments kept); a pinned-back default
    runs on the refused release's SGLang version."""
    text = tune_edit.apply_changes(good_text, difference.candidate)
    lines = text.splitlines()
    if difference.version:
        block = tune_edit._block(lines, re.compile(r"^()sglang:\s*(#.*)?$"))
        if not block:
            raise BisectError("the good release's profile has no top-level `sglang:` section")
        lines = tune_edit._set_entries(lines, block, {"version": difference.version}, tune_edit.yaml_scalar, {})
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


def recovers(measured: tune.Measured | None, refused: tune.Measured, objective: tune.Objective) -> bool:
    """Faster than the refused release by more than the two measurements' noise."""
    return bool(measured and measured.measured and refused.measured) and tune.clear_gain(measured, refused, objective)


def verdict(good: tune.Measured, refused: tune.Measured, alone: list, objective: tune.Objective) -> dict:
    """`alone`: [(Difference, Measured or None)]. The differences that cost the speed alone, largest cost first, and
    the sentence that names them; whether the refused release's slowdown reproduced in this session."""
    if not good.measured:
        return {"reproduced": None, "culprits": [], "failing": [],
                "text": f"the good release could not be measured ({good.error or good.invalid_reason}): no verdict"}
    slowdown = change_pct(refused, good)
    reproduced = costs(refused, good, objective)
    pinned = [(d, m) for d, m in alone if d.pinned]
    alone = [(d, m) for d, m in alone if not d.pinned]
    # a changed default costs the speed where the refused release with it pinned back runs clearly faster than the
    # refused release as it is (largest recovery first)
    recovered = sorted(((d, m) for d, m in pinned if reproduced and recovers(m, refused, objective)),
                       key=lambda dm: -(dm[1].median_decode or 0))
    culprits = sorted(((d, m) for d, m in alone if costs(m, good, objective)), key=lambda dm: change_pct(dm[1], good))
    failing = [(d, m) for d, m in alone + pinned if m is not None and not m.measured]
    refused_text = (f"the refused release runs {refused.median_decode:.1f} tok/s against the good release's "
                    f"{good.median_decode:.1f} ({slowdown:+.1f} %)") if slowdown is not None else \
        f"the refused release could not be measured ({refused.error or refused.invalid_reason})"
    if recovered:
        d, m = recovered[0]
        named = [{"difference": d.name, "kind": d.kind, "changes": d.text(), "decode": m.median_decode,
                  "change_pct": change_pct(m, good), "recovered_pct": change_pct(m, refused)} for d, m in recovered]
        text = (f"the changed default that costs the speed: {d.name} ({d.text()}, SGLang's default changed between "
                f"the releases): pinned back it runs {m.median_decode:.1f} tok/s against the refused release's "
                f"{refused.median_decode:.1f} ({change_pct(m, refused):+.1f} %) and the good release's "
                f"{good.median_decode:.1f} ({change_pct(m, good):+.1f} %); {refused_text}")
        if len(recovered) > 1:
            text += "; also faster pinned back: " + ", ".join(f"{d.name} ({change_pct(m, refused):+.1f} %)"
                                                             for d, m in recovered[1:])
        if culprits:  # a flag or environment difference that costs speed alone on the good release, too
            text += "; also slower alone: " + ", ".join(f"{d.name} ({change_pct(m, good):+.1f} %)"
                                                        for d, m in culprits)
            named += [{"difference": d.name, "kind": d.kind, "changes": d.text(), "decode": m.median_decode,
                       "change_pct": change_pct(m, good)} for d, m in culprits]
        if failing:
            text += "; fails: " + ", ".join(f"{d.name} ({m.error or m.invalid_reason})" for d, m in failing)
        return {"reproduced": reproduced, "slowdown_pct": slowdown, "culprits": named,
                "failing": [d.name for d, _ in failing], "text": text}
    named = [{"difference": d.name, "kind": d.kind, "changes": d.text(), "decode": m.median_decode,
              "change_pct": change_pct(m, good)} for d, m in culprits]
    if culprits:
        d, m = culprits[0]
        text = (f"the change that costs the speed: {d.name} ({d.text()}): alone it runs {m.median_decode:.1f} tok/s "
                f"against {good.median_decode:.1f} ({change_pct(m, good):+.1f} %); {refused_text}")
        if len(culprits) > 1:
            text += "; also slower alone: " + ", ".join(f"{d.name} ({change_pct(m, good):+.1f} %)"
                                                        for d, m in culprits[1:])
    elif reproduced:
        unmeasured = [d.name for d, m in alone + pinned if m is None or not m.measured]
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
    recovering = [m for d, m in alone if d.pinned and m is not None and m.measured and costs(refused, good, objective)
                  and recovers(m, refused, objective)]
    best = max(recovering, key=lambda m: m.median_decode or 0) if recovering else None
    for difference, measured in alone:
        if difference.pinned:
            label = f"pinned back: {difference.name} {repr_value(difference.changes[0][2])} -> " \
                    f"{repr_value(difference.changes[0][1])}"
        else:
            label = f"alone: {difference.text()}"
        if measured is None:
            row(label, None, difference.why_not or "not reached (budget)")
        elif difference.pinned and measured.measured:
            row(label, measured, "RECOVERS THE SPEED: this changed default costs it"
                if measured is best else "-")  # the verdict's culprit: the largest recovery, not every one above noise
        else:
            row(label, measured)
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r[:4])) + ("  " + r[4] if r[4] else "")
                     for r in rows).rstrip()
