"""router.py's stages, in the order it runs them: workers -> found -> install -> gate.

Only the hosts of the inventory group `router` get a router: `workers` says so for any other targeted host and
returns None, and every later stage leaves that host alone. Everything that can be refused (the router's settings,
a worker's profile or address, the key) is refused in `workers`, before the first round trip and any change.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host, inventory, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.server import Command
from pyinfra.operations import python

from roles import release, router as router_role
from roles.settings import host_settings, of
from sglang_deploy.plan import PlanError, host_settings as settings_of, resolve_api_key, resolve_profile_path
from sglang_deploy.profile import ProfileError, load_profile
from sglang_deploy.router import ROUTER_LIB, RouterError, render_unit, wheelhouse, worker_url
from sglang_deploy.settings import RouterSettings


@dataclass(frozen=True)
class Router:
    """The router of this host: its settings, the workers' URLs and gates (in the group's order), the rendered
    unit, the workers' API key and the URL the router is checked at from its own host."""
    config: RouterSettings
    workers: list[str]
    gates: list  # each worker's profile.gate (profile/sections.GateSection)
    unit: str
    api_key: str

    @property
    def check_url(self) -> str:
        address = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.config.bind, self.config.bind)
        return (f"http://[{address}]:{self.config.port}" if ":" in address
                else f"http://{address}:{self.config.port}")


@dataclass(frozen=True)
class Found:
    """What the router host has: its Python (X.Y) and machine, for the wheelhouse, and the installed archive's
    digest ("" when none)."""
    python_version: str
    machine: str
    installed_digest: str


def workers() -> Router | None:
    """The router of this host from the workers' own host data and profiles; None off the group `router`. A bad
    setting, profile, address or key stops the run here, nothing changed."""
    if host not in (inventory.get_group("router") if "router" in inventory.groups else []):
        logger.info(f"[{host.name}] not in the inventory group `router`: no router here")
        return None
    config = of(RouterSettings)
    try:
        urls, gates = [], []
        for worker in inventory.get_group(config.workers_group) if config.workers_group in inventory.groups else []:
            theirs = settings_of(worker.data)
            profile = load_profile(resolve_profile_path(theirs.profile))
            urls.append(worker_url(worker.name, theirs, profile.service.port))
            gates.append(profile.gate)
        unit = render_unit(config, urls)
        api_key = resolve_api_key(host_settings(), where="router")
    except (RouterError, PlanError, ProfileError) as error:
        raise DeployError(f"{host.name}: {error}; nothing was changed") from None
    return Router(config=config, workers=urls, gates=gates, unit=unit, api_key=api_key)


def found(router: Router | None) -> Found | None:
    """One command on the router host: its Python and machine, and the installed archive's manifest."""
    if router is None:
        return None
    output = host.get_fact(Command, command="python3 -c 'import platform, sys; print(\"%d.%d\" % sys.version_info[:2], "
                                            "platform.machine())'; cat " + ROUTER_LIB + "/.manifest 2>/dev/null; true")
    lines = output.splitlines()
    python_version, machine = lines[0].split()
    return Found(python_version=python_version, machine=machine,
                 installed_digest=lines[1].strip() if len(lines) > 1 else "")


def install(router: Router | None, on_host: Found | None) -> None:
    """The wheelhouse archive and the venv (when its digest differs), the key, the hardened unit; restarted on a
    change; then every worker must be healthy through the router (roles/router.install)."""
    if router is None:
        return
    ship = router_role.router_shipment(str(wheelhouse(on_host.python_version, on_host.machine)))
    config = router.config
    logger.info(f"[{host.name}] router on {config.bind}:{config.port} ({config.policy}) over {len(router.workers)} "
                f"workers of group {config.workers_group}: {' '.join(router.workers)}")
    router_role.install(ship=ship, installed_digest=on_host.installed_digest, unit=router.unit,
                        api_key=router.api_key, check_url=router.check_url, workers=router.workers)


def gate(router: Router | None) -> None:
    """With router_gate=true (and workers): the fleet's gate through the router, the first worker's floors, as one
    operation (roles/router.gate_through_router); a failed gate fails the run."""
    if router is None or not (router.config.gate and router.workers):
        return
    release.install_programs()  # the gate's client runs from the host package
    python.call(name=f"Gate through the router ({len(router.workers)} workers)",
                function=router_role.gate_through_router, check_url=router.check_url, workers=router.workers,
                gate=router.gates[0])
