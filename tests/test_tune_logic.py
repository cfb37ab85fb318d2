"""Tune's pure parts: candidates, profile edits, robust scores, the choice, and the search against the sim's model."""

import dataclasses
import json
import os
import random
import time
import types
from pathlib import Path

import pytest

from conftest import bench_measurement
from sglang_deploy.hostside.contract import paths as host_paths
from sglang_deploy.tune import edit as tune_edit, report as tune_report, search as tune
from sglang_deploy.profile import load_profile
from sglang_deploy.sim import hardware

ROOT = Path(__file__).resolve().parent.parent
INCIDENT = ROOT / "profiles" / "qwen3.6-27b-mtp1-2xa6000.yaml"
PROVEN = ROOT / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml"
MACHINE, MODEL = hardware.load_data("2xa6000-pcie"), hardware.load_data("qwen3.6-27b-fp8")


def flags_of(path):
    return {k: v for k, v in load_profile(path).sglang.flags.items() if v is not False}


def model_tok_s(flags):
    """The simulator's noiseless single-stream rate for a flag set (its own hardware model)."""
    spec = tune.spec_settings(flags)
    steps, topk, drafts = spec if spec else (0, 0, 0)
    eff = hardware.Effective(tp=2, spec_algorithm="EAGLE" if spec else None, spec_steps=steps, spec_topk=topk,
                             draft_tokens=drafts, decode_graphs=True, graph_max_bs=16, custom_allreduce=True, p2p=True,
                             nccl_proto=None, max_running=16)
    decode = hardware.expected_tok_s(eff, MACHINE, MODEL)
    tau = decode * hardware.cycle_ms(eff, MACHINE, MODEL, 1) / 1e3
    return decode, 4 * tau / hardware.cycle_ms(eff, MACHINE, MODEL, 4) * 1e3


def fake_measure(original, noise=0.01, seed=1, log=None):
    rng = random.Random(seed)

    def measure(candidate):
        flags = {**original, **candidate.flag_changes}
        flags = {k: v for k, v in flags.items() if v is not None}
        decode, aggregate = model_tok_s(flags)
        if log is not None:
            log.append(candidate.id)
        repeats = [{"decode_tok_s": decode * rng.gauss(1, noise), "aggregate_tok_s": aggregate * rng.gauss(1, noise)}
                   for _ in range(3)]
        return tune.Measured(candidate, repeats=repeats, duration_s=10)
    return measure


def test_robust_score_is_median_minus_scaled_mad():
    assert tune.robust_score([50, 52, 51]) == pytest.approx(51 - 1.4826 * 1)
    assert tune.spread_pct([50, 52, 51]) == pytest.approx(1.4826 / 51 * 100)
    assert tune.robust_score([None, 0]) is None  # no successful repeat, no score


def test_spec_candidates_match_draft_tokens_and_need_page_size_1_for_trees():
    flags = flags_of(INCIDENT)
    chain = tune.spec_candidate(flags, 4, 1)
    assert chain.flag_changes == {"--speculative-num-steps": 4, "--speculative-num-draft-tokens": 5}
    tree = tune.spec_candidate(flags, 3, 2)
    assert tree.flag_changes == {"--speculative-num-steps": 3, "--speculative-eagle-topk": 2,
                                 "--speculative-num-draft-tokens": 7, "--page-size": 1}
    assert tune.spec_settings({}) is None


def test_apply_changes_edits_the_profile_text_and_keeps_comments():
    text = PROVEN.read_text()
    candidate = tune.Candidate("x", "spec", (("--page-size", 1), ("--speculative-eagle-topk", 2),
                                             ("--speculative-num-draft-tokens", 7), ("--context-length", None)),
                               (("NCCL_PROTO", (("reason", "tune candidate"), ("value", "LL"))),))
    out = tune_edit.apply_changes(text, candidate, {"--speculative-eagle-topk": "tuned: 1 -> 2"}, description="tuned")
    path = Path(__file__).parent / "_tune_edit.yaml"
    try:
        path.write_text(out)
        profile = load_profile(path)
    finally:
        path.unlink()
    flags = profile.sglang.flags
    assert (flags["--speculative-eagle-topk"], flags["--speculative-num-draft-tokens"], flags["--page-size"]) == (2, 7, 1)
    assert "--context-length" not in flags and profile.description == "tuned"
    assert profile.environment["NCCL_PROTO"].value == "LL"
    assert "--speculative-eagle-topk: 2  # tuned: 1 -> 2" in out
    assert "--tp-size: 2                         # one shard per A6000" in out  # untouched lines keep their comment


