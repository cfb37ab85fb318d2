"""Root never starts a release venv's python, and a venv whose wheels carry startup hooks is refused (security review
3, finding 3: a wheel's .pth file runs in every process of the venv's python, root's facts and checks included).

The commands the tool builds for root (the provisioning operations and every fact they ask, the facts verb, the
weights fetch, the preflight, the doctor's probe) are scanned: a program of a release venv started there must run as
the service user (`runuser -u USER --`, isolated with -I), or as `python -I -S` (no site-packages, no .pth), or be the
installer on the venv the same operation has just created empty. Then the hooks check itself, on fixture venvs."""

from __future__ import annotations

import base64
import hashlib
import shlex
import subprocess

import pytest

from fakehost import fixture_fact, run_role
from roles import facts as facts_module, provision
from roles.facts import GpuHost, VenvState
from sglang_deploy.hostside import venv_hooks
from sglang_deploy.layout import VENV_ROOT, python_argv, venv_path
from sglang_deploy.profile import load_profile
from conftest import PROVEN

PROFILE = load_profile(PROVEN)
VENV = venv_path(PROFILE)
OPERATORS = {"&&", "||", ";", "|", "(", ")", "{", "}", "&"}


def segments(command: str):
    """The simple commands of a shell command line, as word lists."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    current = []
    for word in lexer:
        if word in OPERATORS or set(word) <= set(";&|()"):
            if current:
                yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


def is_release_program(word: str) -> bool:
    return word.startswith(VENV_ROOT + "/") and "/bin/" in word


def unsafe_starts(commands: list[str]) -> list[str]:
    """What in one operation's commands (in order) starts a release venv's program as root, other than as the
    service user (-I), as `-I -S`, or as the installer of a venv created empty earlier in the operation."""
    fresh, unsafe = set(), []
    for command in commands:
        for words in segments(command):
            if words[:2] == ["rm", "-rf"]:
                fresh.discard(words[2])
            if words[:3] == ["python3", "-m", "venv"] or words[:2] == ["uv", "venv"] or "venv" in words[:4] and \
                    words[0].startswith("UV_PYTHON"):
                fresh.add(words[-1])
            wrapped = words[:2] == ["runuser", "-u"] and "--" in words
            body = words[words.index("--") + 1:] if wrapped else words
            while body and ("=" in body[0] and not body[0].startswith("/") or body[0] in ("env", "-i")):
                body = body[1:]  # env -i NAME=value ...
            started = body[0] if body and is_release_program(body[0]) else None
            if body[:3] == ["uv", "pip", "install"] and "--python" in body:
                started = body[body.index("--python") + 1]
            if not started:
                assert not any(is_release_program(w) and w.endswith(("/pip", "/sglang")) for w in body[:1]), words
                continue
            venv = started.rsplit("/bin/", 1)[0]
            isolated = body[1:3] == ["-I", "-S"] if body[0] == started else False
            installer = (started.endswith("/pip") or body[0] == "uv") and venv in fresh
            as_user = wrapped and body[0] == started and body[1:2] == ["-I"] and words[2] not in ("root", "0")
            if not (isolated or installer or as_user):
                unsafe.append(" ".join(words)[:160])
    return unsafe


def fact_commands(ops) -> list[str]:
    """The commands of every fact a role asked (fakehost records them)."""
    found = []
    for name, kwargs in ops.asked:
        fact = getattr(facts_module, name, None)
        if fact is not None:
            found.append(fact().command(**kwargs))
    return found


def test_the_scanner_catches_root_starting_a_release_venv():
    """The scan fails on what the tool did before (the review's evidence), so a regression is seen."""
    python = f"{VENV}/bin/python"
    assert unsafe_starts([f"{python} -c 'import sglang; print(sglang.__version__)' 2>/dev/null || true"])
    assert unsafe_starts([f"{VENV}/bin/pip install -q sglang==0.5.23"])  # into a venv that existed before
    assert unsafe_starts([f"uv pip install -q --no-build --python {python} sglang==0.5.23"])
    assert unsafe_starts([f"runuser -u root -- {python} -I -c x"])
    assert unsafe_starts([f"env -i PATH=/bin {python} -I -c x"])
    assert unsafe_starts([f"cd /x && {python} -S -c x"])  # -S without -I
    assert not unsafe_starts([f"{python} -I -S -c x", shlex.join(python_argv(python, ["-c", "x"], "sglang"))])


@pytest.mark.parametrize("gpu_case, uv", [("rtx_a6000x2_bare_metal", False), ("rtx_a6000x2_bare_metal", True),
                                          ("no_gpu_docker_dev_box", False)])
def test_provisioning_never_starts_the_venvs_python_as_root(tmp_path, gpu_case, uv):
    ops = run_role(provision.python_env, profile=PROFILE, mode="install", data={},
                   facts={VenvState: {"sglang": None, "problems": []}, GpuHost: fixture_fact("GpuHost", gpu_case),
                          "Which": lambda command: "/usr/local/bin/uv" if uv and command == "uv" else None})
    stack = run_role(provision.nvidia_stack, mode="install", python=f"{VENV}/bin/python", user="sglang",
                     data={"nccl_version": "2.28.9"}, facts={GpuHost: fixture_fact("GpuHost", "lxc_driver_mismatch")})
    commands = [op.commands for op in ops + stack] + [[c] for c in fact_commands(ops) + fact_commands(stack)]
    assert any(VENV in c for cs in commands for c in cs)  # the scan sees the venv's commands
    assert [u for cs in commands for u in unsafe_starts(cs)] == []


def test_the_facts_verb_the_weights_fetch_the_preflight_and_the_doctor_never_start_it_as_root():
    from roles import weights as weights_role
    from roles.release import preflight_command
    from sglang_deploy.hostside.doctor_collect import probe_command
    from sglang_deploy.settings import HostSettings

    python = f"{VENV}/bin/python"
    hub = weights_role.HUB_VENV + "/bin/python"  # the stage's default hub python (roles/stages.py)
    commands = [facts_module.VenvTorch().command(python=python, user="sglang"),
                facts_module.VenvState().command(venv=VENV),
                facts_module.WeightsStatus().command("/srv/models/m.json", "/srv/models/m", python=hub),
                preflight_command("sglang", "0001-abc", python, 2),  # --python: run under User=
                shlex.join(probe_command(python, "sglang", "/var/lib/sglang", {}, False))]
    assert [u for c in commands for u in unsafe_starts([c])] == []
    assert "hub_python" in HostSettings.model_fields and HostSettings.model_fields["hub_python"].default is None


def test_the_preflight_probe_runs_under_the_units_user():
    """The preflight starts the venv's python only through systemd-run with the release unit's properties."""
    from sglang_deploy.hostside.preflight.runner import unit_properties
    from sglang_deploy.render import render

    rendered = render(PROFILE)
    assert "User=sglang" in unit_properties(rendered.unit, "/etc/sglang-deploy/sglang/sglang.env")


def test_the_weights_fetch_refuses_a_release_venvs_python(tmp_path):
    from sglang_deploy.hostside.weights.fetch import fetch
    from sglang_deploy.hostside.weights.manifest import WeightsError

    manifest = {"files": [{"path": "config.json", "size": 2, "sha256": "0" * 64}]}
    with pytest.raises(WeightsError, match="is a release venv's python: the fetch runs as root"):
        fetch(str(tmp_path / "m"), manifest, "Qwen/x", "a" * 40, f"{VENV}/bin/python")


# --- startup hooks: the decision, on fixture site-packages ------------------------------------------------------

def record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def fixture_venv(tmp_path, files: dict[str, tuple[str | None, bytes]]):
    """A venv tree: site-packages files, each (the wheel whose RECORD lists it or None, bytes); sglang 0.5.23's
    dist-info always there."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    records: dict[str, list[str]] = {"sglang-0.5.23": []}
    for name, (wheel, data) in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
        if wheel:
            records.setdefault(wheel, []).append(f"{name},sha256={record_digest(data)},{len(data)}")
    for wheel, rows in records.items():
        dist_info = site / f"{wheel}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Name: {wheel.rsplit('-', 1)[0]}\n")
        (dist_info / "RECORD").write_text("\n".join(rows + [f"{wheel}.dist-info/RECORD,,"]) + "\n")
    return tmp_path / "venv", site


SHIM = b"import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; " \
       b"enabled and __import__('_distutils_hack').add_shim(); \n"
HOOK_CASES = [
    # (id, files, the refused file (None: accepted), part of the message)
    ("setuptools-shim", {"distutils-precedence.pth": ("setuptools-80.9.0", SHIM)}, None, None),
    ("planted-pth", {"zz_nccl_hotfix.pth": ("nvidia_nccl_cu13_hotfix-2.28.9", b"import os; os.system('id')\n")},
     "zz_nccl_hotfix.pth", "a .pth file from nvidia-nccl-cu13-hotfix 2.28.9 runs code"),
    ("shim-with-other-bytes", {"distutils-precedence.pth": ("setuptools-80.9.0", SHIM)}, "distutils-precedence.pth",
     "from setuptools 80.9.0"),
    ("shim-overwritten-by-another-wheel", {"distutils-precedence.pth": ("setuptools-80.9.0", SHIM),
                                           "x/__init__.py": ("evil-1.0", b"")}, "distutils-precedence.pth",
     "evil 1.0"),
    ("pth-in-no-record", {"late.pth": (None, b"/tmp\n")}, "late.pth", "no wheel's RECORD"),
    ("sitecustomize", {"sitecustomize.py": ("evil-1.0", b"import os\n")}, "sitecustomize.py",
     "a sitecustomize module from evil 1.0"),
    ("usercustomize-package", {"usercustomize/__init__.py": ("evil-1.0", b"")}, "usercustomize",
     "a usercustomize module from evil 1.0"),
    ("a-module-is-no-hook", {"torch_hooks.py": ("torch-2.9.1", b"")}, None, None),
]


@pytest.mark.parametrize("case, files, refused, message", HOOK_CASES, ids=[c[0] for c in HOOK_CASES])
def test_a_startup_hook_not_on_the_reviewed_list_is_refused_naming_the_wheel_and_the_file(tmp_path, case, files,
                                                                                          refused, message):
    venv, site = fixture_venv(tmp_path, files)
    if case == "shim-with-other-bytes":
        (site / "distutils-precedence.pth").write_bytes(SHIM + b"import os; os.system('id')\n")
    if case == "shim-overwritten-by-another-wheel":  # a second RECORD lists the shim's name too
        record = site / "evil-1.0.dist-info" / "RECORD"
        record.write_text(record.read_text() + f"distutils-precedence.pth,sha256={record_digest(SHIM)},1\n")
    found = venv_hooks.read(str(venv))
    assert found["sglang"] == "0.5.23"
    if refused is None:
        assert found["problems"] == []
        return
    [problem] = found["problems"]
    assert problem.startswith(f"{site / refused}: ") and message in problem and "venv-startup-hook" in problem, problem


def test_the_reviewed_list_fits_sglangs_real_install_set():
    """The validator env holds SGLang 0.5.23's whole install set: its hooks are exactly the reviewed ones."""
    from sglang_deploy.validate import validator_env

    venv = validator_env.env_dir("0.5.23")
    found = venv_hooks.read(str(venv))
    assert found["sglang"] == "0.5.23" and found["problems"] == [], found
    assert sorted(p.name for p in venv.glob("lib/python3*/site-packages/*.pth")) == sorted(venv_hooks.ALLOWED_PTH)


def test_the_install_refuses_a_planted_hook_removes_the_venv_and_names_it(tmp_path):
    """The install's hooks command, run by a shell as the host would: exit 1, the venv gone, the file and the wheel
    named; with the profile's waiver it passes."""
    from sglang_deploy.provision import hooks_command

    files = {"zz.pth": ("nvidia_nccl_cu13_hotfix-2.28.9", b"import os\n")}
    venv, _ = fixture_venv(tmp_path / "a", files)
    result = subprocess.run(["sh", "-c", hooks_command(str(venv))], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and not venv.exists(), result
    assert "refused: " in result.stderr and "zz.pth: a .pth file from nvidia-nccl-cu13-hotfix 2.28.9" in result.stderr
    assert f"{venv} removed: nothing was switched" in result.stderr
    waived, _ = fixture_venv(tmp_path / "b", files)
    result = subprocess.run(["sh", "-c", hooks_command(str(waived), waived=True)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and waived.exists(), result


def test_the_fact_reads_the_version_and_the_hooks_from_outside_the_venv(tmp_path):
    """VenvState's command, as the host runs it (inline, the system python): no python of the venv exists here,
    so nothing of it can have been started."""
    venv, site = fixture_venv(tmp_path, {"zz.pth": ("evil-1.0", b"import os\n")})
    command = facts_module.VenvState().command(venv=str(venv))
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60).stdout.splitlines()
    state = facts_module.VenvState().process(output)
    assert state["sglang"] == "0.5.23" and [p.split(": ")[0] for p in state["problems"]] == [str(site / "zz.pth")]
    assert not (venv / "bin").exists()
    from sglang_deploy.hostside.contract.answers import VenvHooks

    assert VenvHooks.loads(output[-1]).site == str(site)
