"""Security review 4 (docs/refusals.md): its classes, each closed as a class and tested by more than the review's
own instances. Light path (SGLang's exported option table, the tool's rules) unless a case needs more.

- class 1, allowed dests that open, expose, distort or exhaust: reclassified by effect in the classes file (names)
  and by value (`values`: a limit turned off, a finite stand-in for never, one tokenizer worker);
- class 2, values that mean nothing: waiver reasons of real words, time spans and floors that can trigger, one unit
  line systemd loads, service names of units the tool writes itself, one service user per service;
- defaults that are safe: no outbound media fetch unless the profile names domains;
- the route table SGLang's own code declares, each route public (reviewed), admin or authenticated.
"""

from __future__ import annotations

import json

import pytest

from conftest import PROVEN, proven_with, write_profile
from sglang_deploy import safety
from sglang_deploy.validate import flag_classes, routes
from sglang_deploy.profile import ProfileError, load_profile
from sglang_deploy.validate.check import check_profile

VERSION = "0.5.23"


def light(path):
    return check_profile(load_profile(path), gpus=2, topology="pcie", path="light")


def with_flag(tmp_path, line: str, name="variant.yaml"):
    return proven_with(tmp_path, "  flags:\n", f"  flags:\n    {line}\n", name)


def refusals(report, field):
    return [p for p in report.problems if p.field == field]


# --- class 1: by effect, names --------------------------------------------------------------------------------

# (the review's case, or one of the same class it did not list; the flag line; the rule; part of the message)
RECLASSIFIED = [
    ("flag-root-path-health", "--fastapi-root-path: /health", "flag-exposes-service", "keyless prefixes"),
    ("root-path-any-value", "--fastapi-root-path: /api", "flag-exposes-service", "authentication off"),
    ("flag-response-store-unbounded", "--enable-response-store: true", "flag-exposes-service", "no TTL"),
    ("flag-metric-labels-from-clients", "--tokenizer-metrics-allowed-custom-labels: [tenant]", "flag-exposes-service",
     "which takes no key"),
    ("metric-label-header", "--tokenizer-metrics-custom-labels-header: x-tenant", "flag-exposes-service",
     "metric labels"),
    ("flag-priority-label-cardinality", "--enable-priority-scheduling: true", "flag-exposes-service", "str(priority)"),
    ("flag-preferred-sampling-regex", "--preferred-sampling-params: '{\"regex\": \"(ab)+\"}'",
     "flag-serves-other-weights", "the gate's own bench"),
    ("preferred-sampling-temperature", "--preferred-sampling-params: '{\"temperature\": 0}'",
     "flag-serves-other-weights", "the gate's own bench"),
    ("flag-cache-report-prefix-oracle", "--enable-cache-report: true", "flag-exposes-service", "oracle"),
    ("flag-hidden-states-to-clients", "--enable-return-hidden-states: true", "flag-exposes-service", "hidden states"),
]


@pytest.mark.parametrize("case, line, rule, message", RECLASSIFIED, ids=[c[0] for c in RECLASSIFIED])
def test_an_allowed_looking_flag_is_judged_by_what_sglang_does_with_it(tmp_path, case, line, rule, message):
    flag = line.split(":")[0]
    found = [p for p in refusals(light(with_flag(tmp_path, line)), ("sglang", "flags", flag)) if p.rule == rule]
    assert len(found) == 1 and message in found[0].message, light(with_flag(tmp_path, line)).lines()


# --- class 1: by value ------------------------------------------------------------------------------------------

BY_VALUE = [
    # the shared-memory pickle of multi-tokenizer mode (A1), and its sibling
    ("flag-tokenizer-workers-shm-pickle", "--tokenizer-worker-num: 2", "multi_tokenizer_args"),
    ("tokenizer-workers-many", "--tokenizer-worker-num: 64", "multi_tokenizer_args"),
    ("detokenizer-workers", "--detokenizer-worker-num: 2", "named shared memory"),
    # limits whose 0 or -1 means none
    ("flag-media-download-unlimited", "--media-url-max-file-size-mb: 0", "byte cap"),
    ("media-download-huge", "--media-url-max-file-size-mb: 1000000", "byte cap"),
    ("expert-recorder-infinite", "--expert-distribution-recorder-buffer-size: -1", "infinite"),
    ("queue-cap-zero", "--max-queued-requests: 0", "no cap"),
    ("asr-buffer-off", "--asr-max-buffer-seconds: 100000", "OOM"),
    # finite stand-ins for the refused infinities, on any numeric flag
    ("flag-watchdog-finite-huge", "--watchdog-timeout: 1.0e+300", "finite stand-in"),
    ("soft-watchdog-huge", "--soft-watchdog-timeout: 1.0e+300", "finite stand-in"),
    ("any-number-huge", "--gc-warning-threshold-secs: 1.0e+30", "finite stand-in"),
    ("watchdog-ten-days", "--watchdog-timeout: 864000", "never fires"),
    # logging that prints client data
    ("flag-debug-log-outputs", "--log-level: debug", "model output"),
    ("http-debug-log", "--log-level-http: debug", "request details"),
]


