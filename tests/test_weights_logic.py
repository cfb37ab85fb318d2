"""Weights as part of a release, without a host: the profile's model.source, manifests, and hostside/weights/
against the stand-in Hub (tests/hubstub.py) with huggingface_hub's REAL client (HF_ENDPOINT / endpoint=)."""

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PROVEN, REPO, release_meta, snapshot_mark, store_report, write_profile
from hubstub import Hub
from sglang_deploy.hostside.contract.answers import WeightsPlaced, WeightsPruned
from sglang_deploy.hostside.weights import fetch as host_fetch
from sglang_deploy.hostside.weights import manifest as host_manifest
from sglang_deploy.hostside.weights import prune as host_prune
from sglang_deploy.profile import ProfileError, load_profile
from sglang_deploy.release_plan import listing
from sglang_deploy.render import render
from sglang_deploy.sim.synthetic_checkpoint import write as write_checkpoint
from sglang_deploy.weights import (WEIGHTS_DIRS_VARIABLE, WeightsSourceError, manifest_from_directory, manifest_from_hub,
                                   weights_for, write_manifest)

HOST_LIB = REPO / "sglang_deploy"  # the host runs `python3 -m hostside.weights` from its HOST_LIB
WEIGHTS = [sys.executable, "-m", "hostside.weights"]
REPO_ID = "sim-org/qwen3.6-27b-synthetic"


@pytest.fixture(autouse=True)
def weights_dirs(tmp_path_factory, monkeypatch):
    """The tests' manifests and directories live under pytest's temporary root: the operator's setting names it."""
    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("checkpoint") / "synthetic"
    write_checkpoint(str(directory), header_only=True, architecture="Qwen3_5ForConditionalGeneration")
    return directory


@pytest.fixture
def hub():
    hub = Hub().start()
    yield hub
    hub.stop()


@pytest.fixture
def models(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "models"
    monkeypatch.setattr(host_manifest, "MODELS_ROOT", str(root))
    return root


def fetch(models: Path, manifest_file: Path, commit: str, endpoint: str, repo: str = REPO_ID):
    """weights.py fetch as the host runs it: a separate process, huggingface_hub in `--python`."""
    directory = models / repo.replace("/", "--") / commit
    command = [*WEIGHTS, "fetch", "--manifest", str(manifest_file), "--dir", str(directory),
               "--repo", repo, "--revision", commit, "--python", sys.executable, "--endpoint", endpoint]
    started = time.monotonic()
    result = subprocess.run(command, env=dict(os.environ, SGLANG_DEPLOY_MODELS=str(models)), capture_output=True,
                            text=True, timeout=120, cwd=HOST_LIB)
    return result, directory, time.monotonic() - started


def hub_manifest(hub, tmp_path, commit, repo=REPO_ID) -> Path:
    path = tmp_path / f"{commit}.json"
    write_manifest(manifest_from_hub(repo, commit, endpoint=hub.url), path)
    return path


def source_profile(tmp_path, source: str, manifest: Path | None = None, name="weights.yaml") -> Path:
    text = PROVEN.read_text().replace("  path: /srv/models/Qwen3.6-27B-FP8\n", f"  source: {source}\n"
                                      + (f"  manifest: {manifest}\n" if manifest else ""))
    return write_profile(tmp_path, text, name)


# --- the profile --------------------------------------------------------------------------------------------

def test_a_branch_name_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ProfileError) as error:
        load_profile(source_profile(tmp_path, "hf://Qwen/Qwen3.6-27B-FP8@main"))
    (problem,) = error.value.problems
    assert ": model.source: " in problem and "'main' is a branch or tag name, not a commit" in problem
    assert "sglang-deploy manifest hf://Qwen/Qwen3.6-27B-FP8@main" in problem  # says how to pin it


@pytest.mark.parametrize("source, says", [
    ("hf://Qwen/Qwen3.6-27B-FP8", "not a weights source"),
    ("hf://Qwen/Qwen3.6-27B-FP8@", "revision after '@' is missing"),
    ("hf://Qwen/x;id@" + "a" * 40, "ORG and NAME"),
    ("hf://Qwen/../x@" + "a" * 40, "not a weights source"),
    ("https://huggingface.co/Qwen/x", "not a weights source"),
    ("file://relative/dir", "file:///absolute/directory"),
    ("hf://Qwen/Qwen3.6-27B-FP8@" + "A" * 40, "branch or tag"),  # a commit is lower-case hex
])
def test_bad_sources_are_refused(tmp_path, source, says):
    with pytest.raises(ProfileError) as error:
        load_profile(source_profile(tmp_path, source))
    assert says in str(error.value) and "model.source" in str(error.value)


