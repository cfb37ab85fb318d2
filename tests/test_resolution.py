"""SGLang 0.5.23's whole resolution (ServerArgs.resolve_once, every step) under the target's GPU facts: what
check --full, every deploy and each release's resolved.json rest on. Runs in the cached validator env."""

import json

import pytest

from conftest import DFLASH, PROFILES, PROVEN, dflash_profile, proven_with, synthetic_draft, write_profile
from sglang_deploy.validate import gpu_facts
from sglang_deploy.validate.gpu_facts import GpuFactsError, from_host_gpus
from sglang_deploy.profile import load_profile
from sglang_deploy.validate.check import check_profile


def resolve(path, gpu="a6000", gpus=2):
    report = check_profile(load_profile(path), gpus=gpus, topology="pcie", gpu=gpu_facts.model(gpu))
    return report


@pytest.mark.parametrize("path", sorted(PROFILES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_committed_profile_passes_the_whole_resolution(path, tmp_path, monkeypatch):
    if path == DFLASH:  # its drafter is the user's: frozen here from a synthetic one of the same config
        from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

        monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path))
        path = dflash_profile(tmp_path, synthetic_draft(tmp_path / "qwen3.6-27b-dflash"))
    profile = load_profile(path)
    report = check_profile(profile, gpus=2, topology="pcie", node=__import__("sglang_deploy.cli").cli.stand_in_node(profile))
    assert report.ok, report.lines()
    steps = report.resolution["steps"]
    # every step of run_resolution_pipeline ran (0.5.23 has 90; the last one validates the DeepEP budget), then
    # what `sglang serve` runs before it spawns a process (Engine._launch_subprocesses)
    assert len(steps) >= 87 and steps[-3:] == ["validate_deepep_v2_dispatch_token_budget", "check_server_args",
                                               "resolve_auto_parsers"], steps[-5:]
    assert report.resolution["resolved"]["device"] == "cuda"


def test_what_sglang_serve_checks_at_start_is_part_of_the_check(tmp_path):
    """check_server_args() runs right after the resolution in `sglang serve`: a served name with a colon passes every
    resolution step and is refused there, before the running server is stopped. The line names the profile field
    behind the flag the tool sets, with SGLang's own message and step."""
    path = proven_with(tmp_path, "served_name: qwen3.6-27b", 'served_name: "qwen3.6:27b"')
    report = resolve(path)
    assert [p.rule for p in report.problems] == ["sglang-resolution"], report.lines()
    assert report.lines()[0].startswith(
        f"{path}:7: model.served_name: SGLang 0.5.23 refuses the command line at check_server_args: "
        "AssertionError: served_model_name cannot contain a colon"), report.lines()


def test_the_profiles_environment_is_an_input_of_the_resolution(tmp_path):
    """SGLang's hooks read SGLANG_* variables while resolving: a profile whose environment: makes SGLang refuse is
    refused by the check, naming the variable (SGLANG_GRPC_PORT sets grpc_port, range-checked in
    handle_deprecated_args), and the same variable without the profile's environment is accepted."""
    path = proven_with(tmp_path, "  CUDA_DEVICE_ORDER: PCI_BUS_ID", '  SGLANG_GRPC_PORT: "70000"\n  CUDA_DEVICE_ORDER: PCI_BUS_ID')
    report = resolve(path)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "SGLANG_GRPC_PORT" in text)
    # (the variable is not on the environment's allow-list either: refused by name too, env-not-reviewed)
    assert f"{path}:{line}: environment.SGLANG_GRPC_PORT: SGLang 0.5.23 refuses the command line at " \
        "handle_deprecated_args: ValueError: --grpc-port / SGLANG_GRPC_PORT (70000) must be between 1 and 65535 " \
        "[sglang-resolution]" in report.lines(), report.lines()
    accepted = resolve(proven_with(tmp_path, "  CUDA_DEVICE_ORDER: PCI_BUS_ID",
                                   '  SGLANG_GRPC_PORT: "50051"\n  CUDA_DEVICE_ORDER: PCI_BUS_ID', "grpc.yaml"))
    assert accepted.resolution["resolved"]["grpc_port"] == 50051  # what the unit's environment makes SGLang serve


def test_a_setting_the_host_has_the_module_for_is_not_refused(tmp_path):
    """--mamba-backend flashinfer imports flashinfer.mamba while resolving (mamba_hook.py); flashinfer_python is a
    pinned dependency of sglang, so the host has it and so does the validator env."""
    report = resolve(proven_with(tmp_path, "    --enable-metrics: true ",
                                 "    --mamba-backend: flashinfer\n    --enable-metrics: true "))
    assert report.ok, report.lines()
    assert report.resolution["resolved"]["mamba_backend"] == "flashinfer"


def test_language_model_only_is_refused_with_sglangs_own_message(tmp_path):
    path = proven_with(tmp_path, "    --enable-metrics: true ", "    --language-model-only: true\n    --enable-metrics: true ")
    report = resolve(path)
    assert [p.rule for p in report.problems] == ["sglang-resolution"], report.lines()
    line = report.lines()[0]
    assert line.startswith(f"{path}:{path.read_text().splitlines().index('    --language-model-only: true') + 1}: "
                           "sglang.flags.--language-model-only: SGLang 0.5.23 refuses the command line at "
                           "handle_encoder_disaggregation: ValueError: --language-model-only does not support "
                           "['Qwen3_5ForConditionalGeneration']"), line