@pytest.mark.parametrize("case, line, message", BY_VALUE, ids=[c[0] for c in BY_VALUE])
def test_a_value_that_turns_a_limit_off_or_never_fires_is_refused_naming_the_flag(tmp_path, case, line, message):
    flag = line.split(":")[0]
    report = light(with_flag(tmp_path, line))
    found = [p for p in refusals(report, ("sglang", "flags", flag)) if p.rule == "flag-value-range"]
    assert len(found) == 1 and message in found[0].message and "accepted:" in found[0].message, report.lines()
    # not waivable: the value means something else than the flag's name says
    path = with_flag(tmp_path, line, "waived.yaml")
    path.write_text(path.read_text() + '\nwaivers:\n  flag-exposes-service: "reviewed for the lab host"\n')
    assert [p for p in light(path).problems if p.rule == "flag-value-range"]


@pytest.mark.parametrize("line", ["--tokenizer-worker-num: 1", "--media-url-max-file-size-mb: 64",
                                  "--watchdog-timeout: 600", "--log-level: warning", "--max-queued-requests: 256"])
def test_the_same_flags_within_their_range_pass(tmp_path, line):
    report = light(with_flag(tmp_path, line))
    assert not [p for p in report.problems if p.field == ("sglang", "flags", line.split(":")[0])], report.lines()


def test_every_value_bound_names_an_allowed_dest_of_the_option_table():
    from sglang_deploy.validate import flag_table

    dests = {action["dest"] for action in flag_table.load(VERSION)["actions"]}
    classes = flag_classes.load(VERSION)
    for dest, bound in flag_classes.load_values(VERSION).items():
        assert dest in dests and classes[dest][0] == "allowed", dest
        assert bound["why"] and ("choices" in bound or "min" in bound or "max" in bound), dest


# --- defaults that are safe: outbound media -----------------------------------------------------------------

def test_no_outbound_media_fetch_unless_the_profile_names_domains(tmp_path):
    from sglang_deploy.flags import server_args

    argv = server_args(load_profile(PROVEN))
    at = argv.index("--allowed-media-domains")
    assert argv[at + 1] == "invalid"  # RFC 6761: never resolves, so SGLang fetches nothing
    path = with_flag(tmp_path, "--allowed-media-domains: [images.example.org]")
    named = server_args(load_profile(path))
    assert named.count("--allowed-media-domains") == 1 and "invalid" not in named
    found = [p for p in light(path).problems if p.field == ("sglang", "flags", "--allowed-media-domains")]
    assert len(found) == 1 and found[0].rule == "flag-exposes-service"


def test_the_tools_own_media_list_is_not_a_resolved_exposure():
    from sglang_deploy.validate import flag_table
    from sglang_deploy.validate.rule_checks import resolved_class_problems

    # SGLang's resolution of the proven command line carries the tool's `invalid`; it is the tool's, not the profile's
    resolved, profile = {"allowed_media_domains": ["invalid"]}, load_profile(PROVEN)
    assert resolved_class_problems(profile, resolved, flag_table.load(profile.sglang.version)) == []


# --- class 2: values that mean nothing ------------------------------------------------------------------------

@pytest.mark.parametrize("reason", ["", " ", "\u200b\u200b", "x", "ok ok", "yes", "........", "1234567890 12",
                                    "a b c d e f g"])
def test_a_waiver_reason_must_say_something(tmp_path, reason):
    path = with_flag(tmp_path, "--log-requests: true")
    path.write_text(path.read_text() + f"\nwaivers:\n  flag-exposes-service: {json.dumps(reason)}\n")
    with pytest.raises(ProfileError, match="waivers.flag-exposes-service|control character"):
        load_profile(path)


def test_an_environment_settings_reason_must_say_something_too(tmp_path):
    path = proven_with(tmp_path, "environment:\n", 'environment:\n  NCCL_DEBUG: {value: INFO, reason: "-"}\n')
    with pytest.raises(ProfileError, match="says nothing"):
        load_profile(path)