# A file:// source or a manifest names a controller path: only under the repository's manifests/ or a directory the
# operator configured (security review 2, finding 10). (source, manifest, the weights directories, what is said)
CONTROLLER_PATH_CASES = [
    ("file:///root/.ssh", None, "{tmp}", "the hidden path component '.ssh' is not accepted"),
    ("file:///etc", None, "{tmp}", "file:///etc is not under a weights directory of this controller"),
    ("file://{tmp}/checkpoint", None, "", "now unset"),
    ("file://{tmp}/link-out", None, "{tmp}", "is not under a weights directory"),  # a symlink to /etc
    ("hf://Qwen/Q@" + "0" * 40, "/etc/passwd.json", "{tmp}", "model.manifest '/etc/passwd.json' is not under"),
    ("hf://Qwen/Q@" + "0" * 40, "../../etc/x.json", "{tmp}", "a relative manifest must be under the repository's manifests/"),
    ("hf://Qwen/Q@" + "0" * 40, "profiles/x.json", "{tmp}", "a relative manifest must be under"),
    ("hf://Qwen/Q@" + "0" * 40, "{tmp}/fifo.json", "{tmp}", "not a regular file"),  # a FIFO would hang `check`
]


@pytest.mark.parametrize("source, manifest, dirs, says", CONTROLLER_PATH_CASES,
                         ids=[f"{c[0]}-{c[1]}"[-50:] for c in CONTROLLER_PATH_CASES])
def test_controller_paths_come_only_from_configured_directories(tmp_path, monkeypatch, source, manifest, dirs, says):
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "link-out").symlink_to("/etc")
    os.mkfifo(tmp_path / "fifo.json")
    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, dirs.format(tmp=tmp_path))
    fill = {"tmp": tmp_path}
    path = source_profile(tmp_path, source.format(**fill), manifest and manifest.format(**fill))
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    field = "model.source" if source.startswith("file:") else "model"
    assert any(f": {field}: " in p and says in p for p in error.value.problems), error.value.problems


def test_a_symlink_in_a_pushed_directory_is_not_followed_out_of_it(tmp_path, checkpoint):
    directory = tmp_path / "local"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    manifest_file = tmp_path / "local.json"
    write_manifest(manifest_from_directory(directory), manifest_file)
    weights = weights_for(f"file://{directory}", str(manifest_file))
    assert [entry["path"] for entry, _ in weights.local_files()] == ["config.json"]
    (directory / "config.json").unlink()
    (directory / "config.json").symlink_to("/etc/hostname")
    with pytest.raises(WeightsSourceError, match="not a regular file inside"):
        weights.local_files()


def test_source_derives_the_served_path_and_the_unit_names_the_weights(tmp_path, checkpoint):
    commit = "0123456789abcdef0123456789abcdef01234567"
    manifest = manifest_from_directory(checkpoint)
    manifest_file = tmp_path / "m.json"
    write_manifest(dict(manifest, revision=commit), manifest_file)
    profile = load_profile(source_profile(tmp_path, f"hf://Qwen/Qwen3.6-27B-FP8@{commit}", manifest_file))
    assert profile.model.path == f"/srv/models/Qwen--Qwen3.6-27B-FP8/{commit}"
    unit = render(profile, api_key="k" * 24).unit
    assert f"--model-path /srv/models/Qwen--Qwen3.6-27B-FP8/{commit}" in unit.replace(" \\\n    ", " ")
    digest = host_manifest.manifest_hash(manifest)
    assert f"# Weights: hf://Qwen/Qwen3.6-27B-FP8@{commit} (manifest sha256:{digest}" in unit
    # Other content under the same revision is another release (the unit, hence its hash, differs).
    other = dict(manifest, files=[dict(f, sha256="0" * 64) if f["path"] == "config.json" else f
                                  for f in manifest["files"]])
    write_manifest(other, manifest_file)
    from sglang_deploy import weights as controller_weights
    controller_weights._CACHE.clear()
    assert render(load_profile(source_profile(tmp_path, f"hf://Qwen/Qwen3.6-27B-FP8@{commit}", manifest_file)),
                  api_key="k" * 24).unit != unit


