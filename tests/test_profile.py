"""Profile loading: structure errors name the file, the field path and the line."""

import pytest

from conftest import INCIDENT, PROVEN, proven_with, write_profile
from sglang_deploy.profile import ProfileError, load_profile


def problems_of(path):
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    return raised.value.problems


def test_proven_profile_loads_with_the_incident_flags():
    profile = load_profile(PROVEN)
    flags = profile.sglang.flags
    assert profile.sglang.version == "0.5.23"
    assert flags["--speculative-algorithm"] == "NEXTN"
    assert (flags["--speculative-num-steps"], flags["--speculative-num-draft-tokens"]) == (3, 4)
    assert flags["--cuda-graph-max-bs-decode"] == 16 and flags["--max-running-requests"] == 16
    assert profile.gate.min_decode_tok_s == 45 and profile.gate.min_accept_length == 2.8
    assert profile.name == "qwen3.6-27b-mtp-2xa6000"


def test_incident_profile_is_one_step():
    flags = load_profile(INCIDENT).sglang.flags
    assert (flags["--speculative-num-steps"], flags["--speculative-num-draft-tokens"]) == (1, 2)


def test_bad_yaml_names_file_and_line(tmp_path):
    path = write_profile(tmp_path, "model:\n  path: /x\n  served_name: [unclosed\nsglang: {}\n")
    [problem] = problems_of(path)
    assert problem.startswith(f"{path}:4: invalid YAML")


def test_unknown_key_names_field_and_line(tmp_path):
    path = proven_with(tmp_path, "service:\n", "service:\n  restart_policy: always\n")
    [problem] = problems_of(path)
    line = path.read_text().splitlines().index("  restart_policy: always") + 1
    assert problem == f"{path}:{line}: service.restart_policy: unknown key (not part of the profile format; see docs/profile.md)"


def test_wrong_type_names_field(tmp_path):
    path = proven_with(tmp_path, "  port: 30000", "  port: thirty")
    [problem] = problems_of(path)
    assert ": service.port: " in problem and "integer" in problem


def test_missing_model_path(tmp_path):
    path = proven_with(tmp_path, "  path: /srv/models/Qwen3.6-27B-FP8\n", "")
    [problem] = problems_of(path)
    assert problem.endswith("model: model.source or model.path is required: model.source (hf://ORG/NAME@<commit> or "
                            "file:///dir) for weights the tool provisions and verifies, model.path for a checkpoint "
                            "managed outside the tool")
    assert f"{path}:" in problem


def test_relative_model_path_is_refused(tmp_path):
    path = proven_with(tmp_path, "  path: /srv/models/Qwen3.6-27B-FP8", "  path: models/qwen")
    [problem] = problems_of(path)
    assert "model.path: must be an absolute path on the host" in problem


def test_duplicate_key_is_an_error(tmp_path):
    path = proven_with(tmp_path, "    --tp-size: 2 ", "    --tp-size: 2\n    --tp-size: 1 ")
    [problem] = problems_of(path)
    assert "duplicate key '--tp-size'" in problem


def test_flag_that_the_tool_derives_is_refused(tmp_path):
    path = proven_with(tmp_path, "    --tp-size: 2 ", "    --port: 8000\n    --tp-size: 2 ")
    [problem] = problems_of(path)
    assert "sglang.flags: flag --port is set by the tool from service.port" in problem


def test_flag_without_dashes_is_refused(tmp_path):
    path = proven_with(tmp_path, "    --tp-size: 2 ", "    tp-size: 2 ")
    [problem] = problems_of(path)
    assert "flag 'tp-size' must be written as a full long option such as '--tp-size'" in problem


def test_unpinned_version_is_refused(tmp_path):
    path = proven_with(tmp_path, 'version: "0.5.23"', 'version: ">=0.5"')
    assert "sglang.version: must be an exact release" in problems_of(path)[0]


def test_environment_names_are_restricted(tmp_path):
    path = proven_with(tmp_path, "  NCCL_CUMEM_ENABLE: \"0\"", "  LD_PRELOAD: /tmp/evil.so")
    [problem] = problems_of(path)
    assert "environment: variable 'LD_PRELOAD' is not accepted" in problem and "NCCL_" in problem


