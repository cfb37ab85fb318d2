"""`sglang-deploy check`: exit 0 valid, 1 invalid, messages on stderr naming file, field and flag."""

import subprocess

from conftest import CONTROLLER, PROVEN, REPO, proven_with


def run_check(*args):
    return subprocess.run([*CONTROLLER, "-m", "sglang_deploy.cli", "check", *map(str, args)],
                          capture_output=True, text=True)


def test_valid_profile_exits_0():
    result = run_check(PROVEN, "--gpus", 2, "--topology", "pcie")
    assert result.returncode == 0, result.stderr
    assert "OK:" in result.stdout


def test_invalid_flag_exits_1_with_location(tmp_path):
    path = proven_with(tmp_path, "--speculative-algorithm: NEXTN", "--speculative-algorithm: MTP")
    result = run_check(path, "--gpus", 2)
    assert result.returncode == 1
    assert f"{path}:" in result.stderr and "sglang.flags.--speculative-algorithm" in result.stderr
    assert "INVALID" in result.stderr


def test_structural_error_exits_1(tmp_path):
    path = proven_with(tmp_path, "model:\n", "modle:\n")
    result = run_check(path)
    assert result.returncode == 1 and "modle: unknown key" in result.stderr


def test_gpu_count_mismatch_exits_1():
    result = run_check(PROVEN, "--gpus", 1)
    assert result.returncode == 1 and "--tp-size 2 does not match the host's 1 GPU(s)" in result.stderr


def test_bad_topology_is_a_usage_error():
    result = run_check(PROVEN, "--topology", "infiniband")
    assert result.returncode == 2 and "invalid choice" in result.stderr


def facts_file(tmp_path, gpus: int, interconnect: str):
    """A facts.json as facts.py saves it (only the fields the check reads matter)."""
    import json

    path = tmp_path / f"facts-{gpus}-{interconnect}.json"
    path.write_text(json.dumps({"gpus": [{"index": i, "driver_version": "580.95.05"} for i in range(gpus)],
                                "topology": {"interconnect": interconnect, "links": ["PHB"]}}))
    return path


def test_check_against_a_hosts_facts(tmp_path):
    ct129 = facts_file(tmp_path, 2, "pcie")
    result = run_check(PROVEN, "--facts", ct129)
    assert result.returncode == 0, result.stderr
    assert f"--gpus 2 from the host's facts ({ct129})" in result.stdout
    assert f"--topology pcie from the host's facts ({ct129})" in result.stdout
    assert "skipped" not in result.stdout  # every hardware rule ran
    one_gpu = run_check(PROVEN, "--facts", facts_file(tmp_path, 1, "pcie"))
    assert one_gpu.returncode == 1 and "--tp-size 2 does not match the host's 1 GPU(s)" in one_gpu.stderr


def test_check_refuses_a_command_line_that_contradicts_the_facts(tmp_path):
    result = run_check(PROVEN, "--topology", "pcie", "--facts", facts_file(tmp_path, 2, "nvlink"))
    assert result.returncode == 2
    assert "the command line says --topology pcie but the host reports nvlink" in result.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("not json")
    result = run_check(PROVEN, "--facts", broken)
    assert result.returncode == 2 and f"--facts {broken}: not a facts file written by facts.py" in result.stderr


def test_a_multi_node_profile_is_checked_with_the_node_flags():
    two_nodes = REPO / "profiles" / "qwen3.6-27b-mtp-2nodes-2xa6000.yaml"
    for path in ("--full", "--light"):
        result = run_check(two_nodes, "--gpus", 2, "--topology", "pcie", path)
        assert result.returncode == 0, result.stderr
        assert "nodes: 2: checked as rank 0 (--nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:50000;" in result.stdout
    result = run_check(two_nodes, "--gpus", 4)  # 2 nodes x 4 GPUs: tp 4 is wrong
    assert result.returncode == 1 and "2 nodes x 4 GPU(s) = 8" in result.stderr