def test_path_and_source_together_or_a_missing_manifest_are_refused(tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    text = PROVEN.read_text().replace("  path: /srv/models/Qwen3.6-27B-FP8\n",
                                      f"  path: /srv/models/x\n  source: hf://Qwen/Q@{commit}\n")
    with pytest.raises(ProfileError, match="model.path is derived from model.source"):
        load_profile(write_profile(tmp_path, text))
    with pytest.raises(ProfileError, match=r"manifest .*Qwen--Q/0123.*json: cannot read it.*sglang-deploy manifest"):
        load_profile(source_profile(tmp_path, f"hf://Qwen/Q@{commit}"))


@pytest.mark.parametrize("entry, says", [
    ({"path": "../etc/passwd", "size": 1, "sha256": "0" * 64}, "no '..'"),
    ({"path": "/abs", "size": 1, "sha256": "0" * 64}, "each part"),
    ({"path": ".cache/huggingface/x", "size": 1, "sha256": "0" * 64}, "reserved"),
    ({"path": "a", "size": -1, "sha256": "0" * 64}, "size must be a byte count"),
    ({"path": "a", "size": 1, "sha256": "xyz"}, "64 lower-case hex"),
])
def test_manifest_entries_are_checked(entry, says):
    problems = host_manifest.check_manifest({"format": 1, "files": [entry]})
    assert len(problems) == 1 and says in problems[0] and problems[0].startswith("files[0]")


def test_progress_reports_at_start_while_growing_and_at_the_end(tmp_path, capsys):
    staging, total = tmp_path / "staging", 5000
    staging.mkdir()
    (staging / "a.bin").write_bytes(b"x" * 1000)  # kept from an earlier run: not counted in the rate
    bookkeeping = staging / ".cache" / "huggingface" / "download"
    bookkeeping.mkdir(parents=True)
    (bookkeeping / "b.bin.metadata").write_text("x" * 500)  # huggingface_hub's metadata: not weights
    (bookkeeping / "c.bin.1234.incomplete").write_bytes(b"z" * 1000)  # a partial download: counted
    with host_fetch.Progress(str(staging), total, str(tmp_path / "progress.txt"), interval=0.05):
        for step in range(1, 4):
            time.sleep(0.12)
            with open(staging / "b.bin", "ab") as grow:  # appended, as a download grows (never shrinks)
                grow.write(b"y" * 1000)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("weights: ")]
    percents = [int(line.split("(")[1].split(" %")[0]) for line in lines]
    assert percents[0] == 40 and percents[-1] == 100 and len(set(percents)) >= 3 and percents == sorted(percents)
    assert any("/s, about" in line and " s left" in line for line in lines[1:-1]), lines
    assert (tmp_path / "progress.txt").read_text() == lines[-1].removeprefix("weights: ") + "\n"


# --- the host side against the stand-in Hub (the real huggingface_hub client) -----------------------------------

def test_download_resume_and_a_no_op_rerun(hub, checkpoint, models, tmp_path):
    big = random.Random(16).randbytes(24 << 20)  # above huggingface_hub's 10 MB chunk: a partial chunk is kept
    commit = hub.add_directory(REPO_ID, checkpoint, extra={"extra.bin": big})
    manifest_file = hub_manifest(hub, tmp_path, commit)
    manifest = json.loads(manifest_file.read_text())
    assert manifest["revision"] == commit and {f["path"] for f in manifest["files"]} >= {"config.json", "extra.bin"}
    assert next(f for f in manifest["files"] if f["path"] == "extra.bin")["size"] == len(big)
    hub.log.clear()
    # The connection drops after 12 MB of extra.bin, and one shard fails outright: the run stops.
    hub.cut_after["extra.bin"] = 12 << 20
    hub.fail.add("model-mtp-visual.safetensors")
    result, directory, first_s = fetch(models, manifest_file, commit, hub.url)
    assert result.returncode == 1 and "the next run resumes it" in result.stdout, result.stderr[-2000:]
    assert not directory.exists()  # nothing in place, nothing to switch to
    ranges = [e["range"] for e in hub.gets("extra.bin")]
    assert ranges[0] is None and ranges[1] == f"bytes={10 << 20}-"  # resumed where the kept bytes end
    # The next run fetches only what is missing, verifies everything, and renames the snapshot into place.
    hub.fail.clear()
    before = len(hub.log)
    result, directory, second_s = fetch(models, manifest_file, commit, hub.url)
    assert result.returncode == 0, result.stderr[-2000:]
    fetched = {e["path"].rsplit("/", 1)[1] for e in hub.log[before:] if e["method"] == "GET"}
    assert "model-mtp-visual.safetensors" in fetched and "extra.bin" not in fetched and "config.json" not in fetched
    assert sorted(p.name for p in directory.iterdir()) == sorted(f["path"] for f in manifest["files"])
    assert (directory / "extra.bin").read_bytes() == big
    assert oct(directory.stat().st_mode & 0o777) == "0o755" and oct((directory / "extra.bin").stat().st_mode & 0o777) == "0o644"
    # Unchanged: nothing downloaded, nothing hashed.
    before = len(hub.log)
    result, _, noop_s = fetch(models, manifest_file, commit, hub.url)
    assert result.returncode == 0 and '"changed": false' in result.stdout and len(hub.log) == before
    print(f"\nstand-in Hub: first run (interrupted) {first_s:.2f} s, resumed run {second_s:.2f} s, no-op {noop_s:.2f} s, "
          f"{sum(f['size'] for f in manifest['files'])} bytes")


