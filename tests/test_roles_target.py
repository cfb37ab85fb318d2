"""roles/target.py without a host: the GPU-or-simulated variant is chosen once (the deploy's plan, a rollback's
meta.json), each variant's answers to the stages' questions, and no stage of roles/stages.py or
roles/rollback_stages.py mentions `simulated` again (a scan of their code, shown to find a planted branch)."""

import ast
from pathlib import Path

import pytest

from conftest import PROVEN, REPO, release_meta
from fakehost import fixture_fact, run_role
from roles import simulator, stages, target
from roles.facts import DeployState
from roles.target import RealGpuHost, SimulatedHost
from sglang_deploy.layout import venv_path
from sglang_deploy.plan import Plan
from sglang_deploy.release_plan import Decision
from sglang_deploy.profile import load_profile
from sglang_deploy.settings import HostSettings

PROFILE = load_profile(PROVEN)
A6000X2 = fixture_fact("GpuHost", "rtx_a6000x2_bare_metal")
STAGE_MODULES = ("roles/stages.py", "roles/rollback_stages.py")


class FakeHost:
    """A host whose GpuHost fact is the 2x RTX A6000 fixture; it records every fact asked of it."""

    def __init__(self):
        self.asked = []

    def get_fact(self, cls, **kwargs):
        self.asked.append(cls.__name__)
        return A6000X2


@pytest.mark.parametrize("data, chosen", [
    ({}, RealGpuHost()),
    ({"simulated": False, "sim_server": "model"}, RealGpuHost()),
    ({"simulated": True}, SimulatedHost("sglang")),
    ({"simulated": True, "sim_server": "model"}, SimulatedHost("model")),
])
def test_the_variant_is_chosen_from_the_host_settings(data, chosen):
    assert target.of(HostSettings.of(data)) == chosen


@pytest.mark.parametrize("simulated, chosen", [(True, SimulatedHost("model")), (False, RealGpuHost())])
def test_a_rollback_takes_the_variant_its_release_was_staged_for(simulated, chosen):
    assert target.of_release(release_meta(simulated=simulated), "model") == chosen


def test_a_plan_refuses_a_target_that_contradicts_its_settings():
    with pytest.raises(ValueError, match="the plan's target is simulated=True, its settings simulated=False"):
        Plan(profile=PROFILE, rendered=None, port=30000, simulated=False, skipped_rules=(), target=SimulatedHost())
    assert Plan(profile=PROFILE, rendered=None, port=30000, simulated=False, skipped_rules=(),
                target=RealGpuHost()).target == RealGpuHost()


VENV = "/opt/sglang-deploy/venvs/v1"
ANSWERS = [
    # (question, real GPU host, simulated host)
    ("interpreter", lambda t: t.interpreter(VENV), f"{VENV}/bin/python", simulator.SGLANG_PYTHON),
    ("preflight, resolving", lambda t: t.preflight_args(True), [], ["--simulated", "--step-timeout", "10"]),
    ("preflight, no resolution", lambda t: t.preflight_args(False), [],
     ["--no-gpu", "--simulated", "--step-timeout", "10"]),
    ("manifests", lambda t: t.manifests(PROFILE), (), (simulator.simulator_shipment(PROFILE, "model").manifest,)),
    ("announcements", lambda t: t.announcements(PROFILE), (), (simulator.banner(PROFILE, "model"),)),
    ("gpu", lambda t: t.gpu({}, FakeHost()), "NVIDIA RTX A6000", "NVIDIA RTX A6000"),  # the host's; the model's
    ("gpu, another modelled machine", lambda t: t.gpu({"SGLANG_SIM_MACHINE": "../x"}, FakeHost()),
     "NVIDIA RTX A6000", None),
    ("detected GPUs", lambda t: (t.detected_hardware(FakeHost()) or {}).get("gpus"), 2, None),
]


@pytest.mark.parametrize("question, ask, real, simulated", ANSWERS, ids=[a[0] for a in ANSWERS])
def test_each_variant_answers_the_stages_questions(question, ask, real, simulated):
    assert (ask(RealGpuHost()), ask(SimulatedHost("model"))) == (real, simulated)


def test_only_a_real_gpu_host_is_asked_for_its_gpus():
    real, simulated = FakeHost(), FakeHost()
    RealGpuHost().detected_hardware(real), RealGpuHost().gpu({}, real)
    SimulatedHost().detected_hardware(simulated), SimulatedHost().gpu({}, simulated)
    assert (real.asked, simulated.asked) == (["GpuHost", "GpuHost"], [])


