"""The simulator against SGLang 0.5.23's interface: endpoints, streaming, API key, start phase, faults."""

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from testbed.calibration import PROVEN, measure
from testbed.local_sim import LocalSim, stub_model_dir

KEY = "sk-sim-test"


def call(url, path, body=None, key=None, timeout=60):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return stub_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture
def start_sim(model_dir, tmp_path):
    started = []

    def start(flags=PROVEN, env=None, wait=True):
        sim = LocalSim(list(flags), env or {}, model_dir).start(tmp_path / f"sim{len(started)}.log")
        started.append(sim)
        return sim.wait_ready() if wait else sim
    yield start
    for sim in started:
        sim.stop()


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    sim = LocalSim(PROVEN + ["--api-key", KEY], {}, model_dir).start(tmp_path_factory.mktemp("log") / "sim.log")
    sim.wait_ready()
    yield sim
    sim.stop()


def test_health_ready_and_metrics_stay_open_with_an_api_key(server):
    for path in ("/health", "/health_generate", "/ready", "/metrics"):
        assert call(server.url, path)[0] == 200, path


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info", "/model_info", "/v1/models"])
def test_other_endpoints_need_the_key(server, path):
    assert call(server.url, path)[0] == 401
    assert call(server.url, path, key="wrong")[0] == 401
    assert call(server.url, path, key=KEY)[0] == 200


def test_server_info_reports_resolved_settings_and_says_simulated(server):
    info = json.loads(call(server.url, "/server_info", key=KEY)[1])
    assert info["internal_states"][0]["simulated"] is True and info["version"] == "0.5.23"
    # SGLang's speculative_hook resolves NEXTN to EAGLE; /server_info serves resolved values.
    assert (info["speculative_algorithm"], info["speculative_num_steps"], info["speculative_num_draft_tokens"]) == ("EAGLE", 3, 4)
    assert info["disable_custom_all_reduce"] is False
    assert info["cuda_graph_config"]["decode"]["backend"] == "full" and info["cuda_graph_config"]["decode"]["max_bs"] == 16
    # As SGLang's build_server_info: the key itself, and the launch command after the --config merge.
    assert info["api_key"] == KEY and f"--api-key {KEY}" in info["launch_command"]
    state = info["internal_states"][0]
    graph = state["memory_usage"]["graph"]  # SGLang's per-phase schema
    assert graph["target_verify"] > 0 and graph["draft_decode"] > 0 and "avg_spec_accept_length" in state


def test_model_info(server):
    info = json.loads(call(server.url, "/model_info", key=KEY)[1])
    assert info["is_generation"] is True and info["architectures"] == ["Qwen3_5ForConditionalGeneration"]


def test_generate_meta_info(server):
    status, body = call(server.url, "/generate", {"text": "Tell me about rivers.", "sampling_params": {
        "max_new_tokens": 40, "temperature": 0, "ignore_eos": True}}, key=KEY)
    assert status == 200
    response = json.loads(body)
    meta = response["meta_info"]
    assert meta["completion_tokens"] == 40 == len(response["output_ids"]) and meta["prompt_tokens"] > 0
    assert meta["spec_accept_length"] == pytest.approx(40 / meta["spec_verify_ct"])
    assert 0 < meta["first_token_latency"] < meta["e2e_latency"] and meta["decode_throughput"] > 0


def test_generate_is_deterministic_at_temperature_0(server):
    body = {"text": "Same prompt", "sampling_params": {"max_new_tokens": 30, "temperature": 0}}
    first, second = (json.loads(call(server.url, "/generate", body, key=KEY)[1]) for _ in range(2))
    assert first["output_ids"] == second["output_ids"]
    assert first["meta_info"]["spec_verify_ct"] == second["meta_info"]["spec_verify_ct"]


def test_generate_streaming(server):
    request = urllib.request.Request(server.url + "/generate", headers={"Authorization": f"Bearer {KEY}"},
                                     data=json.dumps({"text": "Stream please", "stream": True,
                                                      "sampling_params": {"max_new_tokens": 20}}).encode())
    chunks = []
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        for line in response:
            if line.startswith(b"data: "):
                chunks.append(line[6:].strip().decode())
    assert chunks[-1] == "[DONE]"
    payloads = [json.loads(c) for c in chunks[:-1]]
    counts = [p["meta_info"]["completion_tokens"] for p in payloads]
    assert counts == sorted(counts) and counts[-1] == 20 and len(payloads) > 3
    assert "e2e_latency" in payloads[-1]["meta_info"]


