"""A DFlash drafter as part of a release on the simulated CT129: the draft checkpoint is pushed and verified like
the weights, the host's preflight resolves DFLASH with it, the gate compares the resolved DFLASH fields with the
running server; a rollback to the MTP release keeps both snapshots; a changed or corrupted draft stops the switch.
The GPU server is the model-only simulator (its drafter model: sim/hardware.py); SSH, systemd, HTTP are real."""

import json

import pytest

from conftest import PROVEN, dflash_profile, proven_with, synthetic_draft
from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

pytestmark = pytest.mark.simhost

RELEASES = "/var/lib/sglang-deploy/sglang/releases"


def state(simhost) -> dict:
    return json.loads(simhost.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))


def running_argv(simhost) -> list[str]:
    return simhost.sh(f"tr '\\0' '\\n' < /proc/{simhost.main_pid()}/cmdline").splitlines()


def deploy_alone(simhost, tmp_path, note):
    """A release of the proven profile of its own (SGLANG_SIM_NOTE), and only it kept (keep_releases=1)."""
    variant = proven_with(tmp_path, "environment:\n", f'environment:\n  SGLANG_SIM_NOTE: "{note}"\n', f"{note}.yaml")
    result = simhost.deploy("--data", "keep_releases=1", profile=variant)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]


def test_a_dflash_release_deploys_gates_and_rolls_back_to_mtp(simhost, tmp_path):
    try:
        dflash_release_deploys_gates_and_rolls_back(simhost, tmp_path)
    finally:
        # The DFlash release passed its gate at ~68 tok/s: left retained, it would be the baseline every later MTP
        # release on this worker's host is compared with (and found 25 % slower). A switch with keep_releases=1
        # prunes it, and its draft snapshot with it.
        deploy_alone(simhost, tmp_path, "after-dflash")
        assert not any(r.get("draft") for r in state(simhost)["releases"])


