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


def test_the_templates_compiled_code_is_kept_and_renders_the_same(tmp_path, monkeypatch):
    """The templates' compiled code lives in $SGLANG_DEPLOY_CACHE/jinja (render._bytecode_cache: a no-op deploy
    loads it instead of compiling): rendered from that cache, the files are byte for byte those rendered without it."""
    from sglang_deploy import render as render_module

    monkeypatch.setenv("SGLANG_DEPLOY_CACHE", str(tmp_path))
    monkeypatch.setattr(render_module, "_bytecode_cache", render_module._bytecode_cache.__wrapped__)
    assert render_module._bytecode_cache() is not None
    first = render(load_profile(PROVEN), api_key=KEY)  # compiles, and keeps the code
    assert len(list((tmp_path / "jinja").iterdir())) >= 3  # unit, environment, secrets
    second = render(load_profile(PROVEN), api_key=KEY)  # loads the kept code
    monkeypatch.setattr(render_module, "_bytecode_cache", lambda: None)
    plain = render(load_profile(PROVEN), api_key=KEY)
    assert (first.unit, first.env, first.secrets) == (second.unit, second.env, second.secrets) \
        == (plain.unit, plain.env, plain.secrets)


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

    from sglang_deploy.validate.validator_env import ensure_env

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


# --- every rendered unit read by systemd's own parser (security review 3, §2: the tool's unit reader must never
# disagree with systemd unnoticed) ----------------------------------------------------------------------------------

def rendered_units(tmp_path):
    """Every unit file the tool writes, by the name it gets on the host: the committed profiles' servers (the proven,
    the tuned one-step and the multi-node ones; the DFlash profile with its drafter frozen), with a key, a waiver and a
    relaxation; their perf watch's service and timer; the router's unit."""
    from conftest import DFLASH, PROFILES, dflash_profile, synthetic_draft
    from sglang_deploy.render import render_watch
    from sglang_deploy.router import RouterSettings, render_unit

    paths = [p for p in sorted(PROFILES.glob("*.yaml")) if p != DFLASH]
    paths.append(dflash_profile(tmp_path, synthetic_draft(tmp_path / "drafters" / "dflash")))
    waived = proven_with(tmp_path, "  user: sglang\n", "  user: sglang\n  relax: [ProtectKernelTunables]\n",
                         "waived.yaml")
    waived.write_text(waived.read_text() + '\nwaivers:\n  mem-fraction-range: "measured on the lab host, 100% fine"\n')
    paths.append(waived)
    units = {}
    for number, path in enumerate(paths):
        profile = load_profile(path)
        rendered, watch = render(profile, api_key=KEY, cuda_home="/usr/local/cuda-13.0"), render_watch(profile)
        units[f"p{number}/sglang.service"] = (rendered.unit, rendered.exec_start)
        units[f"p{number}/sglang-watch.service"] = (watch.service, watch.exec_start)
        units[f"p{number}/sglang-watch.timer"] = (watch.timer, None)
    router = render_unit(RouterSettings(policy="round_robin"), ["http://127.0.0.1:30001", "http://[fd00::7]:30000"])
    units["router/sglang-router.service"] = (router, None)
    return units


def systemd_verify(tmp_path, units: dict) -> dict:
    """systemd-analyze verify on each unit (with its siblings beside it); each unit's messages, without the one
    verify prints for an ExecStart program this machine does not have (the venv's sglang, the router's python)."""
    import re
    import shutil
    import subprocess

    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed here")
    messages = {}
    for name, (text, _) in units.items():
        path = tmp_path / "units" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for name in units:
        path = tmp_path / "units" / name
        result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)], capture_output=True, text=True,
                                timeout=120, cwd=path.parent)
        missing = re.compile(re.escape(path.name) + r": Command (\S+) is not executable: No such file or directory")
        lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        kept = [line for line in lines if not (missing.search(line) and not shutil.which(missing.search(line)[1]))]
        messages[name] = kept
    return messages


def test_every_rendered_unit_is_read_by_systemds_own_parser_without_a_complaint(tmp_path):
    from conftest import PROFILES

    units = rendered_units(tmp_path)
    assert len(units) == 3 * (len(list(PROFILES.glob("*.yaml"))) + 1) + 1  # every committed profile, the waived one
    assert systemd_verify(tmp_path, units) == {name: [] for name in units}


@pytest.mark.parametrize("change, message", [
    (("Restart=always", "Restart=always\nRestartSecs=10"), "Unknown key 'RestartSecs' in section [Service]"),
    (("[Service]", "[Servcie]"), "Unknown section 'Servcie'"),
    (("Type=simple", "Type=simplest"), "Failed to parse service type"),
])
def test_the_systemd_check_fails_on_a_key_or_value_systemd_does_not_read(tmp_path, change, message):
    """The check above can fail: a unit with a misspelt key, section or value is reported by systemd's parser."""
    unit = render(load_profile(PROVEN)).unit
    assert change[0] in unit
    found = systemd_verify(tmp_path, {"sglang.service": (unit.replace(change[0], change[1], 1), None)})
    assert any(message in line for line in found["sglang.service"]), found


def test_the_launcher_imports_nothing_from_the_directories_the_service_user_writes(tmp_path):
    """`python -m` (launcher launch_server) in the unit's environment, its working directory the service user's
    state directory (HOME too), with a module and a user-site .pth planted there: a real venv (the validator env's,
    made as the host's) imports neither (security review 3, finding 6). Without the unit's PYTHONSAFEPATH it would."""
    import subprocess

    from sglang_deploy.validate import validator_env

    python = validator_env.env_dir("0.5.23") / "bin" / "python"
    state = tmp_path / "var-lib-sglang"
    marker = tmp_path / "ran"
    (state / "planted_mod.py").parent.mkdir(parents=True)
    (state / "planted_mod.py").write_text(f"open({str(marker)!r}, 'w').write('module')\n")
    site = state / ".local" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "zz.pth").write_text(f"import os; open({str(marker)!r}, 'w').write('pth')\n")
    environment = {**render(load_profile(PROVEN)).environment, "HOME": str(state)}
    environment["PATH"] = "/usr/bin:/bin"
    assert environment["PYTHONSAFEPATH"] == "1" and not {"PYTHONPATH", "PYTHONUSERBASE", "PYTHONSTARTUP"} & set(environment)
    run = subprocess.run([str(python), "-m", "planted_mod"], cwd=state, env=environment, capture_output=True, text=True,
                         timeout=60)
    assert "No module named planted_mod" in run.stderr and not marker.exists(), (run.stderr, marker.exists())
    without = {k: v for k, v in environment.items() if k != "PYTHONSAFEPATH"}
    subprocess.run([str(python), "-m", "planted_mod"], cwd=state, env=without, capture_output=True, timeout=60)
    assert marker.read_text() == "module"  # the check can fail: the working directory is on sys.path without it
