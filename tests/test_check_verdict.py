"""check's verdict is SGLang's first: whatever SGLang 0.5.23 refuses (its parser, its whole resolution, the start
checks it runs before spawning a process) is reported whatever the tool's rules find and whatever they waive; a
waiver covers only the tool's own rules. Full path (SGLang's own code in the cached validator env)."""

import pytest

from conftest import PROVEN, proven_with, write_profile
from sglang_deploy.profile import load_profile
from sglang_deploy.rules import WAIVABLE
from sglang_deploy.validate.check import check_profile

# One waivable rule of the tool each, with the change to the proven profile that trips it and its waiver.
WAIVED = {
    "flag-runs-code": ("    --enable-metrics: true ", "    --enable-metrics: true\n    --trust-remote-code: true "),
    "mem-fraction-range": ("--mem-fraction-static: 0.88", "--mem-fraction-static: 0.3"),
    "env-not-reviewed": ("  CUDA_DEVICE_ORDER: PCI_BUS_ID", "  CUDA_DEVICE_ORDER: PCI_BUS_ID\n  SGLANG_ENABLE_SPEC_V2: \"1\""),
}
# Each kind of SGLang refusal: (change, SGLang's step, words of SGLang's own message).
REFUSALS = {
    # resolve_once: the attention hook's SM check (the audit's R07: trtllm_mha on the A6000's sm_86)
    "resolution": (("    --context-length: 65536 ", "    --attention-backend: trtllm_mha\n    --context-length: 65536 "),
                   "TRTLLM MHA backend for prefill requires Hopper (SM90)"),
    # check_server_args, which `sglang serve` runs after the resolution
    "start-check": (("served_name: qwen3.6-27b", 'served_name: "qwen3.6:27b"'),
                    "served_model_name cannot contain a colon"),
    # a refusal the profile's environment causes (handle_deprecated_args range-checks SGLANG_GRPC_PORT)
    # the start on the card (validate/start_feasibility.py): FA3's Ampere kernels take bf16/fp16 only, q is cast to fp8
    "start": (("    --context-length: 65536 ", "    --attention-backend: fa3\n    --kv-cache-dtype: fp8_e4m3\n"
                                                "    --context-length: 65536 "),
              "FlashAttention on Ampere/Ada cards only supports fp16 and bf16"),
    "environment": (("  NCCL_CUMEM_ENABLE: \"0\"", '  NCCL_CUMEM_ENABLE: "0"\n  SGLANG_GRPC_PORT: "70000"'),
                    "must be between 1 and 65535"),
}


def variant(tmp_path, *changes, waive=()):
    text = PROVEN.read_text()
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new, 1)
    if waive:
        text += "waivers:\n" + "".join(f"  {rule}: reviewed for this test\n" for rule in waive)
    return write_profile(tmp_path, text, "verdict.yaml")


def check(path, gpus=2):
    return check_profile(load_profile(path), gpus=gpus, topology="pcie", path="full")


@pytest.mark.parametrize("waived", sorted(WAIVED))
@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_a_waiver_never_hides_sglangs_refusal(tmp_path, waived, kind):
    (change, words) = REFUSALS[kind]
    alone = check(variant(tmp_path, WAIVED[waived]))
    assert [p.rule for p in alone.problems] == [waived], alone.lines()  # the waivable rule trips on its own
    report = check(variant(tmp_path, WAIVED[waived], change, waive=(waived,)))
    assert not report.ok
    assert report.problems[0].rule in ("sglang-resolution", "sglang-start") and words in report.problems[0].message, \
        report.lines()
    assert waived not in {p.rule for p in report.problems}, report.lines()  # the waiver still covers its own rule


@pytest.mark.parametrize("kind", sorted(REFUSALS))
@pytest.mark.parametrize("rule", ["flag-runs-code", "mem-fraction-range"])
def test_sglangs_reason_comes_first_beside_the_tools(tmp_path, kind, rule):
    """Unwaived, both refuse: SGLang's own reason is named first, the tool's rule after it (before, the tool's
    rule alone was reported and SGLang's reason hidden)."""
    change, words = REFUSALS[kind]
    report = check(variant(tmp_path, WAIVED[rule], change))
    assert report.problems[0].rule in ("sglang-resolution", "sglang-start") and words in report.lines()[0], \
        report.lines()
    assert rule in [p.rule for p in report.problems], report.lines()


def test_sglangs_refusal_cannot_be_waived(tmp_path):
    assert "sglang-resolution" not in WAIVABLE
    change, words = REFUSALS["resolution"]
    report = check(write_profile(tmp_path, variant(tmp_path, change).read_text()
                                 + "waivers:\n  sglang-resolution: trust me, reviewed by hand\n", "w.yaml"))
    assert [p.rule for p in report.problems] == ["sglang-resolution", "sglang-resolution"], report.lines()
    assert words in report.lines()[0] and "cannot be waived" in report.lines()[1]


