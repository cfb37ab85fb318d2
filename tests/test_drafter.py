"""A draft model as part of the release (speculative.draft, sglang_deploy/drafter.py): the derived flag, the
manifest, the draft's config.json as an input of SGLang's own resolution, the roofline's draft bytes, the
simulator's drafter model and the release listing. Fast: no host."""

import dataclasses
import json

import pytest

from conftest import DFLASH, PROVEN, dflash_profile, proven_with, release_meta, snapshot_mark, synthetic_draft, write_profile
from sglang_deploy import drafter
from sglang_deploy.flags import server_args
from sglang_deploy.hostside.lib import roofline
from sglang_deploy.hostside import safetensors_headers
from sglang_deploy.hostside.weights import prune as weights_prune
from sglang_deploy.profile import ProfileError, load_profile
from sglang_deploy.release_plan import weights_change
from sglang_deploy.sim import hardware
from sglang_deploy.validate.check import check_profile


@pytest.fixture(autouse=True)
def weights_dirs(monkeypatch, tmp_path_factory):
    """The operator's setting that lets file:// sources and manifests come from these directories."""
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path_factory.getbasetemp()))


def check(path):
    return check_profile(load_profile(path), gpus=2, topology="pcie")


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    return synthetic_draft(tmp_path_factory.mktemp("drafts") / "qwen3.6-27b-dflash")


def test_the_draft_path_is_derived_and_its_config_feeds_the_resolution(tmp_path, draft_dir):
    path = dflash_profile(tmp_path, draft_dir)
    profile = load_profile(path)
    served = drafter.draft_weights(profile).path
    assert served.startswith("/srv/models/local--qwen3.6-27b-dflash/") and served.split("/")[-1] != drafter.UNFROZEN
    argv = server_args(profile)
    assert argv[argv.index("--speculative-draft-model-path") + 1] == served
    report = check(path)
    assert report.ok, report.lines()
    resolved = report.resolution["resolved"]
    # SGLang's _handle_dflash: steps and topk forced to 1, the draft tokens read from the draft's block_size
    assert (resolved["speculative_algorithm"], resolved["speculative_num_steps"], resolved["speculative_eagle_topk"],
            resolved["speculative_num_draft_tokens"]) == ("DFLASH", 1, 1, 16)
    assert resolved["speculative_draft_model_path"] == served  # the host's path, not the stand-in directory


def test_the_block_size_comes_from_the_drafters_own_config(tmp_path):
    draft = synthetic_draft(tmp_path / "b8", block_size=8)
    report = check(dflash_profile(tmp_path, draft))
    assert report.ok, report.lines()
    assert report.resolution["resolved"]["speculative_num_draft_tokens"] == 8


def test_a_config_sglang_cannot_read_the_block_size_from_is_refused(tmp_path):
    draft = synthetic_draft(tmp_path / "broken", block_size="sixteen")
    report = check(dflash_profile(tmp_path, draft))
    assert [p.rule for p in report.problems] == ["draft-model"], report.lines()
    assert "would verify 16 tokens" in report.lines()[0] and "Failed to infer DFLASH block_size" in report.lines()[0]


def test_a_draft_config_without_a_block_size_is_refused(tmp_path):
    draft = synthetic_draft(tmp_path / "no-block")
    config = json.loads((draft / "config.json").read_text())
    del config["block_size"]
    (draft / "config.json").write_text(json.dumps(config))
    report = check(dflash_profile(tmp_path, draft))
    assert [p.rule for p in report.problems] == ["draft-model"], report.lines()
    assert "defaulting to 16" in report.lines()[0]


def test_a_draft_from_outside_the_weights_directories_is_refused(tmp_path, draft_dir, monkeypatch):
    """A file:// draft is pushed from the controller: a pull request must not name ~/.docker or /etc."""
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

    import os

    path = dflash_profile(tmp_path, draft_dir)
    allowed = os.environ[WEIGHTS_DIRS_VARIABLE]
    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path / "elsewhere"))
    [problem] = [p for p in check(path).problems if p.rule == "draft-model"]
    assert problem.field == ("speculative", "draft", "source") and "not under a weights directory" in problem.message
    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, allowed)
    text = path.read_text().replace("  draft:\n", "  draft:\n    config: ../../etc/draft.json\n")
    [problem] = [p for p in check(write_profile(tmp_path, text, "etc.yaml")).problems if p.rule == "draft-model"]
    assert problem.field == ("speculative", "draft", "config") and "speculative.draft.config" in problem.message


