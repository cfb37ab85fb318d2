"""`sglang-deploy check`: exit 0 valid, 1 invalid, messages on stderr naming file, field and flag."""

import subprocess
import sys

from conftest import PROVEN, proven_with


def run_check(*args):
    return subprocess.run([sys.executable, "-m", "sglang_deploy.cli", "check", *map(str, args)],
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
