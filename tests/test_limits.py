"""Limits that cannot be switched off silently and paths on allow-lists (security review 3, and review 2's cases
it found still accepted): gate thresholds and YAML number forms, manifests and model.config, exact pin names, host
data paths, the sandbox's privilege directives and the watch's directory. One row per hostile case."""

from __future__ import annotations

import json

import pytest

from conftest import PROFILES, PROVEN, proven_with
from sglang_deploy.profile import load_profile
from sglang_deploy.validate.check import check_profile

VERSION = "0.5.23"


def light(path):
    return check_profile(load_profile(path), gpus=2, topology="pcie", path="light")


def problems_of(report, rule):
    return [p for p in report.problems if p.rule == rule]


# --- thresholds that cannot be switched off silently (security review 3, class f) -----------------------------

SCHEMA_CASES = [
    # (id, old text of the proven profile, new, the field (or "invalid YAML") and line the error names, message)
    ("gate-regression-sexagesimal", "  max_regression_pct: 10", "  max_regression_pct: 1:30", "invalid YAML",
     "max_regression_pct:", "1:30 is a YAML 1.1 number form (1:30 reads as 90, base 60"),
    ("gate-samples-octal", "  samples: 8 ", "  samples: 010 ", "invalid YAML", "samples:", "017 as 15, octal"),
    ("gate-regression-hex", "  max_regression_pct: 10", "  max_regression_pct: 0x20", "invalid YAML",
     "max_regression_pct:", "accepted: the number in plain decimal"),
    ("gate-regression-bypassed", "  max_regression_pct: 10", "  max_regression_pct: 99.99",
     "gate.max_regression_pct", "max_regression_pct:", "less than or equal to 50"),
    ("gate-accept-floor-one", "  min_accept_length: 2.8", "  min_accept_length: 1", "gate.min_accept_length",
     "min_accept_length:", "can never fail"),
    ("gate-decode-floor-denormal", "  min_decode_tok_s: 45", "  min_decode_tok_s: 4.9e-324", "gate.min_decode_tok_s",
     "min_decode_tok_s:", "greater than or equal to 1"),
    ("watch-drift-floor-one", "\ngate:", "\nwatch:\n  drift_min_accept_length: 1.0\ngate:",
     "watch.drift_min_accept_length", "drift_min_accept_length:", "can never fail"),
    ("waiver-reason-trailing-backslash", "\ngate:", '\nwaivers:\n  mem-fraction-range: "tested \\\\"\ngate:',
     "waivers.mem-fraction-range", "mem-fraction-range:", "ends with a backslash"),
    ("waiver-reason-over-64-kib", "\ngate:", '\nwaivers:\n  mem-fraction-range: "' + "a" * 70000 + '"\ngate:',
     "waivers.mem-fraction-range", "mem-fraction-range:", "accepted: at most 65536 bytes"),
    ("yaml-inline-merge-key", "  port: 30000", "  <<: {port: 30001}\n  port: 30000", "invalid YAML", "<<:",
     "a YAML merge key (<<) is not accepted"),
    ("yaml-binary-tag", "  served_name: qwen3.6-27b", "  served_name: !!binary cXdlbg==", "model.served_name",
     "served_name:", "Input should be a valid string"),
    ("flag-value-next-line-char", "--context-length: 65536", '--chat-template: "chatml\\u0085"',
     "sglang.flags.--chat-template", "--chat-template", "control character U+0085"),
    ("flag-value-over-64-kib", "--context-length: 65536", '--chat-template: "' + "t" * 70000 + '"',
     "sglang.flags.--chat-template", "--chat-template", "at most 65536 bytes"),
]


@pytest.mark.parametrize("case, old, new, field, at, message", SCHEMA_CASES, ids=[c[0] for c in SCHEMA_CASES])
def test_a_threshold_or_unit_value_that_would_switch_a_check_off_is_refused(tmp_path, case, old, new, field, at,
                                                                              message):
    from sglang_deploy.profile import ProfileError

    path = proven_with(tmp_path, old, new)
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if at in text)
    assert any(p.startswith(f"{path}:{line}: {field}: ") and message in p for p in raised.value.problems), \
        [p[:300] for p in raised.value.problems]


