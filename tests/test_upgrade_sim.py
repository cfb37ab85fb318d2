"""An upgrade is a release like any other, on the simulated CT129 with the MODEL-ONLY server (sim_server=model: the
model-only simulator serves each release's option table and /server_info version; SGLang's own front end of the
older release is not fitted onto the simulated host, docs/sglang-releases.md).

One chain: the proven profile deployed on the oldest release the tool has data for; `--dry --diff` shows the
resolved-argument diff to the newest; the upgrade passes the gate against the older release's result; rollback.py
crosses back (the old venv, the unit byte for byte); an upgrade with the planted regression (a changed resolved
default that costs speed) is refused and rolled back; the bisect across releases names the default."""

import json
import re
import time

import pytest

from conftest import PROVEN, REPO, write_profile
from sglang_deploy import releases
from test_releases_sim import STORE, release_of, state

pytestmark = pytest.mark.simhost
OLD, NEW = releases.versions()[0], releases.newest_reviewed()
# The planted regression: SGLang's default for this field changed between the releases (option tables: False in
# the older, None, SGLang's own choice, in the newer), and under this fault the newer's value costs 25 % per cycle.
CHANGED = "enable_fused_qk_norm_rope"
FAULT = f"{CHANGED}=null"
# Short gate settings (the verdict's path, not its statistics): the faulted release is 25 % slower (ratio about 0.80),
# the threshold 0.85. The first deploy is compared with whatever baseline another module left on the worker's host,
# measured with the profile's full settings: with 3 pairs, or at 0.95, it straddled for 4 looks under CI's load
# (ratio 0.97, 2026-12-06), so the proven 8 samples stay and the tolerance is wider.
SMALL_GATE = {"max_new_tokens: 256": "max_new_tokens: 64", "warmup: 1": "warmup: 0",
              "max_regression_pct: 10": "max_regression_pct: 30"}


def profile(tmp_path, version, name, fault=False):
    text = PROVEN.read_text().replace(f'version: "{NEW}"', f'version: "{version}"')
    for old, new in SMALL_GATE.items():
        assert old in text, old
        text = text.replace(old, new)
    if fault:
        text = text.replace("environment:\n", f'environment:\n  SGLANG_SIM_FAULT_SLOW_RESOLVED: "{FAULT}"\n', 1)
    return write_profile(tmp_path, text, f"{name}.yaml")


def deployed(simhost, path, **kwargs):
    started = time.monotonic()
    result = simhost.deploy(profile=path, gate=True, **kwargs)
    output = result.stdout + result.stderr
    print(f"--- deploy {path.name}: rc {result.returncode}, {time.monotonic() - started:.0f} s")
    print("\n".join(line for line in output.splitlines() if re.search(r"GATE|gate:|baseline|rollback|Diff:", line)))
    return result.returncode, output


def server_version(simhost) -> str:
    status, body = simhost.http("/server_info", simhost.api_key)
    assert status == 200, body
    return json.loads(body)["version"]


