"""The tune's `vocab` axis (sglang_deploy/tune/vocab.py) without a host: the maps a verified snapshot's manifest lists
for the sizes the profile offers, the sizes that are not built (rows of the table), SGLang's resolution refusing or
dropping a map, the search and its table; and the simulator's model of the lever (sim/hardware.py: the draft
step's head shrinks to N of the vocabulary, acceptance drops a little for small N; token_map/size.py)."""

import random
from dataclasses import replace

import pytest

from conftest import PROVEN, write_profile
from sglang_deploy.profile import load_profile
from sglang_deploy.sim import hardware
from sglang_deploy.token_map.size import map_size, size_from_name
from sglang_deploy.tune import discipline, report as tune_report, search as tune, vocab
from test_tune_logic import MACHINE, MODEL, flags_of


@pytest.fixture
def snapshot(tmp_path, monkeypatch):
    """A file:// snapshot holding two maps (by the token-map command's name and FR-Spec's), its manifest, and a
    profile serving it that offers `sizes`."""
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE, manifest_from_directory, write_manifest

    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path))
    directory = tmp_path / "weights" / "qwen-small"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text((PROVEN.parent.parent / "manifests" / "Qwen--Qwen3.6-27B-FP8" /
                                            "config.reconstructed.json").read_text())
    (directory / "qwen-small-32768.pt").write_bytes(b"not a zip: the size is in the name")
    (directory / "maps").mkdir()
    (directory / "maps" / "freq_8192.pt").write_bytes(b"x")
    (directory / "notes.pt").write_bytes(b"no size anywhere")
    manifest = tmp_path / "weights.manifest.json"
    write_manifest(manifest_from_directory(directory), manifest)

    def profile(sizes):
        text = PROVEN.read_text().replace("  path: /srv/models/Qwen3.6-27B-FP8",
                                          f"  source: file://{directory}\n  manifest: {manifest}", 1)
        text = text.replace("  config: manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json",
                            f"  config: {directory}/config.json", 1)
        if sizes is not None:
            text += f"tune:\n  vocab_sizes: {sizes}\n"
        return load_profile(write_profile(tmp_path, text))
    return profile


def accepting(extra):
    """SGLang's resolution as the probe answered for the proven profile (NEXTN resolves to EAGLE; the map kept)."""
    resolved = {"speculative_algorithm": "EAGLE", "speculative_token_map": None}
    if extra:
        resolved["speculative_token_map"] = extra[1]
    return None, resolved


def test_each_offered_size_is_a_map_of_the_verified_snapshot_or_a_not_built_row(snapshot):
    profile = snapshot([8192, 32768, 65536])
    maps = vocab.snapshot_maps(profile)
    served = __import__("sglang_deploy.weights", fromlist=["x"]).profile_weights(profile).path
    assert maps == {32768: f"{served}/qwen-small-32768.pt", 8192: f"{served}/maps/freq_8192.pt"}  # notes.pt: no size
    offered = vocab.offer(profile, flags_of(PROVEN), accepting)
    assert offered.maps == {8192: f"{served}/maps/freq_8192.pt", 32768: f"{served}/qwen-small-32768.pt"}
    assert list(offered.invalid) == [65536]
    assert "not built: run `sglang-deploy token-map CORPUS --model DIR --size 65536`" in offered.invalid[65536]
    assert [(c.id, c.axis, c.flag_changes) for c in vocab.candidates(offered)] == [
        ("vocab-8192", "vocab", {"--speculative-token-map": f"{served}/maps/freq_8192.pt"}),
        ("vocab-32768", "vocab", {"--speculative-token-map": f"{served}/qwen-small-32768.pt"})]


def test_without_offered_sizes_every_listed_map_is_a_candidate_and_without_speculation_none(snapshot):
    profile = snapshot(None)
    assert sorted(vocab.offer(profile, flags_of(PROVEN), accepting).maps) == [8192, 32768]
    flags = {k: v for k, v in flags_of(PROVEN).items() if not k.startswith("--speculative")}
    assert vocab.offer(profile, flags, accepting).maps == {}


def test_the_resolution_decides_refused_and_dropped_maps_are_rows_with_its_answer(snapshot):
    profile = snapshot([8192, 32768])

    def ask(extra):
        if extra and extra[1].endswith("freq_8192.pt"):
            return "ValueError: MTP uses its own full-vocabulary embedding and head.", {}
        return None, {"speculative_algorithm": "EAGLE", "speculative_token_map": None}  # dropped
    offered = vocab.offer(profile, flags_of(PROVEN), ask)
    assert offered.maps == {}
    assert offered.invalid[8192] == ("refused by SGLang's resolution: ValueError: MTP uses its own full-vocabulary "
                                     "embedding and head.")
    assert offered.invalid[32768].startswith("dropped by SGLang's resolution (speculative_token_map=None")


