"""The release store's pure helpers (hostside/store.py) without a host: release ids, the content hash, retention,
flag differences, secret names. Its documents: test_documents.py; on a host: test_releases_sim.py."""

from conftest import release_meta
from sglang_deploy.hostside.store import (content_hash, flag_differences, last_used, next_release_id,
                                          releases_to_prune, secret_name)


def used(at):
    return {"created": "2026-11-01T00:00:00+00:00", "history": [{"at": at, "event": "activated (deploy)"}]}


def test_release_ids_are_ordered_sequence_plus_hash():
    assert next_release_id([], "abcdef0123") == "0001-abcdef01"
    assert next_release_id(["0001-aaaaaaaa", "0009-bbbbbbbb", "junk"], "c" * 64) == "0010-cccccccc"


def test_content_hash_covers_unit_and_env_only():
    assert content_hash("u", "e") != content_hash("u", "e2") != content_hash("u2", "e")
    assert content_hash("ab", "c") != content_hash("a", "bc")


def test_last_used_prefers_the_latest_activation():
    assert last_used(release_meta(**used("2026-11-05T00:00:00+00:00"))) == "2026-11-05T00:00:00+00:00"
    assert last_used(release_meta(created="2026-11-01T00:00:00+00:00")) == "2026-11-01T00:00:00+00:00"


def test_prune_keeps_newest_and_protected():
    ids = [f"{i:04d}-aaaaaaaa" for i in range(1, 8)]
    assert releases_to_prune(ids, 5, {"0001-aaaaaaaa"}) == ["0002-aaaaaaaa"]
    assert releases_to_prune(ids, 5, set()) == ids[:2]


def test_flag_differences():
    base = ["/v/bin/sglang", "serve", "--tp-size", "2", "--speculative-num-steps", "3", "--enable-metrics"]
    other = ["/v/bin/sglang", "serve", "--tp-size", "2", "--speculative-num-steps", "1"]
    assert flag_differences(other, base) == ["--enable-metrics: on -> (absent)", "--speculative-num-steps: 3 -> 1"]
    assert flag_differences(base, base) == []


def test_secret_names_by_convention_only():
    assert all(secret_name(n) for n in ("HF_TOKEN", "SGLANG_API_KEY", "AWS_SECRET_ACCESS_KEY", "NCCL_PASSWORD",
                                        "X_CREDENTIALS", "TOKEN"))
    assert not any(secret_name(n) for n in ("HF_TOKEN_PATH", "SGLANG_MAX_NEW_TOKENS_LIMIT", "SGLANG_INIT_NEW_TOKEN_RATIO",
                                            "HF_HUB_DISABLE_IMPLICIT_TOKEN", "NCCL_CUMEM_ENABLE"))