def test_upgrade_round_trip_with_a_planted_regression_and_the_bisect(simhost, tmp_path):
    assert OLD != NEW
    old_profile, new_profile = profile(tmp_path, OLD, "old"), profile(tmp_path, NEW, "new")

    code, output = deployed(simhost, old_profile)
    assert code == 0 and "GATE PASS" in output and "MODEL-ONLY" in output, output[-4000:]
    store = state(simhost)
    old_id = store["state"]["active"]
    old_meta = release_of(store, old_id)
    assert f"sglang-{OLD}-" in old_meta["venv"] and server_version(simhost) == OLD

    # --dry --diff: the unit diff and, before anything changes, the resolved-argument diff between the releases
    result = simhost.pyinfra(*simhost.deploy_args("--dry", "--diff", profile=new_profile), timeout=400)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"Diff: resolved arguments, SGLang {OLD} -> {NEW}" in output, output[-4000:]
    at = output.index(f"Diff: resolved arguments, SGLang {OLD} -> {NEW}")
    print(output[at - 300:at + 2500])
    unset = output[at:].split("not set by the profile (changed defaults):", 1)[1].split("set by the profile:")[0]
    assert f"{CHANGED}: False -> None" in unset, output[-4000:]
    assert state(simhost)["state"]["active"] == old_id

    # the upgrade: a new release with its own venv, gated against the older release's result
    code, output = deployed(simhost, new_profile)
    assert code == 0 and "GATE PASS" in output, output[-4000:]
    assert f"baseline: release {old_id}" in output, output[-4000:]
    store = state(simhost)
    new_id = store["state"]["active"]
    new_meta = release_of(store, new_id)
    assert new_id != old_id and f"sglang-{NEW}-" in new_meta["venv"] and server_version(simhost) == NEW

    # rollback.py across releases: the older release's venv and its unit, byte for byte
    result = simhost.pyinfra("rollback.py")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert state(simhost)["state"]["active"] == old_id and server_version(simhost) == OLD
    assert simhost.sh("sha256sum < /etc/systemd/system/sglang.service") == \
        simhost.sh(f"sha256sum < {STORE}/releases/{old_id}/sglang.service")
    cmdline = simhost.sh(f"tr '\\0' '\\n' < /proc/{simhost.main_pid()}/cmdline")
    assert f"{old_meta['venv']}/bin/sglang" in cmdline
    # the newer venv is kept while a retained release uses it (the prune keeps both)
    simhost.sh("cd /opt/sglang-deploy/lib && python3 -m hostside.store prune --service sglang --keep 5 --prune-venvs")
    simhost.sh(f"test -x {old_meta['venv']}/bin/sglang && test -x {new_meta['venv']}/bin/sglang")

    # the planted regression: the newer release's changed default costs speed; refused, rolled back to the old one
    code, output = deployed(simhost, profile(tmp_path, NEW, "new-slow", fault=True))
    assert code != 0 and "GATE FAIL" in output, output[-4000:]
    assert "slower than the baseline" in output and f"automatic rollback to {old_id}: healthy again" in output, \
        output[-4000:]
    store = state(simhost)
    assert store["state"]["active"] == old_id and store["consistent"] and server_version(simhost) == OLD
    [refused] = [r for r in store["releases"] if r["profile"] == "new-slow"]
    assert refused["verdict"] == "bad" and f"sglang-{NEW}-" in refused["venv"]
    assert f"{old_meta['venv']}/bin/sglang" in simhost.sh(f"tr '\\0' '\\n' < /proc/{simhost.main_pid()}/cmdline")

    # the bisect across releases: each changed resolved default pinned back alone on the newer release
    started = time.monotonic()
    result = simhost.pyinfra("doctor.py", "--data", f"profile={old_profile}", "--data", f"bisect={refused['id']}",
                             "--data", "tune_samples=1", "--data", "tune_max_new_tokens=16",
                             "--data", "tune_heartbeat_s=90", timeout=500)
    output = result.stdout + result.stderr
    print(output[-3000:], f"bisect: {time.monotonic() - started:.0f} s")
    assert result.returncode == 0, output[-4000:]
    assert re.search(rf"VERDICT: the changed default that costs the speed: {CHANGED} \({CHANGED}: False -> None, "
                     r"SGLang's default changed between the releases\): pinned back it runs [0-9.]+ tok/s against "
                     r"the refused release's [0-9.]+ \(\+[0-9.]+ %\)", output), output[-4000:]
    # the table marks the verdict's culprit only (the largest recovery): under CI's load another pinned default once
    # measured above the refused release too, still 18 % below the good one (2026-12-06)
    assert [line for line in output.splitlines() if "RECOVERS THE SPEED" in line and "pinned back:" in line] == \
        [line for line in output.splitlines() if "RECOVERS THE SPEED" in line and f"pinned back: {CHANGED}" in line] \
        and output.count("RECOVERS THE SPEED") >= 1, output[-4000:]
    store = state(simhost)
    assert store["state"]["active"] == old_id and store["consistent"] and not store["lock"]
    saved = sorted((REPO / "results" / "ct129-sim").glob(f"{refused['id']}-bisect-*.json"))[-1]
    # the saved verdict lists every pinned default that recovered, largest recovery first (the one named)
    culprits = json.loads(saved.read_text())["verdict"]["culprits"]
    assert culprits and culprits[0]["difference"] == CHANGED and culprits[0]["kind"] == "default", culprits
    assert [c["decode"] for c in culprits if c["kind"] == "default"] == \
        sorted((c["decode"] for c in culprits if c["kind"] == "default"), reverse=True), culprits
