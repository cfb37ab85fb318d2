"""`sglang-deploy token-map` (sglang_deploy/token_map/file.py): the hot-vocabulary map SGLang 0.5.23's
--speculative-token-map reads, read back by SGLang's OWN load_token_map in the validator environment; its frozen
digest; bad input refused naming the file and line; the check's rule that the served map is a verified file."""

import json
import subprocess
from pathlib import Path

import pytest

from conftest import PROVEN, write_profile
from sglang_deploy import cli
from sglang_deploy.profile import load_profile
from sglang_deploy.sim.synthetic_checkpoint import write as write_checkpoint
from sglang_deploy.token_map import file as token_map
from sglang_deploy.validate.check import check_profile
from sglang_deploy.validate.validator_env import ensure_env, scrubbed_environment

# z is the most frequent character of the corpus, then q, then x; the rest once or twice
CORPUS = "zzzzzzzzzzzz qqqqqqqqqq xxxxxxxxx\nzzzzzz qqq xx bc\n\nzzz q x\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("weights") / "qwen-synthetic"
    config = json.loads((PROVEN.parent.parent / "manifests" / "Qwen--Qwen3.6-27B-FP8" /
                         "config.reconstructed.json").read_text())
    write_checkpoint(str(directory), header_only=True, config=config)
    return directory


@pytest.fixture(scope="module")
def built(model_dir, tmp_path_factory):
    corpus = tmp_path_factory.mktemp("corpus") / "prompts.txt"
    corpus.write_text(CORPUS)
    output = model_dir / "token_map.pt"
    assert cli.main(["token-map", str(corpus), "--model", str(model_dir), "--size", "3", "--output", str(output)]) == 0
    return output