def test_a_reason_of_real_words_passes(tmp_path):
    assert safety.reason_problem("reviewed for the lab host, issue 38") is None
    assert safety.reason_problem("bisecting a graph capture bug") is None


@pytest.mark.parametrize("old, new, message", [
    ("watch:\n", "watch:\n  randomized_delay: 3650d\n", "at most 24h"),       # the review's case
    ("watch:\n", "watch:\n  randomized_delay: 2d\n", "at most 24h"),
    ("watch:\n", "watch:\n  interval: 30min\n  randomized_delay: 6h\n", "longer than watch.interval"),
    ("watch:\n", "watch:\n  interval: 999999d\n", "never runs"),
    ("  min_accept_length: 2.8", "  min_accept_length: 1.001", "guards nothing"),  # the review's case
    ("  min_accept_length: 2.8", "  min_accept_length: 1.15", "guards nothing"),
])
def test_time_spans_and_floors_are_bounded_to_values_that_can_trigger(tmp_path, old, new, message):
    text = PROVEN.read_text()
    if old == "watch:\n" and "\nwatch:\n" not in text:
        text += "\nwatch:\n"
    path = write_profile(tmp_path, text.replace(old, new, 1), "variant.yaml")
    with pytest.raises(ProfileError, match=message):
        load_profile(path)


def test_a_command_line_systemd_cannot_load_is_refused_naming_the_flag(tmp_path):
    # twenty strings each under the 64 KiB cap, 1.2 MB in all (the review's case)
    values = json.dumps(["/x" + "a" * 60000] * 20)
    path = with_flag(tmp_path, f"--uvicorn-access-log-exclude-prefixes: {values}")
    found = [p for p in light(path).problems if p.rule == "unit-line-length"]
    assert len(found) == 1 and found[0].field == ("sglang", "flags", "--uvicorn-access-log-exclude-prefixes")
    assert "accepted: at most 131072 bytes" in found[0].message


def test_the_rendered_unit_refuses_a_line_over_the_cap_as_a_backstop():
    from sglang_deploy.render import MAX_UNIT_LINE_BYTES, RenderError, check_unit_structure

    unit = "[Unit]\nDescription=" + "a" * (MAX_UNIT_LINE_BYTES + 1) + "\n[Service]\n[Install]\n"
    with pytest.raises(RenderError, match="at most 131072 bytes"):
        check_unit_structure(unit, None)


def test_service_names_of_units_the_tool_writes_are_refused_as_derived_from_the_code():
    from sglang_deploy.render import watch_paths
    from sglang_deploy.router import ROUTER_SERVICE

    fixed, suffixes = safety.tool_unit_names()
    assert suffixes == {"-watch", "-recover"} and ROUTER_SERVICE in fixed
    for name in ("sglang-watch", "sglang-b-watch", "sglang-recover", ROUTER_SERVICE, "sglang-deploy-nvidia-nodes"):
        problem = safety.service_name_problem(name)
        assert problem and "the tool writes" in problem, name
    # the watch's unit files of every accepted name are not another accepted service's unit
    assert safety.service_name_problem("sglang") is None
    assert watch_paths("sglang")[0].endswith("/sglang-watch.service")


def test_one_service_user_per_service():
    passwd = "sglang:x:998:998:sglang-deploy service user:/var/lib/sglang:/usr/sbin/nologin"
    assert safety.account_problem("sglang", "sglang", passwd) is None
    problem = safety.account_problem("sglang", "sglang-b", passwd)
    assert problem and "another service" in problem and "/var/lib/sglang" in problem


# --- the route table, from SGLang's own code --------------------------------------------------------------------

def test_the_route_table_is_the_releases_own():
    """The committed table is what sglang_deploy/validate/routes.py exports from the validator env's SGLang (its route
    decorators and @auth_level); each registered route is public (reviewed), admin or authenticated by SGLang's own
    decide_request_auth with the tool's two keys."""
    import subprocess
    import sys

    from sglang_deploy.validate import validator_env

    site = validator_env.env_dir(VERSION) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
        "site-packages"
    if not (site / routes.ENTRYPOINT).exists():
        site = next(validator_env.env_dir(VERSION).glob("lib/python3*/site-packages"))
    assert routes.export(site)["routes"] == routes.load(VERSION)
    # SGLang's own decision function, in the validator env's python
    program = ("import json, sys; sys.path.insert(0, sys.argv[1]); from sglang_deploy.validate import routes; "
               "from sglang.srt.utils.auth import AuthLevel, decide_request_auth; "
               "print(json.dumps(routes.classify(routes.registered(routes.load(sys.argv[2])), decide_request_auth, "
               "AuthLevel)))")
    python = validator_env.env_dir(VERSION) / "bin" / "python"
    from conftest import REPO

    answer = subprocess.run([str(python), "-I", "-c", program, str(REPO), VERSION], capture_output=True, text=True,
                            env=validator_env.scrubbed_environment())
    assert answer.returncode == 0, answer.stderr[-2000:]
    kinds = json.loads(answer.stdout)
    assert set(kinds["public"]) <= set(routes.REVIEWED_PUBLIC), kinds["public"]
    assert {"/update_weights_from_disk", "/configure_logging", "/pause_generation", "/start_profile",
            "/slow_down", "/abort_request", "/set_internal_state"} <= set(kinds["admin"])
    assert "/generate" in kinds["authenticated"] and "/server_info" in kinds["authenticated"]
    print({kind: len(paths) for kind, paths in kinds.items()})