def dflash_release_deploys_gates_and_rolls_back(simhost, tmp_path):
    simhost.env[WEIGHTS_DIRS_VARIABLE] = str(tmp_path)
    draft = synthetic_draft(tmp_path / "qwen3.6-27b-dflash")
    profile = dflash_profile(tmp_path, draft)
    # the floor is the profile's subject elsewhere; here the gate's comparison of the DFLASH fields is
    profile.write_text(profile.read_text().replace("min_decode_tok_s: 55", "min_decode_tok_s: 30"))
    # An MTP release of its own, and only it kept: a release an earlier test gated on this worker's host would be
    # the DFlash gate's baseline, and per prompt DFlash ran 0.7-2.2x of MTP (inconclusive after 4 looks, 2026-12-06).
    deploy_alone(simhost, tmp_path, "before-dflash")
    mtp = state(simhost)["state"]["active"]

    result = simhost.deploy(profile=profile, gate=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "push model.safetensors" in output and "Verify the pushed weights" in output
    dflash = state(simhost)["state"]["active"]
    meta = next(r for r in state(simhost)["releases"] if r["id"] == dflash)
    served = meta["draft"]["path"]
    assert served.startswith("/srv/models/local--qwen3.6-27b-dflash/") and meta["draft"]["source"] == f"file://{draft}"
    argv = running_argv(simhost)
    assert argv[argv.index("--speculative-draft-model-path") + 1] == served
    assert simhost.sh(f"ls {served}").split() == ["config.json", "model.safetensors"]
    gate = json.loads(simhost.sh(f"cat {RELEASES}/{dflash}/gate-result.json"))
    config = json.loads(simhost.sh(f"cat {RELEASES}/{dflash}/gate-config.json"))
    # SGLang's resolution on the controller: steps 1, the block from the draft's config; the running server agrees
    assert {key: config["expect"]["resolved"][key] for key in ("speculative_algorithm", "speculative_num_steps",
            "speculative_num_draft_tokens", "speculative_draft_model_path")} == {
        "speculative_algorithm": "DFLASH", "speculative_num_steps": 1, "speculative_num_draft_tokens": 16,
        "speculative_draft_model_path": served}
    assert gate["verdict"] == "pass", gate
    listing = simhost.pyinfra("releases.py")
    assert f"draft: file://{draft}" in listing.stdout + listing.stderr and "-> (none)" in listing.stdout + listing.stderr
    # The doctor's roofline reads the draft snapshot's headers on the host: its bytes are part of every cycle.
    result = simhost.pyinfra("doctor.py")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    doctor = json.loads(simhost.sh(f"cat {RELEASES}/{dflash}/doctor.json"))
    bound = doctor["roofline"]
    assert bound["draft_model"] and bound["steps"] == 1 and not doctor["opportunities"]
    # per GPU: the draft's 3.46 GB and the target's LM head (2.54 GB) over TP 2, on top of the verify pass
    assert bound["draft_step_gb_per_gpu"] == pytest.approx((3.46 + 2.54) / 2, abs=0.05)
    assert "weak-speculation" not in [s["id"] for s in doctor["suspects"]]

    # Back to MTP: no draft flag, and the draft snapshot stays (the DFlash release is retained).
    result = simhost.pyinfra("rollback.py", "--data", f"release={mtp}")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert state(simhost)["state"]["active"] == mtp and "--speculative-draft-model-path" not in running_argv(simhost)
    assert simhost.sh(f"test -d {served} && echo kept").strip() == "kept"

    # A draft changed on the host: the switch back to the DFlash release is refused, naming the file.
    simhost.sh(f"echo ' ' >> {served}/config.json")
    result = simhost.pyinfra("rollback.py", "--data", f"release={dflash}")
    assert result.returncode != 0 and "draft model" in result.stdout + result.stderr
    assert "config.json: size" in result.stdout + result.stderr
    assert state(simhost)["state"]["active"] == mtp

    # A corrupted draft file on the way: the host verifies the push against the manifest before any switch.
    simhost.sh(f"rm -rf {served}")
    with open(draft / "model.safetensors", "ab") as handle:
        handle.write(b"\0" * 8)
    result = simhost.deploy(profile=profile)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "model.safetensors" in output, output[-3000:]
    assert state(simhost)["state"]["active"] == mtp and "--speculative-draft-model-path" not in running_argv(simhost)


def test_the_tune_picks_the_drafter_by_measurement_and_reports_each_content_class(simhost, tmp_path):
    """From the proven MTP release with a DFlash drafter offered (tune.drafters, deployed with the release): the
    drafter candidate runs as a temporary release and wins on the measured mix; the tuned profile names it. The
    modelled block-16 verify costs aggregate throughput at the gate's concurrency 4 (about -7 %): the objective's
    aggregate floor is lowered to 70 % here, a single-stream user's choice the tune otherwise refuses. (At 80 % a CI
    run on 2 busy cores refused it once: 110.7 tok/s against the original's 139.6, -21 %, measured while the other
    workers started servers.)"""
    from sglang_deploy.drafter import config_copy
    from sglang_deploy.weights import manifest_from_directory, write_manifest

    simhost.env[WEIGHTS_DIRS_VARIABLE] = str(tmp_path)
    draft = synthetic_draft(tmp_path / "offered-dflash")
    manifest = tmp_path / "offered-dflash.json"
    write_manifest(manifest_from_directory(draft), manifest)
    config_copy(manifest).write_bytes((draft / "config.json").read_bytes())
    text = PROVEN.read_text().replace("environment:\n", 'environment:\n  SGLANG_SIM_START_SECONDS: "1"\n', 1)
    text += f"\ntune:\n  drafters:\n    - source: file://{draft}\n      manifest: {manifest}\n"
    profile = tmp_path / "mtp-offering-dflash.yaml"
    profile.write_text(text)
    result = simhost.deploy(profile=profile)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    active = state(simhost)["state"]["active"]
    meta = next(r for r in state(simhost)["releases"] if r["id"] == active)
    [offered] = meta["offered_drafts"]
    assert simhost.sh(f"ls {offered['path']}").split() == ["config.json", "model.safetensors"]

    result = simhost.pyinfra("tune.py", "--data", f"profile={profile}", "--data", "tune_space=drafter",
                             "--data", "tune_samples=3", "--data", "tune_max_new_tokens=48",
                             "--data", "tune_resume=false", "--data", "tune_heartbeat_s=90",
                             "--data", "tune_budget_s=600", "--data", "tune_min_aggregate=0.7", timeout=700)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    document = json.loads(simhost.sh(f"cat {RELEASES}/{active}/tune-results.json"))
    print("\n" + document["table"] + "\n" + document["by_kind"])
    results = {entry["id"]: entry for entry in document["results"]}
    assert document["winner"].startswith("drafter-dflash-offered-dflash-"), document["table"]
    winner = results[document["winner"]]
    # the tune's own rule made it the winner (a gain beyond both measurements' noise); short samples under load
    # show less than the model's +27 % on the mix
    assert winner["decode_score"] > results["original"]["decode_score"]
    assert set(winner["by_kind"]) == {"prose", "code", "chat"}
    assert winner["by_kind"]["code"] > winner["by_kind"]["prose"]  # acceptance depends on the text
    assert "per content class" in document["by_kind"] and "code +" in document["by_kind"]
    tuned = profile.with_name("mtp-offering-dflash.tuned.yaml").read_text()
    assert f"source: file://{draft}" in tuned and "--speculative-algorithm: DFLASH  # tuned: NEXTN -> DFLASH" in tuned
    assert "--speculative-num-steps" not in tuned and "code +" in tuned
    assert state(simhost)["state"]["active"] == active  # the original release is back
