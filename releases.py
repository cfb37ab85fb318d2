"""List the releases retained on the host: time, SGLang version, verdict, gate, flags vs the active one.

    pyinfra inventory/sim.py releases.py

Reads only; changes nothing.
"""

from pyinfra import host, logger

from roles.facts import ReleaseStore
from sglang_deploy.release_plan import listing, service_of

service = service_of(host.data)
store = host.get_fact(ReleaseStore, service=service)
logger.info(f"[{host.name}] releases of {service}.service"
            + ("" if store["consistent"] else "  (WARNING: the host is not consistent with its active release)"))
for problem in store.get("problems") or []:
    logger.warning(f"[{host.name}] {problem}")
for line in listing(store):
    logger.info(f"    {line}")