def test_openai_endpoints(server):
    status, body = call(server.url, "/v1/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12,
        "return_spec_tokens_details": True}, key=KEY)
    response = json.loads(body)
    assert status == 200 and response["object"] == "chat.completion"
    assert response["usage"]["completion_tokens"] == 12 and "spec_accept_length" in response["sglext"]
    status, body = call(server.url, "/v1/completions", {"prompt": "Once", "max_tokens": 5}, key=KEY)
    assert status == 200 and json.loads(body)["choices"][0]["text"]
    models = json.loads(call(server.url, "/v1/models", key=KEY)[1])
    assert models["data"][0]["id"]


def test_metrics_use_sglang_names(server):
    call(server.url, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 8}}, key=KEY)
    text = call(server.url, "/metrics")[1]
    for name in ("sglang:num_running_reqs", "sglang:gen_throughput", "sglang:spec_accept_length",
                 "sglang:is_cuda_graph", "sglang:generation_tokens_total", "sglang:spec_verify_calls_total",
                 'mode="decode_cuda_graph"', "sglang:time_to_first_token_seconds_bucket",
                 "sglang:inter_token_latency_seconds_count", "sglang:e2e_request_latency_seconds_sum"):
        assert name in text, name


def test_metrics_absent_without_enable_metrics(start_sim):
    sim = start_sim([f for f in PROVEN if f != "--enable-metrics"])
    assert call(sim.url, "/metrics")[0] == 404
    meta = json.loads(call(sim.url, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 4}})[1])["meta_info"]
    assert "first_token_latency" not in meta


def test_refused_while_loading_then_503_during_warmup_then_up(start_sim):
    sim = start_sim(env={"SGLANG_SIM_START_SECONDS": "3"}, wait=False)
    deadline = time.monotonic() + 8
    seen = []  # http_server.py: no listener until the schedulers are ready, 503 during the warmup
    while time.monotonic() < deadline and 200 not in seen:
        try:
            status = call(sim.url, "/health", timeout=2)[0]
        except (urllib.error.URLError, OSError):
            status = "refused"
        if not seen or seen[-1] != status:
            seen.append(status)
        time.sleep(0.05)
    assert seen == ["refused", 503, 200], seen
    assert call(sim.url, "/ready")[0] == 200
    log = sim.log()
    assert "SIMULATED SGLang 0.5.23" in log and "Capture target verify CUDA graph begin" in log
    assert "Capture draft decode CUDA graph begin" in log


@pytest.mark.parametrize("flag", [["--cuda-graph-max-bs", "16"], ["--disable-piecewise-cuda-graph"],
                                  ["--mamba-scheduler-strategy", "auto"], ["--no-such-flag"]])