def test_an_eagle_profile_may_leave_the_draft_to_sglang(tmp_path):
    """SGLang fills EAGLE's draft path in for checkpoints with MTP layers; DFLASH, EAGLE3, STANDALONE need one."""
    from sglang_deploy import drafter as module

    eagle = load_profile(proven_with(tmp_path, "--speculative-algorithm: NEXTN", "--speculative-algorithm: EAGLE"))
    assert module.problems(eagle) == []


def test_a_draft_config_sglang_refuses_is_its_refusal(tmp_path):
    draft = synthetic_draft(tmp_path / "unknown", model_type="not-a-model-type")
    report = check(dflash_profile(tmp_path, draft))
    assert [p.rule for p in report.problems] == ["sglang-resolution"], report.lines()
    assert "not-a-model-type" in report.lines()[0]


def test_the_committed_profile_waits_only_for_the_users_freeze(monkeypatch):
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, "/srv/drafters")  # as the profile's header says
    report = check(DFLASH)
    assert [p.rule for p in report.problems] == ["draft-model"], report.lines()
    line = report.lines()[0]
    assert line.startswith(f"{DFLASH}:") and "speculative.draft.manifest" in line
    assert ("sglang-deploy manifest file:///srv/drafters/qwen3.6-27b-dflash --output "
            "manifests/local--qwen3.6-27b-dflash.json") in line
    # SGLang's whole resolution still ran, with the reconstructed draft config
    assert report.resolution["resolved"]["speculative_num_draft_tokens"] == 16
    assert report.resolution["steps"][-3:] == ["validate_deepep_v2_dispatch_token_budget", "check_server_args",
                                              "resolve_auto_parsers"]




def test_an_algorithm_that_reads_a_draft_model_needs_one(tmp_path):
    path = proven_with(tmp_path, "--speculative-algorithm: NEXTN", "--speculative-algorithm: EAGLE3")
    problems = [p for p in check(path).problems if p.rule == "draft-model"]
    assert problems and problems[0].field == ("sglang", "flags", "--speculative-algorithm")
    assert "add speculative.draft.source" in problems[0].message


def test_a_draft_model_with_nextn_is_refused(tmp_path, draft_dir):
    text = DFLASH.read_text().replace("--speculative-algorithm: DFLASH", "--speculative-algorithm: NEXTN")
    report = check(dflash_profile(tmp_path, draft_dir, text=text))
    problems = [p for p in report.problems if p.rule == "draft-model"]
    assert problems and problems[0].field == ("speculative", "draft")
    assert "NEXTN drafts with the checkpoint's own MTP heads" in problems[0].message


@pytest.mark.parametrize("flag", ["--speculative-draft-model-path", "--speculative-draft-model-revision"])
def test_the_profile_cannot_name_the_draft_path_itself(tmp_path, flag):
    path = proven_with(tmp_path, "    --enable-metrics: true", f"    {flag}: /dev/shm/other\n    --enable-metrics: true")
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    assert f"flag {flag} is set by the tool from speculative.draft.source" in str(error.value)


def test_a_config_other_than_the_manifests_is_refused(tmp_path, draft_dir):
    other = tmp_path / "other-config.json"
    other.write_text(json.dumps({**json.loads((draft_dir / "config.json").read_text()), "block_size": 8}))
    path = dflash_profile(tmp_path, draft_dir)
    text = path.read_text().replace("  draft:\n", f"  draft:\n    config: {other}\n")
    report = check(write_profile(tmp_path, text, "other.yaml"))
    [problem] = [p for p in report.problems if p.rule == "draft-model"]
    assert problem.field == ("speculative", "draft", "config") and "not the config.json the manifest pins" in problem.message


def test_the_roofline_counts_the_draft_models_bytes(draft_dir):
    from sglang_deploy.sim import synthetic_checkpoint

    target = {"bytes": {"layers": 24.3e9, "lm_head": 2.54e9, "embedding": 2.54e9, "mtp": 0.43e9, "vision": 0.9e9}}
    draft = safetensors_headers.summarize(str(draft_dir))
    assert draft["bytes"]["layers"] == hardware.checkpoint_bytes(str(draft_dir))  # one reading, two readers
    mtp = roofline.roofline(target, 2, 3, 3.4, 768)
    dflash = roofline.roofline(target, 2, 1, 4.4, 768, draft=draft)
    assert dflash["draft_model"] and dflash["steps"] == 1
    assert dflash["cycle_gb_per_gpu"] == pytest.approx((24.3e9 + 2.54e9 + draft["bytes"]["layers"] + 2.54e9) / 2 / 1e9)
    assert mtp["cycle_gb_per_gpu"] == pytest.approx((26.84e9 + 3 * (0.43e9 + 2.54e9)) / 2 / 1e9)
    assert synthetic_checkpoint.SIZES["BF16"] == 2 and 3.0e9 < draft["bytes"]["layers"] < 4.0e9


