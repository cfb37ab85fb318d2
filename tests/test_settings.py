"""Host settings have one typed home (sglang_deploy/settings.py): every key the code reads is a field there, the
verbs and roles read host data only through it, group_data/all.py holds only valid host settings, and
docs/settings.md is generated from the models. Coercion of `--data` strings and the origins in errors."""

import ast
import sys

import pytest

from conftest import REPO
from sglang_deploy import settings, settings_types
from sglang_deploy.settings import (DeployArgs, HostSettings, RollbackArgs, RouterSettings, SettingsError, TuneArgs,
                                    markdown)

GROUP_DATA = REPO / "group_data" / "all.py"
CODE = [*REPO.glob("*.py"), *(REPO / "roles").glob("*.py"), *(REPO / "sglang_deploy").glob("*.py"),
        *(p for package in ("doctor", "profile", "token_map", "tune", "validate")
          for p in (REPO / "sglang_deploy" / package).glob("*.py"))]
# The one place that hands pyinfra's host data to the models, and the one that passes other hosts' data whole.
READS_HOST_DATA = {"roles/settings.py"}
KNOWN = {key for model in settings.MODELS for key in model.keys()}


def _parents(tree):
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node
    return tree


def host_data_uses(path):
    """(line, how) of each `host.data` / `<h>.data` use that is not passing the data on whole."""
    uses = []
    for node in ast.walk(_parents(ast.parse(path.read_text()))):
        if isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.value, ast.Name) \
                and node.value.id in ("host", "worker", "h", "other"):
            parent = getattr(node, "parent", None)
            if isinstance(parent, (ast.Attribute, ast.Subscript)):
                uses.append((node.lineno, ast.unparse(parent)[:60]))
    return uses


def test_only_the_settings_module_reads_host_data():
    found = {f"{path.relative_to(REPO)}:{line}": how for path in CODE for line, how in host_data_uses(path)
             if str(path.relative_to(REPO)) not in READS_HOST_DATA}
    assert found == {}, "read host data through roles/settings.py (host_settings(), of(Model)) instead"


def keys_read():
    """key -> file:line for each `<x>settings.get("key")`: what the code asks a settings model (or another host's
    data) for by its key name."""
    found = {}
    for path in CODE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id.endswith("settings") and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.setdefault(node.args[0].value, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_every_key_the_code_asks_for_is_a_setting():
    unknown = {key: where for key, where in keys_read().items() if key not in KNOWN}
    assert unknown == {}


def test_every_setting_says_what_it_is():
    for model in settings.MODELS:
        assert model.title, model
        for key, name in model.keys().items():
            assert len(model.model_fields[name].description or "") > 15, f"{model.__name__}.{key}"


def test_a_key_means_one_thing_in_every_model():
    seen = {}
    for model in settings.MODELS:
        for key, name in model.keys().items():
            kind = settings._kind(model, name), model.model_fields[name].default
            assert seen.setdefault(key, kind) == kind, key


def test_group_data_sets_only_valid_host_settings():
    namespace = {}
    exec(compile(GROUP_DATA.read_text(), str(GROUP_DATA), "exec"), namespace)
    values = {key: value for key, value in namespace.items() if not key.startswith("__")}
    assert values and set(values) <= set(HostSettings.keys()), set(values) - set(HostSettings.keys())
    HostSettings.of(values)
    run_args = {key for model in settings.MODELS if model is not HostSettings for key in model.keys()}
    assert not set(values) & run_args, "a verb's one-run argument does not belong in group_data/all.py"


def test_the_settings_page_is_generated_from_the_models():
    assert (REPO / "docs" / "settings.md").read_text() == markdown(), \
        "regenerate it: .venv/bin/python -m sglang_deploy.settings > docs/settings.md"
    for key in KNOWN:
        assert f"| `{key}` |" in markdown()


# --- coercion and refusals ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, value", [("true", True), ("false", False), ("no", False), ("ON", True), (1, True),
                                         (0, False), (True, True)])
