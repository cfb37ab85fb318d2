"""Flags by SGLang's own dest (security review 2, findings on spellings and option-valued flags): a second spelling,
an alias of a tool-set field, or a value that is itself an option never reaches the unit. Both paths: SGLang's own
parser (full) and its exported table (light)."""

import pytest

from conftest import proven_with, store_report
from test_validate import check


@pytest.mark.parametrize("old, new, rule, message", [
    ("  flags:\n", "  flags:\n    --tensor-parallel-size: 2\n", "one-spelling-per-flag",
     "--tensor-parallel-size and --tp-size both set SGLang's tp_size"),
    ("  flags:\n", "  flags:\n    --model: /srv/other\n", "tool-derived-flag",
     "--model is SGLang's model_path, which the tool sets from model.path"),
    ("  flags:\n", "  flags:\n    --nccl-init-addr: 10.0.0.9:5000\n", "tool-derived-flag",
     "--nccl-init-addr is SGLang's dist_init_addr"),
    ("  flags:\n", "  flags:\n    --lora-target-modules: [all, \"--host\", \"0.0.0.0\"]\n", "no-option-as-value",
     "the value '--host' of --lora-target-modules starts with '-'"),
    ("  flags:\n", "  flags:\n    --admin-api-key: sk-admin-0123456789abcdef\n", "no-secret-in-profile",
     "--admin-api-key is an admin API key, a secret"),
    ("  flags:\n", "  flags:\n    --ssl-keyfile-password: hunter2hunter2\n", "no-secret-in-profile",
     "--ssl-keyfile-password is the TLS key file's password, a secret"),
    ("  flags:\n", "  flags:\n    --chat-template: \"--api-key=x\"\n", "no-option-as-value",
     "the value '--api-key=x' of --chat-template starts with '-'"),
])
def test_spellings_and_option_values_are_refused_naming_the_flag(tmp_path, old, new, rule, message):
    report = check(proven_with(tmp_path, old, new))
    found = [p for p in report.problems if p.rule == rule]
    assert found and message in found[0].message, report.lines()
    assert report.lines()[0].split(":")[1].isdigit()  # file:line


def test_an_alias_alone_is_refused_so_the_rules_read_what_sglang_gets(tmp_path):
    profile = proven_with(tmp_path, "    --tp-size: 2 ", "    --tensor-parallel-size: 2 ")
    report = check(profile)
    [problem] = [p for p in report.problems if p.rule == "canonical-flag-name"]
    assert "write --tp-size" in problem.message and problem.field == ("sglang", "flags", "--tensor-parallel-size")


def test_a_negative_number_is_a_value_for_a_numeric_flag_only(tmp_path):
    report = check(proven_with(tmp_path, "  flags:\n", "  flags:\n    --random-seed: -1\n"))
    assert not [p for p in report.problems if p.rule == "no-option-as-value"], report.lines()


def test_a_negation_spelling_is_not_an_alias(tmp_path):
    report = check(proven_with(tmp_path, "  flags:\n", "  flags:\n    --no-enable-tf32-matmul: true\n"))
    assert not [p for p in report.problems if p.rule in ("canonical-flag-name", "one-spelling-per-flag")], report.lines()


def test_the_backstop_parses_the_rendered_argv_for_the_tools_own_values():
    from conftest import PROVEN
    from sglang_deploy.flags import server_args
    from sglang_deploy.profile import load_profile
    from sglang_deploy.validate import flag_table
    from sglang_deploy.validate.parser_checks import derived_values_problems

    profile = load_profile(PROVEN)
    argv, table = server_args(profile), flag_table.load(profile.sglang.version)
    assert derived_values_problems(profile, argv, table, None) == []
    [problem] = derived_values_problems(profile, argv + ["--lora-target-modules", "all", "--host", "0.0.0.0"], table,
                                        None)
    assert problem.rule == "tool-flags-intact" and "host='0.0.0.0' (the tool sets '127.0.0.1')" in problem.message


