"""Allow-lists instead of deny-lists (security review 3): every SGLang dest classified for the pinned version, the
profile's environment by name and value. One row per hostile case of the review, one assertion each; the light
path (SGLang's exported option table) unless the case needs SGLang's resolution."""

from __future__ import annotations

import json

import pytest

from conftest import DFLASH, PROFILES, PROVEN, dflash_profile, proven_with, synthetic_draft
from sglang_deploy import flag_classes, flag_table
from sglang_deploy.profile import load_profile
from sglang_deploy.validate import check_profile

VERSION = "0.5.23"


def light(path):
    return check_profile(load_profile(path), gpus=2, topology="pcie", path="light")


def with_variable(tmp_path, variable: str, value: str):
    """The proven profile with one variable set (in place of the profile's own, where it has it)."""
    text = PROVEN.read_text()
    own = [line for line in text.splitlines() if line.startswith(f"  {variable}:")]
    old = own[0] if own else "environment:"
    return proven_with(tmp_path, old, f'  {variable}: "{value}"' if own else f'environment:\n  {variable}: "{value}"')


def env_problems(path, variable):
    """The environment rules' problems for one variable (the NCCL knobs' reason rule aside)."""
    return [p for p in light(path).problems if p.field == ("environment", variable) and p.rule.startswith("env-")]


def problems_of(report, rule):
    return [p for p in report.problems if p.rule == rule]


# --- the dest table -------------------------------------------------------------------------------

def test_every_dest_of_the_option_table_has_exactly_one_reviewed_class():
    table = {action["dest"] for action in flag_table.load(VERSION)["actions"]}
    classes = flag_classes.load(VERSION)
    assert set(classes) == table, (sorted(table - set(classes)), sorted(set(classes) - table))
    assert {kind for kind, _ in classes.values()} <= set(flag_classes.CLASSES)
    assert all(why for kind, why in classes.values() if kind != "allowed")  # every refusal says what the dest does


def test_the_tool_owned_class_is_what_the_tool_sets():
    from sglang_deploy.validate_flags import DERIVED_DESTS, SECRET_DESTS

    owned = {dest for dest, (kind, _) in flag_classes.load(VERSION).items() if kind == "tool-owned"}
    assert owned == set(DERIVED_DESTS) | set(SECRET_DESTS)


def test_a_dest_nobody_classified_is_refused_as_not_reviewed(tmp_path, monkeypatch):
    classes = dict(flag_classes.load(VERSION))
    del classes["max_running_requests"]  # as if a new release had added it
    monkeypatch.setattr(flag_classes, "load", lambda version: classes)
    [problem] = problems_of(light(PROVEN), "flag-reviewed")
    assert problem.field == ("sglang", "flags", "--max-running-requests")
    assert "is not reviewed for SGLang 0.5.23" in problem.message


def test_a_version_without_a_reviewed_table_allows_no_flag(tmp_path, monkeypatch):
    monkeypatch.setattr(flag_classes, "load", lambda version: {})
    flagged = {p.field[-1] for p in problems_of(light(PROVEN), "flag-reviewed")}
    assert flagged == set(load_profile(PROVEN).sglang.flags)


# --- flags by class (security review 3, section 1) ---------------------------------------------------

