"""Multi-node tensor parallelism without hosts: placement from the inventory, rules, rendering, the gate's and
the doctor's view of custom all-reduce across nodes, and the simulator's rendezvous (local processes)."""

import json

import pytest

from conftest import PROVEN, REPO, write_profile
from sglang_deploy.multinode import Node, NodeError, placement
from sglang_deploy.profile import ProfileError, load_profile
from sglang_deploy.render import render
from sglang_deploy.settings import HostSettings, SettingsError
from sglang_deploy.validate.check import check_profile

TWO_NODES = REPO / "profiles" / "qwen3.6-27b-mtp-2nodes-2xa6000.yaml"
GROUPS = {"nodes": [("gpu-a", {"ssh_hostname": "10.0.0.1"}), ("gpu-b", {"ssh_hostname": "10.0.0.2"})]}


def test_placement_follows_the_group_order():
    assert placement(1, 50000, None, "gpu-a", HostSettings(), GROUPS) is None
    assert placement(2, 50000, "eth0", "gpu-a", HostSettings(), GROUPS) == Node(0, 2, "10.0.0.1:50000", "eth0")
    node = placement(2, 50000, None, "gpu-b", HostSettings.of({"nccl_socket_ifname": "^docker,lo"}), GROUPS)
    assert node.args() == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:50000"]
    assert node.environment() == {"NCCL_SOCKET_IFNAME": "^docker,lo", "GLOO_SOCKET_IFNAME": "^docker,lo"}
    assert not node.serves_http
    v6 = {"nodes": [("a", {"worker_address": "fd00::1"}), ("b", {})]}
    assert placement(2, 50001, None, "b", HostSettings(), v6).dist_init_addr == "[fd00::1]:50001"
    other = {"gpus_b": GROUPS["nodes"]}
    assert placement(2, 50000, None, "gpu-b", HostSettings.of({"node_group": "gpus_b"}), other).rank == 1


