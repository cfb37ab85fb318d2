"""`sglang-deploy sglang add`: its pure steps on small inputs (the whole command builds a 6 GB environment and runs
outside the suite: docs/measurements.md), and the committed folders it wrote."""

from __future__ import annotations

import json
import re

import pytest

from sglang_deploy import releases
from sglang_deploy.validate import add as release_add
from sglang_deploy.validate import scan as release_scan
from sglang_deploy.cli import main


def action(dest, **changes):
    record = {"choices": None, "default": None, "deprecated": False, "dest": dest, "kind": "store", "nargs": None,
              "options": [f"--{dest.replace('_', '-')}"], "required": False, "type": "str"}
    return {**record, **changes}


def test_the_recipe_moves_to_the_release_s_own_pins_only():
    base = {"parser": ["numpy", "transformers==5.19.0"], "torch": ["torch==2.14.1", "torchvision==0.29.1"],
            "full_layer": ["sglang-kernel==0.4.10", "openai==2.8.0"], "frontend": ["openai==2.8.0", "uvicorn>=0.51"],
            "frontend_pins": ["flashinfer-python==0.7.2", "anthropic==2.14.0"]}
    requires = ["transformers==5.19.0", "sglang_kernel==0.4.9", "openai==2.6.1", "torch==2.14.1", "torchvision",
                "flashinfer_python[cu13]==0.7.1", "uvicorn", "av==16.1.0; platform_machine == \"aarch64\"",
                "runai==1.0; extra == \"runai\""]
    recipe, moved = release_add.derive_recipe(base, requires)
    assert recipe["full_layer"] == ["sglang-kernel==0.4.9", "openai==2.6.1"]
    assert recipe["frontend"] == ["openai==2.6.1", "uvicorn>=0.51"]  # not pinned by the release: kept
    assert recipe["frontend_pins"] == ["flashinfer-python==0.7.1", "anthropic==2.14.0"]
    assert recipe["torch"] == base["torch"] and recipe["parser"] == base["parser"]
    assert moved == {"sglang-kernel": ["sglang-kernel==0.4.10", "sglang-kernel==0.4.9"],
                     "openai": ["openai==2.8.0", "openai==2.6.1"],
                     "flashinfer-python": ["flashinfer-python==0.7.2", "flashinfer-python==0.7.1"]}


def test_unchanged_dests_keep_their_class_new_and_changed_ones_are_unreviewed_with_a_suggestion():
    base_table = {"actions": [action("port", type="int"), action("mem_fraction_static", type="float", default=0.9),
                              action("attention_backend", choices=["fa3", "triton"]), action("gone")]}
    table = {"actions": [action("port", type="int"), action("mem_fraction_static", type="float", default=0.8),
                         action("attention_backend", choices=["fa3", "triton", "new"]),
                         action("plugin_path"), action("quiet_knob", type="int")]}
    new, changed, removed, defaults, narrow = release_add.diff_dests(base_table, table)
    assert (new, changed, removed) == (["plugin_path", "quiet_knob"], ["attention_backend"], ["gone"])
    assert narrow == []
    assert defaults == {"mem_fraction_static": [0.9, 0.8]}
    sources = {"srt/plugins.py": ["def load(server_args):", "    import importlib",
                                  "    return importlib.import_module(server_args.plugin_path)"],
               "srt/sched.py": ["x = server_args.quiet_knob * 2"],
               "srt/test/test_x.py": ["importlib.import_module(args.quiet_knob)"]}  # tests are not read
    uses = release_scan.dest_uses_in(sources, {"plugin_path", "quiet_knob", "attention_backend"})
    assert uses["plugin_path"] == [{"source": "srt/plugins.py:3", "labels": ["import"]}]
    assert uses["quiet_knob"] == [{"source": "srt/sched.py:1", "labels": []}]
    base_classes = {"port": ["exposure", "opens the listener"], "mem_fraction_static": ["allowed", ""],
                    "attention_backend": ["allowed", ""], "gone": ["allowed", ""]}
    classes = release_add.classes_for(base_classes, table, new, changed, uses, "9.9.9")
    assert classes["dests"]["port"] == ["exposure", "opens the listener"]
    assert classes["dests"]["mem_fraction_static"] == ["allowed", ""]  # a changed default keeps the class
    kind, why = classes["dests"]["plugin_path"]
    assert kind == releases.UNREVIEWED and "new since 9.9.9; suggested: code (import)" in why
    assert "srt/plugins.py:3" in why
    assert classes["dests"]["quiet_knob"][1].startswith("new since 9.9.9; suggested: allowed (no listener")
    assert classes["dests"]["attention_backend"][1].startswith("changed since 9.9.9")
    assert "gone" not in classes["dests"]
    assert classes["suggestions"]["plugin_path"]["suggested"] == "code"


