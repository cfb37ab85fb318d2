"""Weights as part of a release on the simulated CT129: the host fetches two revisions from the stand-in Hub
with huggingface_hub's own client (a small venv from a controller wheelhouse), each becomes a release, a
rollback serves the other snapshot, a changed snapshot stops the switch; a file:// source is pushed over SSH.
One module, one simulated host, deploys shared between assertions (skip_gate: the gate is not the subject).
The doctor reading a pushed snapshot's headers is test_doctor_sim's roofline (the synthetic checkpoint arrives
through the same push path)."""

import json
import re
import subprocess
import sys
import time

import pytest

from conftest import PROVEN, REPO, write_profile
from hubstub import Hub
from sglang_deploy.drafter import config_copy
from sglang_deploy.profile import load_profile
from sglang_deploy.validate.resolution import load_model_config
from sglang_deploy.sim.synthetic_checkpoint import write as write_checkpoint
from sglang_deploy.validate.validator_env import CACHE_DIR
from sglang_deploy.weights import HUB_CLIENT_PIN, WEIGHTS_DIRS_VARIABLE, manifest_from_hub, write_manifest

pytestmark = pytest.mark.simhost

REPO_ID = "sim-org/qwen3.6-27b-synthetic"
SNAPSHOTS = "/srv/models/sim-org--qwen3.6-27b-synthetic"


@pytest.fixture(scope="module")
def wheelhouse():
    """huggingface_hub and its dependencies as wheels for the simulated host's python (Debian 12: 3.11), from the
    index once, cached."""
    directory = CACHE_DIR / "wheelhouse" / (HUB_CLIENT_PIN.replace("==", "-") + "-py311")
    if not (directory / ".complete").exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:",
                        "--python-version", "3.11", "-d", str(directory), HUB_CLIENT_PIN], check=True, capture_output=True)
        (directory / ".complete").touch()
    return directory


def with_config(text: str, config) -> str:
    """model.config: the snapshot's own config.json (the manifest pins it), not the proven profile's reconstruction."""
    return text.replace("config: manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json", f"config: {config}")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """Two revisions of the synthetic checkpoint; B differs in config.json."""
    base = tmp_path_factory.mktemp("weights")
    checkpoint = base / "checkpoint"
    # the checkpoint's real config.json and a tokenizer: SGLang's ModelConfig reads it (a stub config without
    # model_type is refused, as SGLang would refuse it)
    write_checkpoint(str(checkpoint), header_only=True, config=load_model_config(load_profile(PROVEN).model.config))
    hub = Hub().start()
    revision_a = hub.add_directory(REPO_ID, checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    config_b = (json.dumps(dict(config, note="revision B of the stand-in repository"), indent=2) + "\n").encode()
    revision_b = hub.add_directory(REPO_ID, checkpoint, extra={"config.json": config_b})
    profiles = {}
    for label, revision, config_bytes in (("a", revision_a, (checkpoint / "config.json").read_bytes()),
                                          ("b", revision_b, config_b)):
        manifest = base / f"{revision}.json"
        write_manifest(manifest_from_hub(REPO_ID, revision, endpoint=hub.url), manifest)
        config_copy(manifest).write_bytes(config_bytes)  # model.config: the one the manifest pins, as the CLI writes it
        text = PROVEN.read_text().replace("  path: /srv/models/Qwen3.6-27B-FP8\n",
                                          f"  source: hf://{REPO_ID}@{revision}\n  manifest: {manifest}\n")
        text = with_config(text, config_copy(manifest))
        profiles[label] = write_profile(base, text, f"weights-{label}.yaml")
    hub.revisions = {"a": revision_a, "b": revision_b}
    hub.profiles = profiles
    hub.checkpoint = checkpoint
    yield hub
    hub.stop()


def store(simhost) -> dict:
    return json.loads(simhost.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))


def listing_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "flags vs active" in line or re.search(r"\d{4}-[0-9a-f]{8} ", line))


def model_path_running(simhost) -> str:
    cmdline = simhost.sh(f"tr '\\0' '\\n' < /proc/{simhost.main_pid()}/cmdline").splitlines()
    return cmdline[cmdline.index("--model-path") + 1]


