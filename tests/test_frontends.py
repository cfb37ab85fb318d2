"""One request sequence to both simulated servers: SGLang 0.5.23's own front end with the modelled Scheduler
(testbed/local_sglang.py, what the simulated host runs) and the model-only simulator (testbed/local_sim.py, for
tests that restart servers often). The real front end is the reference: for every request the status codes
must be equal, and every field the model-only simulator returns must exist in SGLang's answer with the same
type (it may leave fields out, it may not invent or retype one); the /server_info fields the tool reads
(docs/conformance.md) and the metric names it reads must be in both."""

import json
import urllib.error
import urllib.request

import pytest

from conftest import LOCAL_FRONTEND_KEY as KEY
from conftest import LOCAL_FRONTEND_MODEL as SERVED
from testbed.calibration import PROVEN
from testbed.local_sglang import model_dir
from testbed.local_sim import LocalSim

# What the gate, the watch, the doctor and the dashboard read from /metrics.
METRICS_READ = {"sglang:num_running_reqs", "sglang:gen_throughput", "sglang:spec_accept_length",
                "sglang:cuda_graph_passes_total", "sglang:generation_tokens_total", "sglang:spec_verify_calls_total",
                "sglang:time_to_first_token_seconds_bucket"}
GENERATE = {"text": "Write a function that adds two numbers.", "sampling_params": {"max_new_tokens": 12, "temperature": 0}}
SEQUENCE = [
    ("/health", None, None), ("/v1/models", None, None), ("/v1/models", None, "sk-wrong"), ("/v1/models", None, KEY),
    ("/server_info", None, None), ("/server_info", None, KEY), ("/model_info", None, KEY),
    ("/generate", GENERATE, None), ("/generate", GENERATE, KEY),
    ("/generate", {**GENERATE, "stream": True}, KEY),
    ("/v1/chat/completions", {"model": SERVED, "messages": [{"role": "user", "content": "Hi?"}], "max_tokens": 8}, KEY),
    ("/v1/completions", {"model": SERVED, "prompt": "The capital of France is", "max_tokens": 8}, KEY),
    ("/v1/nonexistent", None, KEY),
]


def call(url, path, body, key):
    request = urllib.request.Request(url + path, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def parse(text):
    if text.startswith("data:"):  # a stream: the chunks' shapes, [DONE] dropped
        return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and "[DONE]" not in line]
    try:
        return json.loads(text)
    except ValueError:
        return text


def not_in_reference(model, real, path=""):
    """Fields of `model` missing from `real`, or of another JSON type there."""
    if isinstance(model, dict):
        if not isinstance(real, dict):
            return [f"{path}: object vs {type(real).__name__}"]
        return [problem for key, value in model.items()
                for problem in ([f"{path}.{key}: not in SGLang's answer"] if key not in real
                                else not_in_reference(value, real[key], f"{path}.{key}"))]
    if isinstance(model, list):
        if not isinstance(real, list):
            return [f"{path}: list vs {type(real).__name__}"]
        return not_in_reference(model[0], real[0], f"{path}[0]") if model and real else []
    kind = lambda v: "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__
    return [] if kind(model) == kind(real) or model is None and real is None else \
        [f"{path}: {kind(model)} vs SGLang's {kind(real)}"]


def metric_names(text):
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith("sglang:")}


_answers: dict = {}


@pytest.fixture
def answers(local_frontend, tmp_path_factory):
    """The sequence's answers from the model-only simulator (started here, with the same flags and checkpoint
    files) and from the local front end (tests/conftest.py local_frontend), asked once."""
    if not _answers:
        checkpoint = model_dir(tmp_path_factory.mktemp("model"))
        model = LocalSim(PROVEN + ["--served-model-name", SERVED, "--api-key", KEY], {}, checkpoint)
        try:
            model.start(tmp_path_factory.mktemp("logs") / "model.log").wait_ready()
            _answers.update({name: [call(server.url, path, body, key) for path, body, key in SEQUENCE]
                             + [call(server.url, "/metrics", None, None)]
                             for name, server in (("model", model), ("sglang", local_frontend))})
        finally:
            model.stop()
    return _answers


@pytest.mark.parametrize("index", range(len(SEQUENCE)), ids=[f"{p}{'+key' if k == KEY else ''}" for p, _, k in SEQUENCE])
def test_same_status_and_no_field_sglang_lacks(answers, index):
    (model_status, model_text), (real_status, real_text) = answers["model"][index], answers["sglang"][index]
    assert model_status == real_status, (SEQUENCE[index][0], model_text[:300], real_text[:300])
    if model_status == 200:
        assert not_in_reference(parse(model_text), parse(real_text), SEQUENCE[index][0]) == []


def test_a_wrong_key_or_none_is_refused_by_both(answers):
    """What SGLang's own benchmark client sees as "not ready" without the key (its ready check asks /v1/models)."""
    for path, body, key in (("/v1/models", None, "sk-wrong"), ("/generate", GENERATE, None)):
        index = SEQUENCE.index((path, body, key))
        assert answers["sglang"][index][0] == answers["model"][index][0] == 401, (path, key, answers["sglang"][index])


def test_the_fields_the_tool_reads_are_in_both(answers):
    """Every path of the conformance table, whole (nested phases included), in SGLang's answer and in the model-only
    simulator's: none is dropped because the reference lacks it (a field the tool reads that real SGLang does not
    serve fails here)."""
    from test_conformance import documented_paths, lookup

    index = SEQUENCE.index(("/server_info", None, KEY))
    paths = documented_paths()
    assert "internal_states[0].decode_cuda_graph_bs" in paths and "cuda_graph_config.decode.backend" in paths
    for name in ("sglang", "model"):
        info = json.loads(answers[name][index][1])
        missing = []
        for path in paths:
            try:
                lookup(info, path)
            except KeyError as error:
                missing.append(str(error))
        assert missing == [], (name, missing)
        assert info["internal_states"][0].get("simulated") is True  # both say they are simulated