# --- the admin key --------------------------------------------------------------------------------------------

def test_the_admin_key_lands_only_in_the_secrets_file_and_not_without_an_api_key():
    from sglang_deploy.render import mask_secrets, render, secrets_digest

    profile = load_profile(PROVEN)
    rendered = render(profile, api_key="sk-api-key-0123456789", admin_key="admin-key-of-the-tool-0123456789")
    assert 'admin-api-key: "admin-key-of-the-tool-0123456789"' in rendered.secrets
    assert "admin-key-of-the-tool" not in rendered.unit + rendered.env + " ".join(rendered.exec_start)
    assert "admin-key-of-the-tool" not in mask_secrets(rendered.secrets)  # what a diff or log shows
    other = render(profile, api_key="sk-api-key-0123456789", admin_key="another-admin-key-9876543210")
    assert secrets_digest(other.secrets) == secrets_digest(rendered.secrets) and other.secrets != rendered.secrets
    assert "admin-api-key" not in render(profile, api_key=None, admin_key="x" * 40).secrets  # auth: none


def test_each_plan_generates_an_admin_key_of_its_own(monkeypatch):
    """A fresh key from the system's CSPRNG in each plan; the host keeps the one it has while the rest of the file is
    the same (render.secrets_digest, roles/secrets.py), so a second deploy changes nothing."""
    from sglang_deploy.plan import plan_for_host
    from sglang_deploy.render import secrets_digest

    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "sk-review4-api-key-0123456789")
    first, second = (plan_for_host({"profile": str(PROVEN), "gpus": 2}).rendered.secrets for _ in range(2))
    keys = [json.loads(line.split(": ", 1)[1]) for text in (first, second) for line in text.splitlines()
            if line.startswith("admin-api-key: ")]
    assert len(keys) == 2 and keys[0] != keys[1] and min(map(len, keys)) >= 40
    assert secrets_digest(first) == secrets_digest(second)


@pytest.mark.parametrize("variables", [{"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "COLL"}, {"NCCL_DEBUG": "TRACE"}])
def test_a_verbose_nccl_log_needs_a_reason(tmp_path, variables):
    # env-nccl-collective-log-flood: a log line per collective drowns the server's own lines in the journal
    lines = "".join(f'  {key}: "{value}"\n' for key, value in variables.items())
    path = proven_with(tmp_path, "environment:\n", "environment:\n" + lines)
    found = {p.field[1] for p in light(path).problems if p.rule == "nccl-debug-knob-needs-reason"}
    assert found == set(variables), light(path).lines()
    quiet = proven_with(tmp_path, "environment:\n", 'environment:\n  NCCL_DEBUG: "WARN"\n', "quiet.yaml")
    assert not [p for p in light(quiet).problems if p.rule == "nccl-debug-knob-needs-reason"]


def test_a_token_map_of_a_gibibyte_is_refused_naming_the_field(tmp_path, monkeypatch):
    # token-map-a-gibibyte (class 3): its sha256 right, pushed and hashed by root before every switch
    import hashlib

    from sglang_deploy.token_map import part as token_map_part
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path))
    big = tmp_path / "qwen-huge.pt"
    with open(big, "wb") as handle:
        handle.truncate(1 << 30)  # sparse: nothing written
    digest = hashlib.sha256(b"not read: refused by its size first").hexdigest()
    path = write_profile(tmp_path, PROVEN.read_text() + f"speculative:\n  token_map:\n    file: {big}\n"
                                                        f"    sha256: \"{digest}\"\n", "huge.yaml")
    found = token_map_part.problems(load_profile(path))
    assert [(p.rule, p.field) for p in found] == [("token-map-part", ("speculative", "token_map", "file"))]
    assert "accepted: at most 16777216 bytes" in found[0].message