def test_weights_revisions_are_releases_and_roll_back(simhost, hub, wheelhouse):
    simhost.env[WEIGHTS_DIRS_VARIABLE] = str(hub.checkpoint.parent)  # the manifests live there
    data = ["--data", f"hf_endpoint={hub.url}", "--data", f"hub_wheelhouse={wheelhouse}"]
    started = time.monotonic()
    result = simhost.deploy(*data, profile=hub.profiles["a"])
    first_s = time.monotonic() - started
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    a, b = hub.revisions["a"], hub.revisions["b"]
    assert model_path_running(simhost) == f"{SNAPSHOTS}/{a}"
    assert simhost.sh(f"stat -c '%U %a' {SNAPSHOTS}/{a} {SNAPSHOTS}/{a}/config.json").split() == ["root", "755", "root", "644"]
    assert hub.gets("model-layers-00.safetensors"), "the host did not download from the stand-in Hub"
    # The transfer's progress reached the controller although the deploy succeeded (printed as it arrives).
    output = result.stdout + result.stderr
    assert re.search(r"\] weights: 0 B of \S+ \S+ \(0 %\)", output) and \
        re.search(r"\] weights: (\S+ \S+) of \1 \(100 %\) after \d+ s", output), output[-4000:]
    release_a = store(simhost)["state"]["active"]
    meta_a = next(r for r in store(simhost)["releases"] if r["id"] == release_a)
    assert meta_a["weights"]["revision"] == a and meta_a["weights"]["path"] == f"{SNAPSHOTS}/{a}"

    # Unchanged: nothing fetched (the host's record says the snapshot is verified), nothing switched.
    before = len(hub.log)
    started = time.monotonic()
    result = simhost.deploy(*data, profile=hub.profiles["a"])
    noop_s = time.monotonic() - started
    assert result.returncode == 0 and len(hub.log) == before and store(simhost)["state"]["active"] == release_a

    # New weights: a new release, switched to (its own snapshot), the listing names the change.
    started = time.monotonic()
    result = simhost.deploy(*data, profile=hub.profiles["b"])
    b_s = time.monotonic() - started
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    release_b = store(simhost)["state"]["active"]
    assert release_b != release_a and model_path_running(simhost) == f"{SNAPSHOTS}/{b}"
    started = time.monotonic()
    listing = simhost.pyinfra("releases.py")
    listing_s = time.monotonic() - started
    text = listing.stdout + listing.stderr
    assert f"weights: hf://{REPO_ID}@{b}" in text and f"-> hf://{REPO_ID}@{a}" in text, text[-3000:]

    # Rollback: the other release serves the other snapshot; both snapshots are kept (both releases retained).
    started = time.monotonic()
    result = simhost.pyinfra("rollback.py")
    rollback_s = time.monotonic() - started
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    print("\nafter the weights change:\n" + listing_lines(text))
    assert store(simhost)["state"]["active"] == release_a and model_path_running(simhost) == f"{SNAPSHOTS}/{a}"
    assert simhost.sh(f"ls {SNAPSHOTS}").split() == sorted([a, b])
    after = simhost.pyinfra("releases.py")
    assert f"weights: hf://{REPO_ID}@{a}" in after.stdout + after.stderr  # now B differs from the active A
    print("after the rollback:\n" + listing_lines(after.stdout + after.stderr))

    # A snapshot changed on the host is not switched to: the file is named, the running release stays.
    simhost.sh(f"echo ' ' >> {SNAPSHOTS}/{b}/config.json")
    result = simhost.pyinfra("rollback.py", "--data", f"release={release_b}")
    assert result.returncode != 0
    assert "config.json: size" in result.stdout + result.stderr
    assert store(simhost)["state"]["active"] == release_a and model_path_running(simhost) == f"{SNAPSHOTS}/{a}"
    print(f"\nfirst deploy with a download {first_s:.1f} s, no-op redeploy {noop_s:.1f} s, deploy of B {b_s:.1f} s, "
          f"listing {listing_s:.1f} s, rollback {rollback_s:.1f} s")
    simhost.sh(f"rm -rf {SNAPSHOTS}/{b}")  # the next deploy of B fetches it again


def test_a_local_directory_is_pushed_over_ssh(simhost, hub):
    """The controller-push path for a file:// source (served at local--<dir>/<manifest hash>)."""
    simhost.env[WEIGHTS_DIRS_VARIABLE] = str(hub.checkpoint.parent)  # the operator's setting names the directory
    text = PROVEN.read_text().replace("  path: /srv/models/Qwen3.6-27B-FP8\n", f"  source: file://{hub.checkpoint}\n")
    manifest = hub.checkpoint.parent / "local-manifest.json"
    result = subprocess.run([sys.executable, "-m", "sglang_deploy.cli", "manifest", f"file://{hub.checkpoint}",
                             "--output", str(manifest)], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    profile = write_profile(hub.checkpoint.parent, with_config(text.replace("  source:", f"  manifest: {manifest}\n  source:"),
                                                               config_copy(manifest)), "weights-local.yaml")
    result = simhost.deploy(profile=profile)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    served = model_path_running(simhost)
    assert served.startswith("/srv/models/local--checkpoint/")
    assert simhost.sh(f"ls {served}").split() == sorted(p.name for p in hub.checkpoint.iterdir())
    meta = next(r for r in store(simhost)["releases"] if r["id"] == store(simhost)["state"]["active"])
    assert meta["weights"]["source"] == f"file://{hub.checkpoint}" and meta["weights"]["path"] == served
