"""Hostile and mistaken input: every value that would change a unit's structure, reach a shell unquoted,
touch another unit or send the API key off the host is refused with `file:line: field: message`.

One row per bad input, one assertion per row. The profile rows need no host and no validator env;
tests/test_hostile_input_sim.py shows on the simulated host that a refused deploy changes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import PROVEN, proven_with, write_profile
from sglang_deploy.plan import PlanError, host_settings
from sglang_deploy.profile import ProfileError, load_profile
from sglang_deploy.render import RenderError, check_unit_structure, render, unit_value


@dataclass(frozen=True)
class Bad:
    id: str
    old: str  # text of the proven profile to replace
    new: str
    field: str  # the field path the error must name
    at: str  # a substring of the line the error must point at
    message: str  # part of what the error says


PROFILE_CASES = [
    # A unit's structure: line breaks and systemd specifiers.
    Bad("served-name-injects-a-section", "  served_name: qwen3.6-27b",
        '  served_name: "q\\n[Service]\\nExecStartPre=+/bin/touch /tmp/pwned\\n[Unit]\\nX-Pad="',
        "model.served_name", "served_name:", "control character U+000A"),
    Bad("served-name-carriage-return", "  served_name: qwen3.6-27b", '  served_name: "qwen\\r"',
        "model.served_name", "served_name:", "U+000D"),
    Bad("served-name-specifier", "  served_name: qwen3.6-27b", '  served_name: "qwen-%H"',
        "model.served_name", "served_name:", "must be letters, digits and ._:/@+-"),
    Bad("served-name-space", "  served_name: qwen3.6-27b", '  served_name: "qwen 27b"',
        "model.served_name", "served_name:", "must be letters, digits"),
    Bad("served-name-bidi-override", "  served_name: qwen3.6-27b", '  served_name: "qwen\\u202e"',
        "model.served_name", "served_name:", "U+202E"),
    Bad("flag-value-trailing-newline", "--context-length: 65536", '--context-length: "65536\\n"',
        "sglang.flags.--context-length", "--context-length", "control character U+000A"),
    Bad("flag-value-block-scalar", "--context-length: 65536", "--context-length: >\n      65536\n   ",
        "sglang.flags.--context-length", "--context-length", "a YAML block scalar"),
    Bad("flag-list-item-newline", "--context-length: 65536", '--cuda-graph-bs-decode: [1, "2\\n"]',
        "sglang.flags.--cuda-graph-bs-decode[1]", "--cuda-graph-bs-decode", "U+000A"),
    Bad("flag-name-trailing-newline", "    --tp-size: 2 ", '    "--tp-size\\n": 2 ',
        "sglang.flags.--tp-size\n", "--tp-size", "the key contains the control character"),
    Bad("flag-derived-api-key", "    --tp-size: 2 ", "    --api-key: sk-x\n    --tp-size: 2 ",
        "sglang.flags", "flags:", "flag --api-key is set by the tool"),
    Bad("flag-derived-config", "    --tp-size: 2 ", "    --config: /tmp/x.yaml\n    --tp-size: 2 ",
        "sglang.flags", "flags:", "flag --config is set by the tool"),
    Bad("env-value-newline-adds-a-variable", 'NCCL_CUMEM_ENABLE: "0"', 'NCCL_CUMEM_ENABLE: "0\\nLD_PRELOAD=/tmp/x.so"',
        "environment.NCCL_CUMEM_ENABLE", "NCCL_CUMEM_ENABLE", "control character U+000A"),
    Bad("env-name-outside-the-prefixes", 'NCCL_CUMEM_ENABLE: "0"', "LD_PRELOAD: /tmp/evil.so",
        "environment", "environment:", "variable 'LD_PRELOAD' is not accepted"),
    Bad("env-name-lower-case", 'NCCL_CUMEM_ENABLE: "0"', 'NCCL_cumem: "0"',
        "environment", "environment:", "variable 'NCCL_cumem' is not accepted"),
    Bad("env-secret-hf-token", 'NCCL_CUMEM_ENABLE: "0"', 'HF_TOKEN: hf_notarealtoken',
        "environment", "environment:", "variable 'HF_TOKEN' looks like a secret"),
    Bad("env-reason-nul", 'NCCL_CUMEM_ENABLE: "0"', 'NCCL_CUMEM_ENABLE: {value: "0", reason: "a\\0b"}',
        "environment.NCCL_CUMEM_ENABLE.reason", "NCCL_CUMEM_ENABLE", "U+0000"),
    Bad("description-escape-sequence", "description: Qwen3.6-27B FP8,", 'description: "\\e[2J Qwen3.6" #',
        "description", "description:", "U+001B"),
    # A root shell (pip install on real hosts; the simulator's checkpoint step).
    Bad("extras-shell-metacharacters", "  launcher: serve\n", "  launcher: serve\n  extras: [\"all'; touch /tmp/pwned-extras; echo '\"]\n",
        "sglang.extras", "extras:", "not a PEP 508 extra name"),
    Bad("extras-space", "  launcher: serve\n", '  launcher: serve\n  extras: ["all extra"]\n',
        "sglang.extras", "extras:", "not a PEP 508 extra name"),
    Bad("extras-bracket", "  launcher: serve\n", '  launcher: serve\n  extras: ["all]==0.1 evil["]\n',
        "sglang.extras", "extras:", "not a PEP 508 extra name"),
    Bad("pin-not-exact", "  launcher: serve\n", '  launcher: serve\n  pins: ["nvidia-nccl-cu13>=2.28"]\n',
        "sglang.pins", "pins:", "must be an exact requirement"),
    Bad("pin-url", "  launcher: serve\n", '  launcher: serve\n  pins: ["torch @ https://evil.example/torch.whl"]\n',
        "sglang.pins", "pins:", "contains whitespace"),
    Bad("pin-marker", "  launcher: serve\n", "  launcher: serve\n  pins: [\"torch==2.9.1;python_version>'3'\"]\n",
        "sglang.pins", "pins:", "carries a URL or an environment marker"),
    Bad("pin-command-substitution", "  launcher: serve\n", '  launcher: serve\n  pins: ["torch==2.9$(id)"]\n',
        "sglang.pins", "pins:", "is not a PEP 508 requirement"),
    Bad("pin-wildcard", "  launcher: serve\n", '  launcher: serve\n  pins: ["torch==2.*"]\n',
        "sglang.pins", "pins:", "must be an exact requirement"),
    Bad("pin-sglang-itself", "  launcher: serve\n", '  launcher: serve\n  pins: ["sglang==0.5.9"]\n',
        "sglang.pins", "pins:", "pin sglang through sglang.version"),
    Bad("version-trailing-newline", 'version: "0.5.23"', 'version: "0.5.23\\n"',
        "sglang.version", "version:", "control character U+000A"),
    Bad("version-range", 'version: "0.5.23"', 'version: ">=0.5"', "sglang.version", "version:", "must be an exact release"),
    Bad("model-path-shell", "  path: /srv/models/Qwen3.6-27B-FP8", '  path: "/srv/x; touch /tmp/p"',
        "model.path", "path:", "must be a normalized absolute path"),
    Bad("model-path-relative", "  path: /srv/models/Qwen3.6-27B-FP8", "  path: models/qwen",
        "model.path", "path:", "must be an absolute path on the host"),
    Bad("model-path-dotdot", "  path: /srv/models/Qwen3.6-27B-FP8", "  path: /srv/../etc",
        "model.path", "path:", "no '..'"),
    Bad("model-path-block-scalar", "  path: /srv/models/Qwen3.6-27B-FP8", "  path: |\n    /srv/models/Qwen3.6-27B-FP8",
        "model.path", "path:", "U+000A"),
    Bad("source-branch", "  path: /srv/models/Qwen3.6-27B-FP8", "  source: hf://Qwen/Qwen3.6-27B-FP8@main",
        "model.source", "source:", "'main' is a branch or tag name, not a commit"),
    Bad("source-shell", "  path: /srv/models/Qwen3.6-27B-FP8", '  source: "hf://Qwen/x;touch /tmp/p@' + "a" * 40 + '"',
        "model.source", "source:", "is not a weights source; accepted: hf://ORG/NAME@<40-hex commit>"),
    Bad("source-file-dotdot", "  path: /srv/models/Qwen3.6-27B-FP8", "  source: file:///srv/../etc",
        "model.source", "source:", "no '..'"),
    Bad("architecture-not-a-class-name", "  architecture: Qwen3_5ForConditionalGeneration",
        '  architecture: "Qwen3_5; id"', "model.architecture", "architecture:",
        "must be a model class name such as Qwen3_5ForConditionalGeneration, got 'Qwen3_5; id'"),
    Bad("draft-source-shell", "\ngate:", '\nspeculative:\n  draft:\n    source: "file:///srv/x;id"\ngate:',
        "speculative.draft.source", "    source:", "expected file:///absolute/directory on the controller"),
    Bad("socket-ifname-space", "\ngate:", '\nmultinode:\n  socket_ifname: "eth0 lo"\ngate:', "multinode.socket_ifname",
        "socket_ifname:", "is not an interface list; accepted: names such as eth0 or ens1f0"),
    # The Hub endpoint is the host's: a profile naming one would get the host's token (security review 2, finding 2).
    Bad("hub-endpoint-in-the-profile", "  path: /srv/models/Qwen3.6-27B-FP8",
        "  path: /srv/models/Qwen3.6-27B-FP8\n  mirror: https://attacker.example", "model.mirror", "mirror:",
        "not a profile field: the Hub endpoint is the host's, host data `hf_endpoint`"),
    # Another account, another unit.
    Bad("user-root", "  user: sglang", "  user: root", "service.user", "user:", "'root' is an existing system"),
    Bad("user-login-account", "  user: sglang", "  user: ubuntu", "service.user", "user:", "'ubuntu' is an existing system"),
    Bad("user-privileged-group", "  user: sglang", "  user: sudo", "service.user", "user:", "'sudo' is an existing system"),
    Bad("user-systemd-account", "  user: sglang", "  user: systemd-network", "service.user", "user:", "is an existing system"),
    Bad("user-shell-characters", "  user: sglang", '  user: "sg$(id)"', "service.user", "user:", "must be a system account name"),
    Bad("user-trailing-newline", "  user: sglang", '  user: "sglang\\n"', "service.user", "user:", "U+000A"),
    Bad("name-ssh", "  name: sglang", "  name: ssh", "service.name", "  name:", "'ssh' is a system unit"),
    Bad("name-journald", "  name: sglang", "  name: systemd-journald", "service.name", "  name:", "is a system unit"),
    Bad("name-store-root", "  name: sglang", "  name: sglang-deploy", "service.name", "  name:", "is a system unit"),
    Bad("name-template-unit", "  name: sglang", '  name: "sglang@"', "service.name", "  name:", "no '.', '@' or '.service'"),
    Bad("name-with-suffix", "  name: sglang", "  name: sglang.service", "service.name", "  name:", "no '.', '@' or '.service'"),
    Bad("name-path-traversal", "  name: sglang", '  name: "../../etc/x"', "service.name", "  name:", "must be a unit name"),
    Bad("name-trailing-newline", "  name: sglang", '  name: "sglang\\n"', "service.name", "  name:", "U+000A"),
    # The API key off the host.
    Bad("host-remote-name", "  host: 127.0.0.1", "  host: gpu.example.com", "service.host", "host:", "host names are refused"),
    Bad("host-remote-address", "  host: 127.0.0.1", "  host: 10.0.0.5", "service.host", "host:", "not a loopback or wildcard"),
    Bad("host-trailing-newline", "  host: 127.0.0.1", '  host: "127.0.0.1\\n"', "service.host", "host:", "U+000A"),
    Bad("auth-none-on-every-interface", "  host: 127.0.0.1", "  host: 0.0.0.0\n  auth: none", "service", "service:",
        "auth: none with host 0.0.0.0"),
    Bad("auth-unknown-mode", "  host: 127.0.0.1", "  host: 127.0.0.1\n  auth: basic", "service.auth", "auth:",
        "Input should be 'api-key' or 'none'"),
    # Numbers: a boolean, a string or a fullwidth digit where a number belongs; privileged ports; a watch that runs
    # the benchmark against production every few seconds (security review 2, finding 17).
    Bad("port-bool", "  port: 30000", "  port: true", "service.port", "port:", "Input should be a valid integer"),
    Bad("port-string", "  port: 30000", '  port: "30000"', "service.port", "port:", "Input should be a valid integer"),
    Bad("port-privileged", "  port: 30000", "  port: 80", "service.port", "port:", "greater than or equal to 1024"),
    Bad("timeout-float", "  start_timeout_s: 1800", "  start_timeout_s: 1800.5", "service.start_timeout_s",
        "start_timeout_s:", "Input should be a valid integer"),
    Bad("gate-floor-bool", "  min_decode_tok_s: 45", "  min_decode_tok_s: true", "gate.min_decode_tok_s",
        "min_decode_tok_s:", "Input should be a valid number"),
    Bad("gate-floor-string", "  min_decode_tok_s: 45", '  min_decode_tok_s: "45"', "gate.min_decode_tok_s",
        "min_decode_tok_s:", "Input should be a valid number"),
    Bad("gate-samples-fullwidth", "  samples: 8 ", '  samples: "８" ', "gate.samples", "samples:",
        "Input should be a valid integer"),
    Bad("watch-interval-fullwidth-digit", "\ngate:", '\nwatch:\n  interval: "６h"\ngate:', "watch.interval",
        "interval:", "must be a systemd time span"),
    Bad("watch-interval-every-second", "\ngate:", "\nwatch:\n  interval: 1s\ngate:", "watch.interval",
        "interval:", "1s is too often"),
    Bad("watch-interval-nine-minutes", "\ngate:", "\nwatch:\n  interval: 9min\ngate:", "watch.interval",
        "interval:", "accepted: 10min or longer"),
    Bad("version-fullwidth-digit", 'version: "0.5.23"', 'version: "0.5.2３"', "sglang.version", "version:",
        "must be an exact release"),
    Bad("nodes-bool", "\ngate:", "\nnodes: true\ngate:", "nodes", "nodes:", "Input should be a valid integer"),
    # YAML keys that are no names (a traceback before; security review 2, finding 19).
    Bad("yaml-list-key", "\ngate:", "\n? [a, b]\n: 1\ngate:", "invalid YAML", "? [a, b]",
        "a key must be a plain name, not a list or mapping"),
    Bad("yaml-mapping-key", "  port: 30000", "  ? {a: 1}\n  : 1\n  port: 30000", "invalid YAML", "? {a: 1}",
        "a key must be a plain name"),
    Bad("relax-unknown-directive", "  host: 127.0.0.1", "  host: 127.0.0.1\n  relax: [MemoryDenyWriteExecute]",
        "service.relax[0]", "relax:", "Input should be"),
]


def line_with(path: Path, text: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("case", PROFILE_CASES, ids=lambda case: case.id)
def test_bad_profile_value_is_refused_naming_file_line_and_field(tmp_path, case):
    path = proven_with(tmp_path, case.old, case.new)
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    prefix = f"{path}:{line_with(path, case.at)}: {case.field}: "
    assert any(p.startswith(prefix) and case.message in p for p in raised.value.problems), raised.value.problems


def test_profile_file_name_with_a_line_break_is_refused(tmp_path):
    path = write_profile(tmp_path, PROVEN.read_text(), "evil\n[Service].yaml")
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    assert raised.value.problems == [f"{path}:1: (file name): the profile's file name contains the control character "
                                     "U+000A (LINE FEED); accepted: printable characters only (a YAML block scalar "
                                     "`|` or `>` ends with a newline: use a plain or quoted scalar); accepted: "
                                     "letters, digits, '.', '_' and '-'"]


def test_check_command_exits_1_on_a_unit_injection(tmp_path):
    path = proven_with(tmp_path, PROFILE_CASES[0].old, PROFILE_CASES[0].new)
    result = subprocess.run([sys.executable, "-m", "sglang_deploy.cli", "check", str(path), "--gpus", "2"],
                            capture_output=True, text=True)
    assert (result.returncode, f"{path}:{line_with(path, 'served_name:')}: model.served_name: contains the control character U+000A" in result.stderr,
            "OK" in result.stdout) == (1, True, False), result.stdout + result.stderr


# --- inventory and --data values ------------------------------------------------------------------

HOST_DATA_CASES = [
    ("port", "30000; id", "must be an integer between 1024 and 65535"),
    ("port", "70000", "must be between 1024 and 65535"),
    ("keep_releases", "-1", "must be between 1 and 100"),
    ("max_auto_rollbacks", "0", "must be between 1 and 100"),
    ("cuda_version", "13.0\nTrusted: yes", "control character U+000A"),
    ("cuda_version", "13.0 && id", "must be MAJOR.MINOR"),
    ("cuda_repo_url", "https://mirror.example/\nTrusted: yes", "control character U+000A"),
    ("cuda_repo_url", "ftp://mirror.example/", "must be an http(s) or file URL"),
    ("driver_package_version", "580.95.05-*) ;; *) id;; esac; case x in (x", "must be a Debian version glob"),
    ("driver_userspace_packages", ["libcuda1; id"], "must be a list of Debian package names"),
    ("nccl_version", "2.28.3 && id", "must be X.Y.Z"),
    ("verify_python", "python3; id", "must be python3, /usr/bin/python3 or a venv's python"),
    ("service", "sglang;id", "must be a unit name"),
    ("gpu_topology", "infiniband", "must be pcie or nvlink"),
    ("api_key_env", "KEY; id", "must be an environment variable name"),
    ("api_key_env", "AWS_SECRET_ACCESS_KEY", "starting with SGLANG_DEPLOY_"),
    ("container_id", "99", "must be between 100 and 999999999"),
    ("sim_server", "vllm", "must be sglang or model"),
    ("hf_endpoint", "http://mirror.example:8080", "plain http only on loopback"),
    ("hf_endpoint", "http://127.0.0.1.attacker.example/", "plain http only on loopback"),
    ("hf_endpoint", "https://hub.example/x;id", "accepted: https://host[:port][/path]"),
    ("hf_endpoint", "ftp://hub.example", "is not an HF-compatible endpoint"),
    ("hf_token_endpoint", "http://hub.example", "plain http only on loopback"),
    ("hf_token_file", "/root/hf token", "must be a normalized absolute path"),
    ("port", "３0000", "must be an integer between 1024 and 65535"),
    ("port", "80", "must be between 1024 and 65535"),
    ("proxy", "http://user:secret@proxy.lan:3128", "must not carry credentials"),
    ("proxy", "http://proxy.lan:3128; id", "must be http://host:port or https://host:port"),
    ("proxy", "socks5://proxy.lan:1080", "must be http://host:port or https://host:port"),
    ("driver_userspace_packages", ["libnvidia-compute|libcuda1;id"], "must be a list of Debian package names"),
]


@pytest.mark.parametrize("key, value, message", HOST_DATA_CASES, ids=[f"{k}={v!r}"[:40] for k, v, _ in HOST_DATA_CASES])
def test_bad_host_data_is_refused_naming_where_it_was_set(monkeypatch, key, value, message):
    monkeypatch.setattr(sys, "argv", ["pyinfra", "inventory/sim.py", "deploy.py", "--data", f"{key}={value}"])
    with pytest.raises(PlanError) as raised:
        host_settings({key: value})
    assert f"--data: {key}: " in str(raised.value) and message in str(raised.value), str(raised.value)


TOKEN_ENDPOINT_CASES = [
    # (host data, refused?) The token goes only to the endpoint named with it (default: the Hub).
    ({"hf_token_file": "/root/hf-token"}, False),
    ({"hf_token_file": "/root/hf-token", "hf_endpoint": "https://huggingface.co/"}, False),
    ({"hf_token_file": "/root/hf-token", "hf_endpoint": "https://attacker.example"}, True),
    ({"hf_token_file": "/root/hf-token", "hf_endpoint": "https://hub.internal", "hf_token_endpoint": "https://hub.internal"}, False),
    ({"hf_token_file": "/root/hf-token", "hf_token_endpoint": "https://hub.internal"}, True),
    ({"hf_endpoint": "https://hub.internal"}, False),  # no token: any https endpoint
]


@pytest.mark.parametrize("data, refused", TOKEN_ENDPOINT_CASES, ids=[str(sorted(d.items()))[:60] for d, _ in TOKEN_ENDPOINT_CASES])
def test_the_hub_token_goes_only_to_the_endpoint_named_with_it(monkeypatch, data, refused):
    monkeypatch.setattr(sys, "argv", ["pyinfra", "inventory/sim.py", "deploy.py"])
    if not refused:
        host_settings(data)
        return
    with pytest.raises(PlanError) as raised:
        host_settings(data)
    assert "hf_token_file: the token of hf_token_file is sent only to hf_token_endpoint" in str(raised.value)


# --- the unit: specifiers escaped, structure checked after rendering -------------------------------

def test_values_printed_into_the_unit_escape_specifiers_and_refuse_line_breaks():
    with pytest.raises(RenderError):
        unit_value("a\nb")
    assert unit_value("100%") == "100%%"


def test_flag_values_with_specifiers_reach_the_process_unchanged(tmp_path):
    path = proven_with(tmp_path, "--context-length: 65536", '--chat-template: "/srv/t/%H $HOME;x.jinja"')
    rendered = render(load_profile(path), api_key="sk-" + "k" * 20)
    assert '--chat-template "/srv/t/%%H $$HOME;x.jinja"' in rendered.unit


def test_a_unit_with_an_injected_section_is_caught_after_rendering():
    unit = render(load_profile(PROVEN), api_key="sk-" + "k" * 20).unit
    injected = unit.replace("[Install]", "[Service]\nExecStartPre=+/bin/touch /tmp/pwned\n[Install]")
    with pytest.raises(RenderError, match="sections"):
        check_unit_structure(injected, render(load_profile(PROVEN), api_key="sk-" + "k" * 20).exec_start)


def test_relaxing_the_servers_sandbox_does_not_weaken_the_root_run_watch(tmp_path):
    from conftest import proven_with
    from sglang_deploy.profile import load_profile
    from sglang_deploy.render import render_watch

    profile = load_profile(proven_with(tmp_path, "  user: sglang\n", "  user: sglang\n  relax: [ProtectHome, "
                                       "SystemCallFilter, ProtectKernelTunables, ProtectControlGroups]\n"))
    watch = render_watch(profile).service
    assert "ProtectHome=yes" in watch and "SystemCallFilter=@system-service" in watch
    assert "ProtectKernelTunables=" not in watch  # what a container without nesting needs for any unit to start


def test_the_validator_never_sees_the_controllers_secrets(monkeypatch, probe_sockets):
    """The shared probe server is started with the scrubbed environment (a fake start here: it exits at once; no
    real server answers in probe_sockets' directory)."""
    from sglang_deploy.validate import probe_client, validator_env

    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "sk-controller-key-0123456789")
    monkeypatch.setenv("SGLANG_DEPLOY_OTHER_KEY", "sk-named-by-api-key-env")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_notarealtoken")
    seen = {}

    class Popen:
        pid = 0

        def __init__(self, argv, env=None, stdin=None, **kwargs):
            seen["env"] = env
            self.stdin = open(os.devnull, "w")

        returncode = 1

        def poll(self):
            return 1

    monkeypatch.setattr(validator_env, "ensure_env", lambda version, quiet=False: Path("/nonexistent/python"))
    monkeypatch.setattr(probe_client.subprocess, "Popen", Popen)
    with pytest.raises(validator_env.ValidatorEnvError, match="could not be loaded"):
        validator_env.run_probe("0.5.23", [])
    env = seen["env"]
    assert env is not None and "PATH" in env
    assert not {"SGLANG_DEPLOY_API_KEY", "SGLANG_DEPLOY_OTHER_KEY", "GITHUB_TOKEN"} & set(env)