FORWARD_HOOKS = '\'[{"name": "h", "target_modules": ["model"], "hook_factory": "builtins:exec", "config": "x"}]\''
FLAG_CASES = [
    # (id, flags, the flag refused, rule, part of the message)
    ("flag-grpc-port-unauthenticated", "--grpc-port: 50051", "--grpc-port", "flag-exposes-service",
     "starts SGLang's native gRPC server beside HTTP, with no API key"),
    ("flag-kv-events-every-interface", "--kv-events-config: '{\"publisher\": \"zmq\"}'", "--kv-events-config",
     "flag-exposes-service", "token ids"),
    ("flag-forward-hooks-exec", f"--forward-hooks: {FORWARD_HOOKS}", "--forward-hooks", "flag-runs-code",
     "builtins:exec"),
    ("flag-sidecar-module", "--sidecar: timeit", "--sidecar", "flag-runs-code", "imports a module"),
    ("flag-sidecar-args", "--sidecar-args: '[\"-s\", \"import os\"]'", "--sidecar-args", "flag-runs-code", "timeit"),
    ("flag-otlp-endpoint", "--otlp-traces-endpoint: collector.example:4317", "--otlp-traces-endpoint",
     "flag-exposes-service", "traces are sent"),
    ("flag-tool-server", "--tool-server: http://tools.example", "--tool-server", "flag-exposes-service", "connects out"),
    ("flag-bootstrap-port", "--disaggregation-bootstrap-port: 9000", "--disaggregation-bootstrap-port",
     "flag-exposes-service", "bootstrap"),
    ("flag-load-publish-endpoint", "--load-publish-endpoint: tcp://0.0.0.0:5558", "--load-publish-endpoint",
     "flag-exposes-service", "ZMQ"),
    ("flag-hicache-dynamic-backend", "--hicache-storage-backend-extra-config: '{\"module_path\": \"x\"}'",
     "--hicache-storage-backend-extra-config", "flag-runs-code", "module path"),
    ("flag-model-loader-extra-config", "--model-loader-extra-config: '{\"x\": 1}'", "--model-loader-extra-config",
     "flag-runs-code", "loader"),
    ("flag-lmcache-config", "--lmcache-config-file: /dev/shm/lm.yaml", "--lmcache-config-file", "flag-runs-code",
     "LMCache"),
    ("flag-accept-threshold", "--speculative-accept-threshold-single: 0.0", "--speculative-accept-threshold-single",
     "flag-serves-other-weights", "did not verify"),
    ("flag-json-model-override", "--json-model-override-args: '{\"architectures\": [\"X\"]}'",
     "--json-model-override-args", "flag-serves-other-weights", "config.json"),
    ("flag-lora-at-runtime", "--enable-lora: true", "--enable-lora", "flag-serves-other-weights", "LoRA"),
    ("flag-load-format-gguf", "--load-format: gguf", "--load-format", "flag-serves-other-weights",
     "accepted: auto, safetensors"),
]


@pytest.mark.parametrize("case, flags, flag, rule, message", FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_a_flag_that_is_not_allowed_is_refused_naming_it_and_can_be_waived(tmp_path, case, flags, flag, rule, message):
    path = proven_with(tmp_path, "  flags:\n", f"  flags:\n    {flags}\n")
    found = [p for p in problems_of(light(path), rule) if p.field == ("sglang", "flags", flag)]
    assert len(found) == 1 and message in found[0].message and "waive the rule" in found[0].message, light(path).lines()
    path.write_text(path.read_text() + f'\nwaivers:\n  {rule}: "reviewed for the lab host, issue 38"\n')
    assert not problems_of(light(path), rule)


def test_an_abbreviation_of_an_exposure_flag_is_refused_by_its_full_name(tmp_path):
    path = proven_with(tmp_path, "  flags:\n", "  flags:\n    --grpc-p: 50051\n")
    assert any("write the full name --grpc-port" in p.message for p in problems_of(light(path), "full-flag-names"))


# --- the resolved configuration (SGLang's own resolution, the full path) ------------------------------

@pytest.fixture(scope="module")
def proven_resolution():
    return check_profile(load_profile(PROVEN), gpus=2, topology="pcie", path="full").resolution["resolved"]


@pytest.mark.parametrize("dest, value, rule", [("grpc_port", 50051, "flag-exposes-service"),
                                               ("kv_events_config", '{"publisher": "zmq"}', "flag-exposes-service"),
                                               ("forward_hooks", [{"hook_factory": "builtins:exec"}], "flag-runs-code")])
def test_a_resolved_exposure_or_code_field_not_set_by_the_flags_is_refused(tmp_path, proven_resolution, dest, value,
                                                                           rule):
    """What SGLang resolves for the proven command line, with one field as the environment would set it (e.g.
    SGLANG_GRPC_PORT): the rule reads the resolution, not the argv."""
    from sglang_deploy.validate_rules import resolved_class_problems

    profile = load_profile(proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_GRPC_PORT: "50051"\n'))
    assert resolved_class_problems(profile, proven_resolution) == []
    [problem] = resolved_class_problems(profile, {**proven_resolution, dest: value})
    assert problem.rule == rule and f"resolves {dest} to {value!r}" in problem.message
    assert problem.field == (("environment", "SGLANG_GRPC_PORT") if dest == "grpc_port" else ("environment",))


@pytest.mark.parametrize("name", sorted(p.name for p in PROFILES.glob("*.yaml") if "dflash" not in p.name))
def test_the_committed_profiles_pass_the_full_check(name):
    report = check_profile(load_profile(PROFILES / name), gpus=2, topology="pcie", path="full")
    assert report.ok, report.lines()


def test_the_dflash_profile_with_its_drafter_frozen_passes_the_full_check(tmp_path, monkeypatch):
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

    draft = synthetic_draft(tmp_path / "drafters" / "qwen3.6-27b-dflash")
    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path))  # the draft and its manifest, as the operator sets it
    report = check_profile(load_profile(dflash_profile(tmp_path, draft)), gpus=2, topology="pcie", path="full")
    assert report.ok and DFLASH.exists(), report.lines()


