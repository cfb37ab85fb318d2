"""The deploy's one variant: a real GPU host or the simulated host, chosen once, so no stage branches on it.

`of(settings)` chooses it from the host settings' `simulated` when the deploy's plan is built (roles/stages.plan,
which hands it to plan.plan_for_host; the plan's refusals still check the choice against the host's simulated
marker); `of_release(meta)` from a release's meta.json, for the rollback. Each variant answers the few questions
the stages ask, where the two kinds of host differ:

- detected_hardware: what the host's nvidia-smi reports (the GpuHost fact), or nothing on the simulated host;
- fallback_weights: the weights of a profile without managed ones (none, or the synthetic checkpoint);
- manifests: the shipments besides the host package whose installed digest the deploy reads (the simulator's);
- announcements and measurement_warnings: what a deploy, or a measuring session (the tune, the bisect, the A/B),
  warns about first (the simulated host says what stands in for the GPU server);
- prepare: the host's own preparation (provisioning, or the simulator's archive), with the operations whose
  change restarts the server;
- interpreter and preflight_args: the python the release's server runs in, and the preflight's variant options;
- gpu: the GPU whose bandwidth bounds decode (the host's first GPU, or the hardware model's).
"""

from __future__ import annotations

from dataclasses import dataclass

from roles import provision, simulator
from roles.facts import GpuHost
from sglang_deploy.hostfacts import detected_hardware
from sglang_deploy.layout import venv_path
from sglang_deploy.profile import Profile
from sglang_deploy.roofline import model_gpu, reported_gpu
from sglang_deploy.weights import Weights


@dataclass(frozen=True)
class RealGpuHost:
    """A GPU host: its own hardware facts, the profile's weights only, provisioned (when host data provision is on)
    and preflighted in the release's venv."""
    simulated = False  # the variant's name as host data and meta.json spell it (not a field)

    def detected_hardware(self, on_host) -> dict | None:
        return detected_hardware(on_host.get_fact(GpuHost))

    def fallback_weights(self, profile: Profile) -> Weights | None:
        return None

    def manifests(self, profile: Profile) -> tuple[str, ...]:
        return ()

    def announcements(self, profile: Profile) -> tuple[str, ...]:
        return ()

    def measurement_warnings(self) -> tuple[str, ...]:
        return ()

    def prepare(self, profile: Profile, settings, facts: dict) -> list:
        """Driver, CUDA, NCCL and the venv (host data provision, provision_mode); nothing restarts the server."""
        if settings.provision:
            provision.nvidia_stack(mode=settings.provision_mode, python=f"{venv_path(profile)}/bin/python",
                                   user=profile.service.user)
            provision.python_env(profile=profile, mode=settings.provision_mode)
        return []

    def interpreter(self, venv: str) -> str:
        return f"{venv}/bin/python"

    def preflight_args(self, resolve: bool) -> list[str]:
        return []

    def gpu(self, environment: dict, on_host) -> str | None:
        return reported_gpu(on_host.get_fact(GpuHost))


@dataclass(frozen=True)
class SimulatedHost:
    """The simulated CT129 (testbed/simhost.py): no nvidia-smi, the synthetic checkpoint for a profile without
    managed weights, the simulator (sim_server: what runs behind <venv>/bin/sglang serve) instead of provisioning,
    and the preflight in the simulated host's SGLang install with its GPU stand-in."""
    sim_server: str = "sglang"
    simulated = True

    def detected_hardware(self, on_host) -> dict | None:
        return None

    def fallback_weights(self, profile: Profile) -> Weights | None:
        return simulator.synthetic_weights(profile)

    def manifests(self, profile: Profile) -> tuple[str, ...]:
        return (simulator.simulator_shipment(profile, self.sim_server).manifest,)

    def announcements(self, profile: Profile) -> tuple[str, ...]:
        return (simulator.banner(profile, self.sim_server),)

    def measurement_warnings(self) -> tuple[str, ...]:
        return ("SIMULATED HOST: every number below comes from sglang_deploy.sim's hardware model of 2x RTX A6000, "
                "not from SGLang on a GPU",)

    def prepare(self, profile: Profile, settings, facts: dict) -> list:
        """The simulator's archive, when its digest differs from the host's; a changed simulator restarts the
        server (the operations returned)."""
        ship = simulator.simulator_shipment(profile, self.sim_server)
        return simulator.install(profile=profile, installed_digest=facts["manifests"].get(ship.manifest),
                                 sim_server=self.sim_server)

    def interpreter(self, venv: str) -> str:
        return simulator.SGLANG_PYTHON

    def preflight_args(self, resolve: bool) -> list[str]:
        # --no-gpu: without the resolution step, the stand-in's torch import (the stack step) is left out;
        # --step-timeout: the GPU stand-in's all-reduce takes milliseconds, NCCL's seconds.
        return ["--no-gpu"] * (not resolve) + ["--simulated", "--step-timeout", "10"]

    def gpu(self, environment: dict, on_host) -> str | None:
        return model_gpu(environment)


Target = RealGpuHost | SimulatedHost


def of(settings) -> Target:
    """The variant of a host, from its settings (settings.HostSettings: simulated, sim_server)."""
    return SimulatedHost(settings.sim_server) if settings.simulated else RealGpuHost()


def of_release(meta, sim_server: str = "sglang") -> Target:
    """The variant a release was staged for (its meta.json's simulated: release.ReleaseMeta)."""
    return SimulatedHost(sim_server) if meta.simulated else RealGpuHost()