def test_unknown_or_removed_flags_exit_non_zero_like_sglang(model_dir, flag):
    result = subprocess.run([sys.executable, "-m", "sglang_deploy.sim.server", "serve", "--model-path", model_dir,
                             *flag], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert ("ambiguous option" if flag[0] == "--cuda-graph-max-bs" else "unrecognized arguments") in result.stderr


def test_mtp_algorithm_fails_at_start_with_sglangs_own_error(start_sim):
    sim = start_sim([*PROVEN[:3], "MTP", *PROVEN[4:]], wait=False)
    assert sim.process.wait(20) == 1
    assert "MTP" in sim.log() and "ValueError" in sim.log()  # raised by SGLang's own speculative hook


def test_missing_checkpoint_fails_at_start(tmp_path):
    sim = LocalSim(PROVEN, {}, str(tmp_path / "nowhere")).start(tmp_path / "log")
    assert sim.process.wait(20) == 1 and "config.json" in sim.log()


@pytest.mark.parametrize("flags", [["--disable-cuda-graph"], ["--disable-decode-cuda-graph"],
                                   ["--cuda-graph-config", '{"decode": {"backend": "disabled"}}']])
def test_decode_log_lines_and_graphs_off_by_any_flag_sglang_folds(start_sim, flags):
    sim = start_sim(PROVEN + flags)
    call(sim.url, "/generate", {"text": "long", "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}})
    assert "cuda graph: False" in sim.log() and "accept len:" in sim.log() and "gen throughput (token/s):" in sim.log()
    info = json.loads(call(sim.url, "/server_info")[1])
    assert info["cuda_graph_config"]["decode"]["backend"] == "disabled"
    assert not any(info["internal_states"][0]["memory_usage"]["graph"][phase]
                   for phase in ("decode", "target_verify", "draft_decode", "draft_extend"))


def test_no_p2p_drops_custom_all_reduce_with_sglangs_warning_and_keeps_the_field(start_sim):
    sim = start_sim(env={"SGLANG_SIM_P2P": "0"})
    info = json.loads(call(sim.url, "/server_info")[1])
    assert info["disable_custom_all_reduce"] is False  # SGLang never writes the runtime fallback back
    assert ("CustomAllreduce is disabled because your platform lacks GPU P2P capability or P2P test failed."
            in sim.log())


# --- faults -----------------------------------------------------------------------------------------

def test_fault_crash_at_start(start_sim):
    sim = start_sim(env={"SGLANG_SIM_CRASH_AT_START": "1"}, wait=False)
    assert sim.process.wait(20) == -9 and "SIMULATED FAULT" in sim.log()  # the launcher kills its tree


def test_fault_hang_at_start(start_sim):
    sim = start_sim(env={"SGLANG_SIM_HANG_AT_START": "1"}, wait=False)
    time.sleep(2)
    assert sim.process.poll() is None
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        call(sim.url, "/health", timeout=2)


def test_fault_graph_capture_failure_kills_the_server_as_0_5_23_does(start_sim):
    sim = start_sim(env={"SGLANG_SIM_GRAPH_CAPTURE_FAIL": "1"}, wait=False)
    assert sim.process.wait(20) == -9  # launch_phase_sigquit_handler: kill_process_tree(os.getpid())
    log = sim.log()
    assert "Capture cuda graph failed: CUDA error: out of memory" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log


def test_fault_die_after_requests(start_sim):
    sim = start_sim(env={"SGLANG_SIM_DIE_AFTER_REQUESTS": "2"})
    for _ in range(2):
        assert call(sim.url, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})[0] == 200
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        call(sim.url, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})
    assert sim.process.wait(10) == -9


def test_fault_5xx_on_generate(start_sim):
    sim = start_sim(env={"SGLANG_SIM_GENERATE_5XX": "1"})
    assert call(sim.url, "/generate", {"text": "x"})[0] == 500
    assert call(sim.url, "/health")[0] == 200


@pytest.mark.parametrize("fault, message", [("SGLANG_SIM_STREAM_ERROR_AFTER", "the stream ended with an error"),
                                            ("SGLANG_SIM_STREAM_ABORT_AFTER", "finished with 'abort' after")])
def test_gate_client_counts_an_errored_or_aborted_stream_as_a_failure(start_sim, fault, message):
    result = start_sim(env={fault: "20"}).bench("--samples", "2", "--warmup", "0", "--max-new-tokens", "96",
                                                "--concurrency", "1")
    assert result["samples"] == [] and result["decode_tok_s"] is None
    assert len(result["errors"]) == 2 and message in result["errors"][0], result["errors"]


def test_fault_slowdown_and_accept_collapse_are_visible_to_the_gate_client(start_sim):
    args = ["--samples", "2", "--warmup", "0", "--max-new-tokens", "96", "--concurrency", "1"]
    base = start_sim(env={"SGLANG_SIM_SEED": "3"}).bench(*args)
    slow = start_sim(env={"SGLANG_SIM_SEED": "3", "SGLANG_SIM_SLOWDOWN_PCT": "15"}).bench(*args)
    collapsed = start_sim(env={"SGLANG_SIM_SEED": "3", "SGLANG_SIM_ACCEPT_COLLAPSE": "1"}).bench(*args)
    ratio = slow["decode_tok_s"]["median"] / base["decode_tok_s"]["median"]
    assert 0.82 <= ratio <= 0.92  # 1 / 1.15 = 0.87
    assert collapsed["accept_length"]["median"] < 1.5 < base["accept_length"]["median"]


def test_launch_blocking_costs_what_was_measured(start_sim):
    """CUDA_LAUNCH_BLOCKING=1: +22 % per decode step with graphs (benchmarks/env_cost_probe.py on H200)."""
    args = ["--samples", "2", "--warmup", "0", "--max-new-tokens", "96", "--concurrency", "1"]
    base = start_sim(env={"SGLANG_SIM_SEED": "5"}).bench(*args)
    blocking = start_sim(env={"SGLANG_SIM_SEED": "5", "CUDA_LAUNCH_BLOCKING": "1"}).bench(*args)
    assert 0.76 <= blocking["decode_tok_s"]["median"] / base["decode_tok_s"]["median"] <= 0.88  # 1 / 1.22 = 0.82


# --- calibration ------------------------------------------------------------------------------------

def test_calibration_table_lands_in_every_band():
    table = measure(samples=5, max_new_tokens=256)  # the gate's defaults
    out_of_band = [row for row in table if not row["in_band"]]
    assert not out_of_band, "\n".join(f"{r['name']}: {r['tok_s']:.1f} tok/s tau {r['tau']} "
                                      f"({r['vs_proven']:.3f} of proven), band {r['band']}" for r in out_of_band)


def test_a_large_stream_interval_does_not_inflate_the_measured_rate(start_sim):
    """--stream-interval N sends N tokens per chunk: the gate's client counts tokens between chunks, so the rate
    stays the server's (it used to credit the first chunk's tokens to no time: +33 % at N=64 of 256)."""
    args = ["--samples", "2", "--warmup", "0", "--max-new-tokens", "256", "--concurrency", "1"]
    base = start_sim(env={"SGLANG_SIM_SEED": "7"}).bench(*args)
    chunky = start_sim([*PROVEN, "--stream-interval", "64"], env={"SGLANG_SIM_SEED": "7"}).bench(*args)
    one_chunk = start_sim([*PROVEN, "--stream-interval", "256"], env={"SGLANG_SIM_SEED": "7"}).bench(*args)
    ratio = chunky["decode_tok_s"]["median"] / base["decode_tok_s"]["median"]
    assert (0.9 <= ratio <= 1.1, one_chunk["decode_tok_s"], "in one chunk" in " ".join(one_chunk["errors"])) == (
        True, None, True), (ratio, one_chunk["errors"])


def test_fault_accept_collapse_after_n_requests(start_sim):
    """SGLANG_SIM_ACCEPT_COLLAPSE_AFTER=N: acceptance decays after N requests of the process (a restart resets it)."""
    args = ["--samples", "2", "--warmup", "0", "--max-new-tokens", "96", "--concurrency", "1"]
    sim = start_sim(env={"SGLANG_SIM_SEED": "3", "SGLANG_SIM_ACCEPT_COLLAPSE_AFTER": "2"})
    before, after = sim.bench(*args), sim.bench(*args)
    assert before["accept_length"]["min"] > 2.0 and after["accept_length"]["max"] < 1.5


def test_fault_exit_0_after_requests(start_sim):
    sim = start_sim(env={"SGLANG_SIM_EXIT0_AFTER_REQUESTS": "1"})
    assert call(sim.url, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})[0] == 200
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        call(sim.url, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})
    assert sim.process.wait(10) == 0  # a fault that exits cleanly: only Restart=always brings it back


def test_fault_graph_memory_zero_keeps_the_captured_sizes(start_sim):
    """SGLANG_SIM_GRAPH_MEMORY_ZERO: the decode-side graphs are captured but their memory deltas read 0 (they reused
    the prefill graph's blocks), as a real card can report: the captured sizes are still there for the gate."""
    sim = start_sim(env={"SGLANG_SIM_GRAPH_MEMORY_ZERO": "1"})
    state = json.loads(call(sim.url, "/server_info", key=KEY)[1])["internal_states"][0]
    graph = state["memory_usage"]["graph"]
    assert [graph[phase] for phase in ("decode", "target_verify", "draft_decode", "draft_extend")] == [0.0] * 4
    assert state["decode_cuda_graph_bs"] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]
    assert state["decode_cuda_graph_memory_gb"] == 0.0