def test_real_variables_that_merely_mention_tokens_are_accepted(tmp_path):
    names = ["SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION", "SGLANG_INIT_NEW_TOKEN_RATIO", "SGLANG_MAX_NEW_TOKENS_LIMIT",
             "SGLANG_DETOKENIZER_MAX_STATES", "HF_HUB_DISABLE_IMPLICIT_TOKEN", "HF_TOKEN_PATH"]
    lines = "".join(f'  {name}: "1"\n' for name in names)
    load_profile(proven_with(tmp_path, "environment:\n", "environment:\n" + lines))


@pytest.mark.parametrize("name", ["HF_TOKEN", "SGLANG_API_KEY", "HF_HUB_TOKEN_SECRET", "NCCL_PASSWORD"])
def test_secret_looking_variables_are_refused_without_echoing_the_value(tmp_path, name):
    path = proven_with(tmp_path, "  NCCL_CUMEM_ENABLE: \"0\"", f"  {name}: hf_QzXsecretvalue42")
    [problem] = problems_of(path)
    assert f"variable '{name}' looks like a secret" in problem and "hf_token_file" in problem
    assert "hf_QzXsecretvalue42" not in problem


def test_several_problems_are_reported_together(tmp_path):
    text = PROVEN.read_text().replace("  port: 30000", "  port: 0").replace("  samples: 8", "  samples: many")
    problems = problems_of(write_profile(tmp_path, text))
    assert len(problems) == 2
    assert any("service.port" in p for p in problems) and any("gate.samples" in p for p in problems)


@pytest.mark.parametrize("samples", [1, 2])
def test_too_few_gate_samples_to_compare_are_refused(tmp_path, samples):
    path = proven_with(tmp_path, "  samples: 8", f"  samples: {samples}")
    [problem] = problems_of(path)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(f"  samples: {samples}"))
    assert problem.startswith(f"{path}:{line}: gate.samples: {samples} is too few: at least 3 are accepted")
    assert load_profile(proven_with(tmp_path, "  samples: 8", "  samples: 3", "three.yaml")).gate.samples == 3


def test_unknown_waiver_rule(tmp_path):
    path = write_profile(tmp_path, PROVEN.read_text() + "waivers:\n  faster-please: because\n")
    assert "unknown rule 'faster-please'" in problems_of(path)[0]


def test_missing_file():
    [problem] = problems_of("/nonexistent/profile.yaml")
    assert "cannot read profile" in problem


def test_pins_go_into_the_versioned_venv(tmp_path):
    from sglang_deploy.layout import requirements, venv_path

    pinned = load_profile(proven_with(tmp_path, '  launcher: serve\n',
                                      '  launcher: serve\n  pins: ["nvidia-nccl-cu13==2.28.9"]\n'))
    assert requirements(pinned) == ["sglang==0.5.23", "nvidia-nccl-cu13==2.28.9"]
    assert venv_path(pinned) != venv_path(load_profile(PROVEN))  # another env, so old releases keep theirs
    loose = proven_with(tmp_path, '  launcher: serve\n', '  launcher: serve\n  pins: ["nvidia-nccl-cu13>=2.28"]\n', "loose.yaml")
    assert any("sglang.pins" in p and "must be an exact requirement" in p for p in problems_of(loose))


def test_yaml_aliases_are_refused_before_they_expand(tmp_path):
    from conftest import PROVEN
    from sglang_deploy.profile import ProfileError, load_profile

    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs + PROVEN.read_text())
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    assert f"{path}:2: YAML alias *a: aliases are not accepted" in str(error.value)


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_infinite_and_nan_numbers_are_refused_naming_the_field(tmp_path, value):
    from conftest import proven_with
    from sglang_deploy.profile import ProfileError, load_profile

    for old, new, field in (("  min_decode_tok_s: 45 ", f"  min_decode_tok_s: {value} ", "gate.min_decode_tok_s"),
                            ("    --mem-fraction-static: 0.88", f"    --mem-fraction-static: {value}",
                             "sglang.flags")):
        with pytest.raises(ProfileError) as error:
            load_profile(proven_with(tmp_path, old, new))
        assert field in str(error.value), str(error.value)