@pytest.mark.parametrize("text, problem", [
    ("[0]", "greater than or equal to 1"),
    ("[32768, 32768]", "[32768] given more than once"),
    ("['40k']", "valid integer"),
])
def test_bad_vocab_sizes_are_refused_naming_the_field(tmp_path, text, problem):
    from sglang_deploy.profile import ProfileError

    path = write_profile(tmp_path, PROVEN.read_text() + f"tune:\n  vocab_sizes: {text}\n")
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    assert "tune.vocab_sizes" in str(error.value) and problem in str(error.value)


# --- the search and its table ----------------------------------------------------------------------------------

def resolved(flags: dict) -> dict:
    out = {"tp_size": 2, "max_running_requests": 16, "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 16}},
           "attention_backend": "flashinfer", "kv_cache_dtype": "auto"}
    if flags.get("--speculative-algorithm"):
        out.update(speculative_algorithm="EAGLE", speculative_num_steps=flags.get("--speculative-num-steps"),
                   speculative_eagle_topk=flags.get("--speculative-eagle-topk"),
                   speculative_num_draft_tokens=flags.get("--speculative-num-draft-tokens"),
                   speculative_token_map=flags.get("--speculative-token-map"))
    return out


def tok_s(flags: dict) -> float:
    return hardware.expected_tok_s(hardware.resolve(resolved(flags), {}, MACHINE, MODEL), MACHINE, MODEL)


def test_the_search_measures_the_built_maps_lists_the_rest_and_adopts_the_modelled_gain():
    flags = flags_of(PROVEN)
    offered = vocab.VocabOffer(maps={8192: "/srv/m/q-8192.pt", 32768: "/srv/m/q-32768.pt"},
                               invalid={65536: vocab.build_hint(65536)})
    rng = random.Random(5)

    def measure(candidate):
        merged = {k: v for k, v in {**flags, **candidate.flag_changes}.items() if v is not None}
        decode = tok_s(merged)
        return tune.Measured(candidate, repeats=[{"decode_tok_s": decode * rng.gauss(1, 0.005),
                                                  "aggregate_tok_s": 3 * decode} for _ in range(3)], duration_s=10)
    recorded = []
    found = tune.Search(flags, {}, ("vocab",), 4, "pcie", measure, choices={vocab.FLAG: offered})
    found.on_invalid = recorded.append
    assert found.planned() == 3 and discipline.candidate_ids(found, "vocab") == ["vocab-8192", "vocab-32768"]
    winner = found.run()
    assert list(found.results) == ["original", "vocab-65536", "vocab-8192", "vocab-32768"]
    assert [m.candidate.id for m in recorded] == ["vocab-65536"]  # the controller records it (the table's rows)
    assert winner.candidate.id == "vocab-32768"  # the modelled optimum: 8192 loses more acceptance than it saves
    assert winner.decode > 1.08 * found.baseline.decode
    table = tune_report.table(list(found.results.values()), found.baseline, winner, tune.Objective(), flags)
    rows = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert rows["vocab-65536"].split()[1] == "vocab" and "not built: run `sglang-deploy token-map" in \
        rows["vocab-65536"] and "--size 65536" in rows["vocab-65536"]
    assert "WINNER" in rows["vocab-32768"] and rows["vocab-8192"].split()[1] == "vocab"
    assert "vocab" in tune.AXES and discipline.axis_order(("vocab", "nccl"))[0] == "vocab"


# --- the simulator's model -------------------------------------------------------------------------------------

def eff_with(size: int):
    eff = hardware.resolve(resolved(flags_of(PROVEN)), {}, MACHINE, MODEL)
    return replace(eff, token_map_size=size)


def test_the_draft_head_shrinks_to_n_of_the_vocabulary_the_gain_grows_as_n_shrinks_bounded_by_the_head():
    full = eff_with(0)
    head_ms = (3 * hardware.lm_head_bytes(MODEL) / 2 / (MACHINE["memory_bandwidth_gbs"] * 1e9
                                                        * MACHINE["weight_read_efficiency"]) * 1e3)
    assert hardware.lm_head_bytes(MODEL) / 2 == pytest.approx(1.27e9, rel=0.01)  # anchors-refresh-4: 1.27 of 1.48 GB
    cycles = [hardware.cycle_ms(eff_with(n), MACHINE, MODEL) for n in (0, 131072, 65536, 32768, 8192, 1024)]
    assert cycles == sorted(cycles, reverse=True) and len(set(cycles)) == len(cycles)  # smaller map: faster cycle
    assert cycles[0] - cycles[-1] < head_ms  # never more than the whole head of 3 draft steps
    assert cycles[0] - hardware.cycle_ms(eff_with(40960), MACHINE, MODEL) == pytest.approx(
        head_ms * (1 - 40960 / MODEL["vocab_size"]), rel=1e-6)
    assert hardware.cycle_ms(eff_with(MODEL["vocab_size"]), MACHINE, MODEL) == cycles[0]
    taus = [hardware.expected_tau(hardware.accept_probabilities(eff_with(n), MODEL, "chat"))
            for n in (0, 65536, 32768, 8192)]
    assert taus == sorted(taus, reverse=True) and taus[0] - taus[-1] < 0.3  # acceptance drops a little (assumed)
    base = hardware.expected_tok_s(full, MACHINE, MODEL)
    gains = {n: hardware.expected_tok_s(eff_with(n), MACHINE, MODEL) / base - 1 for n in (8192, 32768, 131072)}
    assert 0.05 < gains[131072] < gains[32768] < 0.15 and gains[8192] > 0.05