# --- the environment: names on an allow-list, each with its values (security review 3 and review 2) -------------

ENV_CASES = [
    # (id, variable, value, rule, part of the message)
    ("env-grpc-port", "SGLANG_GRPC_PORT", "50051", "env-not-reviewed", "not a variable the tool has reviewed"),
    ("env-nccl-conf-file", "NCCL_CONF_FILE", "/dev/shm/nccl.conf", "env-loads-code", "load code or a config"),
    ("env-triton-kernel-override", "TRITON_KERNEL_OVERRIDE", "1", "env-loads-code", "load code"),
    ("env-triton-override-dir", "TRITON_OVERRIDE_DIR", "/dev/shm/triton-override", "env-loads-code", "load code"),
    ("env-sglang-model-package", "SGLANG_EXTERNAL_MODEL_PACKAGE", "sglang_site_models", "env-loads-code", "by name"),
    ("env-jit-cache-shared", "SGLANG_JIT_CACHE_DIR", "/dev/shm/jit", "env-loads-code", "load code"),
    ("env-deepgemm-cache-shared", "SGLANG_DG_CACHE_DIR", "/dev/shm/dg", "env-loads-code", "load code"),
    ("env-kernel-cache-shared", "PYTORCH_KERNEL_CACHE_PATH", "/dev/shm/k", "env-loads-code", "load code"),
    ("env-hf-modules-shared", "HF_MODULES_CACHE", "/dev/shm/hf", "env-loads-code", "load code"),
    ("env-simulated-acceptance", "SGLANG_SIMULATE_ACC_LEN", "3.5", "env-fakes-measurement", "made-up acceptance"),
    ("env-simulated-token-mode", "SGLANG_SIMULATE_ACC_TOKEN_MODE", "real-draft-token", "env-fakes-measurement",
     "simulate speculative acceptance"),
    ("env-nccl-debug-file", "NCCL_DEBUG_FILE", "/tmp/nccl.%h", "env-not-reviewed", "waive the rule"),
    ("env-cuda-cache-shared", "CUDA_CACHE_PATH", "/dev/shm/nv", "env-value",  # review 2: accepted until now
     "outside the service's own directories and the weights root"),
    ("env-cuda-cache-dotdot", "CUDA_CACHE_PATH", "/var/cache/sglang/../../tmp", "env-value", "not a normalized"),
    ("env-p2p-level-garbage", "NCCL_P2P_LEVEL", "everything", "env-value", "accepted: LOC, NVL"),
    ("env-cumem-not-a-switch", "NCCL_CUMEM_ENABLE", "yes", "env-value", "accepted: 0, 1"),
    ("env-proto-shell", "NCCL_PROTO", "Simple;id", "env-value", "accepted: LL, LL128, Simple"),
    ("env-omp-threads-huge", "OMP_NUM_THREADS", "99999", "env-value", "an integer from 1 to 1024"),
    ("env-tool-owned-home", "HF_HOME", "/dev/shm/hf", "env-tool-owned", "set by the tool"),
]


