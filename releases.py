"""List the releases retained on the host: time, SGLang version, verdict, gate, flags vs the active one.

    pyinfra inventory/sim.py releases.py
    pyinfra inventory/sim_fleet.py releases.py [--data fleet_summary=results/fleet.json]

Reads only; changes nothing. Over several hosts it ends with the fleet summary: each host's active release,
its verdict and gate result, and the newest release when it is not the active one (a deploy that failed and
was rolled back); `fleet_summary=PATH` also writes it as JSON (rollout.py reads it).
"""

import json
from pathlib import Path

from pyinfra import host, logger

from roles import fleet_summary
from roles.facts import ReleaseStore
from roles.settings import host_settings, of
from sglang_deploy.settings import ReleasesArgs
from sglang_deploy.fleet import host_summary, summary_lines
from sglang_deploy.release_plan import listing, service_of

service = service_of(host_settings())
store = host.get_fact(ReleaseStore, service=service)
logger.info(f"[{host.name}] releases of {service}.service"
            + ("" if store.consistent else "  (WARNING: the host is not consistent with its active release: "
                                               + "; ".join(store.inconsistent or ["?"]) + ")"))
for problem in store.problems:
    logger.warning(f"[{host.name}] {problem}")
for line in listing(store):
    logger.info(f"    {line}")

ordered = fleet_summary.add(host.name, host_summary(store))  # every targeted host's row, once all are read
if ordered is not None:
    if len(ordered) > 1:
        logger.info(f"fleet summary ({len(ordered)} hosts):")
        for line in summary_lines(ordered):
            logger.info(f"    {line}")
    if of(ReleasesArgs).fleet_summary:
        path = Path(of(ReleasesArgs).fleet_summary)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(ordered, indent=1) + "\n")
