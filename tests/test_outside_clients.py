"""Clients nobody here wrote, against SGLang 0.5.23's own front end (testbed/local_sglang.py: `sglang serve` with
only its Scheduler modelled) with an API key: the openai Python client (the version SGLang 0.5.23 pins),
prometheus_client's text parser on /metrics, and SGLang's own benchmark client (`python -m sglang.benchmark.serving`
from the validator environment, with a tokenizer built offline)."""

import json
import os
import subprocess

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import LOCAL_FRONTEND_KEY as KEY
from conftest import LOCAL_FRONTEND_MODEL as SERVED
from sglang_deploy.validate import validator_env
from testbed.local_sim import SGLANG_VERSION

# A word-level tokenizer with the `tokenizers` library, saved as a Hugging Face tokenizer directory.
BUILD_TOKENIZER = """
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(4000)}}
tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer.save(sys.argv[1] + "/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>",
           "eos_token": "</s>", "model_max_length": 4096}, open(sys.argv[1] + "/tokenizer_config.json", "w"))
"""


@pytest.fixture
def server(local_frontend):
    """The local front end (tests/conftest.py local_frontend): the proven profile's flags, an API key."""
    return local_frontend


def client(server, key=KEY):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def test_openai_client(server):
    api = client(server)
    assert [m.id for m in api.models.list().data] == [SERVED]
    chat = api.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "Hello?"}], max_tokens=12)
    assert chat.choices[0].message.content and chat.usage.completion_tokens == 12
    completion = api.completions.create(model=SERVED, prompt="The capital of France is", max_tokens=8)
    assert completion.choices[0].text and completion.usage.completion_tokens == 8
    chunks = list(api.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "Count."}],
                                              max_tokens=16, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16
    with pytest.raises(openai.AuthenticationError):
        client(server, key="sk-wrong").models.list()


def test_prometheus_parser_reads_metrics(server):
    client(server).completions.create(model=SERVED, prompt="warm up the counters", max_tokens=24)
    import urllib.request
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    generated = families["sglang:generation_tokens"].samples  # counters lose their _total suffix in the parser
    assert any(s.name == "sglang:generation_tokens_total" and s.value >= 24 for s in generated)
    assert families["sglang:time_to_first_token_seconds"].type == "histogram"
    assert families["sglang:num_running_reqs"].type == "gauge"


def test_sglangs_own_benchmark_client(server, tmp_path):
    python = str(validator_env.ensure_env(SGLANG_VERSION))
    subprocess.run([python, "-P", "-c", BUILD_TOKENIZER, str(tmp_path)], check=True, timeout=120)
    output = tmp_path / "bench.jsonl"
    command = [python, "-P", "-m", "sglang.benchmark.serving", "--backend", "sglang", "--base-url", server.url,
               "--dataset-name", "random-ids", "--tokenizer", str(tmp_path), "--random-input-len", "32",
               "--random-output-len", "32", "--num-prompts", "4", "--max-concurrency", "2",
               "--ready-check-timeout-sec", "5", "--output-file", str(output)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": KEY}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    record = json.loads(output.read_text().splitlines()[-1])
    assert record["completed"] == 4 and record["output_throughput"] > 0 and record["accept_length"] > 1