def test_nccl_candidates_are_valid_for_the_topology_and_keep_reasoned_knobs():
    ids = [c.id for c in tune.nccl_candidates({}, {}, "pcie")]
    assert "nccl-proto-ll128" not in ids and "nccl-proto-ll" in ids and "custom-allreduce-off" in ids
    assert "nccl-proto-ll128" in [c.id for c in tune.nccl_candidates({}, {}, "nvlink")]
    ll = next(c for c in tune.nccl_candidates({}, {}, "pcie") if c.id == "nccl-proto-ll")
    assert ll.flags == () and ll.env_changes["NCCL_PROTO"]["value"] == "LL"
    reasoned = {"NCCL_PROTO": {"value": "LL", "reason": "verified"}}
    assert not [c for c in tune.nccl_candidates({}, reasoned, "pcie") if "proto" in c.id]


def measured(id_, decode, aggregate, axis="spec", flags=()):
    return tune.Measured(tune.Candidate(id_, axis, flags), repeats=[{"decode_tok_s": decode, "aggregate_tok_s": aggregate}
                                                                    for _ in range(3)])


def test_choice_respects_the_aggregate_floor_noise_and_prefers_fewer_draft_tokens_in_a_tie():
    base = measured("original", 40, 140, "baseline")
    fast_but_starves_batch = measured("a", 60, 120, flags=(("--speculative-num-steps", 6),
                                                           ("--speculative-num-draft-tokens", 7)))
    noisy = tune.Measured(tune.Candidate("n", "spec"), repeats=[{"decode_tok_s": v, "aggregate_tok_s": 150}
                                                                for v in (40, 70, 55)])
    deep = measured("deep", 52.3, 150, flags=(("--speculative-num-steps", 5), ("--speculative-num-draft-tokens", 6)))
    shallow = measured("shallow", 52.0, 150, flags=(("--speculative-num-steps", 4),
                                                    ("--speculative-num-draft-tokens", 5)))
    objective = tune.Objective()
    flags = {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": 1, "--speculative-num-draft-tokens": 2}
    assert tune.acceptable(fast_but_starves_batch, base, objective)[1].startswith("aggregate 120.0")
    assert tune.acceptable(noisy, base, objective)[1].startswith("noisy")
    assert tune.choose([base, fast_but_starves_batch, noisy, deep, shallow], base, objective, flags) is shallow
    assert {m.candidate.id for m in tune.pareto([base, fast_but_starves_batch, deep, shallow])} == {"a", "deep"}


@pytest.mark.parametrize("start", [INCIDENT, PROVEN])
def test_search_finds_the_simulators_optimum_from_either_profile(start):
    flags = flags_of(start)
    log = []
    search = tune.Search(flags, {}, ("spec",), 4, "pcie", fake_measure(flags, log=log))
    winner = search.run()
    everything = {**flags, **winner.candidate.flag_changes}
    best_possible = max(model_tok_s({**flags, **tune.spec_candidate(flags, s, k).flag_changes})[0]
                        for s in tune.STEPS_RANGE for k in tune.TOPKS)
    assert model_tok_s(everything)[0] >= 0.985 * best_possible
    assert model_tok_s(everything)[0] >= model_tok_s(flags_of(PROVEN))[0]
    assert everything["--speculative-eagle-topk"] == 1 and len(log) <= 8, log  # coordinate descent, not a grid


def test_the_search_stops_at_the_budget_with_the_best_so_far():
    flags = flags_of(INCIDENT)
    inner = fake_measure(flags)
    calls = []

    def measure(candidate):
        if len(calls) == 3:
            raise tune.BudgetExhausted("budget: 0s left")
        calls.append(candidate.id)
        return inner(candidate)
    search = tune.Search(flags, {}, ("spec",), 4, "pcie", measure)
    winner = search.run()
    assert calls == ["original", "steps2-topk1-draft3", "steps3-topk1-draft4"]
    assert search.stopped == "budget: 0s left" and winner.candidate.id == "steps3-topk1-draft4"


def test_other_axes_build_on_the_best_spec_setting():
    flags = flags_of(PROVEN)
    log = []
    search = tune.Search(flags, {}, ("spec", "graphs", "nccl"), 4, "pcie", fake_measure(flags, log=log))
    search.run()
    graph_ids = [i for i in log if "graphbs" in i]
    assert graph_ids and all(i.startswith("steps4-topk1-draft5+") for i in graph_ids), log


def test_a_knob_that_wins_by_noise_is_not_built_upon():
    """The sim run that found it: original spread 3.6 %, running8-graphbs8 +2.5 % at 0.8 %; the nccl axis must
    start from the original, not from that graph size."""
    flags = flags_of(PROVEN)
    log = []

    def measure(candidate):
        log.append(candidate.id)
        if candidate.id == "original":
            values = (38.0, 39.5, 41.0)
        elif candidate.id.endswith("running8-graphbs8"):
            values = (40.2, 40.5, 40.8)
        else:
            values = (39.0, 39.1, 39.2)
        return tune.Measured(candidate, repeats=[{"decode_tok_s": v, "aggregate_tok_s": 130} for v in values])

    tune.Search(flags, {}, ("graphs", "nccl"), 4, "pcie", measure).run()
    nccl = [i for i in log if "nccl" in i or "allreduce" in i]
    assert nccl and not any(i.startswith("running8-graphbs8+") for i in nccl), log


# --- the controller's runner, with a recording stand-in for the host ---------------------------------

class RecordingRemote:
    def __init__(self):
        self.commands, self.puts, self.texts = [], [], []

    def run(self, command):
        self.commands.append(command)
        return False, "", "not on a host"

    def put(self, text, path):
        self.puts.append(path)
        self.texts.append(text)


@pytest.fixture
def runner(tmp_path, monkeypatch):
    from sglang_deploy.tune import controller as tune_run

    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "k" * 24)
    profile = tmp_path / "incident.yaml"
    profile.write_text(INCIDENT.read_text())
    data = {"profile": str(profile), "simulated": True, "gpus": 2, "gpu_topology": "pcie",
            "tune_budget_s": "60", "tune_max_new_tokens": "64", "tune_samples": "2"}
    remote = RecordingRemote()
    runner = tune_run.Runner("host", data, remote, lambda line: None, results_dir=tmp_path / "results")
    runner.profile = load_profile(profile)
    runner.profile_text = profile.read_text()
    runner.settings = tune_run.settings_from(data, runner.profile)
    runner.work = tmp_path / "work"
    (runner.work / "candidates").mkdir(parents=True)
    runner.release_ids, runner.by_hash, runner.saved, runner.all_results = ["0001-aaaaaaaa"], {}, {}, []
    runner.active, runner.service, runner.session, runner.started = "0001-aaaaaaaa", "sglang", "s1", time.monotonic()
    runner.stamp = "20261130T000000Z"
    runner.search = tune.Search(flags_of(profile), {}, ("spec",), 4, "pcie", runner.measure)
    return runner


