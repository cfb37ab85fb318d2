"""SGLang 0.5.23's own pool sizing as the modelled Scheduler asks it (sglang_deploy/sim/sglang_memory.py), run in the
validator env under the A6000 stand-in with SGLang's parse, resolution and published context: the hybrid GDN model's
mamba state cache and its intermediate SSM scratch per draft token decide how many requests run at once."""

import json
import subprocess

import pytest

from conftest import DFLASH_CONFIG, PROVEN
from sglang_deploy.validate import gpu_facts
from sglang_deploy.validate import validator_env
from sglang_deploy.profile import load_profile
from sglang_deploy.flags import server_args
from sglang_deploy.validate.resolution import model_config_problems

SCRIPT = r"""
import json, os, sys, tempfile, importlib.util
requests = json.loads(sys.stdin.read())
def directory(config):
    path = tempfile.mkdtemp()
    json.dump(config, open(os.path.join(path, "config.json"), "w"))
    return path
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    return module
probe = load("probe", requests[0]["probe"])
probe.load()
memory = load("memory", requests[0]["memory"])
from sglang.srt.server_args import prepare_server_args
from sglang.srt.runtime_context import publish
for request in requests:  # one process: SGLang is imported once; each publish replaces the last (last-publish-wins)
    argv = list(request["argv"])
    argv[argv.index("--model-path") + 1] = directory(request["model_config"])
    if request.get("draft_config"):
        argv[argv.index("--speculative-draft-model-path") + 1] = directory(request["draft_config"])
    args = prepare_server_args(argv)
    args.resolve_once()
    publish(args, role="scheduler")
    print(json.dumps(memory.sglang_capacity(args, request["weights_gib"])), flush=True)
    print("--- end of request ---", file=sys.stderr, flush=True)
"""
DRAFT_WEIGHTS_GIB = 1.6 / 2  # the DFlash drafter's BF16 bytes per GPU at TP 2


@pytest.fixture(scope="module")
def sized():
    """SGLang's sizing of the proven MTP profile, of its DFLASH variant (block 16) and of MTP with the drafter's
    weights loaded too (the same memory, to compare the scratch alone): one process, SGLang imported once."""
    from pathlib import Path

    profile = load_profile(PROVEN)
    argv, config = server_args(profile, 30999, None), model_config_problems(profile)[1]
    dflash = list(argv)
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        index = dflash.index(flag)
        del dflash[index:index + 2]
    dflash[dflash.index("--speculative-algorithm") + 1] = "DFLASH"
    dflash += ["--speculative-draft-model-path", "/srv/drafters/dflash"]
    common = {"model_config": config, "probe": str(validator_env.PROBE_SCRIPT),
              "memory": str(Path(validator_env.__file__).parents[1] / "sim" / "sglang_memory.py")}
    requests = [{**common, "argv": argv, "weights_gib": 27.5 / 2},
                {**common, "argv": dflash, "weights_gib": 27.5 / 2 + DRAFT_WEIGHTS_GIB,
                 "draft_config": json.loads(DFLASH_CONFIG.read_text())},
                {**common, "argv": argv, "weights_gib": 27.5 / 2 + DRAFT_WEIGHTS_GIB}]
    facts = gpu_facts.facts_json(gpu_facts.model("a6000"), 2)
    python = validator_env.ensure_env("0.5.23")
    result = subprocess.run([str(python), "-P", "-c", SCRIPT], input=json.dumps(requests), capture_output=True,
                            text=True, timeout=300, env=validator_env.standin_environment("0.5.23", facts))
    assert result.returncode == 0, result.stderr[-3000:]
    answers = [json.loads(line) for line in result.stdout.strip().splitlines()]
    logs = result.stderr.split("--- end of request ---")
    return {name: (answer, log) for name, answer, log in zip(("mtp", "dflash", "mtp+draft"), answers, logs)}


def test_mtp_keeps_its_16_running_requests(sized):
    found, _ = sized["mtp"]
    # 4 draft tokens: the state cache (its scratch charged) leaves more than 5 slots for each of the 16 requests
    assert found["mamba_ratio"] == 5 and found["max_mamba_cache_size"] // 5 >= 16
    assert found["max_running_requests"] == 16
    assert 300_000 < found["max_total_num_tokens"] < 700_000


def test_dflash_block_16_is_capped_by_the_mamba_state_cache(sized):
    """DFLASH verifies a block of 16 draft tokens: SGLang reserves an intermediate SSM cache per draft token and caps
    max_running_requests by the state cache, far below the profile's 16 (the conformance audit's estimate: ~7)."""
    found, log = sized["dflash"]
    assert found["max_running_requests"] == found["max_mamba_cache_size"] // found["mamba_ratio"] < 16
    assert "max_running_requests is capped to" in log and "by the mamba state cache" in log
    # the same memory with 4 draft tokens: the 16-token scratch comes out of the state cache and the KV
    mtp, _ = sized["mtp+draft"]
    assert found["max_mamba_cache_size"] < mtp["max_mamba_cache_size"]
    assert found["max_total_num_tokens"] < mtp["max_total_num_tokens"]