CHECK_CASES = [
    # (id, old, new, rule, field)
    ("gate-accept-floor-removed", "  min_accept_length: 2.8", "  min_accept_length: null", "gate-floors-required",
     ("gate", "min_accept_length")),
    ("gate-decode-floor-removed", "  min_decode_tok_s: 45", "  min_decode_tok_s: null", "gate-floors-required",
     ("gate", "min_decode_tok_s")),
    ("flag-mem-fraction-string", "    --mem-fraction-static: 0.88", '    --mem-fraction-static: "0.99"',
     "flag-value-kind", ("sglang", "flags", "--mem-fraction-static")),
    ("flag-mem-fraction-nan-string", "    --mem-fraction-static: 0.88", '    --mem-fraction-static: "NaN"',
     "flag-value-kind", ("sglang", "flags", "--mem-fraction-static")),
    ("flag-running-requests-inf-string", "    --max-running-requests: 16", '    --max-running-requests: "inf"',
     "flag-value-kind", ("sglang", "flags", "--max-running-requests")),
    ("flag-graph-sizes-as-strings", "  flags:\n", '  flags:\n    --cuda-graph-bs-decode: ["1", "2"]\n',
     "flag-value-kind", ("sglang", "flags", "--cuda-graph-bs-decode")),
]


@pytest.mark.parametrize("case, old, new, rule, field", CHECK_CASES, ids=[c[0] for c in CHECK_CASES])
def test_a_threshold_the_rules_read_is_a_number_and_present(tmp_path, case, old, new, rule, field):
    report = light(proven_with(tmp_path, old, new))
    assert field in [p.field for p in problems_of(report, rule)], report.lines()


def test_the_speculation_floors_are_not_waivable(tmp_path):
    path = proven_with(tmp_path, "  min_decode_tok_s: 45", "  min_decode_tok_s: null")
    path.write_text(path.read_text() + '\nwaivers:\n  gate-floors-required: "no floor needed"\n')
    report = light(path)
    assert problems_of(report, "gate-floors-required") and any("cannot be waived" in p.message for p in report.problems)


# --- manifests and model.config (security review 3, findings 7 and 8) ------------------------------------

def managed(tmp_path, monkeypatch, files: dict[str, bytes], config: bytes | None = None):
    """The proven profile on a file:// source under a weights directory named by the controller's environment,
    frozen by a manifest of `files`, with model.config the given bytes (default: the manifest's config.json)."""
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE, manifest_from_directory, write_manifest

    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path))
    snapshot = tmp_path / "qwen"
    snapshot.mkdir()
    for name, data in files.items():
        (snapshot / name).write_bytes(data)
    manifest = tmp_path / "qwen.manifest.json"
    write_manifest(manifest_from_directory(snapshot), manifest)
    (tmp_path / "config.json").write_bytes(config if config is not None else files["config.json"])
    text = PROVEN.read_text().replace("  path: /srv/models/Qwen3.6-27B-FP8\n",
                                      f"  source: file://{snapshot}\n  manifest: {manifest}\n")
    text = text.replace("config: manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json",
                        f"config: {tmp_path / 'config.json'}")
    path = tmp_path / "managed.yaml"
    path.write_text(text)
    return path


CONFIG = (PROFILES.parent / "manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json").read_bytes()


def test_a_managed_snapshot_with_its_own_config_passes(tmp_path, monkeypatch):
    report = light(managed(tmp_path, monkeypatch, {"config.json": CONFIG}))
    assert not [p for p in report.problems if p.field[0] == "model"], report.lines()


def test_a_manifest_that_lists_a_diffusion_model_index_is_refused(tmp_path, monkeypatch):
    from sglang_deploy.profile import ProfileError

    files = {"config.json": CONFIG, "model_index.json": b'{"_diffusers_version": "0.35.0"}'}
    path = managed(tmp_path, monkeypatch, files)
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    assert any(p.startswith(f"{path}:") and "model_index.json makes `sglang serve` start its diffusion server" in p
               for p in raised.value.problems), raised.value.problems


def test_a_model_config_other_than_the_manifests_is_refused(tmp_path, monkeypatch):
    other = json.loads(CONFIG)
    other["num_hidden_layers"] = 2
    report = light(managed(tmp_path, monkeypatch, {"config.json": CONFIG}, json.dumps(other).encode()))
    [problem] = problems_of(report, "model-config-pinned")
    assert problem.field == ("model", "config") and "is not the config.json the manifest pins" in problem.message


@pytest.mark.parametrize("case, value, message", [
    ("outside-the-repository", "/etc/ssl/x.json", "is not under the repository's manifests/ or a weights directory"),
    ("dotdot", "manifests/../../etc/x.json", "a relative config must be under the repository's manifests/"),
    ("fifo", "FIFO", "is not a regular file of at most 1 MiB"),
    ("huge", "HUGE", "is not a regular file of at most 1 MiB"),
])
def test_model_config_follows_the_manifest_path_rules(tmp_path, monkeypatch, case, value, message):
    import os

    from sglang_deploy.profile import ProfileError
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path / "weights"))
    (tmp_path / "weights").mkdir()
    if value == "FIFO":
        value = str(tmp_path / "weights" / "config.json")
        os.mkfifo(value)
    elif value == "HUGE":
        value = str(tmp_path / "weights" / "config.json")
        with open(value, "wb") as out:
            out.truncate(2 << 20)
    path = proven_with(tmp_path, "config: manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json",
                       f"config: {value}")
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    assert any("model.config: " in p and message in p for p in raised.value.problems), raised.value.problems


