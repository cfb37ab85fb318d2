"""Validation layer a: each flag of the profile against SGLang's own parser (its option table): names and value
kinds, one spelling per SGLang field, no flag the tool sets itself, the tool's own values intact on the command line,
and flags that run code or serve unverified weights."""

from __future__ import annotations

import contextlib
import difflib
import io
import os
from dataclasses import dataclass

from .. import releases
from ..drafter import draft_path
from ..flags import systemd_quote
from ..profile import Profile
from ..profile.problem import Problem, flag_field, remove_or_waive
from ..render import MAX_UNIT_LINE_BYTES
from ..rules import CODE_FLAGS, LOAD_FORMAT_DESTS, VERIFIED_FORMATS, WEIGHTS_PATH_DESTS
from . import flag_classes, flag_table


def parser_problems(profile: Profile, spec: tuple[dict, ...], probe: dict) -> list[Problem]:
    """Layer a: names, value kinds and the real parser's verdict."""
    problems: list[Problem] = []
    options = {opt: action for action in spec for opt in action["options"]}
    for name, value in profile.sglang.flags.items():
        if name in options:
            action = options[name]
            switch = action["kind"] in ("store_true", "store_false")
            if switch and not isinstance(value, bool):
                problems.append(Problem("flag-value-kind", flag_field(name),
                                        f"{name} is a switch: write `{name}: true` (or false to omit it), not {value!r}"))
            elif not switch and isinstance(value, bool):
                accepted = f"one of {', '.join(action['choices'])}" if action["choices"] else "a value"
                problems.append(Problem("flag-value-kind", flag_field(name),
                                        f"{name} takes {accepted}, not a bare true/false"))
            continue
        prefixed = sorted(opt for opt in options if opt.startswith(name))
        renamed = releases.renamed_flags(profile.sglang.version)
        if name in renamed:
            message = f"{name} is not accepted by SGLang {profile.sglang.version}; use {renamed[name]}"
        elif len(prefixed) == 1:
            message = f"{name} is an abbreviation; write the full name {prefixed[0]}"
        elif prefixed:
            message = f"{name} is ambiguous in SGLang {profile.sglang.version}: it could be {', '.join(prefixed)}"
        else:
            close = difflib.get_close_matches(name, options, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            message = f"{name} is not a flag of SGLang {profile.sglang.version}{hint}"
        problems.append(Problem("full-flag-names" if len(prefixed) == 1 else "sglang-parser", flag_field(name), message))
    if not problems and not probe["results"][0]["ok"]:
        problems.append(Problem("sglang-parser", ("sglang", "flags"),
                                f"SGLang {profile.sglang.version}'s parser rejects the command line: {probe['results'][0]['error']}"))
    return problems


def spelled_in_full(profile: Profile, spec: tuple[dict, ...]) -> tuple[Profile, dict]:
    """The profile as SGLang's parser reads it: a flag written as an argparse abbreviation (a unique prefix, which
    SGLang's parser accepts: --tp for --tp-size) under its full name, so that the rules read the value SGLang
    does; and {full name: the name written} to point each problem at the line the profile has. parser_problems
    names the abbreviation itself (full-flag-names), once."""
    options = {opt for action in spec for opt in action["options"]}
    flags, written = {}, {}
    for name, value in profile.sglang.flags.items():
        prefixed = [opt for opt in options if opt.startswith(name)] if name not in options else []
        full = prefixed[0] if len(prefixed) == 1 and prefixed[0] not in profile.sglang.flags else name
        flags[full] = value
        if full != name:
            written[full] = name
    if not written:
        return profile, {}
    return profile.model_copy(update={"sglang": profile.sglang.model_copy(update={"flags": flags})}), written


def as_written(problem: Problem, written: dict) -> Problem:
    """A problem found on spelled_in_full's profile, pointed at the flag as the profile writes it."""
    field = problem.field
    if len(field) == 3 and field[:2] == ("sglang", "flags") and field[2] in written:
        return Problem(problem.rule, flag_field(written[field[2]]), problem.message)
    return problem


# SGLang's fields the tool sets itself (the unit's argv, the secrets file); no spelling of them in sglang.flags.
DERIVED_DESTS = {
    "model_path": "model.path (or model.source)", "served_model_name": "model.served_name", "host": "service.host",
    "port": "service.port", "api_key": "the host's API key secret, through --config", "config": "the secrets file",
    "nnodes": "nodes", "node_rank": "the host's place in the inventory group `nodes`",
    "dist_init_addr": "multinode.dist_init_port and the rank 0 host's address",
    "speculative_draft_model_path": "speculative.draft.source (the verified draft snapshot)",
    "speculative_draft_model_revision": "speculative.draft.source (its manifest pins every file)",
}
NUMERIC_TYPES = ("int", "float")
# Secrets SGLang takes as flags: on the command line they are world-readable in /proc, and a profile is reviewed in
# the open. The API key goes through the secrets file (--config); these have no place in a profile at all.
SECRET_DESTS = {"admin_api_key": "an admin API key", "ssl_keyfile_password": "the TLS key file's password"}


def _is_number(value: str) -> bool:
    try:
        float(value)
        return value.strip() == value and value.isascii()
    except ValueError:
        return False


def _number_text(item) -> bool:
    """A string SGLang's int()/float() would take as a number ('0.99', ' 2', 'NaN', 'inf'); other strings get the
    parser's own verdict."""
    try:
        float(item) if isinstance(item, str) else None
    except ValueError:
        return False
    return isinstance(item, str)


def flag_identity_problems(profile: Profile, spec: tuple[dict, ...]) -> list[Problem]:
    """Each flag by SGLang's own dest: no second spelling of one dest, no spelling of a dest the tool sets, no
    alias the rules would not read, and no value that is itself an option (argparse would take `--host` inside a
    list as the next flag)."""
    options = {opt: action for action in spec for opt in action["options"]}
    seen: dict[str, str] = {}
    problems = []
    for name, value in profile.sglang.flags.items():
        action = options.get(name)
        if action is None:
            continue  # parser_problems names it
        dest, canonical = action["dest"], action["options"][0]
        if dest in SECRET_DESTS:
            problems.append(Problem("no-secret-in-profile", flag_field(name),
                                    f"{name} is {SECRET_DESTS[dest]}, a secret: a profile is reviewed in the open and "
                                    "SGLang's command line is world-readable in /proc; remove it (the tool passes "
                                    "only the API key, through the root-owned secrets file)"))
            continue
        if dest in DERIVED_DESTS:
            problems.append(Problem("tool-derived-flag", flag_field(name),
                                    f"{name} is SGLang's {dest}, which the tool sets from {DERIVED_DESTS[dest]}; "
                                    "remove it from sglang.flags"))
            continue
        if dest in seen:
            problems.append(Problem("one-spelling-per-flag", flag_field(name),
                                    f"{seen[dest]} and {name} both set SGLang's {dest} (the last one wins in SGLang, "
                                    f"the rules read {canonical}); keep one: {canonical}"))
            continue
        seen[dest] = name
        negation = name.startswith("--no-") and action["kind"] in ("store_true", "store_false")
        if name != canonical and not negation:
            problems.append(Problem("canonical-flag-name", flag_field(name),
                                    f"{name} is another spelling of {canonical} (SGLang's {dest}); write {canonical}, "
                                    "the spelling the tool's rules read"))
        numeric = action.get("type") in NUMERIC_TYPES
        text = [item for item in (value if isinstance(value, list) else [value]) if _number_text(item)]
        if numeric and text:
            problems.append(Problem("flag-value-kind", flag_field(name),
                                    f"{name} is a number (SGLang's {action['type']}), given as the string "
                                    f"{text[0]!r}: the tool's rules read numbers, and SGLang's {action['type']}() "
                                    "would also take 'nan' or 'inf'; accepted: a plain YAML number"))
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item.startswith("-") and not (numeric and _is_number(item)):
                problems.append(Problem("no-option-as-value", flag_field(name),
                                        f"the value {item!r} of {name} starts with '-': SGLang's parser would read it "
                                        "as an option; accepted: a value that does not start with '-' (a negative "
                                        "number only for a numeric flag)"))
    return problems


def code_and_weights_problems(profile: Profile, spec: tuple[dict, ...]) -> list[Problem]:
    """Each flag by the reviewed class of its SGLang dest (validate/flag_classes.py; every spelling counts): only `allowed`
    passes as it is; `exposure`, `code` and `other-weights` need a waiver with a reason, which the unit and the
    release listing then show; a dest nobody classified for this SGLang version is refused (not waivable)."""
    options = {opt: action for action in spec for opt in action["options"]}
    classes = flag_classes.load(profile.sglang.version)
    snapshot = profile.model.path if profile.model.source else None  # verified on the host before any switch
    problems = []
    for name, value in profile.sglang.flags.items():
        dest = (options.get(name) or {}).get("dest")
        if value is False or value is None or dest is None:
            continue
        kind, why = classes.get(dest, (None, ""))
        if kind is None:
            problems.append(Problem("flag-reviewed", flag_field(name),
                                    f"{name} (SGLang's {dest}) is not reviewed for SGLang {profile.sglang.version}: "
                                    f"{flag_classes.not_reviewed_reason(profile.sglang.version, dest)}, so nobody has "
                                    "read what it opens, loads or serves; accepted: the flags of class `allowed` "
                                    "there (classify a new dest after reading SGLang's source), or another "
                                    "sglang.version"))
        elif kind == "tool-owned":
            continue  # flag_identity_problems names it
        elif (problem := flag_classes.value_problem(profile.sglang.version, dest, value)) is not None:
            problems.append(Problem("flag-value-range", flag_field(name), f"{name} {problem}"))
        elif dest == "speculative_token_map":
            continue  # token_map.problems: a file of a verified snapshot that its manifest lists, else refused
        elif dest in CODE_FLAGS:
            if not (dest == "trust_remote_code" and snapshot):
                problems.append(Problem("flag-runs-code", flag_field(name),
                                        f"{name} {CODE_FLAGS[dest]}; " + remove_or_waive("flag-runs-code")))
        elif dest in LOAD_FORMAT_DESTS:
            if value not in VERIFIED_FORMATS:
                problems.append(Problem("flag-serves-other-weights", flag_field(name),
                                        f"{name} {value} does not read the verified snapshot's files as they are "
                                        f"(random weights, another server's, another format); accepted: "
                                        f"{', '.join(VERIFIED_FORMATS)}; " + remove_or_waive("flag-serves-other-weights")))
        elif dest in WEIGHTS_PATH_DESTS:
            for item in value if isinstance(value, list) else [value]:
                text = str(item)
                if WEIGHTS_PATH_DESTS[dest] and "/" not in text:
                    continue  # a built-in template's name
                inside = snapshot and os.path.isabs(text) and ".." not in text.split("/") \
                    and os.path.commonpath([text, snapshot]) == snapshot
                if not inside:
                    where = f"the verified snapshot {snapshot}" if snapshot else "a verified snapshot (model.source)"
                    problems.append(Problem("flag-serves-other-weights", flag_field(name),
                                            f"{name} {text} is outside {where}: the server would read what nobody "
                                            "verified (any local user writes /dev/shm, /tmp); accepted: a path inside "
                                            "it; " + remove_or_waive("flag-serves-other-weights")))
                    break
        elif kind in flag_classes.CLASS_RULES:
            rule = flag_classes.CLASS_RULES[kind]
            problems.append(Problem(rule, flag_field(name),
                                    f"{name} is of class `{kind}` for SGLang {profile.sglang.version}: it {why}; "
                                    + remove_or_waive(rule)))
    return problems


def derived_values_problems(profile: Profile, argv: list[str], table: dict | None, port: int | None,
                            node=None) -> list[Problem]:
    """Backstop: the rendered argv, parsed by the table of SGLang's own parser (flag_table.load of the profile's
    version), gives the tool's own values for the fields the tool sets (whatever the profile's flags do to the
    parse)."""
    if table is None:
        return []
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            parsed = vars(flag_table.build_parser(table).parse_args(argv))
    except flag_table.ParseFailure:
        return []  # the parser's verdict is reported by parser_problems

    wanted = {"model_path": profile.model.path, "served_model_name": profile.model.served_name,
              "host": profile.service.host, "port": int(port or profile.service.port), "api_key": None, "config": None,
              "speculative_draft_model_path": draft_path(profile), "speculative_draft_model_revision": None}
    if node is not None:
        wanted.update(nnodes=node.nnodes, node_rank=node.rank, dist_init_addr=node.dist_init_addr)
    else:
        wanted.update(nnodes=1, node_rank=0, dist_init_addr=None)
    wrong = {dest: parsed.get(dest) for dest, value in wanted.items() if dest in parsed and parsed.get(dest) != value}
    if not wrong:
        return []
    return [Problem("tool-flags-intact", ("sglang", "flags"),
                    "the command line would not carry the tool's own values: SGLang's parser reads "
                    + ", ".join(f"{dest}={value!r} (the tool sets {wanted[dest]!r})" for dest, value in wrong.items())
                    + "; a value in sglang.flags is taken for an option")]


def unit_line_problems(profile: Profile, argv: list[str]) -> list[Problem]:
    """The command line as the unit's ExecStart= carries it (render.MAX_UNIT_LINE_BYTES, systemd's own quoting): one
    logical line that systemd must load. Each string is capped at 64 KiB (profile/yaml_lines.py), but twenty of
    them made a line of 1.2 MB that systemd 252 refuses to load ("No buffer space available", review 4): the
    deploy would install a unit systemd cannot start. Named: the flag with the longest value."""

    size = len(" ".join(systemd_quote(arg) for arg in argv).encode())
    if size <= MAX_UNIT_LINE_BYTES:
        return []
    longest = max(profile.sglang.flags, key=lambda name: len(str(profile.sglang.flags[name]).encode()), default=None)
    field = flag_field(longest) if longest else ("sglang", "flags")
    return [Problem("unit-line-length", field,
                    f"the unit's command line would be {size} bytes (this flag's value is the longest); accepted: at "
                    f"most {MAX_UNIT_LINE_BYTES} bytes in all (systemd loads no unit with a longer line)")]


@dataclass
class ParserFindings:
    """Layer a, as check_profile reads it: SGLang's parser on the flags (`identity`: one spelling per dest, none the
    tool sets; `layer`: those and the parser's verdict), the profile as that parser reads it (`read`, with `written`
    pointing back at the profile's spelling), and the tool's checks that read the parser's option table (`rules`:
    the reviewed classes and the unit's line; `derived`: the tool's own values intact, run only while `identity`
    found nothing)."""
    identity: list[Problem]
    layer: list[Problem]
    read: Profile
    written: dict
    rules: list[Problem]
    derived: list[Problem]


def findings(profile: Profile, argv: list[str], probe: dict, table: dict | None, port: int | None,
             node=None) -> ParserFindings:
    """check_profile's parser stage: `probe` is SGLang's answer (its option table, the parse), `table` the exported
    option table of the profile's version (None where the checkout has none)."""
    spec = tuple(probe["actions"])
    identity = flag_identity_problems(profile, spec)
    layer = identity + parser_problems(profile, spec, probe)
    # The rules read the flags as SGLang's parser does (an abbreviation under its full name), so that a flag written
    # short gets one message (full-flag-names), not a second one about a value the rule did not see.
    read, written = spelled_in_full(profile, spec)
    rules = code_and_weights_problems(read, spec) + unit_line_problems(profile, argv)
    derived = [] if identity else derived_values_problems(profile, argv, table, port, node)
    return ParserFindings(identity, layer, read, written, rules, derived)
