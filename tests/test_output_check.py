"""The gate's output check (hostside/lib/output_check.py): known answers, degenerate output and agreement with the last
good release, as decisions on recorded answers, and against both simulated servers with the output faults."""

import json
from pathlib import Path

import pytest

from conftest import LOCAL_FRONTEND_KEY, LOCAL_FRONTEND_MODEL
from sglang_deploy.hostside.lib import output_check
from testbed.calibration import PROVEN
from testbed.local_sglang import model_dir
from testbed.local_sim import LocalSim

DOCUMENT, DIGEST = output_check.load_prompts()
BOOK = json.loads((Path(output_check.__file__).parents[2] / "sim" / "data" / "answers.json").read_text())
KEY = "sk-output-check-0123456789"


def answers(wrong=False, finish="stop"):
    return {item["id"]: ((BOOK["wrong"] if wrong and item["prompt"] in BOOK["wrong"] else BOOK["answers"])[item["prompt"]],
                         finish) for item in DOCUMENT["prompts"]}


def test_the_prompt_set_is_versioned_and_the_simulator_answers_all_of_it():
    assert DOCUMENT["version"] == 1 and DIGEST.startswith("sha256:") and len(DOCUMENT["prompts"]) == 8
    prompts = {item["prompt"] for item in DOCUMENT["prompts"]}
    assert set(BOOK["answers"]) == prompts and len(set(BOOK["wrong"]) & prompts) == 3


def test_right_answers_pass_and_every_wrong_one_is_named():
    good = output_check.evaluate(answers(), DOCUMENT, DIGEST)
    assert good.verdict == "pass" and good.known_right == 8 and good.degenerate == 0
    bad = output_check.evaluate(answers(wrong=True), DOCUMENT, DIGEST)
    assert bad.verdict == "fail" and bad.known_right == 5
    assert bad.reasons == ["output: 3 of 8 known answers wrong: arith-mul: answered 381, expected 391; copy-code: "
                              "does not contain 'XK7-QP2-M9ZT-44B'; json-sum: JSON values wrong: sum=6 (expected 5)"]
    # the other checks, on answers of the right form with wrong content
    checks = {item["id"]: item["check"] for item in DOCUMENT["prompts"]}
    assert output_check.known_answer_problem(checks["json-city"], '{"city": "Paris"}') == "JSON object lacks country"
    assert output_check.known_answer_problem(checks["code-add"], "def add(a, b)\n  return a + b").startswith(
        "the code does not parse")
    assert output_check.known_answer_problem(checks["code-add"], "def plus(a, b):\n    return a + b") == \
        "the code defines no function add"
    assert output_check.known_answer_problem(checks["count-five"], "1, 2, 3, 5") == "does not contain '1, 2, 3, 4, 5'"


@pytest.mark.parametrize("text, finish, problem", [
    ("!" * 64, "length", "one character repeated (64 of 64)"),
    ("", "stop", "empty output"),
    ("the the model the model the " * 5, "length", "30 words from 2 distinct ones"),
    ("391 and then it went on and on", "length", "finish reason 'length', expected 'stop'"),
])
def test_degenerate_output_fails_even_with_the_right_answer_inside(text, finish, problem):
    recorded = answers()
    recorded["arith-mul"] = (text, finish)
    result = output_check.evaluate(recorded, DOCUMENT, DIGEST)
    assert result.verdict == "fail" and f"arith-mul: {problem}" in " ".join(result.reasons), result.reasons


def test_agreement_with_the_baseline_is_measured_and_low_agreement_alone_is_inconclusive():
    baseline = output_check.evaluate(answers(), DOCUMENT, DIGEST)
    same = output_check.evaluate(answers(), DOCUMENT, DIGEST, baseline)
    assert same.agreement == 1.0 and same.verdict == "pass"
    reworded = answers()
    for name in ("json-city", "code-add", "copy-mixed"):  # right answers, said otherwise
        text, finish = reworded[name]
        reworded[name] = ("Sure: " + text, finish)
    moved = output_check.evaluate(reworded, DOCUMENT, DIGEST, baseline)
    assert moved.verdict == "inconclusive" and moved.agreement == 5 / 8
    assert {row.id: row.first_divergence for row in moved.results}["json-city"] == 0
    assert "5 of 8 prompts agree with the baseline release" in moved.inconclusive[0]
    other_set = output_check.evaluate(reworded, DOCUMENT, "sha256:another", baseline)
    assert other_set.agreement is None  # another prompt set: nothing to compare


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return model_dir(tmp_path_factory.mktemp("model"))


def check_on_sim(checkpoint, log, fault=None, baseline=None):
    env = {"SGLANG_SIM_FAULT_OUTPUT": fault} if fault else {}
    sim = LocalSim(PROVEN + ["--api-key", KEY, "--served-model-name", "qwen3.6-27b"], env, checkpoint)
    sim.start(log).wait_ready()
    try:
        return output_check.run(sim.url, KEY, "qwen3.6-27b", baseline)
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def clean_baseline(checkpoint, tmp_path_factory):
    return check_on_sim(checkpoint, tmp_path_factory.mktemp("log") / "baseline.log")


@pytest.mark.parametrize("fault, verdict, expected", [
    (None, "pass", None),  # an unchanged release: every answer right, all 8 agree with the baseline
    ("garbage", "fail", "degenerate on 8 of 8 prompts"),
    ("wrong-answers", "fail", "3 of 8 known answers wrong"),
    ("diverge", "inconclusive", "0 of 8 prompts agree with the baseline release"),
])
def test_the_model_only_simulator(checkpoint, clean_baseline, tmp_path, fault, verdict, expected):
    assert clean_baseline.verdict == "pass"
    result = check_on_sim(checkpoint, tmp_path / "sim.log", fault, clean_baseline)
    assert result.verdict == verdict, result.reasons + result.inconclusive
    assert expected is None or expected in " ".join(result.reasons + result.inconclusive)
    if fault is None:
        assert result.agreement == 1.0


def test_sglangs_own_front_end_returns_the_modelled_answers(local_frontend):
    # the chat template, the tokenizer's byte tokens and the detokenizer are SGLang's: the answers survive them
    result = output_check.run(local_frontend.url, LOCAL_FRONTEND_KEY, LOCAL_FRONTEND_MODEL)
    assert result.verdict == "pass", result.reasons + [result.dump()[:2000]]
    assert {row.finish_reason for row in result.results} == {"stop"}
