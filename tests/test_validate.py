"""Flag validation: SGLang 0.5.23's own parser (cached validator env) and the tool's rules.

Every case runs both paths: SGLang's own code (full) and the option table exported from its parser
(light, validate/flag_table.py); they must agree on every problem except the rules that read SGLang's resolution,
which the light path reports as skipped."""

import pytest

from conftest import INCIDENT, PROVEN, proven_with, write_profile
from sglang_deploy.profile import load_profile
from sglang_deploy.validate.check import check_profile


RESOLUTION_RULES = {"decode-graph-covers-batch", "cuda-graphs-on", "sglang-resolution", "model-config"}


def check(path, gpus=2, topology="pcie"):
    profile = load_profile(path)
    full = check_profile(profile, gpus=gpus, topology=topology, path="full")
    light = check_profile(profile, gpus=gpus, topology=topology, path="light")
    assert [(p.rule, p.field) for p in light.problems] == [
        (p.rule, p.field) for p in full.problems if p.rule not in RESOLUTION_RULES], (full.lines(), light.lines())
    assert light.path == "light" and any("sglang-resolution" in s for s in light.skipped)
    return full


def only_problem(report):
    assert len(report.problems) == 1, report.lines()
    return report.problems[0], report.lines()[0]


def test_proven_and_incident_profiles_pass():
    assert check(PROVEN).ok
    assert check(INCIDENT).ok


@pytest.mark.parametrize("flag, expected", [
    ("--cuda-graph-max-bs", "--cuda-graph-max-bs is not accepted by SGLang 0.5.23; use --cuda-graph-max-bs-decode"),
    ("--disable-piecewise-cuda-graph", "--disable-piecewise-cuda-graph is not accepted by SGLang 0.5.23; use --cuda-graph-backend-prefill"),
    ("--mamba-scheduler-strategy", "--mamba-scheduler-strategy is not accepted by SGLang 0.5.23; use --mamba-radix-cache-strategy"),
])
def test_removed_flags_are_rejected_by_the_real_parser(tmp_path, flag, expected):
    value = "true" if "disable" in flag else ("16" if "bs" in flag else "auto")
    path = proven_with(tmp_path, "    --enable-metrics: true ", f"    --enable-metrics: true\n    {flag}: {value} ")
    problem, line = only_problem(check(path))
    assert problem.rule == "sglang-parser" and expected in line
    assert f"sglang.flags.{flag}" in line


def test_unknown_flag_gets_a_suggestion(tmp_path):
    path = proven_with(tmp_path, "    --enable-metrics: true ", "    --enable-metrix: true ")
    _, line = only_problem(check(path))
    assert "--enable-metrix is not a flag of SGLang 0.5.23; did you mean --enable-metrics" in line


def test_abbreviated_flag_is_refused_although_argparse_accepts_it(tmp_path):
    path = proven_with(tmp_path, "    --tp-size: 2 ", "    --tp: 2 ")
    problem, line = only_problem(check(path, gpus=None))
    assert problem.rule == "full-flag-names"
    assert "--tp is an abbreviation; write the full name --tp-size" in line


def test_value_errors_come_from_the_real_parser(tmp_path):
    path = proven_with(tmp_path, "    --tp-size: 2 ", '    --tp-size: "two" ')
    problem, line = only_problem(check(path, gpus=None))
    assert problem.rule == "sglang-parser" and "argument --tp-size" in line and "invalid int value: 'two'" in line


def test_switch_given_a_value(tmp_path):
    path = proven_with(tmp_path, "    --enable-metrics: true ", "    --enable-metrics: 1 ")
    problem, line = only_problem(check(path))
    assert problem.rule == "flag-value-kind" and "--enable-metrics is a switch" in line


def test_valued_flag_given_true(tmp_path):
    path = proven_with(tmp_path, "    --context-length: 65536 ", "    --context-length: true ")
    problem, _ = only_problem(check(path))
    assert problem.rule == "flag-value-kind"


def test_mtp_is_not_an_algorithm(tmp_path):
    path = proven_with(tmp_path, "--speculative-algorithm: NEXTN", "--speculative-algorithm: MTP")
    problem, line = only_problem(check(path))
    assert problem.rule == "speculative-algorithm"
    assert "'MTP' is not a speculative algorithm of SGLang 0.5.23" in line and "NEXTN" in line
    line_no = path.read_text().splitlines().index(next(l for l in path.read_text().splitlines() if "MTP  " in l or l.strip().startswith("--speculative-algorithm"))) + 1
    assert line.startswith(f"{path}:{line_no}:")


def test_draft_tokens_must_be_steps_plus_one_with_topk_1(tmp_path):
    path = proven_with(tmp_path, "--speculative-num-draft-tokens: 4", "--speculative-num-draft-tokens: 3")
    problem, line = only_problem(check(path))
    assert problem.rule == "draft-tokens-chain" and "must be 4 (SGLang forces it), not 3" in line


def test_tp_size_must_match_gpu_count(tmp_path):
    problem, line = only_problem(check(PROVEN, gpus=4))
    assert problem.rule == "tp-matches-gpus" and "--tp-size 2 does not match the host's 4 GPU(s)" in line
    assert "tp-matches-gpus" in " ".join(check(PROVEN, gpus=None).skipped)


