"""An upgrade's pure parts: the model-only simulator serves the profile's release, the planted upgrade fault, and
the bisect's differences across releases (changed resolved defaults pinned back one at a time)."""

import io
import os
import tarfile
import subprocess
import sys

import pytest

from conftest import PROVEN, REPO
from sglang_deploy import bisect_release, releases
from sglang_deploy.profile import load_profile
from sglang_deploy.sim.engine import slow_resolved

OLDEST, NEWEST = releases.versions()[0], releases.newest_reviewed()


def profile_of(version: str, tmp_path):
    path = tmp_path / f"p-{version}.yaml"
    path.write_text(PROVEN.read_text().replace(f'version: "{NEWEST}"', f'version: "{version}"'))
    profile = load_profile(path)
    assert profile.sglang.version == version
    return profile


def test_the_model_only_shim_names_the_profiles_release_and_the_server_reports_it(tmp_path):
    from roles import simulator

    assert OLDEST != NEWEST
    ship = simulator.simulator_shipment(profile_of(OLDEST, tmp_path), "model")
    with tarfile.open(fileobj=io.BytesIO(ship.data)) as archive:
        [member] = [m for m in archive.getmembers() if m.name.endswith("/bin/sglang")]
        shim = archive.extractfile(member).read()
    assert f'os.environ["SGLANG_SIM_SGLANG_VERSION"] = "{OLDEST}"' in shim.decode()
    assert "MODEL-ONLY" in simulator.banner(profile_of(OLDEST, tmp_path), "model")
    for version in (OLDEST, NEWEST):
        out = subprocess.run([sys.executable, "-m", "sglang_deploy.sim.server", "version"], cwd=REPO, text=True,
                             capture_output=True, env={**os.environ, "SGLANG_SIM_SGLANG_VERSION": version})
        assert out.stdout.startswith(f"sglang version: {version} "), out.stdout + out.stderr


def test_the_front_end_server_refuses_another_release_naming_the_model_only_server(tmp_path):
    from roles import simulator

    with pytest.raises(simulator.SimServerError, match=rf"sglang.version {OLDEST}: .*SGLang {NEWEST} only.*"
                                                       r"sim_server=model"):
        simulator.simulator_shipment(profile_of(OLDEST, tmp_path), "sglang")
    simulator.simulator_shipment(profile_of(NEWEST, tmp_path), "sglang")  # its own release: served


@pytest.mark.parametrize("fault, resolved, slow", [
    ("enable_fused_qk_norm_rope=null", {"enable_fused_qk_norm_rope": None}, True),
    ("enable_fused_qk_norm_rope=null", {"enable_fused_qk_norm_rope": False}, False),
    ("enable_fused_qk_norm_rope=null", {}, False),  # a field the release lacks never matches
    ("attention_backend=triton", {"attention_backend": "triton"}, True),  # not JSON: a string
    ("cuda_graph_max_bs=16", {"cuda_graph_max_bs": 16}, True),
    ("", {"x": None}, False), (None, {}, False), ("no-equals-sign", {"no-equals-sign": None}, False),
])
def test_the_planted_upgrade_fault_matches_the_resolved_value(fault, resolved, slow):
    assert slow_resolved(fault, resolved) is slow


def dumped(version: str, tmp_path, **flags):
    document = profile_of(version, tmp_path).model_dump(mode="json")
    document["sglang"]["flags"].update(flags)
    return document


def test_an_upgrade_is_decomposed_into_its_changed_defaults_each_pinned_back(tmp_path):
    old, new = dumped(OLDEST, tmp_path), dumped(NEWEST, tmp_path)
    found, _ = bisect_release.differences(old, new)
    kinds = {d.kind for d in found}
    assert kinds == {"install", "default"}, [(d.name, d.kind) for d in found]
    [version] = [d for d in found if d.kind == "install"]
    assert version.candidate is None and version.why_not  # the version alone is the refused release
    defaults = {d.name: d for d in found if d.kind == "default"}
    changed = bisect_release.changed_defaults(OLDEST, NEWEST)
    assert set(defaults) == {change.dest for change in changed} and defaults
    assert all(d.candidate is not None for d in defaults.values())  # each pinned back by the newer release's flag
    qk = defaults["enable_fused_qk_norm_rope"]
    assert qk.changes == (("enable_fused_qk_norm_rope", False, None),)
    # the candidate: the refused release (its version) with this one default pinned back by its own flag
    assert dict(qk.candidate.flags) == {"--no-enable-fused-qk-norm-rope": True}
    text = bisect_release.profile_text(PROVEN.read_text().replace(f'"{NEWEST}"', f'"{OLDEST}"'), qk)
    assert f'version: "{NEWEST}"' in text and "--no-enable-fused-qk-norm-rope: true" in text
    assert load_profile(write(tmp_path, text)).sglang.version == NEWEST


def write(tmp_path, text):
    path = tmp_path / "candidate.yaml"
    path.write_text(text)
    return path


def test_a_default_the_profile_sets_itself_is_no_changed_default(tmp_path):
    old = dumped(OLDEST, tmp_path, **{"--enable-fused-qk-norm-rope": True})
    new = dumped(NEWEST, tmp_path, **{"--enable-fused-qk-norm-rope": True})
    names = {d.name for d in bisect_release.differences(old, new)[0]}
    assert "enable_fused_qk_norm_rope" not in names and "enable_tf32_matmul" in names


