"""The token map as a release part (token_map/part.py), without a host: the profile's field and its refusals, the
derived flag, what a release records and `releases.py` shows, the host's digest check before the switch, the prune's
choice of unused maps, and the role that ships it (on a fake host)."""

import hashlib
import json
import os
import time

import pytest

from conftest import PROVEN, write_profile
from fakehost import run_role
from sglang_deploy.token_map import file as token_map, part as token_map_part
from sglang_deploy.flags import server_args
from sglang_deploy.hostside.contract.release import ReleaseMeta
from sglang_deploy.hostside.weights import manifest as host_manifest
from sglang_deploy.hostside.weights.prune import maps_to_remove, prune_maps, referenced_snapshots
from sglang_deploy.profile import ProfileError, load_profile
from sglang_deploy.release_plan import listing, map_label

MAP_BYTES = b"a hot-vocabulary map of 32768 ids (its size from the name)"
DIGEST = hashlib.sha256(MAP_BYTES).hexdigest()


@pytest.fixture
def map_file(tmp_path, monkeypatch):
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path))
    path = tmp_path / "qwen-32768.pt"
    path.write_bytes(MAP_BYTES)
    return path


def profile_with(tmp_path, section: str, flag: str = ""):
    text = PROVEN.read_text()
    if flag:
        text = text.replace("    --enable-metrics: true", f"    --enable-metrics: true\n    {flag}", 1)
    return write_profile(tmp_path, text + section)


def release_section(file, sha256=DIGEST) -> str:
    return f"speculative:\n  token_map:\n    file: {file}\n    sha256: \"{sha256}\"\n"


def test_the_release_map_becomes_the_flag_at_its_content_addressed_place(tmp_path, map_file):
    profile = load_profile(profile_with(tmp_path, release_section(map_file)))
    assert token_map_part.problems(profile) == [] and token_map.problems(profile) == []
    argv = server_args(profile)
    assert argv[argv.index("--speculative-token-map") + 1] == f"/srv/models/token-maps/{DIGEST}.pt"
    part = token_map_part.release_map(profile)
    assert part.meta() == {"sha256": DIGEST, "path": f"/srv/models/token-maps/{DIGEST}.pt", "size": 32768,
                           "file": "qwen-32768.pt"}


def test_a_tune_map_is_shipped_and_may_be_named_by_the_flag(tmp_path, map_file):
    """tune.token_maps: shipped with the release; a tuned profile's --speculative-token-map naming it is verified."""
    section = f"tune:\n  token_maps:\n    - file: {map_file}\n      sha256: {DIGEST}\n"
    profile = load_profile(profile_with(tmp_path, section,
                                        flag=f"--speculative-token-map: /srv/models/token-maps/{DIGEST}.pt"))
    assert token_map.problems(profile) == [] and token_map_part.problems(profile) == []
    assert [p.host_path for p in token_map_part.shipped(profile)] == [f"/srv/models/token-maps/{DIGEST}.pt"]
    from sglang_deploy.tune.vocab import snapshot_maps

    assert snapshot_maps(profile) == {32768: f"/srv/models/token-maps/{DIGEST}.pt"}  # a vocab axis candidate


def test_a_tuned_flag_naming_a_shipped_map_serves_it_instead_of_the_release_map(tmp_path, map_file):
    """The tune's vocab winner writes --speculative-token-map naming a tune.token_maps map; the profile's own
    speculative.token_map stays shipped (and kept), the flag appears once, and the release records the served one."""
    other = tmp_path / "qwen-65536.pt"
    other.write_bytes(b"another map")
    digest = hashlib.sha256(b"another map").hexdigest()
    section = release_section(map_file) + f"tune:\n  token_maps:\n    - file: {other}\n      sha256: \"{digest}\"\n"
    profile = load_profile(profile_with(tmp_path, section,
                                        flag=f"--speculative-token-map: /srv/models/token-maps/{digest}.pt"))
    assert token_map_part.problems(profile) == [] and token_map.problems(profile) == []
    argv = server_args(profile)
    assert argv.count("--speculative-token-map") == 1
    assert argv[argv.index("--speculative-token-map") + 1] == f"/srv/models/token-maps/{digest}.pt"
    assert token_map_part.served(profile).sha256 == digest
    assert len(token_map_part.shipped(profile)) == 2