def test_metric_names(answers):
    model, real = (metric_names(answers[name][-1][1]) for name in ("model", "sglang"))
    assert model - real == set(), "the model-only simulator exports metric names SGLang does not"
    assert METRICS_READ - model == set() and METRICS_READ - real == set()


# The scheduler-side readings the gate, the doctor and the tune use. Equal in both servers: the role, the captured
# decode graph sizes (SGLang's own get_batch_sizes_to_capture under the front end), the graph and weight memory and
# what is free after start. The pool sizes (KV tokens, the running-request cap, the mamba state cache) are SGLang's
# own arithmetic under the front end (sim/sglang_memory.py) and MODELLED in the model-only server: for the proven
# profile both allow its 16 running requests; the front end's are checked against SGLang's rules below.
SCHEDULER_READINGS = ("effective_max_running_requests_per_dp", "decode_cuda_graph_bs", "disaggregation_mode",
                      "decode_cuda_graph_memory_gb")
MEMORY_READINGS = ("weight", "startup_available", "graph")


def test_the_readings_the_tool_uses_have_the_same_values_in_both(answers):
    index = SEQUENCE.index(("/server_info", None, KEY))
    model, real = (json.loads(answers[name][index][1])["internal_states"][0] for name in ("model", "sglang"))
    for field in SCHEDULER_READINGS:
        assert field in real and field in model, field
        assert model[field] == real[field], (field, model[field], real[field])
    for field in MEMORY_READINGS:
        assert model["memory_usage"][field] == real["memory_usage"][field], (field, model["memory_usage"][field],
                                                                             real["memory_usage"][field])
    assert real["decode_cuda_graph_bs"], "the proven profile captures its decode (verify) graphs"


def test_the_pool_sizes_are_sglangs_own_arithmetic(answers):
    """Under SGLang's front end the KV tokens and the mamba state cache come from SGLang's KVCacheConfigurator: the
    state cache is written into the published context (internal_states' max_mamba_cache_size, as on a GPU), it
    bounds the running requests by SGLang's ratio (5 slots per request with the extra buffer and overlap), and
    the intermediate SSM scratch per draft token (4 here) is charged before the KV pool is sized."""
    index = SEQUENCE.index(("/server_info", None, KEY))
    real = json.loads(answers["sglang"][index][1])["internal_states"][0]
    assert isinstance(real["max_mamba_cache_size"], int) and real["max_mamba_cache_size"] // 5 >= 16
    assert real["effective_max_running_requests_per_dp"] == 16
    assert 300_000 < real["memory_usage"]["token_capacity"] < 700_000  # about 0.5 M, not the model's 1 M


# The tests below do not ask the front end: after the ones that do, so that it starts once (conftest.py stops it
# after the last test in a row that uses it).
def test_the_front_end_layer_satisfies_what_sglang_serve_imports():
    """The layer is installed from exact pins without resolving (releases/<version>/dependencies.json frontend_pins): SGLang's own
    requirements of its serving path (frontend) must hold in it, the validator env's packages included."""
    import subprocess

    from testbed import sglang_env

    check = ("import json, sys\nfrom importlib.metadata import version, PackageNotFoundError\n"
             "from packaging.requirements import Requirement\nbad = []\n"
             "for text in json.loads(sys.argv[1]):\n    r = Requirement(text)\n"
             "    try:\n        v = version(r.name)\n    except PackageNotFoundError:\n        v = None\n"
             "    if v is None or not r.specifier.contains(v, prereleases=True):\n        bad.append((text, v))\n"
             "print(json.dumps(bad))\n")
    python = sglang_env.ensure()
    result = subprocess.run([str(python), "-c", check, json.dumps(sglang_env.frontend_packages())],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == []


ENGINE_CHECK = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("resolution", sys.argv[1])
resolution = importlib.util.module_from_spec(spec)
spec.loader.exec_module(resolution)
extracted = resolution.engine_function("_set_envs_and_config")
from sglang.srt.entrypoints import engine
own = engine._set_envs_and_config
nested = [const.co_code for const in own.__code__.co_consts if hasattr(const, "co_code")]
print(json.dumps({"same_code": extracted.__code__.co_code == own.__code__.co_code,
                  "same_nested": nested == [c.co_code for c in extracted.__code__.co_consts if hasattr(c, "co_code")],
                  "names": sorted(name for name in extracted.__code__.co_names if name in vars(engine)),
                  "differ": sorted(name for name in extracted.__globals__ if name in vars(engine)
                                   and name != "_set_envs_and_config" and not name.startswith("__")
                                   and extracted.__globals__[name] is not vars(engine)[name])}))
"""


def test_the_preflights_set_envs_and_config_is_the_engines_own():
    """The host's preflight runs SGLang's `_set_envs_and_config` compiled from the engine module's file without
    importing the module (hostside/lib/sglang_resolution.engine_function): where the module does import (the front end's
    layer), it is the same bytecode bound to the very objects the imported module binds."""
    import subprocess
    from pathlib import Path

    from testbed import sglang_env

    import sglang_deploy.hostside.lib.sglang_resolution as resolution

    result = subprocess.run([str(sglang_env.ensure()), "-c", ENGINE_CHECK, str(Path(resolution.__file__))],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["same_code"] and found["same_nested"], found
    assert {"set_ulimit", "assert_pkg_version", "resolving_view", "envs", "mp"} <= set(found["names"]), found
    assert found["differ"] == [], found