def test_an_invalid_candidate_is_refused_by_sglangs_resolution_and_never_started(runner):
    # SGLang's whole resolution refuses a topk 2 tree with 16-token pages on a backend that cannot page trees
    tree_with_big_pages = tune.Candidate("topk2-page16", "spec", (("--attention-backend", "torch_native"),
                                                                  ("--page-size", 16), ("--speculative-eagle-topk", 2),
                                                                  ("--speculative-num-draft-tokens", 3)))
    measured = runner.measure(tree_with_big_pages)
    assert not measured.valid and "sglang-resolution" in measured.invalid_reason, measured.invalid_reason
    assert "page_size > 1 is only supported on" in measured.invalid_reason
    assert runner.remote.commands == [] and runner.remote.puts == []  # nothing reached the host
    item, problem = runner.stage_files(tune.spec_candidate(flags_of(INCIDENT), 3, 2))
    assert problem is None and item["files"]["meta.json"] and '"--page-size"' in item["files"]["resolved.json"]


def test_a_candidate_that_does_not_fit_the_budget_is_not_started(runner):
    runner.durations = [50.0]  # the last candidate took 50 s; 60 s budget, 20 s of it gone
    runner.started -= 20
    with pytest.raises(tune.BudgetExhausted, match="needs about"):
        runner.measure(tune.spec_candidate(flags_of(INCIDENT), 2, 1))
    assert runner.remote.puts == []


