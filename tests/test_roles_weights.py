"""roles/weights.py without a host: the fetch command line, and what ensure() and hub_client() run for the
WeightsStatus fact's answer (fixtures in tests/fixtures/facts/WeightsStatus) on a fake host."""

import json
import shlex

import pytest

from fakehost import fixture_fact, run_role
from roles import weights as role
from sglang_deploy.weights import HUB_CLIENT_PIN, Source, Weights

REVISION = "0123456789abcdef0123456789abcdef01234567"
FILES = [{"path": "config.json", "size": 1200, "sha256": "a" * 64},
         {"path": "model-00001-of-00001.safetensors", "size": 3 * 2**30, "sha256": "b" * 64}]


def weights(tmp_path, kind="hf") -> Weights:
    manifest = {"files": FILES}
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps(manifest))
    source = (Source("hf", "Qwen/Qwen3.6-27B-FP8", REVISION, None) if kind == "hf"
              else Source("dir", None, None, str(tmp_path / "local")))
    if kind == "dir":
        (tmp_path / "local").mkdir()
        for entry in FILES:
            (tmp_path / "local" / entry["path"]).write_text("x")
    return Weights(source, manifest_file, manifest, "d" * 64, f"/srv/models/Qwen--Qwen3.6-27B-FP8/{REVISION}")


def verified(case: str) -> bool:
    return fixture_fact("WeightsStatus", case)["verified"]


def test_fetch_command(tmp_path):
    w = weights(tmp_path)
    argv = shlex.split(role.fetch_command(w, "/opt/v/bin/python", None).split(" && ", 1)[1])
    assert argv == ["python3", "-m", "hostside.weights", "fetch", "--manifest", w.host_manifest, "--dir", w.path,
                    "--repo", "Qwen/Qwen3.6-27B-FP8", "--revision", REVISION, "--python", "/opt/v/bin/python"]
    more = shlex.split(role.fetch_command(w, "/p", "http://mirror:8080", token_file="/etc/hf-token").split(" && ", 1)[1])
    assert more[-4:] == ["--endpoint", "http://mirror:8080", "--token-file", "/etc/hf-token"]


def test_verified_weights_only_get_their_manifest(tmp_path):
    assert verified("verified_with_hub")
    w = weights(tmp_path)
    ops = run_role(role.ensure, weights=w, verified=True, python="/p")
    assert [name.split(" | ")[1] for name in ops.names] == [
        "/srv/models/.sglang-deploy/manifests",
        f"Weights manifest sha256:{'d' * 12} (2 files, 3.2 GB)"]
    assert ops[1].commands[-2:] == [f"upload {w.host_manifest}", f"chmod 644 {w.host_manifest}"]


@pytest.mark.parametrize("case", ["no_manifest_captured", "changed_since_verified_no_hub_asked", "unreadable_manifest"])
def test_unverified_hf_weights_are_fetched_on_the_host(tmp_path, case):
    w = weights(tmp_path)
    ops = run_role(role.ensure, weights=w, verified=verified(case), python="/p", endpoint="http://mirror")
    fetch = ops.named("Fetch hf://Qwen/Qwen3.6-27B-FP8@")
    assert fetch.commands == ["call _fetch_live"]
    assert fetch.raw[0].kwargs["command"] == role.fetch_command(w, "/p", "http://mirror")


def test_unverified_local_weights_are_pushed_to_staging_then_promoted(tmp_path):
    w = weights(tmp_path, kind="dir")
    ops = run_role(role.ensure, weights=w, verified=False, local_dir=str(tmp_path / "local"))
    staging = f"/srv/models/Qwen--Qwen3.6-27B-FP8/.staging-{REVISION}"
    assert [op.commands[-2] for op in ops if "| push " in op.name] == [
        f"upload {staging}/config.json", f"upload {staging}/model-00001-of-00001.safetensors"]
    assert ops[-1].commands == [f"cd /opt/sglang-deploy/lib && python3 -m hostside.weights promote --manifest "
                                f"{w.host_manifest} --dir {w.path}"]


def test_hub_client_from_the_index_or_a_wheelhouse(tmp_path):
    ops = run_role(role.hub_client, wheelhouse=None)
    assert ops.commands == [f"python3 -m venv {role.HUB_VENV}",
                            f"{role.HUB_VENV}/bin/pip install -q --disable-pip-version-check {HUB_CLIENT_PIN}"]
    (tmp_path / "huggingface_hub-1.33.0-py3-none-any.whl").write_text("")
    offline = run_role(role.hub_client, wheelhouse=str(tmp_path))
    assert offline[0].commands[-2] == f"upload {role.HUB_WHEELS}/huggingface_hub-1.33.0-py3-none-any.whl"
    assert offline[-1].commands[-1] == (f"{role.HUB_VENV}/bin/pip install -q --disable-pip-version-check --no-index "
                                        f"--find-links {role.HUB_WHEELS} {HUB_CLIENT_PIN}")


def test_an_empty_wheelhouse_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no wheels"):
        run_role(role.hub_client, wheelhouse=str(tmp_path))
