"""Allow-lists instead of deny-lists (security review 3): every SGLang dest classified for the pinned version, the
profile's environment by name and value. One row per hostile case of the review, one assertion each; the light
path (SGLang's exported option table) unless the case needs SGLang's resolution."""

from __future__ import annotations

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

TABLE_VERSIONS = sorted(p.name.removeprefix("sglang-").removesuffix(".json") for p in flag_table.TABLE_DIR.glob("*.json")
                        if not p.name.endswith(".classes.json"))


@pytest.mark.parametrize("version", TABLE_VERSIONS)
def test_every_dest_of_the_option_table_has_exactly_one_reviewed_class(version):
    """Every exported table (a new SGLang release's too) comes with its reviewed classes, dest for dest."""
    table = {action["dest"] for action in flag_table.load(version)["actions"]}
    classes = flag_classes.load(version)
    assert set(classes) == table, (sorted(table - set(classes)), sorted(set(classes) - table))
    assert {kind for kind, _ in classes.values()} <= set(flag_classes.CLASSES)
    assert all(why for kind, why in classes.values() if kind != "allowed")  # every refusal says what the dest does


def test_the_tool_owned_class_is_what_the_tool_sets():
    from sglang_deploy.validate.flag_checks import DERIVED_DESTS, SECRET_DESTS

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
    from sglang_deploy.validate.rule_checks import resolved_class_problems

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
    ours += (repo / "sglang_deploy/hostside/preflight/allreduce.py").read_text()  # the stand-in's all-reduce
    named = set(re.findall(r"SGLANG_SIM_[A-Z0-9_]+", ours))
    assert set(env_rules.SIMULATOR_ENV) - {"SGLANG_SIM_NOTE"} <= named
    sglang = validator_env.env_dir(VERSION).glob("lib/python3*/site-packages/sglang")
    text = "".join(p.read_text(errors="replace") for root in sglang for p in root.rglob("*.py"))
    assert text and not [name for name in env_rules.SIMULATOR_ENV if name in text]