def sglang_reads(path: Path) -> list:
    """SGLang 0.5.23's own load_token_map (srt/speculative/spec_utils.py), run in its validator environment."""
    code = ("import json, sys\nfrom sglang.srt.speculative.spec_utils import load_token_map\n"
            "t = load_token_map(sys.argv[1])\nprint(json.dumps([str(t.dtype), t.tolist()]))\n")
    result = subprocess.run([str(ensure_env("0.5.23")), "-c", code, str(path)], capture_output=True, text=True,
                            env=scrubbed_environment(), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_sglangs_own_load_token_map_reads_the_most_frequent_ids(built, model_dir):
    dtype, ids = sglang_reads(built)
    assert dtype == "torch.int64"
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    assert ids == [tokenizer["z"], tokenizer["q"], tokenizer["x"]]  # by frequency, from the model's own tokenizer
    # the simulated servers and the tune read its size from the file itself, without torch (its name has none)
    from sglang_deploy.token_map.size import map_size

    assert map_size(str(built)) == (len(ids), "file")


def test_the_digest_is_frozen_beside_the_map_and_a_changed_map_is_caught(built, tmp_path):
    line = token_map.digest_path(built).read_text()
    assert line == f"{token_map.sha256_file(built)}  {built.name}\n"  # sha256sum -c reads it
    assert token_map.verify(built) == line.split()[0]
    copy = tmp_path / built.name
    copy.write_bytes(built.read_bytes() + b"\0")
    token_map.digest_path(copy).write_text(line)
    with pytest.raises(token_map.TokenMapError, match="differs from the frozen"):
        token_map.verify(copy)


BAD_CORPORA = [  # (id, file name, bytes, what the error must say)
    ("not-utf8", "p.txt", b"fine\n\xff\xfe\n", "p.txt:2: not UTF-8"),
    ("jsonl-not-json", "p.jsonl", b'"ok"\n{broken\n', "p.jsonl:2: not JSON"),
    ("jsonl-no-prompt", "p.jsonl", b'{"prompt": "ok"}\n{"other": 1}\n', "p.jsonl:2: no prompt"),
    ("jsonl-empty-prompt", "p.jsonl", b'{"text": "  "}\n', "p.jsonl:1: no prompt"),
    ("empty", "p.txt", b"\n \n", "p.txt: no prompts"),
]


@pytest.mark.parametrize("case", BAD_CORPORA, ids=[c[0] for c in BAD_CORPORA])
def test_a_bad_corpus_is_refused_naming_file_and_line(case, tmp_path):
    _, name, content, message = case
    (tmp_path / name).write_bytes(content)
    with pytest.raises(token_map.TokenMapError) as error:
        token_map.read_corpus(tmp_path / name)
    assert message in str(error.value)


def test_read_corpus_accepts_strings_and_objects(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('"a b"\n{"prompt": "c"}\n\n{"text": "d"}\n')
    assert token_map.read_corpus(path) == ["a b", "c", "d"]


BAD_ARGUMENTS = [  # (id, corpus, model, size, what the error must say)
    ("size-zero", "p.txt", "MODEL", "0", "--size 0: accepted: a positive number"),
    ("no-tokenizer", "p.txt", "/nonexistent", "3", "no tokenizer.json"),
    ("missing-corpus", "/nonexistent/p.txt", "MODEL", "3", "/nonexistent/p.txt: cannot read it"),
    ("more-than-the-corpus-has", "p.txt", "MODEL", "50", "distinct token ids, fewer than --size 50"),
]


@pytest.mark.parametrize("case", BAD_ARGUMENTS, ids=[c[0] for c in BAD_ARGUMENTS])
def test_bad_arguments_are_refused_and_nothing_is_written(case, model_dir, tmp_path, capsys):
    _, corpus, model, size, message = case
    (tmp_path / "p.txt").write_text(CORPUS)
    output = tmp_path / "out" / "map.pt"
    argv = ["token-map", str(tmp_path / corpus), "--model", str(model_dir) if model == "MODEL" else model,
            "--size", size, "--output", str(output)]
    assert cli.main(argv) == 1
    assert message in capsys.readouterr().err
    assert not output.exists() and not token_map.digest_path(output).exists()
    assert not list(output.parent.glob("*.partial")) if output.parent.exists() else True


# --- the check: the served map is a file of a verified snapshot ---------------------------------------------------

def local_profile(tmp_path, model_dir, token_map_path: str) -> Path:
    """The proven profile serving a file:// snapshot of `model_dir` (its manifest written now) with the map flag."""
    from sglang_deploy.weights import manifest_from_directory, write_manifest

    manifest = tmp_path / "weights.manifest.json"
    write_manifest(manifest_from_directory(model_dir), manifest)
    text = PROVEN.read_text().replace("  path: /srv/models/Qwen3.6-27B-FP8",
                                      f"  source: file://{model_dir}\n  manifest: {manifest}", 1)
    # model.config: the config.json the manifest pins (rule model-config-pinned)
    text = text.replace("  config: manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json",
                        f"  config: {model_dir}/config.json", 1)
    text = text.replace("    --enable-metrics: true", f"    --enable-metrics: true\n"
                                                      f"    --speculative-token-map: {token_map_path}", 1)
    return write_profile(tmp_path, text)


@pytest.fixture
def weights_dirs(monkeypatch, tmp_path_factory):
    from sglang_deploy.weights import WEIGHTS_DIRS_VARIABLE

    monkeypatch.setenv(WEIGHTS_DIRS_VARIABLE, str(tmp_path_factory.getbasetemp()))


def served(path: Path) -> str:
    return __import__("sglang_deploy.weights", fromlist=["profile_weights"]).profile_weights(load_profile(path)).path


def test_a_profile_serving_the_map_from_its_verified_snapshot_passes_check_full(built, model_dir, tmp_path,
                                                                                 weights_dirs):
    first = local_profile(tmp_path, model_dir, "/placeholder")
    path = local_profile(tmp_path, model_dir, f"{served(first)}/token_map.pt")
    report = check_profile(load_profile(path), gpus=2, topology="pcie", path="full")
    assert report.ok, report.lines()
    assert report.path == "full"


@pytest.mark.parametrize("where,rule,message", [
    ("/tmp/token_map.pt", "flag-serves-other-weights", "is outside /srv/models/local--"),
    ("thunlp/LLaMA3-Instruct-8B-FR-Spec/freq_32768.pt", "flag-serves-other-weights", "download from the Hub"),
    ("SNAPSHOT/not_frozen.pt", "token-map-verified", "not_frozen.pt is not in the manifest"),
    ("SNAPSHOT/../elsewhere/token_map.pt", "flag-serves-other-weights", "is outside"),
])
def test_a_map_nobody_verifies_is_refused(built, model_dir, tmp_path, weights_dirs, where, rule, message):
    snapshot = served(local_profile(tmp_path, model_dir, "/placeholder"))
    path = local_profile(tmp_path, model_dir, where.replace("SNAPSHOT", snapshot))
    found = token_map.problems(load_profile(path))
    assert [p.rule for p in found] == [rule]
    assert message in found[0].message