@pytest.mark.parametrize("variable, value, rule", [
    ("HF_HUB_OFFLINE", "0", "env-tool-owned"), ("TRITON_CACHE_DIR", "/tmp/shared", "env-tool-owned"),
    ("CUDA_HOME", "/opt/other-cuda", "env-tool-owned"), ("HF_ENDPOINT", "http://mirror.example", "env-tool-owned"),
    ("NCCL_NET_PLUGIN", "/srv/x/libnccl-net.so", "env-loads-code"), ("TRITON_PTXAS_PATH", "/srv/x/ptxas", "env-loads-code"),
    ("CUDA_INJECTION64_PATH", "/srv/x/inject.so", "env-loads-code"),
])
def test_environment_that_undoes_the_tool_or_loads_code_is_refused(tmp_path, variable, value, rule):
    report = check(proven_with(tmp_path, "environment:\n", f'environment:\n  {variable}: "{value}"\n'))
    [problem] = [p for p in report.problems if p.field == ("environment", variable)]
    assert problem.rule == rule, report.lines()


def test_a_code_loading_variable_can_be_waived_with_a_reason(tmp_path):
    text = ('environment:\n  NCCL_NET_PLUGIN: "/opt/nccl-net/libnccl-net.so"\n')
    profile = proven_with(tmp_path, "environment:\n", text)
    profile.write_text(profile.read_text() + 'waivers:\n  env-loads-code: "the site network plugin, reviewed"\n')
    assert not [p for p in check(profile).problems if p.rule == "env-loads-code"]


# --- pins: the CUDA/torch/kernel family, or a waiver with a reason (security review 2, finding 3) -----------------

PIN_CASES = [
    # (pin, waived, refused)
    ("nvidia-nccl-cu13==2.28.9", False, False),
    ("torch==2.9.1", False, False),
    ("flashinfer-python==0.5.3", False, False),
    ("sgl_kernel==0.3.20", False, False),  # normalized to sgl-kernel
    ("cuda-python==13.0.1", False, False),
    ("requests==2.32.3", False, True),
    ("evil-build-backend==1.0", False, True),
    ("evil-build-backend==1.0", True, False),
    ("nvidia-nccl-cu13-hotfix==2.28.9", False, True),  # security review 3: a squattable name under the prefix
    ("cuda-anything==1.0", False, True),
    ("flashinfer-evil==0.1", False, True),
    ("nvidia-cublas==13.0.0.19", False, False),  # CUDA 13 torch's own, unsuffixed
]


@pytest.mark.parametrize("pin, waived, refused", PIN_CASES, ids=[f"{c[0]}-{'waived' if c[1] else 'plain'}" for c in PIN_CASES])
def test_pins_name_the_cuda_family_or_carry_a_waiver(tmp_path, pin, waived, refused):
    waiver = '\nwaivers:\n  pin-outside-cuda-family: "a reviewed fix, upstream PR 123"\n' if waived else "\n"
    path = proven_with(tmp_path, "  launcher: serve\n", f'  launcher: serve\n  pins: ["{pin}"]\n')
    path.write_text(path.read_text() + waiver)
    report = check(path)
    rules = [(p.rule, p.field) for p in report.problems]
    assert (("pin-outside-cuda-family", ("sglang", "pins", 0)) in rules) == refused, report.lines()


# --- flags that run someone else's code or serve other weights: refused unless waived (security review 2, 6) -------