def test_settings_refuse_fewer_than_three_repeats_and_unknown_axes(runner):
    from sglang_deploy.tune import controller as tune_run

    with pytest.raises(tune_run.TuneError, match="tune_repeats: must be between 3 and 50, got 2"):
        tune_run.settings_from({"tune_repeats": "2"}, runner.profile)
    with pytest.raises(tune_run.TuneError, match="tune_space: 'graph'"):
        tune_run.settings_from({"tune_space": "graph"}, runner.profile)
    with pytest.raises(tune_run.TuneError, match="tune_topk: \\[3\\] not in the search space"):
        tune_run.settings_from({"tune_topk": "1,3"}, runner.profile)
    assert tune_run.settings_from({"tune_space": "all"}, runner.profile).axes == tune.AXES


def test_saved_results_resume_without_measuring_again(runner, tmp_path):
    candidate = tune.spec_candidate(flags_of(INCIDENT), 3, 1)
    done = tune.Measured(candidate, repeats=[{"decode_tok_s": 51, "aggregate_tok_s": 140}] * 3, duration_s=20)
    runner.all_results = [done]
    from sglang_deploy.hostside.contract.findings import TuneResults# the runner's document and report() spell its fields
    assert set(runner.document()) | {"restore", "tuned_profile", "table", "by_kind"} == TuneResults.field_names()
    path = runner.results_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(runner.document()))
    runner.all_results = []
    runner.saved = runner.load_saved()
    again = runner.measure(candidate)
    assert again.resumed and again.decode == 51 and runner.remote.puts == []


def test_the_queued_candidate_is_the_item_the_hosts_session_reads(runner):
    """run_item writes queue/<seq>.json as hostside/contract/session.TuneItem; the host's session reads its measurement from
    it (a field renamed on either side fails the write or this read)."""
    from sglang_deploy.hostside.lib import tune_runner
    from sglang_deploy.hostside.contract.session import TuneItem
    from sglang_deploy.tune import controller as tune_run

    runner.settings = dataclasses.replace(runner.settings, budget_s=3600)
    with pytest.raises(tune_run.TuneError, match="could not queue candidate original"):  # the stand-in host refuses mv
        runner.run_item(tune.BASELINE, {"release_id": "0001-aaaaaaaa", "files": None}, restart=True)
    item = TuneItem.loads(runner.remote.texts[-1], runner.remote.puts[-1])
    assert (item.seq, item.id, item.release_id, item.restart, item.files) == (1, "original", "0001-aaaaaaaa", True, None)
    assert item.settings.samples == runner.settings.samples and 60 <= item.start_timeout_s <= 1800
    command = tune_runner.bench_command("http://127.0.0.1:30000", "/s", item.settings, item.settings.warmup)
    assert command[command.index("--samples") + 1] == str(runner.settings.samples)


def test_a_noise_level_gain_changes_nothing():
    base = measured("original", 39.0, 127, "baseline")
    knob = measured("nccl-proto-ll", 39.5, 129, "nccl")
    assert tune.choose([base, knob], base, tune.Objective(), {}) is base  # +1.3 % < min_gain_pct 2
    assert tune.choose([base, knob], base, tune.Objective(min_gain_pct=1.0), {}) is knob


def test_a_gain_inside_the_spreads_changes_nothing():
    """Seen on the simulated host: the original spread 3.6 %, running8-graphbs8 scored +2.5 % (spread 0.8 %)."""
    base = tune.Measured(tune.Candidate("original", "baseline"),
                         repeats=[{"decode_tok_s": v, "aggregate_tok_s": 129} for v in (38.0, 39.5, 41.0)])
    steady = measured("running8-graphbs8", base.decode * 1.025, 129, "graphs")
    assert round(tune.gain_needed_pct(steady, base, tune.Objective()), 1) == round(base.noise(), 1) > 2.5
    assert tune.choose([base, steady], base, tune.Objective(), {}) is base
    clear = measured("steps4", base.decode * 1.3, 135)  # the incident's 1 -> 4 steps: far outside the noise
    assert tune.choose([base, steady, clear], base, tune.Objective(), {}) is clear