# --- pins: exact names as published (security review 3, finding 3) --------------------------------------

def test_the_pin_family_names_the_cuda_stack_sglang_installs():
    """Every CUDA/torch/kernel package in the validator env's SGLang 0.5.23 install is a name a pin may use."""
    import re

    from packaging.utils import canonicalize_name

    from sglang_deploy.validate import validator_env
    from sglang_deploy.rules import PIN_FAMILY

    sites = list(validator_env.env_dir(VERSION).glob("lib/python3*/site-packages"))
    names = {canonicalize_name(p.name.split("-")[0]) for site in sites for p in site.glob("*.dist-info")}
    stack = {n for n in names if re.match(r"(nvidia|cuda|torch|triton|flashinfer|sgl)", n) and n != "sglang"}
    assert stack and stack <= PIN_FAMILY, sorted(stack - PIN_FAMILY)


# --- host data: controller files only where the operator keeps them (security review 3, section 2) ---------------

HOST_DATA_CASES = [
    # (key, value, part of the refusal)
    ("api_key_file", "/root/.vault-token", "outside the repository's secrets/"),
    ("api_key_file", "secrets/../inventory/ct129.py", "no '..' accepted"),
    ("cuda_repo_key_url", "/root/.ssh/id_ed25519", "outside the repository's secrets/"),
    ("cuda_repo_key_url", "file:///root/.ssh/id_ed25519", "outside the repository's secrets/"),
    ("wheelhouse", "/root/.ssh", "outside the repository's secrets/"),
    ("hub_wheelhouse", "/root/.ssh", "outside the repository's secrets/"),
    ("hub_python", "/tmp/py", "must be python3, /usr/bin/python3 or the hub client's python"),
    ("hub_python", "/opt/sglang-deploy/venvs/sglang-0.5.23-0123456789/bin/python",
     "a release venv's wheels would run as root"),
    ("verify_python", "/tmp/py", "must be python3, /usr/bin/python3 or a venv's python"),
    ("verify_python", "/opt/sglang-deploy/venvs/../../../tmp/py", "must be python3, /usr/bin/python3"),
    ("profile", "/tmp/x.yaml", "outside the repository's profiles/"),
    ("profile", "profiles/../../tmp/x.yaml", "no '..' accepted"),
]


@pytest.mark.parametrize("key, value, message", HOST_DATA_CASES, ids=[f"{k}={v}" for k, v, _ in HOST_DATA_CASES])
def test_host_data_names_controller_files_only_where_the_operator_keeps_them(monkeypatch, key, value, message):
    import sys

    from sglang_deploy.plan import PlanError, host_settings

    monkeypatch.delenv("SGLANG_DEPLOY_DATA_DIRS", raising=False)
    monkeypatch.delenv("SGLANG_DEPLOY_PROFILE_DIRS", raising=False)
    monkeypatch.setattr(sys, "argv", ["pyinfra", "inventory/sim.py", "deploy.py", "--data", f"{key}={value}"])
    with pytest.raises(PlanError) as raised:
        host_settings({key: value})
    assert f"--data: {key}: " in str(raised.value) and message in str(raised.value), str(raised.value)


def test_fleet_summary_is_written_only_under_results():
    from sglang_deploy.settings import ReleasesArgs, SettingsError

    with pytest.raises(SettingsError, match="outside the repository's results/"):
        ReleasesArgs.of({"fleet_summary": "/root/.bashrc"})
    assert ReleasesArgs.of({"fleet_summary": "results/fleet.json"}).fleet_summary == "results/fleet.json"


ACCEPTED_HOST_DATA = [("api_key_file", "secrets/ct129.api_key"), ("cuda_repo_key_url", "https://mirror.example/k.pub"),
                      ("verify_python", "/opt/sglang-deploy/venvs/sglang-0.5.23-0123456789/bin/python"),
                      ("hub_python", "/opt/sglang-deploy/hub-client/bin/python"), ("verify_python", "/usr/bin/python3"),
                      ("profile", "profiles/qwen3.6-27b-mtp-2xa6000.yaml")]


@pytest.mark.parametrize("key, value", ACCEPTED_HOST_DATA, ids=[f"{k}={v}" for k, v in ACCEPTED_HOST_DATA])
def test_host_data_the_operator_keeps_in_place_is_accepted(monkeypatch, key, value):
    from sglang_deploy.plan import host_settings

    monkeypatch.delenv("SGLANG_DEPLOY_DATA_DIRS", raising=False)
    assert getattr(host_settings({key: value}), key) == value