@pytest.mark.parametrize("case, variable, value, rule, message", ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_a_variable_off_the_allow_list_or_with_a_value_it_does_not_accept_is_refused(tmp_path, case, variable, value,
                                                                                       rule, message):
    found = env_problems(with_variable(tmp_path, variable, value), variable)
    assert [p.rule for p in found] == [rule] and message in found[0].message, found


@pytest.mark.parametrize("rule, variable, value, waivable", [
    ("env-not-reviewed", "SGLANG_GRPC_PORT", "50051", True), ("env-loads-code", "NCCL_CONF_FILE", "/etc/nccl.conf", True),
    ("env-fakes-measurement", "SGLANG_SIMULATE_ACC_LEN", "3.5", False), ("env-value", "CUDA_CACHE_PATH", "/tmp/x", False)])
def test_which_environment_rules_a_reason_can_waive(tmp_path, rule, variable, value, waivable):
    path = proven_with(tmp_path, "environment:\n", f'environment:\n  {variable}: "{value}"\n')
    path.write_text(path.read_text() + f'\nwaivers:\n  {rule}: "the site needs it, reviewed in issue 38"\n')
    rules = {p.rule for p in light(path).problems}
    assert (rule in rules) == (not waivable), light(path).lines()


ACCEPTED_ENV = [("NCCL_CUMEM_ENABLE", "0"), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("CUDA_CACHE_PATH", "/var/cache/sglang/nv"),
                ("NCCL_PROTO", "^LL128"), ("NCCL_ALGO", "Ring,Tree"), ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
                ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "1"), ("TORCH_CUDA_ARCH_LIST", "8.6"), ("SGLANG_SIM_P2P", "0"),
                ("SGLANG_SIM_NOTE", "after dflash"), ("CUDA_VISIBLE_DEVICES", "0,1")]


@pytest.mark.parametrize("variable, value", ACCEPTED_ENV, ids=[v for v, _ in ACCEPTED_ENV])
def test_the_variables_the_tool_understands_pass_without_a_waiver(tmp_path, variable, value):
    assert env_problems(with_variable(tmp_path, variable, value), variable) == []


def test_the_simulators_variables_are_read_by_the_simulator_and_not_by_sglang():
    import pathlib
    import re

    from sglang_deploy import env_rules, validator_env

    repo = pathlib.Path(__file__).resolve().parent.parent
    ours = "".join(p.read_text() for d in ("sglang_deploy/sim", "testbed") for p in (repo / d).rglob("*.py"))
    named = set(re.findall(r"SGLANG_SIM_[A-Z0-9_]+", ours))
    assert set(env_rules.SIMULATOR_ENV) - {"SGLANG_SIM_NOTE"} <= named
    sglang = validator_env.env_dir(VERSION).glob("lib/python3*/site-packages/sglang")
    text = "".join(p.read_text(errors="replace") for root in sglang for p in root.rglob("*.py"))
    assert text and not [name for name in env_rules.SIMULATOR_ENV if name in text]


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

    from sglang_deploy import validator_env
    from sglang_deploy.rules import PIN_FAMILY

    sites = list(validator_env.env_dir(VERSION).glob("lib/python3*/site-packages"))
    names = {canonicalize_name(p.name.split("-")[0]) for site in sites for p in site.glob("*.dist-info")}
    stack = {n for n in names if re.match(r"(nvidia|cuda|torch|triton|flashinfer|sgl)", n) and n != "sglang"}
    assert stack and stack <= PIN_FAMILY, sorted(stack - PIN_FAMILY)
