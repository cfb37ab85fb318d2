"""What the tool knows of an SGLang release is that release's data (sglang_deploy/releases/<version>/): product code
names no release number, the loader reads a folder, a release the tool has no data for is refused naming
sglang.version and the command that adds it, and the host-side programs' copies agree with the data."""

from __future__ import annotations

import json
import re

import pytest

from conftest import PROVEN, REPO, proven_with
from sglang_deploy import releases
from sglang_deploy.validate import env_rules, flag_classes, validator_env
from sglang_deploy.profile import load_profile
from sglang_deploy.validate.check import check_profile


VERBS = ("deploy.py", "doctor.py", "facts.py", "history.py", "provision.py", "releases.py", "rollback.py",
         "rollout.py", "router.py", "tune.py")
# An SGLang-shaped release number (SGLang is 0.x): not part of a longer number, an address or another package's pin.
RELEASE_NUMBER = re.compile(r"(?<![\w.=<>~-])0\.\d+\.\d+(?:\.post\d+)?(?![\w.])")
# Version numbers of other projects that happen to look like one, each with why.
OTHER_PROJECTS = {("sglang_deploy/router.py", 'ROUTER_VERSION = "0.3.2"'): "sglang-router, a package of its own"}


def product_files(root):
    """The product code: sglang_deploy/ (its release folders' data aside), roles/, the verbs; Python and templates."""
    files = [p for p in (root / "sglang_deploy").rglob("*") if p.suffix in (".py", ".j2")]
    files += [p for p in (root / "roles").rglob("*.py")] + [root / verb for verb in VERBS if (root / verb).exists()]
    return sorted(p for p in files if "__pycache__" not in p.parts)


def release_numbers(root) -> list[str]:
    found = []
    for path in product_files(root):
        relative = path.relative_to(root).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if RELEASE_NUMBER.search(line) and not any(relative == file and text in line
                                                       for file, text in OTHER_PROJECTS):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_no_product_module_names_a_release_number():
    assert release_numbers(REPO) == [], "name the release through sglang_deploy.releases instead"


def test_the_scan_finds_a_planted_release_number(tmp_path):
    (tmp_path / "sglang_deploy" / "validate").mkdir(parents=True)
    (tmp_path / "roles").mkdir()
    (tmp_path / "sglang_deploy" / "validate" / "planted.py").write_text('VERSION = "0.5.24"\n')
    (tmp_path / "roles" / "planted.py").write_text("# as SGLang 0.5.22.post1 does\n")
    (tmp_path / "tune.py").write_text("x = 1\n")
    assert [hit.split(":")[0] for hit in release_numbers(tmp_path)] == ["roles/planted.py",
                                                                       "sglang_deploy/validate/planted.py"]


def test_the_release_folders_are_package_data():
    text = (REPO / "pyproject.toml").read_text()
    assert '"releases/*/*.json"' in text
    assert not (REPO / "sglang_deploy" / "flag-tables").exists()


# --- the loader ------------------------------------------------------------------------------------------------------

def test_versions_sort_as_numbers():
    assert sorted(["0.5.10", "0.5.9", "0.5.10.post1", "0.4.10", "0.5.11"], key=releases.version_key) == \
        ["0.4.10", "0.5.9", "0.5.10", "0.5.10.post1", "0.5.11"]


def test_every_release_folder_holds_the_same_files_and_the_newest_reviewed_is_the_default():
    wanted = {"options.json", "classes.json", "environment.json", "dependencies.json", "hooks.json", "hints.json",
              "log-lines.json", "release.json"}
    for version in releases.versions():
        present = {p.name for p in releases.folder(version).iterdir()}
        assert wanted <= present, (version, sorted(wanted - present))
        assert releases.read(version, "release.json")["version"] == version
    assert releases.newest_reviewed() in releases.reviewed()
    assert all(releases.version_key(v) <= releases.version_key(releases.newest_reviewed()) for v in releases.reviewed())


def test_the_recipe_is_the_release_data():
    version = releases.newest_reviewed()
    document = releases.read(version, "dependencies.json")
    recipe = validator_env.recipe(version)
    assert list(recipe.full_layer) == document["full_layer"] and list(recipe.parser) == document["parser"]
    # Every pin of the recipe that the release's own METADATA pins too is at that release's version.
    from sglang_deploy.validate import scan as release_scan

    pins = release_scan.pinned(document["requires_dist"])
    for requirement in recipe.parser + recipe.full_layer + recipe.frontend_pins + recipe.torch:
        name, _, pinned = requirement.partition("==")
        if pinned and release_scan.normalize(name) in pins:
            assert pins[release_scan.normalize(name)] == pinned, requirement


