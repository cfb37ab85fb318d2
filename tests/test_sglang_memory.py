"""SGLang 0.5.23's own pool sizing as the modelled Scheduler asks it (sglang_deploy/sim/sglang_memory.py), run in the
validator env under the A6000 stand-in with SGLang's parse, resolution and published context: the hybrid GDN model's
mamba state cache and its intermediate SSM scratch per draft token decide how many requests run at once."""

import json
import subprocess

import pytest

from conftest import DFLASH_CONFIG, PROVEN
from sglang_deploy import gpu_facts, validator_env
from sglang_deploy.profile import load_profile
from sglang_deploy.validate import model_config_problems, server_args

SCRIPT = r"""
import json, os, sys, tempfile, importlib.util
request = json.loads(sys.stdin.read())
def directory(config):
    path = tempfile.mkdtemp()
    json.dump(config, open(os.path.join(path, "config.json"), "w"))
    return path
spec = importlib.util.spec_from_file_location("probe", request["probe"])
probe = importlib.util.module_from_spec(spec); spec.loader.exec_module(probe)
probe.load()
from sglang.srt.server_args import prepare_server_args
from sglang.srt.runtime_context import publish
argv = request["argv"]
argv[argv.index("--model-path") + 1] = directory(request["model_config"])
if request.get("draft_config"):
    argv[argv.index("--speculative-draft-model-path") + 1] = directory(request["draft_config"])
args = prepare_server_args(argv)
args.resolve_once()
publish(args, role="scheduler")
spec = importlib.util.spec_from_file_location("memory", request["memory"])
memory = importlib.util.module_from_spec(spec); spec.loader.exec_module(memory)
print(json.dumps(memory.sglang_capacity(args, request["weights_gib"])))
"""


def capacity(argv, model_config, weights_gib, draft_config=None):
    from pathlib import Path

    facts = gpu_facts.facts_json(gpu_facts.model("a6000"), 2)
    request = {"argv": argv, "model_config": model_config, "draft_config": draft_config,
               "weights_gib": weights_gib, "probe": str(validator_env.PROBE_SCRIPT),
               "memory": str(Path(validator_env.__file__).parent / "sim" / "sglang_memory.py")}
    python = validator_env.ensure_env("0.5.23")
    result = subprocess.run([str(python), "-P", "-c", SCRIPT], input=json.dumps(request), capture_output=True,
                            text=True, timeout=300, env=validator_env.standin_environment("0.5.23", facts))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@pytest.fixture(scope="module")
def proven():
    profile = load_profile(PROVEN)
    return server_args(profile, 30999, None), model_config_problems(profile)[1]


def test_mtp_keeps_its_16_running_requests(proven):
    argv, config = proven
    found, _ = capacity(argv, config, 27.5 / 2)
    # 4 draft tokens: the state cache (its scratch charged) leaves more than 5 slots for each of the 16 requests
    assert found["mamba_ratio"] == 5 and found["max_mamba_cache_size"] // 5 >= 16
    assert found["max_running_requests"] == 16
    assert 300_000 < found["max_total_num_tokens"] < 700_000


def test_dflash_block_16_is_capped_by_the_mamba_state_cache(proven):
    """DFLASH verifies a block of 16 draft tokens: SGLang reserves an intermediate SSM cache per draft token and caps
    max_running_requests by the state cache, far below the profile's 16 (the conformance audit's estimate: ~7)."""
    argv, config = proven
    argv = list(argv)
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        index = argv.index(flag)
        del argv[index:index + 2]
    argv[argv.index("--speculative-algorithm") + 1] = "DFLASH"
    argv += ["--speculative-draft-model-path", "/srv/drafters/dflash"]
    found, log = capacity(argv, config, 27.5 / 2 + 1.6 / 2, json.loads(DFLASH_CONFIG.read_text()))
    assert found["max_running_requests"] == found["max_mamba_cache_size"] // found["mamba_ratio"] < 16
    assert "max_running_requests is capped to" in log and "by the mamba state cache" in log
    mtp, _ = capacity(proven[0], config, 27.5 / 2 + 1.6 / 2)
    assert found["max_total_num_tokens"] < mtp["max_total_num_tokens"]  # the 16-token scratch comes out of the KV
