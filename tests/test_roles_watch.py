"""roles/watch.py without a host: in_place from the DeployState fact's fixtures, install's commands (the timer)."""

import hashlib

import pytest
from pyinfra.facts.files import File, Sha256File

from fakehost import FactsBy, fixture_fact, run_role
from roles import watch
from sglang_deploy.render import RenderedWatch

# the texts whose sha256 the fixture DeployState/redeploy_everything_in_place found on the host
RENDERED = RenderedWatch(service="[Unit]\nDescription=fixture watch\n", timer="[Timer]\nOnUnitActiveSec=15min\n",
                         exec_start=[])
UNIT, TIMER = "/etc/systemd/system/sglang-watch.service", "/etc/systemd/system/sglang-watch.timer"


def state(case: str):
    fact = fixture_fact("DeployState", case)
    return fact["files"], fact["timers"]


def test_enabled_and_in_place_after_a_deploy():
    files, timers = state("redeploy_everything_in_place")
    assert watch.in_place(files, timers, RENDERED, "sglang", enabled=True, textfile_dir_present=True)


def test_first_deploy_is_not_in_place_and_a_disabled_watch_is():
    files, timers = state("first_deploy_gpu_host")
    assert timers == {"sglang-watch.timer": ["inactive"]}
    assert not watch.in_place(files, timers, RENDERED, "sglang", enabled=True, textfile_dir_present=False)
    assert watch.in_place(files, timers, RENDERED, "sglang", enabled=False, textfile_dir_present=False)


@pytest.mark.parametrize("change", [
    {"timers": {"sglang-watch.timer": ["enabled", "inactive"]}},
    {"timers": {"sglang-watch.timer": ["disabled", "active"]}},
    {"timers": {}},
    {"files": {UNIT: ["644", "root", "root", "0" * 64]}},
    {"files": {TIMER: ["664", "root", "root", hashlib.sha256(RENDERED.timer.encode()).hexdigest()]}},
    {"textfile_dir_present": False},
])
def test_anything_off_reinstalls(change):
    files, timers = state("redeploy_everything_in_place")
    files = {**files, **change.get("files", {})}
    timers = change.get("timers", timers)
    assert not watch.in_place(files, timers, RENDERED, "sglang", enabled=True,
                              textfile_dir_present=change.get("textfile_dir_present", True))


def test_disabled_but_still_enabled_or_running_is_not_in_place():
    files, timers = state("redeploy_everything_in_place")
    assert not watch.in_place(files, timers, RENDERED, "sglang", enabled=False, textfile_dir_present=True)
    assert not watch.in_place(files, {"sglang-watch.timer": ["disabled", "active"]}, RENDERED, "sglang",
                              enabled=False, textfile_dir_present=True)


# --- the operations: facts in, commands out ----------------------------------------------------------------

def test_install_writes_both_units_root_0644_then_enables_and_restarts_the_timer():
    ops = run_role(watch.install, rendered=RENDERED, service="sglang", textfile_dir="/var/lib/prometheus/node-exporter")
    assert ops.names == [f"Perf watch | {UNIT}", f"Perf watch | {TIMER}",
                         "Perf watch | Textfile directory /var/lib/prometheus/node-exporter; enable sglang-watch.timer"]
    for op, path in zip(ops, (UNIT, TIMER)):
        assert op.commands[-3:] == [f"upload {path}", f"chown root:root {path}", f"chmod 644 {path}"]
    assert ops[2].commands == [
        "cd /opt/sglang-deploy/lib && python3 -m hostside.watch --service sglang --textfile-dir "
        "/var/lib/prometheus/node-exporter --prepare-textfile-dir",
        "systemctl daemon-reload && systemctl enable sglang-watch.timer && systemctl restart sglang-watch.timer"]


def test_units_already_there_are_not_uploaded_but_the_timer_is_still_enabled():
    digests = {UNIT: hashlib.sha256(RENDERED.service.encode()).hexdigest(),
               TIMER: hashlib.sha256(RENDERED.timer.encode()).hexdigest()}
    ops = run_role(watch.install, rendered=RENDERED, service="sglang", textfile_dir="/x",
                   facts={Sha256File: FactsBy("path", digests), File: {"mode": 644, "user": "root", "group": "root"},
                          "Directory": {"mode": 755, "user": "root", "group": "root"}})
    assert ops[0].commands == ops[1].commands == []
    assert ops[2].commands[-1].startswith("systemctl daemon-reload && systemctl enable sglang-watch.timer")


def test_disabled_only_disables_the_timer():
    ops = run_role(watch.install, rendered=RENDERED, service="sglang", textfile_dir="/x", enabled=False)
    assert ops.names == ["Perf watch | Disable sglang-watch.timer (watch.enabled: false)"]
    assert ops.commands == ["systemctl disable --now sglang-watch.timer 2>/dev/null || true"]