def test_mem_fraction_range(tmp_path):
    path = proven_with(tmp_path, "--mem-fraction-static: 0.88", "--mem-fraction-static: 0.99")
    problem, line = only_problem(check(path))
    assert problem.rule == "mem-fraction-range" and "outside the sane range 0.5-0.95" in line


def test_decode_graph_must_cover_max_running_requests(tmp_path):
    path = proven_with(tmp_path, "--cuda-graph-max-bs-decode: 16", "--cuda-graph-max-bs-decode: 8")
    report = check(path)
    assert report.ok and [p.rule for p in report.warnings] == ["decode-graph-covers-batch"], report.lines()
    line = report.warning_lines()[0]  # speed left on the table: a warning with its fixes (test_check_verdict.py)
    assert "fix: --cuda-graph-max-bs-decode 16" in line and "--max-running-requests 8" in line
    assert "sglang.flags.--cuda-graph-max-bs-decode" in line


@pytest.mark.parametrize("flag", ["--disable-cuda-graph: true", "--disable-decode-cuda-graph: true",
                                  "--cuda-graph-backend-decode: disabled",
                                  """--cuda-graph-config: '{"decode": {"backend": "disabled"}}'"""])
def test_cuda_graphs_off_by_any_flag_sglang_folds(tmp_path, flag):
    path = proven_with(tmp_path, "    --enable-metrics: true ", f"    --enable-metrics: true\n    {flag} ")
    problem, line = only_problem(check(path))
    assert problem.rule == "cuda-graphs-on" and flag.split(":")[0] in line and "'disabled'" in line


def test_cuda_graphs_must_stay_on_unless_waived(tmp_path):
    path = proven_with(tmp_path, "    --enable-metrics: true ", "    --enable-metrics: true\n    --disable-cuda-graph: true ")
    problem, _ = only_problem(check(path))
    assert problem.rule == "cuda-graphs-on"
    waived = write_profile(tmp_path, path.read_text() + "waivers:\n  cuda-graphs-on: bisecting a graph capture bug\n", "w.yaml")
    assert check(waived).ok


def test_adaptive_speculation_refused_on_hybrid_models(tmp_path):
    path = proven_with(tmp_path, "    --enable-metrics: true ", "    --enable-metrics: true\n    --speculative-adaptive: true ")
    problem, line = only_problem(check(path))
    assert problem.rule == "no-adaptive-speculation-on-hybrid" and "remove it" in line


def test_ll128_refused_on_pcie(tmp_path):
    path = proven_with(tmp_path, "environment:\n", "environment:\n  NCCL_PROTO: {value: LL128, reason: tuning on NVLink}\n")
    problem, line = only_problem(check(path, topology="pcie"))
    assert problem.rule == "nccl-ll128-needs-nvlink" and "can corrupt data" in line
    assert check(path, topology="nvlink").ok  # with a reason, on NVLink, it is the user's call


def test_p2p_level_nvl_refused_on_pcie(tmp_path):
    path = proven_with(tmp_path, "environment:\n", "environment:\n  NCCL_P2P_LEVEL: NVL\n")
    problem, line = only_problem(check(path, topology="pcie"))
    assert problem.rule == "nccl-p2p-level-nvl-needs-nvlink" and "disables P2P" in line


@pytest.mark.parametrize("knob", ["NCCL_ALGO: Ring", "NCCL_MAX_NCHANNELS: 4", "NCCL_BUFFSIZE: 8388608", "NCCL_NTHREADS: 256"])
def test_nccl_debug_knobs_need_a_reason(tmp_path, knob):
    key, value = knob.split(": ")
    path = proven_with(tmp_path, "environment:\n", f"environment:\n  {knob}\n")
    problem, line = only_problem(check(path))
    assert problem.rule == "nccl-debug-knob-needs-reason" and key in line and "reason" in line
    explained = proven_with(tmp_path, "environment:\n", f"environment:\n  {key}: {{value: \"{value}\", reason: \"A/B measured +6 %\"}}\n", "ok.yaml")
    assert check(explained).ok


def test_parser_rules_cannot_be_waived(tmp_path):
    path = write_profile(tmp_path, PROVEN.read_text() + "waivers:\n  sglang-parser: trust me on this\n")
    problem, line = only_problem(check(path))
    assert "rule sglang-parser cannot be waived" in line


def test_the_light_path_without_a_table_says_how_to_proceed(tmp_path):
    """A profile pinned to an SGLang version whose option table this checkout lacks: a clear error on the light
    path (nothing is built, nothing guessed); `--full` or an export are the ways on."""
    from sglang_deploy.validate.validator_env import ValidatorEnvError

    path = proven_with(tmp_path, 'version: "0.5.23"', 'version: "0.5.99"')
    with pytest.raises(ValidatorEnvError, match=r"sglang.version 0\.5\.99: no exported option table .*sglang-deploy "
                                                r"check --full.*sglang-deploy sglang add 0\.5\.99"):
        check_profile(load_profile(path), gpus=2, topology="pcie", path="light")