def test_the_fallback_weights_are_the_synthetic_checkpoint_on_the_simulated_host_only():
    assert RealGpuHost().fallback_weights(PROFILE) is None
    weights = SimulatedHost().fallback_weights(PROFILE)
    assert weights.path == PROFILE.model.path and weights.source.kind == "dir" and "synthetic" in weights.source.local_dir


def test_preparing_a_host_provisions_a_real_one_and_installs_the_simulator_on_the_simulated_one():
    unprovisioned = HostSettings.of({"provision": False})
    assert run_role(lambda: RealGpuHost().prepare(PROFILE, unprovisioned, {"manifests": {}})).names == []
    ship = simulator.simulator_shipment(PROFILE, "model")
    installed = run_role(lambda: SimulatedHost("model").prepare(PROFILE, None, {"manifests": {ship.manifest: None}}))
    assert [name.split(" | ")[0] for name in installed.names] == ["SGLang simulator (simulated host)"] * 2
    current = {"manifests": {ship.manifest: ship.digest}}
    assert run_role(lambda: SimulatedHost("model").prepare(PROFILE, None, current)).names == []


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "api_key"
    path.write_text("sk-target-test-key-0123456789\n")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("data, chosen, asked_gpus", [
    ({"simulated": True, "gpus": 2, "gpu_topology": "pcie", "sim_server": "model"}, SimulatedHost("model"), False),
    ({"simulated": False}, RealGpuHost(), True),
])
def test_the_deploys_plan_carries_the_variant_chosen_once(key_file, data, chosen, asked_gpus):
    found = {}

    def role():
        found["plan"] = stages.plan()
        found["facts"] = stages.facts(found["plan"], stages.snapshots(found["plan"]))
        stages.preflight(found["plan"], Decision(release_id="0001-aaaaaaaa", is_new=True, switch=True, reason="t"))

    ops = run_role(role, facts={"GpuHost": A6000X2, DeployState: lambda **kwargs: found.setdefault("asked", kwargs)},
                   data={"profile": str(PROVEN), "api_key_file": str(key_file), **data})
    assert found["plan"].target == chosen and found["plan"].simulated == chosen.simulated
    assert ("GpuHost" in [name for name, _ in ops.asked]) is asked_gpus
    assert found["asked"]["manifests"][1:] == chosen.manifests(PROFILE)  # the simulator's, on the simulated host
    assert (found["asked"]["weights"] != ()) is chosen.simulated  # the synthetic checkpoint, on the simulated host
    preflight = ops.named("Preflight of release").text  # the variant's python and options
    python = chosen.interpreter(venv_path(PROFILE))
    assert f"--python {python} " in preflight and python.startswith("/opt/sglang-sim/") is chosen.simulated
    assert ("--simulated --step-timeout 10" in preflight) is chosen.simulated


def variant_mentions(source: str) -> list[str]:
    """`line: name` for each place the code (docstrings left out) names the simulated variant: an identifier,
    attribute, keyword or argument containing `simulat`, or a string that is such a name (facts["simulated"])."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        name = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                else node.arg if isinstance(node, (ast.keyword, ast.arg)) else node.name
                if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.alias)) else
                node.value if isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings and node.value.isidentifier() else None)
        if name and "simulat" in name.lower():
            found.append(f"{node.lineno}: {name}" if hasattr(node, "lineno") else name)
    return found


@pytest.mark.parametrize("module", STAGE_MODULES)
def test_no_stage_names_the_simulated_variant(module):
    """Stages ask the plan's target (roles/target.py); a branch on `simulated` belongs there, not here."""
    assert variant_mentions((REPO / module).read_text()) == []


PLANTED = [
    ("branch on the plan", "    if plan.simulated:\n        return None\n", "plan.simulated"),
    ("branch on the settings", "    if host_settings().simulated:\n        return None\n", "simulated"),
    ("the host's marker", "    if facts['simulated']:\n        return None\n", "simulated"),
    ("a keyword", "    release.preflight(simulated=True)\n", "simulated"),
    ("the simulator role", "    simulator.install(profile=plan.profile)\n", "simulator"),
]


@pytest.mark.parametrize("case, planted, name", PLANTED, ids=[p[0] for p in PLANTED])
def test_the_scan_finds_a_planted_branch(case, planted, name):
    source = (REPO / "roles/stages.py").read_text()
    anchor = "    release.prune(service=plan.profile.service.name, keep=host_settings().keep_releases)\n"
    assert anchor in source
    found = variant_mentions(source.replace(anchor, planted + anchor))
    assert found and all(name.split(".")[-1] in line for line in found), found


def test_the_scan_leaves_docstrings_and_sentences_alone():
    source = ('"""The simulated host."""\ndef stage():\n    """On a simulated host, nothing."""\n'
              '    logger.info("the simulated host is ready")\n')
    assert variant_mentions(source) == []