def test_a_default_that_cannot_be_pinned_back_is_named_not_measured(tmp_path):
    # the older release's option table: the newer default (None) has no flag that writes it there
    changed = bisect_release.changed_defaults(NEWEST, OLDEST)
    assert changed and all(change.pin == () for change in changed)
    found, _ = bisect_release.differences(dumped(NEWEST, tmp_path), dumped(OLDEST, tmp_path))
    defaults = [d for d in found if d.kind == "default"]
    assert defaults and all(d.candidate is None and "no flag" in d.why_not for d in defaults)


def test_resolved_arguments_decide_what_changed_when_given(tmp_path):
    good = {"enable_fused_qk_norm_rope": False, "chunked_prefill_size": 4096, "api_key": "a", "gone": 1}
    refused = {"enable_fused_qk_norm_rope": False, "chunked_prefill_size": 2048, "api_key": "b"}
    found, _ = bisect_release.differences(dumped(OLDEST, tmp_path), dumped(NEWEST, tmp_path), (good, refused))
    [default] = [d for d in found if d.kind == "default"]  # the key never, a field one release lacks never
    assert default.name == "chunked_prefill_size" and default.changes == (("chunked_prefill_size", 4096, 2048),)
    assert ("--chunked-prefill-size", 4096) in default.candidate.flags


def measured(decode, name="x"):
    from sglang_deploy.tune import search as tune

    return tune.Measured(tune.Candidate(name, "bisect"), repeats=[{"decode_tok_s": decode * f, "tau": 3.0}
                                                                   for f in (0.995, 1.0, 1.005)], release_id=name)


def test_the_verdict_names_the_default_whose_pin_brings_the_speed_back(tmp_path):
    from sglang_deploy.tune import search as tune

    found, _ = bisect_release.differences(dumped(OLDEST, tmp_path), dumped(NEWEST, tmp_path))
    defaults = [d for d in found if d.kind == "default"]
    culprit = next(d for d in defaults if d.name == "enable_fused_qk_norm_rope")
    alone = [(d, measured(52.0 if d is culprit else 41.0, d.name)) for d in defaults]
    alone += [(d, None) for d in found if d.kind != "default"]
    objective = tune.Objective()
    result = bisect_release.verdict(measured(52.0, "good"), measured(41.0, "refused"), alone, objective)
    assert result["reproduced"] and [c["difference"] for c in result["culprits"]] == ["enable_fused_qk_norm_rope"]
    assert result["text"].startswith("the changed default that costs the speed: enable_fused_qk_norm_rope "
                                     "(enable_fused_qk_norm_rope: False -> None")
    table = bisect_release.table(measured(52.0, "good"), measured(41.0, "refused"), alone, objective)
    assert table.count("RECOVERS THE SPEED") == 1 and "COSTS THE SPEED" not in table
    # nothing recovers: no default is named (the combination, or something not measured)
    flat = [(d, measured(41.0, d.name)) for d in defaults]
    assert not bisect_release.verdict(measured(52.0, "good"), measured(41.0, "refused"), flat,
                                      objective)["culprits"]


def test_a_half_built_environment_is_rebuilt_and_a_failed_build_names_the_field_and_the_command(tmp_path, monkeypatch):
    """A validator environment of the profile's release left half-built (no completion marker: an interrupted
    build) is never used; when its rebuild fails the error names sglang.version and the command, and nothing half
    built is left."""
    from sglang_deploy.validate import validator_env

    monkeypatch.setattr(validator_env, "CACHE_DIR", tmp_path)
    target = validator_env.env_dir(OLDEST)
    (target / "bin").mkdir(parents=True)
    (target / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")  # half-built: no .complete
    assert not validator_env.env_built(OLDEST)
    monkeypatch.setattr(validator_env, "installer", lambda python: ["false"])  # the package index is unreachable
    with pytest.raises(validator_env.ValidatorEnvError) as error:
        validator_env.ensure_env(OLDEST, quiet=True)
    message = str(error.value)
    assert message.startswith(f"sglang.version {OLDEST}: could not create the validation environment")
    assert f"`sglang-deploy sglang add {OLDEST} --check`" in message and "nothing half-built is used" in message
    assert not target.exists()


def test_an_environment_uv_fills_is_made_without_pip(tmp_path, monkeypatch):
    """ensurepip is 3.4 of venv's 3.5 s: an environment that uv fills gets none; with pip as the installer it keeps it,
    and the environment made either way runs (venv itself, not a stand-in)."""
    from pathlib import Path

    from sglang_deploy.validate import validator_env

    monkeypatch.setattr(validator_env, "_uv", lambda: "/usr/bin/uv")
    command = validator_env.venv_command(sys.executable, tmp_path / "env")
    assert command == [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")]
    subprocess.run(command, check=True)
    assert (tmp_path / "env" / "bin" / "python").exists() and not list((tmp_path / "env").rglob("pip"))
    monkeypatch.setattr(validator_env, "_uv", lambda: None)
    assert validator_env.venv_command(Path("/usr/bin/python3"), tmp_path / "e2") == [
        "/usr/bin/python3", "-m", "venv", str(tmp_path / "e2")]
    assert validator_env.installer(tmp_path / "e2" / "bin" / "python")[1:3] == ["-m", "pip"]

