"""The option table kept in the repository against SGLang 0.5.23's own parser (validator env)."""

import json

import pytest

from sglang_deploy.validate import flag_table, validator_env

VERSION = "0.5.23"
BASE = ["--model-path", "/srv/models/m"]
# Command lines for every kind of value the parser checks: SGLang's own verdict and message must come back
# from the rebuilt parser. Custom argparse types (human_readable_int, cuda graph config/backend, JSON lists)
# included, valid and invalid.
CORPUS = [
    [], ["--tp-size", "2"], ["--tp-size", "two"], ["--tp", "2"], ["--tp-size"], ["--no-such-flag", "1"],
    ["--mem-fraction-static", "0.8"], ["--mem-fraction-static", "high"], ["--enable-metrics"],
    ["--enable-metrics", "yes"], ["--context-length", "128k"], ["--context-length", "1Ki"],
    ["--context-length", "1.5Ki"], ["--context-length", "25.6k"], ["--context-length", "lots"],
    ["--speculative-algorithm", "EAGLE"], ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1"],
    ["--cuda-graph-backend-decode", "full"], ["--cuda-graph-backend-decode", "tc_piecewise"],
    ["--cuda-graph-backend-decode", "warp"], ["--cuda-graph-config", '{"decode": {"max_bs": 16}}'],
    ["--cuda-graph-config", '{"decode": {"max_batch": 16}}'], ["--cuda-graph-config", '{"verify": {}}'],
    ["--cuda-graph-config", "[1, 2]"], ["--cuda-graph-config", "{not json"], ["--cuda-graph-max-bs-decode", "16"],
    ["--dtype", "bfloat16"], ["--dtype", "fp7"], ["--quantization", "fp8"], ["--kv-cache-dtype", "fp8_e4m3"],
    ["--json-model-override-args", '{"a": 1}'], ["--json-model-override-args", "{bad"],
    ["--preferred-sampling-params", '{"temperature": 0}'], ["--api-key", "k"], ["--port", "30000"],
    ["--port", "-1"], ["--host", "127.0.0.1"], ["--served-model-name", "a", "b"], ["--nnodes", "2"],
]


@pytest.fixture(scope="module")
def table():
    return flag_table.load(VERSION)


def test_the_kept_table_is_what_sglangs_parser_exports_today(table):
    """Re-exported from the real parser in the validator env: a stale or hand-edited table fails here."""
    assert table == json.loads(json.dumps(validator_env.export_table(VERSION), sort_keys=True))
    assert flag_table.unchecked_types(table) == []  # every argparse type of 0.5.23 is reproduced


def test_the_rebuilt_parser_gives_sglangs_verdict_and_message(table):
    argvs = [BASE + argv for argv in CORPUS] + [CORPUS[1]]  # the last one without the required --model-path
    real = validator_env.run_probe(VERSION, argvs)["results"]
    light = [flag_table.parse_error(table, argv) for argv in argvs]
    assert [(r["ok"], r["error"]) for r in real] == [(error is None, error) for error in light]
    assert sum(error is not None for error in light) >= 15  # the corpus exercises refusals, not just passes


def test_speculative_algorithms_as_from_string_accepts_them(table):
    names = ["EAGLE", "eagle", "EAGLE3", "NEXTN", "nextn", "NGRAM", "STANDALONE", "MTP", "medusa", "LOOKAHEAD"]
    real = validator_env.run_probe(VERSION, [], names)["algorithms"]
    assert {name: error is None for name, error in real.items()} == {
        name: flag_table.algorithm_error(table, name) is None for name in names}
    assert real["MTP"] is not None and real["NEXTN"] is None
