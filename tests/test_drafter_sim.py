"""A DFlash drafter as part of a release on the simulated CT129: the draft checkpoint is pushed and verified like
the weights, the host's preflight resolves DFLASH with it, the gate compares the resolved DFLASH fields with the
running server; a rollback to the MTP release keeps both snapshots; a changed or corrupted draft stops the switch.
The GPU server is the model-only simulator (its drafter model: sim/hardware.py); SSH, systemd, HTTP are real."""

import json

import pytest

from conftest import PROVEN, dflash_profile, synthetic_draft
from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

pytestmark = pytest.mark.simhost

RELEASES = "/var/lib/sglang-deploy/sglang/releases"


def state(simhost) -> dict:
    return json.loads(simhost.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.store state --service sglang"))


def running_argv(simhost) -> list[str]:
    return simhost.sh(f"tr '\\0' '\\n' < /proc/{simhost.main_pid()}/cmdline").splitlines()


def test_a_dflash_release_deploys_gates_and_rolls_back_to_mtp(simhost, tmp_path):
    simhost.env[WEIGHTS_DIRS_VARIABLE] = str(tmp_path)
    draft = synthetic_draft(tmp_path / "qwen3.6-27b-dflash")
    profile = dflash_profile(tmp_path, draft)
    # the floor is the profile's subject elsewhere; here the gate's comparison of the DFLASH fields is
    profile.write_text(profile.read_text().replace("min_decode_tok_s: 55", "min_decode_tok_s: 30"))
    result = simhost.deploy(profile=PROVEN)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
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