def test_fewer_spellings_or_choices_keep_the_class_more_do_not():
    base_table = {"actions": [action("lora_backend", choices=["triton", "csgmv", "triton_v2"]),
                              action("enable_x", kind="store_true", options=["--enable-x", "--no-enable-x"]),
                              action("parser", choices=["a", "b"]), action("size", type="int")]}
    table = {"actions": [action("lora_backend", choices=["triton", "csgmv"]),
                         action("enable_x", kind="store_true", options=["--enable-x"]),
                         action("parser", choices=["a", "b", "c"]), action("size", type="str")]}
    new, changed, removed, _, narrow = release_add.diff_dests(base_table, table)
    assert narrow == ["enable_x", "lora_backend"] and changed == ["parser", "size"] and new == removed == []


def test_the_uses_are_found_in_each_form_sglang_reads_a_dest():
    sources = {"srt/a.py": ["if get_global_server_args().moe_runner_backend == 'x':"],
               "srt/b.py": ["backend = global_server_args_dict[\"moe_runner_backend\"]"],
               "srt/c.py": ["if get_spec().moe_runner_backend:", "moe_runner_backendx = 1"],
               "srt/server_args.py": ["    if self.moe_runner_backend == 'auto':"],
               "srt/test/test_a.py": ["args.moe_runner_backend"]}  # tests are not read
    uses = release_scan.dest_uses_in(sources, {"moe_runner_backend"})
    assert [use["source"] for use in uses["moe_runner_backend"]] == ["srt/a.py:1", "srt/b.py:1", "srt/c.py:1",
                                                                     "srt/server_args.py:1"]


@pytest.mark.parametrize("text,label", [
    ("sock.bind((server_args.host, server_args.port))", "listener"),
    ("open(server_args.dump_path, 'w').write(x)", "file-write"),
    ("pickle.loads(server_args.blob)", "import"),
    ("subprocess.Popen([server_args.cmd])", "subprocess"),
    ("requests.get(server_args.url)", "outbound"),
    ("if request.headers['Authorization'] != server_args.api_key:", "auth"),
])
def test_each_kind_of_use_is_labelled(text, label):
    dest = re.findall(r"server_args\.(\w+)", text)[-1]
    uses = release_scan.dest_uses_in({"srt/x.py": [text]}, {dest})
    assert label in uses[dest][0]["labels"]


def test_the_environment_follows_the_release_s_registry():
    base = {"allowed": {"NCCL_ALGO": ["regex", "x", "y"], "SGLANG_KEPT": ["0", "1"], "SGLANG_GONE": ["0", "1"]},
            "registry": {"SGLANG_KEPT": "srt/environ.py:10", "SGLANG_GONE": "srt/environ.py:11"}}
    sources = {"srt/environ.py": ["class Envs:", "    SGLANG_KEPT = EnvBool(False)", "    SGLANG_NEW = EnvInt(3)",
                                  "    def helper(self):", "        return 1"],
               "srt/other.py": ["import os", "flag = os.environ.get('SGLANG_ELSEWHERE')  # and SGLANG_KEPT again"]}
    registry = release_scan.env_registry_of(sources)
    assert registry == {"SGLANG_KEPT": {"type": "EnvBool", "default": "False", "source": "srt/environ.py:2"},
                        "SGLANG_NEW": {"type": "EnvInt", "default": "3", "source": "srt/environ.py:3"}}
    mentioned = release_scan.env_mentioned_of(sources, registry)
    assert mentioned == ["SGLANG_ELSEWHERE"]  # read outside the registry; a registry name is not repeated
    document, new, dropped = release_add.environment_for(base, registry, mentioned)
    assert set(document["allowed"]) == {"NCCL_ALGO", "SGLANG_KEPT"} and dropped == ["SGLANG_GONE"]
    assert document["mentioned"] == ["SGLANG_ELSEWHERE"]
    assert new == ["SGLANG_NEW"] and document["registry"]["SGLANG_NEW"] == "srt/environ.py:3"