@pytest.mark.parametrize("change, rule", [
    (("--mem-fraction-static: 0.88", "--mem-fraction-static: 0.3"), "mem-fraction-range"),
    (("    --enable-metrics: true ", "    --enable-metrics: true\n    --trust-remote-code: true "), "flag-runs-code"),
    (("  CUDA_DEVICE_ORDER: PCI_BUS_ID", "  CUDA_DEVICE_ORDER: PCI_BUS_ID\n  SGLANG_FOO_BAR: \"1\""),
     "env-not-reviewed"),
    (("    --enable-metrics: true ", "    --enable-metrics: true\n    --disable-cuda-graph: true "), "cuda-graphs-on"),
])
def test_every_waivable_refusal_says_how_to_waive_it(tmp_path, change, rule):
    report = check(variant(tmp_path, change))
    [problem] = report.problems
    assert problem.rule == rule and f"`waivers: {{{rule}: \"" in problem.message, report.lines()


def test_tp_matches_gpus_says_how_to_waive_it():
    [problem] = check(PROVEN, gpus=4).problems
    assert problem.rule == "tp-matches-gpus" and '`waivers: {tp-matches-gpus: "' in problem.message


def test_sglangs_default_graph_sizes_are_a_warning_with_cost_and_fix(tmp_path):
    """On SGLang's own defaults (no --max-running-requests, no decode graph size) the A6000 resolves decode graphs
    to 32 and 48 running requests under speculation: a warning with its cost and both fixes, not a refusal."""
    path = variant(tmp_path, ("    --max-running-requests: 16           # bounded batch; the decode graphs below "
                              "cover all of it\n", ""),
                   ("    --cuda-graph-max-bs-decode: 16       # capture decode graphs up to max-running-requests\n",
                    ""))
    report = check(path)
    assert report.ok, report.lines()
    [warning] = report.warnings
    assert warning.rule == "decode-graph-covers-batch" and warning.field == ("sglang", "flags")
    line = report.warning_lines()[0]
    assert "from its own defaults" in line and "--cuda-graph-max-bs-decode 48" in line
    assert "--max-running-requests 32" in line and "without CUDA graphs" in line
    assert '`waivers: {decode-graph-covers-batch: "' in line
    waived = check(write_profile(tmp_path, path.read_text() + "waivers:\n  decode-graph-covers-batch: seen and accepted here\n", "w.yaml"))
    assert waived.ok and not waived.warnings


def test_a_misspelled_flag_gets_one_message(tmp_path):
    """--tp-sise is no flag of SGLang: the parser's message names it; no second message about a TP 1 that the
    tp-matches-gpus rule would have read in place of the misspelled value."""
    report = check(proven_with(tmp_path, "    --tp-size: 2 ", "    --tp-sise: 2 "))
    assert [p.rule for p in report.problems] == ["sglang-parser"], report.lines()
    assert "did you mean --tp-size" in report.lines()[0]
    assert any("tp-matches-gpus (SGLang's parser refuses" in line for line in report.skipped)


@pytest.mark.parametrize("short, full, more", [
    ("    --tp-size: 2 ", "    --tp: 2 ", ""),
    ("    --speculative-algorithm: NEXTN ", "    --speculative-algo: NEXTN ", ""),
    ("    --enable-metrics: true ", "    --enable-metrics: true\n    --trust-remote: true ", "flag-runs-code"),
])
def test_an_abbreviated_flag_gets_one_message(tmp_path, short, full, more):
    """SGLang's parser takes argparse prefixes (--tp for --tp-size): the tool names the full spelling once
    (full-flag-names) and its rules read the value SGLang reads, with no second, wrong message about it."""
    report = check(proven_with(tmp_path, short, full))
    rules = [p.rule for p in report.problems]
    assert rules == ["full-flag-names"] + ([more] if more else []), report.lines()
    name = full.split("\n")[-1].split(":")[0].strip()
    assert all(p.field == ("sglang", "flags", name) for p in report.problems), report.lines()


@pytest.mark.parametrize("name, read", [("SGLANG_ENABLE_SPEC_V2", False), ("SGLANG_ENABLE_DFLASH_SPEC_V2", False),
                                        ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", True)])
def test_a_variable_the_release_does_not_read_is_named_so(tmp_path, name, read):
    """SGLang's own env registry (sglang/srt/environ.py, in releases/0.5.23/environment.json) decides:
    a name 0.5.23 never reads is "not read by SGLang 0.5.23", one it reads is "not reviewed" (both waivable)."""
    report = check(variant(tmp_path, ("  CUDA_DEVICE_ORDER: PCI_BUS_ID", f"  CUDA_DEVICE_ORDER: PCI_BUS_ID\n  {name}: \"1\"")))
    [problem] = report.problems
    assert problem.rule == "env-not-reviewed" and '`waivers: {env-not-reviewed: "' in problem.message
    assert ("not read by SGLang 0.5.23" in problem.message) is (not read), problem.message
    assert ("sglang/srt/environ.py" in problem.message) is (not read)