def test_a_corrupted_download_is_caught_by_the_manifest(hub, checkpoint, models, tmp_path):
    commit = hub.add_directory(REPO_ID, checkpoint)
    manifest_file = hub_manifest(hub, tmp_path, commit)
    hub.corrupt.add("model-layers-16.safetensors")  # same size, one byte flipped
    result, directory, _ = fetch(models, manifest_file, commit, hub.url)
    assert result.returncode == 1
    assert "model-layers-16.safetensors: sha256" in result.stdout and "nothing was switched" in result.stdout
    assert not directory.exists()
    # The bad file was dropped from the staging directory: the next run fetches it again, and only it.
    hub.corrupt.clear()
    before = len(hub.log)
    result, directory, _ = fetch(models, manifest_file, commit, hub.url)
    assert result.returncode == 0 and directory.is_dir()
    assert [e["path"].rsplit("/", 1)[1] for e in hub.log[before:] if e["method"] == "GET"] == ["model-layers-16.safetensors"]


def test_download_through_a_mirror_url(hub, checkpoint, models, tmp_path):
    mirror = Hub(prefix="/hf-mirror").start()
    try:
        commit = mirror.add_directory(REPO_ID, checkpoint)
        manifest_file = hub_manifest(mirror, tmp_path, commit)
        result, directory, _ = fetch(models, manifest_file, commit, mirror.url)
        assert result.returncode == 0, result.stderr[-2000:]
        assert all(e["path"].startswith("/hf-mirror/") for e in mirror.log) and mirror.gets("config.json")
        assert hub.log == []  # the Hub itself was never asked
    finally:
        mirror.stop()