REFUSED = [  # (id, section (FILE: the map), flag, field, what the message must say)
    ("digest-mismatch", release_section("FILE", "0" * 64), "", ("speculative", "token_map", "sha256"),
     f"sha256 {DIGEST} differs from the profile's {'0' * 64}"),
    ("no-such-file", release_section("DIR/qwen-65536.pt"), "", ("speculative", "token_map", "file"),
     "qwen-65536.pt: no such file; build it with `sglang-deploy token-map"),
    ("outside-accepted-dirs", release_section("/etc/qwen-32768.pt"), "", ("speculative", "token_map", "file"),
     "the token map '/etc/qwen-32768.pt' is not under the repository's manifests/ or a weights directory"),
    ("relative-escapes", release_section("manifests/../qwen-32768.pt"), "", ("speculative", "token_map", "file"),
     "a relative map must be under the repository's manifests/"),
    ("tune-map-mismatch", f"tune:\n  token_maps:\n    - file: FILE\n      sha256: \"{'1' * 64}\"\n", "",
     ("tune", "token_maps", 0, "sha256"), "differs from the profile's"),
    ("flag-and-part", release_section("FILE"), "--speculative-token-map: /srv/models/x.pt",
     ("sglang", "flags", "--speculative-token-map"), "speculative.token_map names another map"),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_map_part_that_is_not_its_frozen_file_is_refused(tmp_path, map_file, case):
    _, section, flag, field, message = case
    profile = load_profile(profile_with(tmp_path, section.replace("FILE", str(map_file))
                                        .replace("DIR", str(tmp_path)), flag))
    found = token_map_part.problems(profile)
    assert [(p.rule, p.field) for p in found] == [("token-map-part", field)], found
    assert message in found[0].message


@pytest.mark.parametrize("section,message", [
    (release_section("maps/qwen.bin"), "must name a token map (a .pt file"),
    (release_section("maps/qwen.pt", "ABC"), "accepted: 64 lower-case hex digits"),
    ("speculative:\n  token_map:\n    file: maps/qwen.pt\n", "sha256"),
])
def test_the_profile_field_is_checked_where_it_is_written(tmp_path, section, message):
    with pytest.raises(ProfileError) as error:
        load_profile(profile_with(tmp_path, section))
    text = "\n".join(error.value.problems)
    assert "speculative.token_map" in text and message in text, text


# --- the host: its digest before the switch, and prune ----------------------------------------------------------

def test_the_host_refuses_a_map_whose_bytes_are_not_its_digest(tmp_path):
    maps = tmp_path / "token-maps"
    maps.mkdir()
    path = maps / f"{DIGEST}.pt"
    argv = ["sglang", "serve", "--speculative-token-map", str(path)]
    assert "is not on the host (pruned?)" in host_manifest.map_problem(argv, str(maps))
    path.write_bytes(MAP_BYTES)
    assert host_manifest.map_problem(argv, str(maps)) is None
    path.write_bytes(MAP_BYTES + b"\0")
    problem = host_manifest.map_problem(argv, str(maps))
    assert f"not the {DIGEST} it was shipped with" in problem
    renamed = maps / "qwen-32768.pt"
    renamed.write_bytes(MAP_BYTES)
    assert "is not named <sha256>.pt" in host_manifest.map_problem(["--speculative-token-map", str(renamed)], str(maps))
    # a map elsewhere (inside a verified snapshot, checked with it) is not this check's
    assert host_manifest.map_problem(["--speculative-token-map", "/srv/models/x/y/map.pt"], str(maps)) is None


def test_the_switch_check_covers_the_release_map(monkeypatch, tmp_path):
    """release_problem (run by the switch before anything changes) reads the release's command line."""
    maps = tmp_path / "token-maps"
    maps.mkdir()
    (maps / f"{DIGEST}.pt").write_bytes(b"changed")
    monkeypatch.setattr(host_manifest, "MAPS_DIR", str(maps))
    meta = ReleaseMeta.from_dict({**META, "exec_start": ["x", "--speculative-token-map", str(maps / f"{DIGEST}.pt")]})
    assert "it changed on the host" in host_manifest.release_problem(meta)


META = {"id": "0001-aaaaaaaa", "created": "2026-12-02T10:00:00+00:00", "deployed_by": "me", "git": {},
        "profile": "p", "sglang_version": "0.5.23", "venv": "/opt/v", "content_hash": "a" * 64, "exec_start": [],
        "simulated": True, "service": "sglang", "probe_url": "http://127.0.0.1:30000", "start_timeout_s": 60}


def test_prune_keeps_the_maps_a_retained_release_names_and_recent_ones():
    used = {"/m/token-maps/" + "a" * 64 + ".pt"}
    ages = {"a" * 64 + ".pt": 10 ** 6, "b" * 64 + ".pt": 10 ** 6, "c" * 64 + ".pt": 60, "notes.txt": 10 ** 6}
    assert maps_to_remove(ages, used, "/m/token-maps", 3600) == ["b" * 64 + ".pt"]


def test_prune_removes_only_unused_maps_on_disk(tmp_path):
    store = tmp_path / "store" / "sglang" / "releases" / "0001-aaaaaaaa"
    store.mkdir(parents=True)
    maps = tmp_path / "token-maps"
    maps.mkdir()
    kept, offered, gone = (maps / f"{c * 64}.pt" for c in "abc")
    for path in (kept, offered, gone):
        path.write_bytes(b"x")
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    meta = ReleaseMeta.from_dict({**META, "token_map": {"sha256": "a" * 64, "path": str(kept)},
                                  "offered_token_maps": [{"sha256": "b" * 64, "path": str(offered)}]})
    (store / "meta.json").write_text(json.dumps(meta.to_dict()))
    used = referenced_snapshots(str(tmp_path / "store"))
    assert {str(kept), str(offered)} <= used
    result = prune_maps(str(maps), used, 3600)
    assert result["removed"] == [str(gone)] and sorted(result["kept"]) == [str(kept), str(offered)]
    assert not gone.exists() and kept.exists() and offered.exists()


# --- what the release records and shows; the role --------------------------------------------------------------

def test_releases_py_shows_the_map_and_the_tunes_maps():
    from conftest import store_report
    from sglang_deploy.hostside.contract.release import ReleaseMeta

    release = ReleaseMeta.from_dict({**META, "token_map": {"sha256": DIGEST, "path": "/m/a.pt", "size": 32768},
                                     "offered_token_maps": [{"sha256": "b" * 64, "path": "/m/b.pt", "size": 65536}]})
    assert map_label(release) == f"map 32768 sha256:{DIGEST[:12]}; tune maps 65536 sha256:{'b' * 12}"
    assert map_label(ReleaseMeta.from_dict(META)) == ""
    lines = listing(store_report(release, active="0001-aaaaaaaa"))
    assert lines[1].endswith(f"(active)  [map 32768 sha256:{DIGEST[:12]}; tune maps 65536 sha256:{'b' * 12}]")


def test_the_role_ships_the_map_to_its_digest_path(map_file):
    from roles import weights as role

    part = token_map_part.MapPart(str(map_file), map_file, DIGEST, ("speculative", "token_map"))
    ops = run_role(role.token_map, part=part)
    assert ops[-1].commands[-2:] == [f"upload /srv/models/token-maps/{DIGEST}.pt",
                                     f"chmod 644 /srv/models/token-maps/{DIGEST}.pt"]


def test_the_plan_serves_the_map_and_the_release_records_it(tmp_path, map_file, monkeypatch):
    """The whole check (SGLang's parser and resolution, the rules) accepts the derived flag; the release's meta.json
    records the map the deploy ships, which the prune and releases.py read."""
    from sglang_deploy.plan import plan_for_host
    from sglang_deploy.release_plan import build_meta

    monkeypatch.setenv("SGLANG_DEPLOY_API_KEY", "k" * 24)
    path = profile_with(tmp_path, release_section(map_file))
    plan = plan_for_host({"profile": str(path), "simulated": True, "gpus": 2, "gpu_topology": "pcie"})
    argv = plan.rendered.exec_start
    assert argv[argv.index("--speculative-token-map") + 1] == f"/srv/models/token-maps/{DIGEST}.pt"
    assert plan.resolution["resolved"]["speculative_token_map"] == f"/srv/models/token-maps/{DIGEST}.pt"
    meta = build_meta(plan, "0001-aaaaaaaa")
    assert meta.token_map.to_dict() == {"sha256": DIGEST, "path": f"/srv/models/token-maps/{DIGEST}.pt",
                                        "size": 32768, "file": "qwen-32768.pt"} and meta.offered_token_maps == []
