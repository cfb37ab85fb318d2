"""Allow-lists instead of deny-lists (security review 3): every SGLang dest classified for the pinned version, the
profile's environment by name and value. One row per hostile case of the review, one assertion each; the light
path (SGLang's exported option table) unless the case needs SGLang's resolution."""

from __future__ import annotations

import json
import re

import pytest

from conftest import DFLASH, PROFILES, PROVEN, dflash_profile, proven_with, synthetic_draft
from sglang_deploy import releases
from sglang_deploy.validate import flag_classes, flag_table
from sglang_deploy.profile import load_profile
from sglang_deploy.validate.check import check_profile

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

TABLE_VERSIONS = releases.versions()


@pytest.mark.parametrize("version", TABLE_VERSIONS)
def test_every_dest_of_the_option_table_has_exactly_one_reviewed_class(version):
    """Every exported table (a new SGLang release's too) comes with its classes, dest for dest: a reviewed class, or
    "unreviewed" (refused) with the suggestion `sglang-deploy sglang add` wrote."""
    table = {action["dest"] for action in flag_table.load(version)["actions"]}
    document = releases.read(version, "classes.json")
    classes = {dest: tuple(entry) for dest, entry in document["dests"].items()}
    assert set(classes) == table, (sorted(table - set(classes)), sorted(set(classes) - table))
    assert {kind for kind, _ in classes.values()} <= set(flag_classes.CLASSES) | {releases.UNREVIEWED}
    assert all(why for kind, why in classes.values() if kind != "allowed")  # every refusal says what the dest does
    assert set(flag_classes.load(version)) == {d for d, (kind, _) in classes.items() if kind != releases.UNREVIEWED}


