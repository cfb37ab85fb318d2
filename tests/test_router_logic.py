"""The router's settings and unit (sglang_deploy/router.py), without hosts."""

import pytest

from conftest import bench_measurement
from sglang_deploy.router import ROUTER_VERSION, RouterError, RouterSettings, command_line, render_unit, worker_url
from sglang_deploy.settings import HostSettings, SettingsError


def test_defaults_and_values():
    assert RouterSettings.of({}) == RouterSettings()
    custom = RouterSettings.of({"router_port": "31000", "router_policy": "round_robin", "router_bind": "::1",
                                "router_workers": "gpu_a", "router_health_interval_s": 5})
    assert (custom.port, custom.policy, custom.bind, custom.workers_group, custom.health_interval_s) == \
        (31000, "round_robin", "::1", "gpu_a", 5)


@pytest.mark.parametrize("data, message", [
    ({"router_port": "30080;id"}, "router_port: must be an integer between 1 and 65535, got '30080;id'"),
    ({"router_port": 70000}, "router_port"),
    ({"router_bind": "router.example.com"}, "router_bind: must be an IP literal (127.0.0.1, ::1, 0.0.0.0), got 'router.example.com'"),
    ({"router_policy": "fastest"}, "router_policy: must be cache_aware or round_robin or random or power_of_two, got 'fastest'"),
    ({"router_workers": "fleet; rm -rf /"}, "router_workers"),
    ({"router_health_failures": "0"}, "router_health_failures"),
])
def test_bad_settings_are_refused_with_the_key(data, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RouterSettings.of(data)


def test_worker_urls():
    def url(name, data):
        return worker_url(name, HostSettings.of(data), 30000)

    assert url("w1", {"ssh_hostname": "10.0.0.7", "port": 30001}) == "http://10.0.0.7:30001"
    assert url("w1", {"worker_address": "fd00::7"}) == "http://[fd00::7]:30000"
    assert url("gpu-3.lab", {}) == "http://gpu-3.lab:30000"
    for bad in ("10.0.0.7/x", "a b", "$(id)"):
        with pytest.raises(RouterError, match="worker_address"):
            url("w1", {"worker_address": bad})
    with pytest.raises(SettingsError, match="worker_address"):  # refused as host data already
        url("w1", {"worker_address": "host\n[Service]"})


def test_unit_passes_the_workers_and_keeps_the_key_off_the_command_line():
    workers = ["http://127.0.0.1:30001", "http://[fd00::7]:30000"]
    unit = render_unit(RouterSettings(policy="round_robin"), workers)
    assert unit.startswith("# Managed by sglang-deploy")
    exec_start = unit[unit.index("ExecStart="):unit.index("Restart=")]
    assert "--worker-urls http://127.0.0.1:30001 'http://[fd00::7]:30000'" in exec_start
    assert "--policy round_robin" in exec_start and "--health-check-endpoint /health" in exec_start
    assert "--api-key" not in unit
    assert "LoadCredential=workers-api-key:/etc/sglang-deploy/sglang-router/workers-api-key" in unit
    for directive in ("DynamicUser=yes", "PrivateDevices=yes", "MemoryDenyWriteExecute=yes", "ProtectSystem=strict",
                      "CapabilityBoundingSet=", "StartLimitIntervalSec=0"):
        assert f"\n{directive}\n" in unit, directive
    assert f"sglang-router-{ROUTER_VERSION}/bin/python" in exec_start
    with pytest.raises(RouterError, match="has no hosts"):
        command_line(RouterSettings(), [])


def test_the_fleet_gate_through_the_router_applies_the_workers_floors():
    from sglang_deploy.gate import gate_settings
    from sglang_deploy.profile.sections import GateSection
    from sglang_deploy.router import gate_verdict

    floors = gate_settings(GateSection(min_decode_tok_s=45, min_accept_length=2.8))
    good = bench_measurement([51.0], [3.2], aggregates=[450.0],  # the router does not proxy /server_info
                             errors=["/server_info: HTTP Error 404: Not Found"])
    assert gate_verdict(good, floors, 3) == {
        "verdict": "pass", "reasons": [], "workers": 3, "decode_tok_s": 51.0, "accept_length": 3.2,
        "aggregate_tok_s": 450.0, "aggregate_per_worker_tok_s": 150.0}
    slow = bench_measurement([30.0], [1.1], aggregates=[450.0], errors=["sample 2: timed out"])
    verdict = gate_verdict(slow, floors, 3)
    assert verdict["verdict"] == "fail" and len(verdict["reasons"]) == 3
    assert gate_verdict(good.but(decode_tok_s=None), floors, 3)["reasons"] == [
        "no single-stream sample completed through the router"]


def test_the_router_key_file_is_read_as_an_api_key(tmp_path):
    from sglang_deploy.hostside.lib.client import read_api_key

    (tmp_path / "workers-api-key").write_text("sk-abc123\n")
    (tmp_path / "secrets.yaml").write_text('api-key: "sk-xyz"\n')
    (tmp_path / "other.yaml").write_text("something: else\nmore: lines\n")
    assert [read_api_key(str(tmp_path / n)) for n in ("workers-api-key", "secrets.yaml", "other.yaml", "none")] == [
        "sk-abc123", "sk-xyz", None, None]