def test_the_simulator_models_dflash_by_content(draft_dir):
    machine, model = hardware.load_data("2xa6000-pcie"), hardware.load_data("qwen3.6-27b-fp8")
    base = {"tp_size": 2, "max_running_requests": 16, "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 16}}}
    mtp = hardware.resolve({**base, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}, {}, machine, model)
    dflash = hardware.resolve({**base, "speculative_algorithm": "DFLASH", "speculative_num_steps": 1,
                               "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 16,
                               "speculative_draft_model_path": str(draft_dir)}, {}, machine, model)
    assert dflash.drafter == "DFLASH" and dflash.draft_bytes == hardware.checkpoint_bytes(str(draft_dir))
    tau = {kind: {name: hardware.expected_tau(hardware.accept_probabilities(eff, model, kind))
                  for name, eff in (("mtp", mtp), ("dflash", dflash))} for kind in ("prose", "chat", "code")}
    assert tau["code"]["dflash"] > tau["chat"]["dflash"] > tau["prose"]["dflash"]
    assert 4.2 < tau["code"]["dflash"] < 4.8 and 3.2 < tau["code"]["mtp"] < 3.6  # the cited 4.4 vs 3.4 on code
    # the draft pass costs its bytes: a drafter twice the size is slower per cycle
    heavier = dataclasses.replace(dflash, draft_bytes=2 * dflash.draft_bytes)
    assert hardware.cycle_ms(heavier, machine, model) > hardware.cycle_ms(dflash, machine, model)
    gain = hardware.expected_tok_s(dflash, machine, model) / hardware.expected_tok_s(mtp, machine, model) - 1
    assert 0.2 < gain < 0.5, gain


def test_the_listing_and_prune_know_the_draft(tmp_path, draft_dir):
    release = {"draft": snapshot_mark(source="file:///srv/drafters/b", revision=None, manifest_sha256="b" * 64,
                                      path="/srv/models/x/b")}
    active = {"draft": snapshot_mark(source="file:///srv/drafters/a", revision=None, manifest_sha256="a" * 64)}
    mine, theirs = release_meta(**release), release_meta(**active)
    assert weights_change(mine, theirs, "draft") == ("draft: file:///srv/drafters/a (manifest aaaaaaaaaaaa) -> "
                                                     "file:///srv/drafters/b (manifest bbbbbbbbbbbb)")
    assert weights_change(mine, release_meta(), "draft").startswith("draft: (none) -> ")
    store = tmp_path / "store" / "sglang" / "releases" / "r1"
    store.mkdir(parents=True)
    (store / "meta.json").write_text(release_meta(**release, exec_start=[
        "sglang", "serve", "--speculative-draft-model-path", "/srv/models/y/c"]).dump())
    assert {"/srv/models/x/b", "/srv/models/y/c"} <= weights_prune.referenced_snapshots(str(tmp_path / "store"))


def test_the_draft_and_the_offered_drafters_are_part_of_the_release_content(tmp_path, draft_dir):
    """Each snapshot is named in the unit with its manifest's hash: offering a drafter, or another manifest of the
    draft, makes another release (which then records it), not an 'unchanged' deploy that prune forgets."""
    from sglang_deploy.render import render

    path = dflash_profile(tmp_path, draft_dir)
    unit = render(load_profile(path)).unit
    assert f"# Draft model: file://{draft_dir} (manifest sha256:" in unit
    mtp = load_profile(proven_with(tmp_path, "--enable-metrics: true", "--enable-metrics: true"))
    manifest = path.read_text().split("manifest: ")[1].split("\n")[0]
    offering = write_profile(tmp_path, PROVEN.read_text() + f"\ntune:\n  drafters:\n    - source: file://{draft_dir}\n"
                             f"      manifest: {manifest}\n", "offering.yaml")
    offered_unit = render(load_profile(offering)).unit
    assert f"# Drafter offered to the tune: file://{draft_dir}" in offered_unit
    assert offered_unit != render(mtp).unit
