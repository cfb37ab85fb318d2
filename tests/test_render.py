"""Rendering: golden files, determinism, systemd quoting, and no secret outside the secrets file."""

import os
import shlex
from pathlib import Path

import pytest

from conftest import PROVEN, proven_with
from sglang_deploy.flags import exec_start_line, flag_args, systemd_quote
from sglang_deploy.profile import load_profile
from sglang_deploy.render import mask_secrets, render

GOLDEN = Path(__file__).resolve().parent / "golden"
KEY = "sk-golden-$ecret%key"


@pytest.mark.parametrize("name, content", [
    ("proven.service", lambda r: r.unit), ("proven.env", lambda r: r.env), ("proven.secrets.yaml", lambda r: r.secrets),
])
def test_golden_files(name, content):
    rendered = content(render(load_profile(PROVEN), api_key=KEY, cuda_home="/usr/local/cuda-13.0"))
    golden = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"{name} differs from the golden file (UPDATE_GOLDEN=1 to accept)"


def test_same_profile_renders_byte_identical():
    first, second = render(load_profile(PROVEN), api_key=KEY), render(load_profile(PROVEN), api_key=KEY)
    assert (first.unit, first.env, first.secrets) == (second.unit, second.env, second.secrets)


def test_key_only_in_the_secrets_file():
    rendered = render(load_profile(PROVEN), api_key=KEY)
    assert KEY not in rendered.unit and KEY not in rendered.env
    assert KEY not in " ".join(rendered.exec_start)
    assert '"sk-golden-$ecret%key"' in rendered.secrets
    assert "--config /etc/sglang-deploy/sglang/secrets.yaml" in rendered.unit


def test_without_key_no_config_flag():
    rendered = render(load_profile(PROVEN), api_key=None)
    assert "--config" not in rendered.unit and "api-key" not in rendered.secrets


def test_booleans_render_as_bare_flags_and_false_is_omitted():
    assert flag_args({"--enable-metrics": True, "--disable-cuda-graph": False, "--tp-size": 2,
                      "--mem-fraction-static": 0.88, "--cuda-graph-bs-decode": [1, 2, 4]}) == [
        "--enable-metrics", "--tp-size", "2", "--mem-fraction-static", "0.88", "--cuda-graph-bs-decode", "1", "2", "4"]


@pytest.mark.parametrize("arg", ["plain", "/srv/models/Qwen3.6-27B-FP8", "with space", 'quote"d', "100%", "$HOME",
                                 "back\\slash", "{\"json\": [1, 2]}"])
def test_systemd_quoting_round_trips(arg):
    quoted = systemd_quote(arg)
    # systemd unquoting: like a shell's double quotes, plus %% -> % and $$ -> $.
    unquoted = shlex.split(quoted.replace("%%", "%").replace("$$", "\x00"))[0].replace("\x00", "$")
    assert unquoted == arg
    assert " " not in quoted or quoted.startswith('"')


def test_exec_start_is_one_flag_per_line():
    line = exec_start_line(["/venv/bin/sglang", "serve", "--tp-size", "2", "--enable-metrics", "--model-path", "/a b"])
    assert line.splitlines() == ["/venv/bin/sglang serve \\", "    --tp-size 2 \\", "    --enable-metrics \\",
                                 '    --model-path "/a b"']


def test_environment_file_holds_profile_variables_and_defaults(tmp_path):
    path = proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_SIM_NOTE: "two words"\n')
    env = render(load_profile(path)).env
    assert 'SGLANG_SIM_NOTE="two words"' in env.splitlines()
    assert "HF_HUB_OFFLINE=1" in env.splitlines() and "NCCL_CUMEM_ENABLE=0" in env.splitlines()


def test_mask_secrets_hides_every_key_value():
    text = 'api-key: "sk-1"\n# comment\n  admin-api-key: other\nport: 1\n'
    assert mask_secrets(text) == 'api-key: ********\n# comment\n  admin-api-key: ********\nport: 1\n'


def test_port_override_from_host_data():
    assert "--port 30100" in render(load_profile(PROVEN), port=30100).unit


def test_secrets_file_is_understood_by_sglangs_own_config_merger(tmp_path):
    """The key reaches SGLang through --config: run SGLang 0.5.23's ConfigArgumentMerger on the file."""
    import json
    import subprocess

    from sglang_deploy.validator_env import ensure_env

    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(render(load_profile(PROVEN), api_key=KEY).secrets)
    program = (
        "import argparse, json, sys\n"
        "from sglang.srt.server_args import ServerArgs\n"
        "from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger\n"
        "p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)\n"
        "argv = ConfigArgumentMerger(p).merge_config_with_args(['--model-path', 'm', '--config', sys.argv[1]])\n"
        "print(json.dumps([argv, p.parse_args(argv).api_key]))\n"
    )
    result = subprocess.run([str(ensure_env("0.5.23")), "-c", program, str(secrets)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    argv, api_key = json.loads(result.stdout.strip().splitlines()[-1])
    assert api_key == KEY and "--config" not in argv


def test_the_launcher_never_imports_from_the_service_users_directory(tmp_path):
    """`python -m sglang.launch_server` runs in WorkingDirectory=/var/lib/<svc>, which the service user writes: with
    PYTHONSAFEPATH=1 in every unit's environment no implicit directory goes first on sys.path (security review 3)."""
    from conftest import proven_with

    profile = load_profile(proven_with(tmp_path, "launcher: serve", "launcher: launch_server"))
    rendered = render(profile, "sk-test-key-0123456789")
    assert "-m sglang.launch_server" in " ".join(rendered.exec_start)
    assert rendered.environment["PYTHONSAFEPATH"] == "1" and "PYTHONSAFEPATH=1" in rendered.env