def test_only_eagle_and_nextn_use_the_map_eagle3_logs_sglangs_warning_and_an_unreadable_map_fails_at_start():
    flags = {**flags_of(PROVEN), "--speculative-token-map": "/srv/m/q-32768.pt"}
    eff = hardware.resolve(resolved(flags), {}, MACHINE, MODEL)
    assert eff.token_map_size == 32768 and hardware.start_problem(eff, MACHINE) is None
    eagle3 = hardware.resolve({**resolved(flags), "speculative_algorithm": "EAGLE3"}, {}, MACHINE, MODEL)
    assert eagle3.token_map_size == 0 and hardware.EAGLE3_IGNORES_MAP in eagle3.notes
    unnamed = hardware.resolve({**resolved(flags), "speculative_token_map": "/srv/m/hot.pt"}, {}, MACHINE, MODEL)
    assert "load_token_map" in hardware.start_problem(unnamed, MACHINE)


@pytest.mark.parametrize("name, size", [("qwen-synthetic-40960.pt", 40960), ("maps/freq_32768.pt", 32768),
                                        ("token_map.pt", None), ("x-0.pt", None), ("x-32768.pt.sha256", None)])
def test_the_size_in_a_maps_name(name, size):
    assert size_from_name(name) == size


def test_a_file_that_is_not_a_saved_list_falls_back_to_its_name(tmp_path):
    (tmp_path / "m-4096.pt").write_bytes(b"PK\x03\x04 broken")
    assert map_size(str(tmp_path / "m-4096.pt")) == (4096, "name")
    assert map_size(str(tmp_path / "hot.pt"))[0] is None


# --- a map SGLang says it ignores ----------------------------------------------------------------------------------

def test_sglangs_ignored_map_line_is_read_from_the_start_log():
    """The line SGLang 0.5.23's EAGLE worker logs for an EAGLE3 run with a map (eagle_worker_v2.py:328), as the
    simulator logs it too, is what the host reads (hostside/evidence.py); other start logs read nothing."""
    from pathlib import Path

    from sglang_deploy.hostside import evidence

    source = Path.home() / ".cache" / "sglang-deploy" / "validators" / "sglang-0.5.23" / "lib" / "python3.11" / \
        "site-packages" / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py"
    if source.exists():
        assert f'"{hardware.EAGLE3_IGNORES_MAP}"' in source.read_text()  # the simulator's line is SGLang's own
    line = f"[2026-12-02 10:00:00 TP0] WARNING eagle_worker_v2.py:328: {hardware.EAGLE3_IGNORES_MAP}"
    found = evidence.log_findings(f"INFO starting\n{line}\nINFO ready\n")["token_map_ignored"]
    assert found == line
    assert evidence.log_findings("INFO Load token map from /srv/models/token-maps/a.pt\n")["token_map_ignored"] is None


def test_a_vocab_candidate_whose_map_sglang_ignores_is_labelled_not_a_gain():
    fast = [{"decode_tok_s": 60.0, "aggregate_tok_s": 150.0}] * 3
    line = "WARNING eagle_worker_v2.py:328: ... Ignoring the specified token map."
    ignored = vocab.label_ignored(tune.Measured(tune.Candidate("vocab-32768", "vocab"), repeats=list(fast)), line)
    assert not ignored.measured and ignored.repeats == fast  # its speed kept, never taken for the map's gain
    assert ignored.invalid_reason == f"map ignored by SGLang (its start log: {line})"
    other = vocab.label_ignored(tune.Measured(tune.Candidate("nospec", "nospec"), repeats=list(fast)), line)
    assert other.measured  # only a vocab candidate is about the map
    assert vocab.label_ignored(tune.Measured(tune.Candidate("vocab-32768", "vocab"), repeats=list(fast)),
                               None).measured