def test_a_directory_the_controllers_environment_names_is_accepted(tmp_path, monkeypatch):
    from sglang_deploy.plan import host_settings

    monkeypatch.setenv("SGLANG_DEPLOY_DATA_DIRS", f"/nonexistent:{tmp_path}")
    assert host_settings({"api_key_file": str(tmp_path / "key")}).api_key_file == str(tmp_path / "key")
    (tmp_path / "link").symlink_to("/root")
    with pytest.raises(Exception, match="outside the repository's secrets/"):  # a symlink out of it is not inside
        host_settings({"api_key_file": str(tmp_path / "link" / ".vault-token")})


# --- the sandbox and the watch's directory (security review 2's four cases still accepted at review 3) -------------

SANDBOX_CASES = [
    # (id, old, new, rule, field, waivable)
    ("relax-capability-bounding-set", "  host: 127.0.0.1", "  host: 127.0.0.1\n  relax: [CapabilityBoundingSet]",
     "relax-privileges", ("service", "relax", 0), True),
    ("relax-no-new-privileges", "  host: 127.0.0.1", "  host: 127.0.0.1\n  relax: [ProtectHome, NoNewPrivileges]",
     "relax-privileges", ("service", "relax", 1), True),
    ("relax-protect-system", "  host: 127.0.0.1", "  host: 127.0.0.1\n  relax: [ProtectSystem]",
     "relax-privileges", ("service", "relax", 0), True),
    ("watch-textfile-dir-service-writable", "\ngate:", "\nwatch:\n  textfile_dir: /var/lib/sglang/metrics\ngate:",
     "watch-textfile-dir", ("watch", "textfile_dir"), False),
    ("watch-textfile-dir-system", "\ngate:", "\nwatch:\n  textfile_dir: /run/systemd/system\ngate:",
     "watch-textfile-dir", ("watch", "textfile_dir"), False),
]


@pytest.mark.parametrize("case, old, new, rule, field, waivable", SANDBOX_CASES, ids=[c[0] for c in SANDBOX_CASES])
def test_sandbox_relaxations_and_the_watch_directory_are_allow_listed(tmp_path, case, old, new, rule, field, waivable):
    path = proven_with(tmp_path, old, new)
    assert field in [p.field for p in problems_of(light(path), rule)], light(path).lines()
    path.write_text(path.read_text() + f'\nwaivers:\n  {rule}: "a reviewed exception"\n')
    assert (not problems_of(light(path), rule)) == waivable


def test_what_a_container_needs_relaxed_passes_without_a_waiver(tmp_path):
    path = proven_with(tmp_path, "  user: sglang\n",
                       "  user: sglang\n  relax: [ProtectKernelTunables, ProtectControlGroups, ProtectHome]\n")
    assert not problems_of(light(path), "relax-privileges")


# --- the tune's guards and candidates (security review 3, section 2: tune_min_aggregate=0 tune_noise_pct=100 ...) -----

TUNE_CASES = [
    # (key, value, part of the refusal)
    ("tune_min_aggregate", "0", "must be between 0.5 and 1"),
    ("tune_min_aggregate", "0.1", "must be between 0.5 and 1"),
    ("tune_noise_pct", "100", "must be between 0.1 and 25"),
    ("tune_min_gain_pct", "0", "must be between 0.5 and 50"),
    ("tune_min_gain_pct", "-5", "must be between 0.5 and 50"),
    ("tune_attention", "flashinfer,evil_backend", "'evil_backend' is not an --attention-backend choice"),
    ("tune_attention", "fa3;id", "is not an --attention-backend choice of SGLang's parser"),
]


@pytest.mark.parametrize("key, value, message", TUNE_CASES, ids=[f"{k}={v}" for k, v, _ in TUNE_CASES])
def test_a_tune_guard_cannot_be_switched_off_and_its_backends_are_sglangs(key, value, message):
    from sglang_deploy.settings import SettingsError, TuneArgs

    with pytest.raises(SettingsError) as raised:
        TuneArgs.of({key: value})
    assert key in str(raised.value) and message in str(raised.value), str(raised.value)


def test_the_tune_defaults_and_sglangs_backends_are_accepted():
    from sglang_deploy.settings import TuneArgs

    tune = TuneArgs.of({"tune_attention": "flashinfer, fa3,triton", "tune_min_aggregate": "0.7"})
    assert (tune.attention, tune.min_aggregate, tune.noise_pct, tune.min_gain_pct) == ("flashinfer, fa3,triton", 0.7,
                                                                                       5.0, 2.0)
