"""roles/router.py and roles/multinode.py's start order without a host: which operations run, and whether the
router restarts, for a fake host's facts."""

import hashlib

import pytest
from pyinfra.facts.files import File, Sha256File

from fakehost import FactsBy, run_role
from sglang_deploy.switch_options import SwitchOptions
from roles import multinode, router
from sglang_deploy.router import ROUTER_KEY_PATH, ROUTER_UNIT_PATH

UNIT = "[Unit]\nDescription=router\n"
KEY = "sk-router-fixture-key"
WORKERS = ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]


def install(tmp_path, installed_digest, facts):
    ship = router.router_shipment(str(tmp_path))
    return ship, run_role(router.install, ship=ship, installed_digest=installed_digest, unit=UNIT, api_key=KEY,
                          check_url="http://127.0.0.1:30015", workers=WORKERS, facts=facts)


def test_first_install_sends_the_wheelhouse_and_starts_the_router(tmp_path):
    ship, ops = install(tmp_path, None, {})
    assert ops.named("Router archive").commands[-2:] == [f"upload {ship.upload_path}", f"chmod 600 {ship.upload_path}"]
    assert "--no-index" in ops.named("Router venv").commands[1]
    assert ops.named("Workers' API key").commands[-1] == f"chmod 600 {ROUTER_KEY_PATH}"
    assert ops.named("enabled and running").name.endswith("(restarted)")
    assert ops.named("Router ready").commands == [
        "python3 /opt/sglang-deploy/router/router_check.py --url http://127.0.0.1:30015 --key-file "
        f"{ROUTER_KEY_PATH} --timeout 120 --worker {WORKERS[0]} --worker {WORKERS[1]}"]
    assert KEY not in "\n".join(ops.commands + ops.names)


def test_nothing_changed_no_restart_but_the_health_check_still_runs(tmp_path):
    ship = router.router_shipment(str(tmp_path))
    facts = {Sha256File: FactsBy("path", {ROUTER_KEY_PATH: hashlib.sha256(f"{KEY}\n".encode()).hexdigest(),
                                          ROUTER_UNIT_PATH: hashlib.sha256(UNIT.encode()).hexdigest()}),
             File: FactsBy("path", {ROUTER_KEY_PATH: {"mode": 600, "user": "root", "group": "root"},
                                    ROUTER_UNIT_PATH: {"mode": 644, "user": "root", "group": "root"}}),
             "Directory": {"mode": 700, "user": "root", "group": "root"},
             "SystemdStatus": {"sglang-router.service": True}, "SystemdEnabled": {"sglang-router.service": True}}
    _, ops = install(tmp_path, ship.digest, facts)
    assert not [name for name in ops.names if "Router archive" in name or "(restarted)" in name]
    assert [op.name for op in ops if op.commands] == ["SGLang router | Router ready with 2 healthy worker(s)"]


@pytest.mark.parametrize("rank, order", [
    (0, ["Stop sglang on all 2 nodes", "Every node of the server passed the steps before rank 0's start",
         "Switch sglang to release r2", "Report"]),
    (1, ["Stop sglang on all 2 nodes", "Every node of the server passed the steps before the joining ranks' start",
         "Switch sglang to release r2", "Report"]),
])
def test_multinode_switch_stops_every_node_first_then_starts_in_rank_order(rank, order):
    switch = SwitchOptions(service="sglang", release_id="r2", probe_url="http://127.0.0.1:30000", timeout=600,
                           reason="deploy")
    ops = run_role(multinode.switch_in_order, options=switch, rank=rank, nnodes=2, nodes=["gpu-a", "gpu-b"])
    assert [next(part for part in order if part in name) for name in ops.names] == order
    assert ops[0].commands[0].endswith("--auto-rollback --stop-only")
