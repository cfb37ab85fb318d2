"""The router's settings and unit (sglang_deploy/router.py), without hosts."""

import pytest

from sglang_deploy.router import ROUTER_VERSION, RouterError, RouterSettings, command_line, render_unit, settings, \
    worker_url


def test_defaults_and_values():
    assert settings({}) == RouterSettings()
    custom = settings({"router_port": "31000", "router_policy": "round_robin", "router_bind": "::1",
                       "router_workers": "gpu_a", "router_health_interval_s": 5})
    assert (custom.port, custom.policy, custom.bind, custom.workers_group, custom.health_interval_s) == \
        (31000, "round_robin", "::1", "gpu_a", 5)


@pytest.mark.parametrize("data, message", [
    ({"router_port": "30080;id"}, "router_port: '30080;id': an integer from 1 to 65535"),
    ({"router_port": 70000}, "router_port"),
    ({"router_bind": "router.example.com"}, "router_bind: 'router.example.com': an IP literal"),
    ({"router_policy": "fastest"}, "router_policy: 'fastest': one of random, round_robin, cache_aware, power_of_two"),
    ({"router_workers": "fleet; rm -rf /"}, "router_workers"),
    ({"router_health_failures": "0"}, "router_health_failures"),
])
def test_bad_settings_are_refused_with_the_key(data, message):
    with pytest.raises(RouterError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings(data)


def test_worker_urls():
    assert worker_url("w1", {"ssh_hostname": "10.0.0.7", "port": 30001}, 30000) == "http://10.0.0.7:30001"
    assert worker_url("w1", {"worker_address": "fd00::7"}, 30000) == "http://[fd00::7]:30000"
    assert worker_url("gpu-3.lab", {}, 30000) == "http://gpu-3.lab:30000"
    for bad in ("10.0.0.7/x", "a b", "host\n[Service]", "$(id)"):
        with pytest.raises(RouterError, match="worker_address"):
            worker_url("w1", {"worker_address": bad}, 30000)


def test_unit_passes_the_workers_and_keeps_the_key_off_the_command_line():
    workers = ["http://127.0.0.1:30001", "http://[fd00::7]:30000"]
    unit = render_unit(RouterSettings(policy="round_robin"), workers)
    assert unit.startswith("# Managed by sglang-deploy")
    exec_start = unit[unit.index("ExecStart="):unit.index("Restart=")]
    assert "--worker-urls http://127.0.0.1:30001 'http://[fd00::7]:30000'" in exec_start
    assert "--policy round_robin" in exec_start and "--health-check-endpoint /health" in exec_start
    assert "--api-key" not in unit
    assert f"LoadCredential=workers-api-key:/etc/sglang-deploy/sglang-router/workers-api-key" in unit
    for directive in ("DynamicUser=yes", "PrivateDevices=yes", "MemoryDenyWriteExecute=yes", "ProtectSystem=strict",
                      "CapabilityBoundingSet=", "StartLimitIntervalSec=0"):
        assert f"\n{directive}\n" in unit, directive
    assert f"sglang-router-{ROUTER_VERSION}/bin/python" in exec_start
    with pytest.raises(RouterError, match="has no hosts"):
        command_line(RouterSettings(), [])