def test_flags_from_the_command_line(text, value):
    assert DeployArgs.of({"force": text}).force is value


def test_a_flag_that_is_not_yes_or_no_is_refused_not_taken_as_false(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pyinfra", "inventory/sim.py", "deploy.py", "--data", "skip_gate=maybe"])
    with pytest.raises(SettingsError) as refused:
        DeployArgs.of({"skip_gate": "maybe"})
    assert str(refused.value) == "--data: skip_gate: must be true or false (also yes/no, on/off, 1/0), got 'maybe'"


def test_values_are_coerced_and_defaults_filled():
    values = HostSettings.of({"port": "30001", "cuda_version": 13.1, "simulated": "false", "_sudo": True})
    assert (values.port, values.cuda_version, values.simulated, values.sudo) == (30001, "13.1", False, True)
    assert (values.keep_releases, values.max_auto_rollbacks, values.sim_server) == (5, 3, "sglang")
    tune = TuneArgs.of({"tune_repeats": "4", "tune_min_aggregate": "0.8", "tune_topk": 2})
    assert (tune.repeats, tune.min_aggregate, tune.topk, tune.budget_s) == (4, 0.8, "2", 3600)
    assert settings_types.int_list("1-3,6") == (1, 2, 3, 6)


def test_an_error_names_the_inventory_line_that_set_the_value(tmp_path, monkeypatch):
    inventory = tmp_path / "inventory" / "ct.py"
    inventory.parent.mkdir()
    inventory.write_text('hosts = [("ct129", {\n    "ssh_hostname": "10.0.0.9",\n    "keep_releases": 0,\n})]\n')
    monkeypatch.setattr(sys, "argv", ["pyinfra", str(inventory), "deploy.py"])
    with pytest.raises(SettingsError) as refused:
        HostSettings.of({"keep_releases": 0, "gpus": "two"})
    assert f"{inventory}:3: keep_releases: must be between 1 and 100, got 0" in refused.value.problems
    assert "host data: gpus: must be an integer between 1 and 64, got 'two'" in refused.value.problems


@pytest.mark.parametrize("model, data, message", [
    (RollbackArgs, {"release": "0003-1a2b3c4d; id"}, "release: must be a release id such as 0003-1a2b3c4d"),
    (TuneArgs, {"tune_steps": "1-x"}, "tune_steps: '1-x' is not a list such as 1-6 or 1,2,4"),
    (TuneArgs, {"tune_budget_s": "soon"}, "tune_budget_s: must be a number between 10 and 604800"),
    (RouterSettings, {"router_bind": "0.0.0.0\n"}, "router_bind: contains the control character U+000A"),
    (HostSettings, {"profile": ["a.yaml"]}, "profile: must be a string, got ['a.yaml']"),
])
def test_each_verbs_arguments_are_checked_where_they_are_defined(monkeypatch, model, data, message):
    monkeypatch.setattr(sys, "argv", ["pyinfra", "inventory/sim.py", "x.py"])
    with pytest.raises(SettingsError) as refused:
        model.of(data)
    assert message in str(refused.value), str(refused.value)


def test_every_environment_variable_is_named_once_with_its_meaning():
    import re

    used = set()
    for path in [*CODE, *(REPO / "testbed").glob("*.py"), *(REPO / "tests").glob("*.py"),
                 *(REPO / "sglang_deploy" / "hostside").rglob("*.py"), *(REPO / "scripts").iterdir(),
                 *(REPO / "inventory").glob("*.py"), *(REPO / "benchmarks").glob("*.py")]:
        if path.is_file():
            used |= set(re.findall(r"SGLANG_DEPLOY_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")))
    used -= {"SGLANG_DEPLOY_OTHER_KEY"}  # a test's own variable: api_key_env naming another one
    assert sorted(used - set(settings.ENVIRONMENT)) == [], "add it to settings.ENVIRONMENT"
    assert sorted(set(settings.ENVIRONMENT) - used) == [], "no longer used: remove it from settings.ENVIRONMENT"