def test_log_lines_are_found_again_or_named_as_lost():
    base = {"log_lines": {"a": {"pattern": "A", "source": ["srt/x.py:5"], "needles": ['log("A failed")']},
                          "b": {"pattern": "B", "source": ["srt/y.py:7"], "needles": ['log("B gone")']}},
            "server_info": {}}
    moved, lost = release_add.relocate_log_lines(base, {"srt/x.py": ["", "", 'log("A failed")'], "srt/y.py": []})
    assert moved["log_lines"]["a"]["source"] == ["srt/x.py:3"]
    assert lost == ['b: log("B gone")'] and "not found in this one" in moved["log_lines"]["b"]["source"][0]


def test_a_release_missing_from_the_index_names_the_field(tmp_path, monkeypatch):
    def fake_run(argv, **kwargs):
        class Done:
            returncode, stdout, stderr = 1, "", "ERROR: No matching distribution found for sglang==0.0.1"
        return Done()

    monkeypatch.setattr(release_add.subprocess, "run", fake_run)
    with pytest.raises(release_add.AddError) as caught:
        release_add.download("0.0.1", tmp_path)
    assert "sglang.version 0.0.1: SGLang 0.0.1 is not on the package index" in str(caught.value)
    assert "No matching distribution" in str(caught.value)


def test_the_command_refuses_to_overwrite_a_reviewed_folder(capsys):
    version = releases.newest_reviewed()
    assert main(["sglang", "add", version]) == 2
    assert f"releases/{version}/ exists" in capsys.readouterr().err


# --- what the command wrote, committed ---------------------------------------------------------------------------

ADDED = [v for v in releases.versions() if (releases.read(v, "release.json") or {}).get("base")]


@pytest.mark.parametrize("version", ADDED)
def test_an_added_release_records_its_base_its_recipe_and_its_unreviewed_dests(version):
    record = releases.read(version, "release.json")
    assert record["base"] in releases.versions() and record["base"] != version
    dependencies = releases.read(version, "dependencies.json")
    pins = release_scan.pinned(dependencies["requires_dist"])
    for name, (_, new) in dependencies["moved_from_base"].items():
        assert pins[name] == new.split("==")[1]
    classes = releases.read(version, "classes.json")
    unreviewed = sorted(d for d, (kind, _) in classes["dests"].items() if kind == releases.UNREVIEWED)
    assert set(unreviewed) <= set(record["new_dests"]) | set(record["changed_dests"])
    for dest in unreviewed:
        assert "suggested:" in classes["dests"][dest][1]
    assert json.dumps(classes)  # readable


def test_a_half_written_folder_is_written_again_not_refused(tmp_path, monkeypatch):
    """An add interrupted after the recipe (no option table yet) leaves a folder the next add completes; the profile
    meanwhile gets the add command in its refusal (test_release_data.py)."""
    base = releases.newest_reviewed()
    (tmp_path / base).mkdir()
    for path in releases.folder(base).iterdir():  # a reviewed base to diff against
        (tmp_path / base / path.name).write_bytes(path.read_bytes())
    (tmp_path / "0.0.1").mkdir()
    (tmp_path / "0.0.1" / "dependencies.json").write_text("{}")
    monkeypatch.setattr(releases, "RELEASES_DIR", tmp_path)

    def missing(version, into):
        raise release_add.AddError(f"sglang.version {version}: SGLang {version} is not on the package index")

    monkeypatch.setattr(release_add, "download", missing)
    with pytest.raises(release_add.AddError, match="not on the package index"):
        release_add.add("0.0.1", log=lambda text: None)
    assert releases.versions() == [base]  # the half-written folder is no release