def test_an_unknown_release_names_the_profile_field_and_the_command(tmp_path):
    with pytest.raises(validator_env.ValidatorEnvError) as caught:
        validator_env.ensure_env("0.0.1")
    message = str(caught.value)
    assert "sglang.version 0.0.1" in message and "sglang-deploy sglang add 0.0.1" in message
    assert not validator_env.env_dir("0.0.1").exists()  # nothing was made


def test_a_release_without_classes_names_the_file_the_field_and_the_command():
    reason = flag_classes.not_reviewed_reason("0.0.1", "max_running_requests")
    assert "releases/0.0.1/classes.json" in reason and "sglang-deploy sglang add 0.0.1" in reason
    assert "sglang.version 0.0.1" in reason


def test_an_unreviewed_dest_is_refused_with_its_suggestion(tmp_path, monkeypatch):
    version = releases.newest_reviewed()
    document = releases.read(version, "classes.json")
    document["dests"]["max_running_requests"] = [releases.UNREVIEWED, "new since 0.0.1; suggested: allowed (no "
                                                                      "listener, write, import or fetch seen)"]
    folder = tmp_path / version
    folder.mkdir()
    for path in releases.folder(version).iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "classes.json").write_text(json.dumps(document))
    monkeypatch.setattr(releases, "RELEASES_DIR", tmp_path)
    flag_classes.load.cache_clear()
    try:
        assert "max_running_requests" not in flag_classes.load(version)
        [problem] = [p for p in check_profile(load_profile(PROVEN), gpus=2, topology="pcie", path="light").problems
                     if p.rule == "flag-reviewed"]
        assert problem.field == ("sglang", "flags", "--max-running-requests")
        assert f"releases/{version}/classes.json marks it unreviewed (new since 0.0.1; suggested: allowed" \
            in problem.message
        assert not releases.is_reviewed(version)
    finally:
        flag_classes.load.cache_clear()


def test_an_sglang_variable_the_release_does_not_declare_is_named_as_unread(tmp_path):
    version = releases.newest_reviewed()
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in releases.env_registry(version)
    assert env_rules.not_read("SGLANG_ENABLE_SPEC_V2", version)
    assert not env_rules.not_read("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", version)
    assert not env_rules.not_read("NCCL_ALGO", version)
    assert "\nenvironment:" in PROVEN.read_text()
    profile = proven_with(tmp_path, "environment:", 'environment:\n  SGLANG_ENABLE_SPEC_V2: "1"')
    [problem] = [p for p in check_profile(load_profile(profile), gpus=2, topology="pcie", path="light").problems
                 if p.field == ("environment", "SGLANG_ENABLE_SPEC_V2")]
    assert problem.rule == "env-not-reviewed"
    assert f"is not read by SGLang {version}" in problem.message


# --- the host-side programs' copies (they run alone with the system python: no package data on the host) ------------

def test_the_host_hook_list_is_the_union_of_the_releases_hooks():
    from sglang_deploy.hostside import venv_hooks

    union = {}
    for version in releases.versions():
        union.update(releases.allowed_pth(version))
    assert venv_hooks.ALLOWED_PTH == union


def test_the_host_log_patterns_are_the_releases_log_lines():
    from sglang_deploy.hostside import evidence

    readers = {"custom_all_reduce_fallback": evidence.CUSTOM_ALL_REDUCE_FALLBACK,
               "pcie_ipc_fallback": evidence.PCIE_IPC_FALLBACK, "token_map_ignored": evidence.TOKEN_MAP_IGNORED,
               "graph_capture_failed": evidence.GRAPH_CAPTURE_FAILED}
    for version in releases.versions():
        lines = releases.log_lines(version)
        for name, regex in readers.items():
            assert lines[name]["pattern"] == regex.pattern, (version, name)
            assert lines[name]["source"], (version, name)


# --- an upgrade: the resolved-argument diff between two releases (validate/upgrade.py) --------------------------------

def test_the_resolved_diff_names_changed_defaults_apart_from_the_profile_s_flags_and_masks_secrets():
    from sglang_deploy.validate import upgrade

    old = {"attention_backend": "flashinfer", "chunked_prefill_size": 2048, "api_key": "sk-old", "gone": 1,
           "tp_size": 2}
    new = {"attention_backend": "fa3", "chunked_prefill_size": 4096, "api_key": "sk-new", "added": True,
           "tp_size": 2}
    changes = upgrade.resolved_diff(old, new)
    assert [c.dest for c in changes] == ["added", "api_key", "attention_backend", "chunked_prefill_size", "gone"]
    lines = upgrade.describe("1.0.0", "1.1.0", changes, {"chunked_prefill_size"})
    text = "\n".join(lines)
    assert "sk-old" not in text and "sk-new" not in text
    assert lines[0].startswith("Diff: resolved arguments, SGLang 1.0.0 -> 1.1.0") and "5 differ" in lines[0]
    unset = text.split("set by the profile:")[0]
    assert "attention_backend: 'flashinfer' -> 'fa3'" in unset and "chunked_prefill_size" not in unset
    assert "chunked_prefill_size: 2048 -> 4096" in text.split("  set by the profile:")[1]
    assert "gone: 1 -> '<absent>'" in text and "added: '<absent>' -> True" in text
    assert upgrade.describe("1.0.0", "1.0.0", [], set())[0].endswith("none differ for this profile")