def test_the_manifest_command_resolves_a_branch_to_its_commit(hub, checkpoint, tmp_path):
    commit = hub.add_directory(REPO_ID, checkpoint, branch="main")
    output = tmp_path / "out.json"
    result = subprocess.run([sys.executable, "-m", "sglang_deploy.cli", "manifest", f"hf://{REPO_ID}@main",
                             "--endpoint", hub.url, "--output", str(output)], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert f"source: hf://{REPO_ID}@{commit}" in result.stdout
    manifest = json.loads(output.read_text())
    local = manifest_from_directory(checkpoint)
    assert host_manifest.manifest_hash(manifest) == host_manifest.manifest_hash(local)  # Hub metadata == the bytes


# --- verification state, push, switch check, prune --------------------------------------------------------------

def place(models: Path, checkpoint: Path, name="local--synthetic/rev") -> tuple[Path, dict]:
    """A pushed snapshot: files in the staging directory, then promote (as roles/weights.py does)."""
    directory = models / name
    staging = Path(host_fetch.staging_dir(str(directory)))
    staging.mkdir(parents=True)
    for path in checkpoint.iterdir():
        (staging / path.name).write_bytes(path.read_bytes())
    manifest = manifest_from_directory(checkpoint)
    placed = WeightsPlaced.from_dict(host_fetch.promote(str(directory), manifest))  # `promote`'s answer, strict
    assert placed.changed is True and placed.files == len(manifest["files"])
    return directory, manifest


def test_reverify_hashes_only_what_changed(models, checkpoint):
    directory, manifest = place(models, checkpoint)
    problems, stats = host_manifest.verify(str(directory), manifest)
    assert problems == [] and stats["hashed_files"] == 0
    shard = directory / "model-layers-00.safetensors"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    problems, stats = host_manifest.verify(str(directory), manifest)
    assert problems == [] and stats["hashed_files"] == 1  # touched, same content: hashed again, accepted
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    assert not host_manifest.is_verified(str(directory), manifest)
    problems, _ = host_manifest.verify(str(directory), manifest)
    assert len(problems) == 1 and problems[0].startswith("model-layers-00.safetensors: sha256")


def test_a_stray_file_in_a_pushed_snapshot_is_refused(models, checkpoint):
    directory = models / "local--synthetic/rev"
    staging = Path(host_fetch.staging_dir(str(directory)))
    staging.mkdir(parents=True)
    for path in checkpoint.iterdir():
        (staging / path.name).write_bytes(path.read_bytes())
    (staging / "model-extra.safetensors").write_bytes(b"x")  # SGLang would load it
    with pytest.raises(host_manifest.WeightsError, match="model-extra.safetensors: not in the manifest"):
        host_fetch.promote(str(directory), manifest_from_directory(checkpoint))
    assert not directory.exists()


def test_free_disk_is_checked_before_anything_is_fetched(tmp_path):
    with pytest.raises(host_manifest.WeightsError, match=r"not enough disk space .* nothing was downloaded"):
        host_fetch.check_free_space(str(tmp_path), 1 << 60)


def test_the_switch_refuses_weights_that_are_missing_or_changed(models, checkpoint, tmp_path):
    directory, manifest = place(models, checkpoint)
    manifest_file = tmp_path / "m.json"
    write_manifest(manifest, manifest_file)
    weights = snapshot_mark(path=str(directory), manifest=str(manifest_file),
                            manifest_sha256=host_manifest.manifest_hash(manifest))
    meta = release_meta(weights=weights)
    assert host_manifest.release_problem(meta) is None and host_manifest.release_problem(release_meta()) is None
    (directory / "config.json").write_text("{}")
    assert "config.json: size" in host_manifest.release_problem(meta)
    meta = release_meta(weights={**weights, "path": str(models / "gone")})
    assert "are not on the host" in host_manifest.release_problem(meta)


def test_prune_keeps_snapshots_of_retained_releases(models, checkpoint, tmp_path):
    kept, _ = place(models, checkpoint, "org--a/1111")
    legacy, _ = place(models, checkpoint, "org--a/2222")
    dropped, _ = place(models, checkpoint, "org--a/3333")
    foreign = models / "someone-else" / "model"
    foreign.mkdir(parents=True)
    store = tmp_path / "store"
    for release_id, meta in (("0001-aaaaaaaa", release_meta(weights=snapshot_mark(path=str(kept)))),
                             ("0002-bbbbbbbb", release_meta(exec_start=["x", "serve", "--model-path", str(legacy)]))):
        (store / "sglang" / "releases" / release_id).mkdir(parents=True)
        (store / "sglang" / "releases" / release_id / "meta.json").write_text(meta.dump())
    # Just verified: a deploy may be between its fetch and the release that records the snapshot.
    result = WeightsPruned.from_dict(host_prune.prune(str(models), str(store)))  # `prune`'s answer, strict
    assert result.removed == [] and result.skipped is None and dropped.is_dir()
    # While a fetch, promote or verify holds the weights' lock, prune waits for nothing and removes nothing.
    with host_prune.models_lock(str(models)):
        result = WeightsPruned.from_dict(host_prune.prune(str(models), str(store), grace_s=0))
    assert result.skipped == "locked" and result.removed == [] and dropped.is_dir()
    result = WeightsPruned.from_dict(host_prune.prune(str(models), str(store), grace_s=0))
    assert result.removed == [str(dropped)] and kept.is_dir() and legacy.is_dir() and foreign.is_dir()
    assert not dropped.exists()


def test_the_listing_shows_a_weights_change():
    a = snapshot_mark(source="hf://o/n@" + "a" * 40, revision="a" * 40, manifest_sha256="1" * 64)
    b = snapshot_mark(source="hf://o/n@" + "b" * 40, revision="b" * 40, manifest_sha256="2" * 64)
    store = store_report(
        {"id": "0001-aaaaaaaa", "weights": a, "exec_start": ["s", "--model-path", "/srv/models/o--n/" + "a" * 40]},
        {"id": "0002-bbbbbbbb", "weights": b, "exec_start": ["s", "--model-path", "/srv/models/o--n/" + "b" * 40]},
        active="0002-bbbbbbbb")
    lines = listing(store)
    old = next(line for line in lines if "0001-aaaaaaaa" in line)
    assert "aaaaaaaaaaaa" in old and f"weights: hf://o/n@{'b' * 40} (manifest 222222222222) -> hf://o/n@{'a' * 40}" in old
    assert "--model-path" not in old


def test_a_missing_hub_client_is_named(hub, checkpoint, models, tmp_path):
    commit = hub.add_directory(REPO_ID, checkpoint)
    manifest_file = hub_manifest(hub, tmp_path, commit)
    directory = models / REPO_ID.replace("/", "--") / commit
    result = subprocess.run([*WEIGHTS, "fetch", "--manifest", str(manifest_file), "--dir",
                             str(directory), "--repo", REPO_ID, "--revision", commit, "--python", "/nonexistent/python"],
                            env=dict(os.environ, SGLANG_DEPLOY_MODELS=str(models)), capture_output=True, text=True,
                            cwd=HOST_LIB)
    assert result.returncode == 1 and "/nonexistent/python (the python whose huggingface_hub" in result.stdout
    assert "Traceback" not in result.stderr


def test_a_directory_the_tool_did_not_verify_is_never_replaced(models, checkpoint):
    """Someone's own weights (or an older synthetic checkpoint) at the served path: refused, left as it is."""
    directory = models / "Qwen3.6-27B-FP8"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text('{"theirs": true}')
    staging = Path(host_fetch.staging_dir(str(directory)))
    staging.mkdir(parents=True)
    for path in checkpoint.iterdir():
        (staging / path.name).write_bytes(path.read_bytes())
    with pytest.raises(host_manifest.WeightsError, match=r"already exists and does not match the manifest .*"
                                                         r"move it away \(mv .*Qwen3.6-27B-FP8 .*\.old\)"):
        host_fetch.promote(str(directory), manifest_from_directory(checkpoint))
    assert sorted(p.name for p in directory.iterdir()) == ["config.json"]
    assert (directory / "config.json").read_text() == '{"theirs": true}'


# A forged verification record names the directory prune removes: never one outside the models root
# (security review 2, finding 18). (the directory written in the record, relative to tmp_path; {models}: the root)
FORGED_RECORD_CASES = [
    "{models}/../victim",              # '..' out of the root
    "{models}/org--a/../../victim",
    "{models}/org--link/rev",           # a symlinked org directory pointing out of the root
    "{models}/org--a/rev-link",         # a symlinked snapshot
    "{models}//org--a/x",              # not normalized
    "{models}/org--a",                  # not a snapshot: the whole org directory
    "{models}/.sglang-deploy/manifests",  # the tool's own directory
    "victim/org--a/rev",                # another root
]


@pytest.mark.parametrize("written", FORGED_RECORD_CASES)
def test_prune_never_leaves_the_models_root(models, tmp_path, written):
    victim = tmp_path / "victim"
    (victim / "org--a" / "rev").mkdir(parents=True)
    (victim / "keep.txt").write_text("not the tool's")
    (models / "org--a").mkdir(parents=True)
    (models / "org--link").symlink_to(victim / "org--a")
    (models / "org--a" / "rev-link").symlink_to(victim)
    (models / ".sglang-deploy" / "manifests").mkdir(parents=True)
    records = models / ".sglang-deploy" / "verified"
    records.mkdir(parents=True)
    directory = written.format(models=models) if written.startswith("{") else str(tmp_path / written)
    (records / "forged.json").write_text(json.dumps({"directory": directory, "verified_at": "2000-01-01T00:00:00Z"}))
    result = host_prune.prune(str(models), str(tmp_path / "store"), grace_s=0)
    assert result["removed"] == [] and (victim / "keep.txt").exists() and (victim / "org--a" / "rev").is_dir()
    assert (models / "org--a").is_dir() and (models / ".sglang-deploy" / "manifests").is_dir()
