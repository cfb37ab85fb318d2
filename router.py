"""Deploy SGLang's router (sglang-router, pinned) in front of the fleet's workers, on the hosts of group `router`.

    pyinfra inventory/sim_fleet.py router.py [--data router_port=30080] [--data router_policy=round_robin]

The workers are the hosts of the inventory group `router_workers` (default `fleet`), each at
http://<worker_address or ssh_hostname>:<port>; every worker must share one API key (the router sends one).
Targeted hosts outside the group `router` are left alone. The unit (sglang-router.service) is hardened
(DynamicUser, no devices, read-only system); the key reaches it through LoadCredential. After a change the
router must report every worker healthy. Settings: sglang_deploy/router.py.

With `--data router_gate=true` the fleet's gate is also measured through the router: the gate's client
(hostside/bench.py, run on the router host) sends the workers' gate prompts through it, single stream and then
gate.concurrency streams per worker at once; the workers' floors apply (sglang_deploy.router.gate_verdict). The
result is saved in results/<router host>/; a failed gate fails the run (nothing is rolled back: the router holds
no release).
"""


from pyinfra import host, inventory, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.server import Command
from pyinfra.operations import python

from roles import release
from roles import router as router_role
from roles.settings import host_settings, of
from sglang_deploy.plan import PlanError, host_settings as settings_of, resolve_api_key
from sglang_deploy.profile import ProfileError, load_profile
from sglang_deploy.plan import resolve_profile_path
from sglang_deploy.settings import RouterSettings
from sglang_deploy.router import (ROUTER_LIB, RouterError, render_unit,
                                  wheelhouse, worker_url)


if host not in (inventory.get_group("router") if "router" in inventory.groups else []):
    logger.info(f"[{host.name}] not in the inventory group `router`: no router here")
else:
    config = of(RouterSettings)
    try:
        workers, gates = [], []
        for worker in inventory.get_group(config.workers_group) if config.workers_group in inventory.groups else []:
            theirs = settings_of(worker.data)
            profile = load_profile(resolve_profile_path(theirs.profile))
            workers.append(worker_url(worker.name, theirs, profile.service.port))
            gates.append(profile.gate)
        unit = render_unit(config, workers)
        api_key = resolve_api_key(host_settings(), where="router")
    except (RouterError, PlanError, ProfileError) as error:
        raise DeployError(f"{host.name}: {error}; nothing was changed") from None
    found = host.get_fact(Command, command="python3 -c 'import platform, sys; print(\"%d.%d\" % sys.version_info[:2], "
                                           "platform.machine())'; cat " + ROUTER_LIB + "/.manifest 2>/dev/null; true")
    lines = found.splitlines()
    python_version, machine = lines[0].split()
    ship = router_role.router_shipment(str(wheelhouse(python_version, machine)))
    address = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(config.bind, config.bind)
    check_url = f"http://[{address}]:{config.port}" if ":" in address else f"http://{address}:{config.port}"
    logger.info(f"[{host.name}] router on {config.bind}:{config.port} ({config.policy}) over {len(workers)} "
                f"workers of group {config.workers_group}: {' '.join(workers)}")
    router_role.install(ship=ship, installed_digest=(lines[1].strip() if len(lines) > 1 else ""), unit=unit,
                        api_key=api_key, check_url=check_url, workers=workers)
    if config.gate and workers:
        release.install_programs()  # the gate's client runs from the host package
        python.call(name=f"Gate through the router ({len(workers)} workers)", function=router_role.gate_through_router,
                    check_url=check_url, workers=workers, gate=gates[0])