def test_the_resolution_follows_the_gpu_facts():
    a6000 = resolve(PROVEN, "a6000").resolution["resolved"]
    h100 = resolve(PROVEN, "h100").resolution["resolved"]
    # fields only the whole pipeline resolves, from the GPU it is told about (as on the host)
    assert (a6000["attention_backend"], a6000["chunked_prefill_size"]) == ("flashinfer", 4096)
    assert (h100["attention_backend"], h100["chunked_prefill_size"]) == ("fa3", 8192)
    for resolved in (a6000, h100):
        assert resolved["page_size"] == 1 and resolved["mamba_radix_cache_strategy"] == "extra_buffer"
        assert resolved["cuda_graph_config"]["prefill"]["backend"] == "breakable"
        assert (resolved["speculative_algorithm"], resolved["speculative_num_draft_tokens"]) == ("EAGLE", 4)
        # the host's path, not the stand-in directory the config was read from; no per-start randomness
        assert resolved["model_path"] == resolved["tokenizer_path"] == "/srv/models/Qwen3.6-27B-FP8"
        assert "random_seed" not in resolved and "api_key" not in resolved


def test_the_checkpoint_config_is_an_input_of_the_resolution(tmp_path, monkeypatch):
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path))  # model.config: under a weights directory, or manifests/
    config = json.loads((PROFILES.parent / "manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json").read_text())
    config["architectures"] = ["Cosmos3ForConditionalGeneration"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    path = proven_with(tmp_path, "config: manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json",
                       f"config: {tmp_path / 'config.json'}")
    report = resolve(path)
    assert [p.rule for p in report.problems] == ["model-config"]
    assert ("model.architecture: model.architecture is Qwen3_5ForConditionalGeneration but "
            f"{tmp_path / 'config.json'} says Cosmos3ForConditionalGeneration") in report.lines()[0]


@pytest.mark.parametrize("old, new, expected", [
    ("  config: manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json", "  config: manifests/missing/config.json",
     "model.config: manifests/missing/config.json does not exist"),
    ("  config: manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json", "",
     "model: model.config is required for SGLang's resolution"),
])
def test_a_missing_config_is_named(tmp_path, old, new, expected):
    text = PROVEN.read_text()
    line = next(line for line in text.splitlines() if line.startswith(old))
    path = write_profile(tmp_path, text.replace(line, new, 1))
    report = resolve(path)
    assert [p.rule for p in report.problems] == ["model-config"] and expected in report.lines()[0], report.lines()


def test_gpu_models_from_host_facts():
    assert from_host_gpus([{"name": "NVIDIA RTX A6000"}] * 2).key == "a6000"
    assert from_host_gpus([]) is None and from_host_gpus([{"index": 0}]) is None
    with pytest.raises(GpuFactsError, match="not in the resolution stand-in's table"):
        from_host_gpus([{"name": "NVIDIA GeForce RTX 3090"}])
    with pytest.raises(GpuFactsError, match="mixed GPU models"):
        from_host_gpus([{"name": "NVIDIA RTX A6000"}, {"name": "NVIDIA H200"}])


@pytest.fixture(scope="module")
def private_probe(tmp_path_factory):
    """A probe server of its own (validate/probe_client.py), started while the controller's shell holds SGLANG_* variables
    SGLang would act on, and warmed up with a command line SGLang refuses (--language-model-only); then asked for the
    proven profile. One start of SGLang (about 12 CPU-s) for the two tests below."""
    from pathlib import Path

    from sglang_deploy.validate import probe_client, resolution, validator_env
    from sglang_deploy.flags import server_args
    from sglang_deploy.validate.resolution import model_config_problems

    gpu = gpu_facts.model("a6000")

    def request(path):
        profile = load_profile(path)
        argv = server_args(profile, 30999, None)
        return {"argvs": [argv], "algorithms": ["NEXTN"],
                "resolve": resolution.request(argv, model_config_problems(profile)[1], gpu, 2,
                                              environment=profile.env_values())}

    directory = tmp_path_factory.mktemp("profiles")
    refused = request(proven_with(directory, "    --enable-metrics: true ",
                                  "    --language-model-only: true\n    --enable-metrics: true "))
    proven = request(PROVEN)
    facts = proven["resolve"]["gpu_facts"]
    private = probe_client.socket_path(Path("/isolation-check"), ["0.5.23", facts, *validator_env._probe_identity("0.5.23")])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGLANG_GRPC_PORT", "70000")  # refused if SGLang saw it (the test above)
        patch.setenv("SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION", "1")
        try:
            first = probe_client.answer(private, lambda: validator_env._server_command("0.5.23", facts), refused)
            after_refusal = probe_client.answer(private, lambda: pytest.fail("started twice"), proven)
        finally:
            probe_client.stop_all(Path("/isolation-check"))
    shared = validator_env.run_probe("0.5.23", proven["argvs"], proven["algorithms"], resolve=proven["resolve"])
    return {"first": first, "after_refusal": after_refusal, "shared": shared}


def test_the_controllers_own_environment_is_never_an_input(private_probe):
    """The operator's shell may hold SGLANG_* variables: neither the probe server started under them nor the request
    sees them, so the proven profile's verdict and resolution are those of its own environment."""
    answer = private_probe["after_refusal"]
    assert answer["resolution"]["error"] is None, answer["resolution"]["error"]
    assert answer["resolution"]["resolved"]["grpc_port"] is None


def test_the_shared_probe_answers_each_request_as_if_it_were_the_first(private_probe):
    """The probe server answers in forks of one process that imported SGLang and resolved a warm-up request: a
    server warmed up with a refused command line (--language-model-only) gives the same answer for the proven one as
    the shared server, steps and log included."""
    assert private_probe["first"]["resolution"]["error"], "the warm-up was expected to be refused"
    after_refusal, shared = private_probe["after_refusal"], private_probe["shared"]
    assert after_refusal["resolution"]["error"] is None
    assert after_refusal["resolution"] == shared["resolution"]
    assert after_refusal["results"] == shared["results"]