@pytest.mark.parametrize("groups, host, data, message", [
    ({}, "gpu-a", {}, "no group 'nodes'"),
    ({"nodes": GROUPS["nodes"][:1]}, "gpu-a", {}, "lists 1 (gpu-a); accepted: exactly 2 distinct hosts"),
    (GROUPS, "gpu-c", {}, "gpu-c is not in the inventory group 'nodes'"),
    (GROUPS, "gpu-a", {"nccl_socket_ifname": "eth0; id"}, "nccl_socket_ifname"),
    ({"nodes": [("a", {"worker_address": "$(id)"}), ("b", {})]}, "b", {}, "worker_address"),
    ({"nodes": [("a", {"worker_address": "a\nb"}), ("b", {})]}, "b", {}, "a (rank 0 of the group 'nodes'): "
     "host data: worker_address: contains the control character"),
])
def test_bad_placements_are_refused(groups, host, data, message):
    with pytest.raises(NodeError, match=message.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
        placement(2, 50000, None, host, HostSettings.of(data), groups)


def test_a_bad_node_group_is_refused_as_host_data():
    with pytest.raises(SettingsError, match="node_group: must be an inventory group name, got 'a b'"):
        HostSettings.of({"node_group": "a b"})


def test_tp_counts_the_gpus_of_every_node():
    profile = load_profile(TWO_NODES)
    node = Node(1, 2, "10.0.0.1:50000")
    assert check_profile(profile, gpus=2, topology="pcie", node=node).ok
    report = check_profile(profile, gpus=4, topology="pcie", node=node)
    assert [p.rule for p in report.problems] == ["tp-matches-gpus"]
    assert "--tp-size 4 does not match 2 nodes x 4 GPU(s) = 8; accepted: 8" in report.lines()[0]


def test_tp_must_split_over_the_nodes(tmp_path):
    text = TWO_NODES.read_text().replace("nodes: 2\n", "nodes: 3\n")
    report = check_profile(load_profile(write_profile(tmp_path, text)), gpus=None, topology="pcie")
    assert [p.rule for p in report.problems] == ["multinode-tp-divisible"]


@pytest.mark.parametrize("flag", ["--nnodes: 2", "--node-rank: 1", "--dist-init-addr: 10.0.0.1:5000"])
def test_the_node_flags_are_derived_not_written(tmp_path, flag):
    text = TWO_NODES.read_text().replace("    --enable-metrics: true", f"    --enable-metrics: true\n    {flag}")
    with pytest.raises(ProfileError, match=flag.split(":")[0]):
        load_profile(write_profile(tmp_path, text))


def test_a_bad_interface_name_is_refused(tmp_path):
    text = TWO_NODES.read_text().replace("  socket_ifname: null", '  socket_ifname: "eth0 lo"')
    with pytest.raises(ProfileError, match="multinode.socket_ifname"):
        load_profile(write_profile(tmp_path, text))


def test_each_rank_renders_its_own_unit():
    profile = load_profile(TWO_NODES)
    units = [render(profile, api_key="k" * 20, node=Node(rank, 2, "10.0.0.1:50000", "eth0")) for rank in (0, 1)]
    for rank, rendered in enumerate(units):
        assert f"--nnodes 2 --node-rank {rank} --dist-init-addr 10.0.0.1:50000".split() == \
            rendered.exec_start[rendered.exec_start.index("--nnodes"):rendered.exec_start.index("--nnodes") + 6]
        assert rendered.environment["NCCL_SOCKET_IFNAME"] == "eth0"
    assert units[0].unit.replace("--node-rank 0", "--node-rank 1") == units[1].unit


def test_custom_all_reduce_across_nodes_is_neither_a_gate_failure_nor_a_doctor_suspect():
    from sglang_deploy.doctor.diagnosis import suspects_from
    from sglang_deploy.gate import expectations
    from sglang_deploy.plan import Plan

    profile = load_profile(TWO_NODES)
    resolved = {"tp_size": 4, "disable_custom_all_reduce": False, "cuda_graph_config": {"decode": {"backend": "full"}}}
    plan = Plan(profile=profile, rendered=render(profile, api_key="k" * 20, node=Node(0, 2, "10.0.0.1:50000")),
                port=30000, simulated=True, skipped_rules=(), resolution={"resolved": resolved}, node=Node(0, 2, "x:1"))
    assert expectations(plan)["custom_all_reduce"] is False
    one_node = Plan(profile=load_profile(PROVEN), rendered=plan.rendered, port=30000, simulated=True,
                    skipped_rules=(), resolution={"resolved": {**resolved, "tp_size": 2}})
    assert expectations(one_node)["custom_all_reduce"] is True
    spans = {"custom_all_reduce_fallback": "CustomAllreduce is disabled because this process group spans across nodes."}
    info = {**resolved, "nnodes": 2}
    assert "custom-all-reduce" not in [s.id for s in suspects_from(info, {}, None, [], None, None, spans)]
    assert "custom-all-reduce" in [s.id for s in suspects_from({**info, "nnodes": 1}, {}, None, [], None, None, spans)]


def test_simulator_ranks_rendezvous_and_fail_like_sglang_without_a_peer(tmp_path):
    import time
    import urllib.request

    from testbed.local_sim import LocalSim, free_port, stub_model_dir

    model = stub_model_dir(tmp_path / "model")
    base = ["--tp-size", "4", "--nnodes", "2", "--dist-init-addr", f"127.0.0.1:{free_port()}", "--dist-timeout", "4"]
    alone = LocalSim(base + ["--node-rank", "0"], model_dir=model).start(tmp_path / "alone.log")
    assert alone.process.wait(30) == 1
    assert "DistStoreError: Timed out after 4 seconds waiting for clients. 1/2 clients joined." in alone.log()
    rank0 = LocalSim(base + ["--node-rank", "0"], model_dir=model).start(tmp_path / "r0.log")
    rank1 = LocalSim(base + ["--node-rank", "1"], model_dir=model).start(tmp_path / "r1.log")
    try:
        rank0.wait_ready(30)
        info = json.loads(urllib.request.urlopen(rank0.url + "/server_info", timeout=5).read())
        assert (info["nnodes"], info["node_rank"]) == (2, 0)
        assert "spans across nodes" in rank0.log() and "serving no HTTP" in rank1.log()
        rank1.stop()
        deadline = time.monotonic() + 10
        while rank0.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert rank0.process.poll() is not None and "node rank 1 went away" in rank0.log()
    finally:
        rank0.stop()
        rank1.stop()