def test_the_tool_owned_class_is_what_the_tool_sets():
    from sglang_deploy.validate.parser_checks import DERIVED_DESTS, SECRET_DESTS

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
    from sglang_deploy.validate import flag_table
    from sglang_deploy.validate.rule_checks import resolved_class_problems

    profile = load_profile(proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_GRPC_PORT: "50051"\n'))
    table = flag_table.load(profile.sglang.version)
    assert resolved_class_problems(profile, proven_resolution, table) == []
    [problem] = resolved_class_problems(profile, {**proven_resolution, dest: value}, table)
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

    from sglang_deploy.validate import env_rules, validator_env

    repo = pathlib.Path(__file__).resolve().parent.parent
    ours = "".join(p.read_text() for d in ("sglang_deploy/sim", "testbed") for p in (repo / d).rglob("*.py"))
    ours += (repo / "sglang_deploy/hostside/preflight/allreduce.py").read_text()  # the stand-in's all-reduce
    named = set(re.findall(r"SGLANG_SIM_[A-Z0-9_]+", ours))
    assert set(env_rules.SIMULATOR_ENV) - {"SGLANG_SIM_NOTE"} <= named
    sglang = validator_env.env_dir(VERSION).glob("lib/python3*/site-packages/sglang")
    text = "".join(p.read_text(errors="replace") for root in sglang for p in root.rglob("*.py"))
    assert text and not [name for name in env_rules.SIMULATOR_ENV if name in text]


# --- the done-when audit (issue 38): every case of security review 3, and the 4 of review 2 it found accepted ----------
# The review's note (shared/notes/security-review-3.md) names 22 of its 43 profile cases in its results table; the
# other 21 are the values its findings and fix directions name (finding 2's variable, finding 4's list, the exposure
# dests of §5, the thresholds of class f, §2.3's megabyte). Each must be refused naming its field or flag; the one
# case that is no input to refuse (the launcher's working directory) must be defused by the unit.

GATE = "\ngate:"
REVIEW_3 = [
    # (case, how: flag | env | edit | manifest | render, the input, the field the refusal names, part of it)
    # the note's results table
    ("flag-grpc-port-unauthenticated", "flag", "--grpc-port: 50051", "sglang.flags.--grpc-port", "flag-exposes-service"),
    ("flag-kv-events-every-interface", "flag", "--kv-events-config: '{\"publisher\": \"zmq\"}'",
     "sglang.flags.--kv-events-config", "flag-exposes-service"),
    ("flag-forward-hooks-exec", "flag", f"--forward-hooks: {FORWARD_HOOKS}", "sglang.flags.--forward-hooks",
     "flag-runs-code"),
    ("flag-sidecar-module", "flag", "--sidecar: timeit", "sglang.flags.--sidecar", "flag-runs-code"),
    ("env-nccl-conf-file", "env", ("NCCL_CONF_FILE", "/dev/shm/nccl.conf"), "environment.NCCL_CONF_FILE",
     "env-loads-code"),
    ("env-triton-kernel-override", "env", ("TRITON_KERNEL_OVERRIDE", "1"), "environment.TRITON_KERNEL_OVERRIDE",
     "env-loads-code"),
    ("env-sglang-model-package", "env", ("SGLANG_EXTERNAL_MODEL_PACKAGE", "sglang_site_models"),
     "environment.SGLANG_EXTERNAL_MODEL_PACKAGE", "env-loads-code"),
    ("model-config-outside-repo", "edit", ("config: manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json",
                                           "config: /etc/ssl/x.json"), "model.config", "is not under the repository's"),
    ("env-simulated-acceptance", "env", ("SGLANG_SIMULATE_ACC_LEN", "3.5"), "environment.SGLANG_SIMULATE_ACC_LEN",
     "env-fakes-measurement"),
    ("gate-floors-removed", "edit", [("  min_decode_tok_s: 45", "  min_decode_tok_s: null"),
                                     ("  min_accept_length: 2.8", "  min_accept_length: null")],
     "gate.min_accept_length", "gate-floors-required"),
    ("gate-regression-sexagesimal", "edit", ("  max_regression_pct: 10", "  max_regression_pct: 1:30"), "invalid YAML",
     "YAML 1.1 number form"),
    ("gate-accept-floor-one", "edit", ("  min_accept_length: 2.8", "  min_accept_length: 1"), "gate.min_accept_length",
     "can never fail"),
    ("flag-mem-fraction-string", "edit", ("    --mem-fraction-static: 0.88", '    --mem-fraction-static: "0.99"'),
     "sglang.flags.--mem-fraction-static", "flag-value-kind"),
    ("launcher-imports-from-state-dir", "render", ("  launcher: serve", "  launcher: launch_server"), "PYTHONSAFEPATH",
     "1"),
    ("flag-abbreviation-grpc-port", "flag", "--grpc-p: 50051", "sglang.flags.--grpc-p", "write the full name --grpc-port"),
    ("yaml-inline-merge-key", "edit", ("  port: 30000", "  <<: {port: 30001}\n  port: 30000"), "invalid YAML",
     "merge key"),
    ("yaml-binary-tag", "edit", ("  served_name: qwen3.6-27b", "  served_name: !!binary cXdlbg=="), "model.served_name",
     "valid string"),
    ("flag-value-next-line-char", "flag", '--chat-template: "chatml\\u0085"', "sglang.flags.--chat-template",
     "U+0085"),
    ("waiver-reason-trailing-backslash", "edit", (GATE, '\nwaivers:\n  mem-fraction-range: "tested \\\\"' + GATE),
     "waivers.mem-fraction-range", "ends with a backslash"),
    ("pin-squattable-family-name", "edit", ('  launcher: serve', '  launcher: serve\n  pins: ["nvidia-nccl-cu13-hotfix==2.28.9"]'),
     "sglang.pins", "pin-outside-cuda-family"),
    ("weights-manifest-declares-diffusion", "manifest", "model_index.json", "model",  # names model.source/.manifest
     "start its diffusion server"),
    ("weights-config-not-the-manifests", "manifest", "other-config", "model.config", "model-config-pinned"),
    # the values the findings and fix directions name
    ("waiver-reason-over-a-megabyte", "edit", (GATE, '\nwaivers:\n  mem-fraction-range: "' + "a" * (1 << 20) + '"' + GATE),
     "waivers.mem-fraction-range", "at most 65536 bytes"),
    ("model-config-fifo", "edit", ("config: manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json", "config: FIFO"),
     "model.config", "is not a regular file"),
    ("env-grpc-port", "env", ("SGLANG_GRPC_PORT", "50051"), "environment.SGLANG_GRPC_PORT", "env-not-reviewed"),
    ("env-simulated-token-mode", "env", ("SGLANG_SIMULATE_ACC_TOKEN_MODE", "real-draft-token"),
     "environment.SGLANG_SIMULATE_ACC_TOKEN_MODE", "env-fakes-measurement"),
    ("env-triton-override-dir", "env", ("TRITON_OVERRIDE_DIR", "/dev/shm/t"), "environment.TRITON_OVERRIDE_DIR",
     "env-loads-code"),
    ("env-jit-cache-shm", "env", ("SGLANG_JIT_CACHE_DIR", "/dev/shm/jit"), "environment.SGLANG_JIT_CACHE_DIR",
     "env-loads-code"),
    ("env-deepgemm-cache-shm", "env", ("SGLANG_DG_CACHE_DIR", "/dev/shm/dg"), "environment.SGLANG_DG_CACHE_DIR",
     "env-loads-code"),
    ("env-kernel-cache-shm", "env", ("PYTORCH_KERNEL_CACHE_PATH", "/dev/shm/k"), "environment.PYTORCH_KERNEL_CACHE_PATH",
     "env-loads-code"),
    ("env-hf-modules-shm", "env", ("HF_MODULES_CACHE", "/dev/shm/hf"), "environment.HF_MODULES_CACHE", "env-loads-code"),
    ("flag-sidecar-args", "flag", "--sidecar-args: '[\"-s\", \"import os\"]'", "sglang.flags.--sidecar-args",
     "flag-runs-code"),
    ("flag-hicache-storage-backend", "flag", "--hicache-storage-backend: dynamic", "sglang.flags.--hicache-storage-backend",
     "flag-runs-code"),
    ("flag-lmcache-config", "flag", "--lmcache-config-file: /dev/shm/lm.yaml", "sglang.flags.--lmcache-config-file",
     "flag-runs-code"),
    ("flag-model-loader-extra-config", "flag", "--model-loader-extra-config: '{\"x\": 1}'",
     "sglang.flags.--model-loader-extra-config", "flag-runs-code"),
    ("flag-otlp-endpoint", "flag", "--otlp-traces-endpoint: collector.example:4317", "sglang.flags.--otlp-traces-endpoint",
     "flag-exposes-service"),
    ("flag-tool-server", "flag", "--tool-server: http://tools.example", "sglang.flags.--tool-server",
     "flag-exposes-service"),
    ("flag-bootstrap-port", "flag", "--disaggregation-bootstrap-port: 9000",
     "sglang.flags.--disaggregation-bootstrap-port", "flag-exposes-service"),
    ("flag-load-publish-endpoint", "flag", "--load-publish-endpoint: tcp://0.0.0.0:5558",
     "sglang.flags.--load-publish-endpoint", "flag-exposes-service"),
    ("flag-encoder-urls", "flag", "--encoder-urls: [http://enc.example]", "sglang.flags.--encoder-urls",
     "flag-exposes-service"),
    ("flag-remote-instance-weights", "flag", "--remote-instance-weight-loader-seed-instance-ip: 10.0.0.9",
     "sglang.flags.--remote-instance-weight-loader-seed-instance-ip", "flag-exposes-service"),
    ("gate-decode-floor-denormal", "edit", ("  min_decode_tok_s: 45", "  min_decode_tok_s: 4.9e-324"),
     "gate.min_decode_tok_s", "greater than or equal to 1"),
    ("watch-drift-floor-one", "edit", (GATE, "\nwatch:\n  drift_min_accept_length: 1.0" + GATE),
     "watch.drift_min_accept_length", "can never fail"),
]
REVIEW_2_OPEN = [  # accepted at review 3's time (issue 38's done-when)
    ("review2-cuda-cache-shm", "env", ("CUDA_CACHE_PATH", "/dev/shm/nv"), "environment.CUDA_CACHE_PATH", "env-value"),
    ("review2-textfile-dir-service-own", "edit", (GATE, "\nwatch:\n  textfile_dir: /var/lib/sglang/metrics" + GATE),
     "watch.textfile_dir", "watch-textfile-dir"),
    ("review2-textfile-dir-systemd", "edit", (GATE, "\nwatch:\n  textfile_dir: /run/systemd/system" + GATE),
     "watch.textfile_dir", "watch-textfile-dir"),
    ("review2-relax-privileges", "edit", ("  host: 127.0.0.1", "  host: 127.0.0.1\n  relax: [CapabilityBoundingSet, "
                                          "NoNewPrivileges, ProtectSystem]"), "service.relax", "relax-privileges"),
]


def refusal_lines(tmp_path, monkeypatch, how, given) -> list[str]:
    """What `check` (light path) says about the proven profile with the case's input: the profile's errors, or the
    failing checks' lines; [] when it passes."""
    import os

    from sglang_deploy.profile import ProfileError

    if how == "manifest":
        from test_limits import CONFIG, managed

        other = {**json.loads(CONFIG), "num_hidden_layers": 2}
        files = {"config.json": CONFIG, **({given: b'{"_diffusers_version": "0.35.0"}'} if given.endswith(".json") else {})}
        path = managed(tmp_path, monkeypatch, files, json.dumps(other).encode() if given == "other-config" else None)
    elif how == "flag":
        path = proven_with(tmp_path, "  flags:\n", f"  flags:\n    {given}\n")
    elif how == "env":
        path = with_variable(tmp_path, *given)
    else:
        path = None
        for old, new in given if isinstance(given, list) else [given]:
            if "FIFO" in new:
                from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

                monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path))
                os.mkfifo(tmp_path / "config.json")
                new = new.replace("FIFO", str(tmp_path / "config.json"))
            if path is None:
                path = proven_with(tmp_path, old, new)
            else:
                path.write_text(path.read_text().replace(old, new, 1))
    try:
        report = light(path)
    except ProfileError as error:
        return list(error.problems)
    return [] if report.ok else [line for line in report.lines() if line.endswith("]")]


AUDIT = REVIEW_3 + REVIEW_2_OPEN


@pytest.mark.parametrize("case, how, given, field, text", AUDIT, ids=[c[0] for c in AUDIT])
def test_every_case_of_review_3_and_review_2s_open_ones_is_refused_naming_its_field(tmp_path, monkeypatch, case, how,
                                                                                   given, field, text):
    if how == "render":  # no input to refuse: the unit keeps the launcher off the service user's directory
        from sglang_deploy.render import render

        rendered = render(load_profile(proven_with(tmp_path, *given)))
        assert rendered.exec_start[1:3] == ["-m", "sglang.launch_server"] and rendered.environment[field] == text
        return
    lines = refusal_lines(tmp_path, monkeypatch, how, given)
    named = re.compile(rf":[0-9]+: {re.escape(field)}(\.[0-9]+)?: ")  # file:line: field (or its list item): ...
    assert any(named.search(line) and text in line for line in lines), [line[:300] for line in lines]


def test_the_audit_holds_every_case_the_issue_counts():
    assert (len(REVIEW_3), len(REVIEW_2_OPEN)) == (43, 4)
    assert len({case for case, *_ in AUDIT}) == 47