SNAPSHOT_SOURCE = "hf://Qwen/Qwen3.6-27B-FP8@" + "0" * 40
CODE_FLAG_CASES = [
    # (flags, managed weights?, rule or None)
    ("--enable-custom-logit-processor: true", False, "flag-runs-code"),
    ("--custom-weight-loader: [os.system]", False, "flag-runs-code"),
    ("--trust-remote-code: true", False, "flag-runs-code"),  # model.path: weights nobody verified
    ("--load-format: dummy", False, "flag-serves-other-weights"),
    ("--load-format: remote_instance", False, "flag-serves-other-weights"),
    ("--tokenizer-path: /dev/shm/tokenizer", False, "flag-serves-other-weights"),
    ("--chat-template: /dev/shm/template.jinja", False, "flag-serves-other-weights"),
    ("--chat-template: chatml", False, None),  # a built-in template's name
    ("--load-format: safetensors", False, None),
    ("--enable-custom-logit-processor: false", False, None),
    ("--trust-remote-code: true", True, None),  # the verified snapshot's own code
    (f"--chat-template: /srv/models/Qwen--Qwen3.6-27B-FP8/{'0' * 40}/chat_template.jinja", True, None),
    (f"--tokenizer-path: /srv/models/Qwen--Qwen3.6-27B-FP8/{'0' * 40}/../../x", True, "flag-serves-other-weights"),
]


def code_flag_profile(tmp_path, monkeypatch, flags: str, managed: bool):
    path = proven_with(tmp_path, "  flags:\n", f"  flags:\n    {flags}\n")
    if managed:  # a source with a manifest made for the test (model.path becomes the verified snapshot's)
        from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE, write_manifest

        monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path))
        manifest = tmp_path / "manifest.json"
        write_manifest({"format": 1, "revision": "0" * 40, "files": [{"path": "config.json", "size": 2,
                                                                      "sha256": "0" * 64}], "total_bytes": 2}, manifest)
        path.write_text(path.read_text().replace("  path: /srv/models/Qwen3.6-27B-FP8\n",
                                                 f"  source: {SNAPSHOT_SOURCE}\n  manifest: {manifest}\n"))
    return path


@pytest.mark.parametrize("flags, managed, rule", CODE_FLAG_CASES, ids=[f"{c[0][:45]}-{c[1]}" for c in CODE_FLAG_CASES])
def test_flags_that_run_code_or_serve_other_weights_need_a_waiver(tmp_path, monkeypatch, flags, managed, rule):
    from sglang_deploy.profile import load_profile
    from sglang_deploy.validate.check import check_profile

    path = code_flag_profile(tmp_path, monkeypatch, flags, managed)
    report = check_profile(load_profile(path), gpus=2, topology="pcie", path="light")
    found = [p for p in report.problems if p.rule in ("flag-runs-code", "flag-serves-other-weights")]
    assert [p.rule for p in found] == ([rule] if rule else []), report.lines()
    if rule:
        assert found[0].field[:2] == ("sglang", "flags") and "waive the rule" in found[0].message
        path.write_text(path.read_text() + f'\nwaivers:\n  {rule}: "reviewed: needed for the eval harness"\n')
        waived = check_profile(load_profile(path), gpus=2, topology="pcie", path="light")
        assert not [p for p in waived.problems if p.rule == rule], waived.lines()


def test_a_waiver_is_shown_in_the_unit_and_the_release_listing(tmp_path):
    from sglang_deploy.profile import load_profile
    from sglang_deploy.release_plan import listing
    from sglang_deploy.render import render

    path = proven_with(tmp_path, "  flags:\n", "  flags:\n    --enable-custom-logit-processor: true\n")
    path.write_text(path.read_text() + '\nwaivers:\n  flag-runs-code: "the eval harness sends processors"\n')
    unit = render(load_profile(path), api_key="k" * 24).unit
    assert "# WAIVED by the profile: flag-runs-code: the eval harness sends processors" in unit
    store = store_report({"id": "0001-aaaaaaaa", "exec_start": ["x"]},
                         {"id": "0002-bbbbbbbb", "exec_start": ["x"], "waivers": {"flag-runs-code": "the eval harness"}},
                         active="0002-bbbbbbbb")
    lines = listing(store)
    assert "WAIVED: flag-runs-code" in next(line for line in lines if "0002-bbbbbbbb" in line)
    assert "WAIVED" not in next(line for line in lines if "0001-aaaaaaaa" in line)
