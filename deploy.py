"""Deploy the SGLang server described by the host's profile.

    pyinfra inventory/sim.py deploy.py [--data profile=profiles/X.yaml] [--dry --diff]

validate (no host change on failure) -> service user -> [simulator, on simulated hosts] -> unit,
environment, secrets -> daemon-reload/restart only when they changed -> wait until ready.
"""

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import File

from roles import service_user, sglang_service, simulator
from sglang_deploy.layout import SIMULATED_MARKER, ServiceLayout
from sglang_deploy.plan import PlanError, plan_for_host

try:
    plan = plan_for_host(host.data)
except PlanError as error:
    raise DeployError(f"{host.name}: nothing was changed on the host.\n{error}") from None

profile = plan.profile
host_is_simulated = bool(host.get_fact(File, path=SIMULATED_MARKER))
if plan.simulated != host_is_simulated:
    raise DeployError(
        f"{host.name}: the inventory says simulated={plan.simulated} but the host "
        f"{'has' if host_is_simulated else 'lacks'} {SIMULATED_MARKER}; refusing to deploy")
if plan.simulated:
    logger.warning(f"[{host.name}] SIMULATED HOST: the GPU server is sglang_deploy.sim (a hardware model of "
                   "2x RTX A6000), not SGLang; systemd, SSH and HTTP are real.")
logger.info(f"[{host.name}] profile {profile.name}: SGLang {profile.sglang.version}, "
            f"{profile.model.served_name} on port {plan.port}")
for skipped in plan.skipped_rules:
    logger.warning(f"[{host.name}] rule skipped: {skipped}")

layout = ServiceLayout(profile.service.name)
service_user.install(user=profile.service.user, home=layout.state_dir)
if plan.simulated:
    simulator.install(profile=profile)
unit, env, secrets = sglang_service.configure(rendered=plan.rendered, service=profile.service.name,
                                              user=profile.service.user)
sglang_service.activate(service=profile.service.name, probe_url=plan.probe_url,
                        start_timeout_s=profile.service.start_timeout_s, unit=unit, changed=[unit, env, secrets])