def test_host_session_helpers():
    from sglang_deploy.hostside.lib import tune_runner
    from sglang_deploy.hostside import tune_session
    from sglang_deploy.hostside.contract.session import TuneMeasure

    assert tune_runner.heartbeat_stale(100.0, 131.0, 30) and not tune_runner.heartbeat_stale(100.0, 129.0, 30)
    command = tune_runner.bench_command("http://127.0.0.1:30000", "/etc/s.yaml", TuneMeasure(
        repeats=3, samples=6, max_new_tokens=128, concurrency=4, aggregate_rounds=1, warmup=1), warmup=0)
    assert command[1:3] == ["-m", "sglang_deploy.hostside.bench"] and command[command.index("--samples") + 1] == "6"
    assert command[command.index("--warmup") + 1] == "0" and command[command.index("--aggregate-rounds") + 1] == "1"
    summary = tune_runner.repeat_summary(bench_measurement([50.0], [3.2], kinds=["code"], aggregates=[150.0]))
    assert (summary["decode_tok_s"], summary["aggregate_tok_s"], summary["accept_length"], summary["samples"],
            summary["by_kind"]) == (50.0, 150.0, 3.2, [50.0], {"code": 50.0})
    # the bench's answer through its class: a renamed field, an exit or no JSON is a repeat without a rate, naming why
    done = types.SimpleNamespace(returncode=0, stdout=json.dumps({**bench_measurement([50.0]).to_dict(), "decode": 1}))
    unread = tune_runner.repeat_summary(tune_runner.bench_measurement(done))
    assert unread["decode_tok_s"] is None and unread["errors"][0].startswith(
        "bench.py's answer cannot be read: hostside.bench's measurement: unknown field 'decode'")
    for returncode, stdout, error in ((3, "", "bench.py exited with 3"), (0, "Traceback", "bench.py's answer cannot")):
        failed = tune_runner.bench_measurement(types.SimpleNamespace(returncode=returncode, stdout=stdout))
        assert failed.errors[0].startswith(error) and failed.samples == [] and failed.decode_median is None
    assert tune_session.SESSION_ID.fullmatch("20261130222606") and not tune_session.SESSION_ID.fullmatch("../x")


def test_the_sessions_files_are_its_typed_documents(tmp_path, monkeypatch, capsys):
    """session.json (TuneStatus) as the host's session writes it, read by close; close (TuneClose) as close writes
    it, read by the watchdog; an ended session's restore (TuneRestore) decides close's exit code."""
    from types import SimpleNamespace

    from sglang_deploy.hostside import store as store_module, tune_session
    from sglang_deploy.hostside.lib import tune_runner

    monkeypatch.setattr(host_paths, "STORE_ROOT", str(tmp_path))
    args = SimpleNamespace(service="sglang", session="s1", abort=True, why="interrupted on the controller", wait_s=5)
    paths = tune_runner.Paths("sglang", "s1")
    os.makedirs(paths.root)
    session = tune_runner.Session(args)
    session.original = session.current = "0001-aaaaaaaa"
    session.save_status(state="ready", original="0001-aaaaaaaa", done=[1])
    assert tune_runner.read_status(paths.status).done == [1]
    session.restore()  # nothing else was installed: no restart, nothing to remove
    session.save_status(state="aborted")
    assert tune_session.cmd_close(args) == 0
    from sglang_deploy.hostside.contract.session import TuneSession

    closed = TuneSession.loads(capsys.readouterr().out)  # close's answer, as the controller reads it
    assert (closed.state, closed.restore.to_dict()) == ("aborted", {"needed": False, "ready": True, "stage": None,
                                                                     "detail": None, "elapsed_s": None, "removed": []})
    close = tune_runner.read_close(paths)
    assert (close.abort, close.why) == (True, "interrupted on the controller")
    session.save_status(restore=session.status.restore.but(needed=True, ready=False, detail="timeout"))
    assert tune_session.cmd_close(args) == 3  # the original did not come back


# --- the drafter axis ---------------------------------------------------------------------------------