def test_the_same_release_on_both_sides_resolves_the_proven_profile_alike():
    """The old side is the profile with only sglang.version changed, resolved in that release's own env: with the same
    release on both sides nothing differs (the real resolution, not a stub)."""
    from sglang_deploy.validate import upgrade

    profile = load_profile(PROVEN)
    report = check_profile(profile, gpus=2, topology="pcie", path="full")
    assert report.resolution and report.resolution["resolved"]
    lines = upgrade.for_profile(profile, profile.sglang.version, report.resolution)
    assert lines == [f"Diff: resolved arguments, SGLang {profile.sglang.version} -> {profile.sglang.version}: none "
                     "differ for this profile"]


def test_check_of_an_unknown_release_names_the_field_and_the_command_and_builds_nothing(tmp_path, capsys):
    from sglang_deploy.cli import main

    profile = proven_with(tmp_path, 'version: "0.5.23"', 'version: "0.0.1"')
    assert main(["check", str(profile), "--gpus", "2"]) == 2  # auto: no table, no environment -> full
    err = capsys.readouterr().err
    assert "sglang.version 0.0.1" in err and "`sglang-deploy sglang add 0.0.1`" in err
    assert not validator_env.env_dir("0.0.1").exists()
    assert not (validator_env.CACHE_DIR / "validators" / ".sglang-0.0.1.lock").exists()
    assert main(["check", str(profile), "--gpus", "2", "--light"]) == 2
    err = capsys.readouterr().err
    assert "sglang.version 0.0.1: no exported option table" in err and "sglang-deploy sglang add 0.0.1" in err


def test_dry_diff_of_an_upgrade_prints_the_resolved_diff_only_across_releases(monkeypatch, caplog):
    """roles/stages.upgrade_diff's wiring (the diff itself runs for real above): asked with the active release's
    version only under --diff and only when the profile's differs."""
    import logging
    import types

    from conftest import store_report
    from fakehost import run_role
    from roles import stages
    from sglang_deploy.validate import upgrade

    asked = []
    monkeypatch.setattr(upgrade, "for_profile", lambda profile, old, resolution, port=None, node=None:
                        asked.append((old, profile.sglang.version)) or [f"Diff: resolved arguments, {old} -> ..."])
    profile = load_profile(PROVEN)
    plan = types.SimpleNamespace(profile=profile, resolution={"resolved": {"tp_size": 2}}, port=30000, node=None)
    older = store_report({"id": "0001-aaaaaaaa", "sglang_version": "0.0.1"}, active="0001-aaaaaaaa")
    same = store_report({"id": "0001-aaaaaaaa", "sglang_version": profile.sglang.version}, active="0001-aaaaaaaa")
    with caplog.at_level(logging.INFO):
        run_role(stages.upgrade_diff, plan, older, diff=False)
        run_role(stages.upgrade_diff, plan, same, diff=True)
        assert asked == []
        run_role(stages.upgrade_diff, plan, older, diff=True)
    assert asked == [("0.0.1", profile.sglang.version)]
    assert "Diff: resolved arguments, 0.0.1 -> ..." in caplog.text


def test_a_changed_recipe_makes_the_environment_incomplete(tmp_path, monkeypatch):
    version = releases.newest_reviewed()
    target = tmp_path / "env"
    target.mkdir()
    marker = target / ".complete"
    marker.write_text(f"{version} recipe {validator_env.ENV_RECIPE} {validator_env._base_digest(version)}\n")
    assert validator_env._complete(target, version)
    marker.write_text(f"{version} recipe {validator_env.ENV_RECIPE} 0123456789abcdef\n")  # built from another recipe
    assert not validator_env._complete(target, version)
    marker.write_text(f"{version} recipe {validator_env.ENV_RECIPE}\n")  # written before the recipe was data
    assert validator_env._complete(target, version)
    marker.write_text(f"{version} recipe 2\n")
    assert not validator_env._complete(target, version)
    marker.write_text(f"0.0.1 recipe {validator_env.ENV_RECIPE} 0123456789abcdef\n")
    assert not validator_env._complete(target, "0.0.1")  # a release the tool has no recipe for: no exception