OFFERED = {"source": "file:///srv/drafters/qwen3.6-27b-dflash", "manifest": "manifests/local--qwen3.6-27b-dflash.json",
           "config": None, "algorithm": "DFLASH"}


def test_a_drafter_candidate_names_its_draft_and_drops_the_step_flags(tmp_path):
    flags = flags_of(PROVEN)
    [candidate] = tune.drafter_candidates(flags, [OFFERED])
    assert candidate.id.startswith("drafter-dflash-qwen3.6-27b-dflash-") and candidate.axis == "drafter"
    # two drafters of one name, or one offered with two algorithms, are two candidates
    others = tune.drafter_candidates(flags, [OFFERED, {**OFFERED, "manifest": "manifests/other.json"},
                                             {**OFFERED, "algorithm": "EAGLE3"}])
    assert len({c.id for c in others}) == 3
    assert candidate.flag_changes == {"--speculative-algorithm": "DFLASH", "--speculative-num-steps": None,
                                      "--speculative-eagle-topk": None, "--speculative-num-draft-tokens": None}
    out = tune_edit.apply_changes(PROVEN.read_text(), candidate)
    path = tmp_path / "candidate.yaml"
    path.write_text(out)
    profile = load_profile(path)  # the schema accepts it; the resolution is test_drafter's
    assert profile.speculative.draft.source == OFFERED["source"]
    assert profile.speculative.draft.manifest == OFFERED["manifest"]
    assert profile.sglang.flags["--speculative-algorithm"] == "DFLASH"
    assert not {"--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"} & set(
        profile.sglang.flags)
    # a second application replaces the section, does not add another
    again = tune_edit.apply_changes(out, candidate)
    assert again.count("speculative:\n  draft:") == 1


def drafter_measure(original, gain, by_kind, noise=0.01):
    rng = random.Random(3)

    def measure(candidate):
        flags = {k: v for k, v in {**original, **candidate.flag_changes}.items() if v is not None}
        decode, aggregate = model_tok_s(flags)
        factor, kinds = (gain, by_kind) if candidate.draft else (1.0, {"prose": 1.0, "code": 1.0, "chat": 1.0})
        repeats = [{"decode_tok_s": decode * factor * rng.gauss(1, noise), "aggregate_tok_s": aggregate,
                    "by_kind": {kind: decode * f * rng.gauss(1, noise) for kind, f in kinds.items()}}
                   for _ in range(3)]
        return tune.Measured(candidate, repeats=repeats, duration_s=10)
    return measure


@pytest.mark.parametrize("gain, wins", [(1.3, True), (1.005, False), (0.8, False)])
def test_the_drafter_wins_only_by_a_clear_measured_gain(gain, wins):
    flags = flags_of(PROVEN)
    search = tune.Search(flags, {}, ("spec", "drafter"), 4, "pcie",
                         drafter_measure(flags, gain, {"prose": 1.15, "code": 1.5, "chat": 1.35}),
                         steps_range=(2, 3, 4), topks=(1,), drafters=[OFFERED])
    winner = search.run()
    assert (winner.candidate.axis == "drafter") is wins, winner.candidate.id
    [drafter_id] = [key for key in search.results if key.startswith("drafter-")]  # measured either way
    if wins:  # a drafter replaces the tuned steps rather than stacking on them
        assert winner.candidate.id == drafter_id and not winner.candidate.flag_changes.get(
            "--speculative-num-steps")
        table = tune_report.kind_table(list(search.results.values()), search.baseline)
        import re

        gains = {kind: int(value) for kind, value in re.findall(r"(prose|code|chat) \+(\d+) %", table)}
        assert gains.keys() == {"prose", "code", "chat"} and abs(gains["prose"] - 15) <= 3 and \
            abs(gains["code"] - 50) <= 3 and abs(gains["chat"] - 35) <= 3, table


def test_saved_results_keep_the_draft_and_the_classes():
    [candidate] = tune.drafter_candidates(flags_of(PROVEN), [OFFERED])
    measured = tune.Measured(candidate, repeats=[{"decode_tok_s": 60.0, "by_kind": {"code": 70.0, "prose": 50.0}}] * 3)
    again = tune.Measured.from_json(json.loads(json.dumps(measured.to_json())))
    assert again.candidate == candidate and again.by_kind() == {"code": 70.0, "prose": 50.0}
