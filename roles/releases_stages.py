"""releases.py's stages, in the order it runs them: read -> listing -> summary. They only read the host.

pyinfra runs the file once per host; the fleet summary is made by the host that completes the run's set
(roles/fleet_summary.py), with every targeted host's row in inventory order.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyinfra import host, logger

from roles import fleet_summary
from roles.facts import ReleaseStore
from roles.settings import host_settings, of
from sglang_deploy.fleet import host_summary, summary_lines
from sglang_deploy.release_plan import listing as listing_lines, service_of
from sglang_deploy.settings import ReleasesArgs


def read():
    """The ReleaseStore fact (the store's report): the retained releases, the active one, and whether the host is
    consistent with it, in one round trip."""
    return host.get_fact(ReleaseStore, service=service_of(host_settings()))


def listing(store) -> None:
    """The table of releases, a warning when the host is not consistent with its active release, and the store's
    problems."""
    logger.info(f"[{host.name}] releases of {service_of(host_settings())}.service"
                + ("" if store.consistent else "  (WARNING: the host is not consistent with its active release: "
                                                   + "; ".join(store.inconsistent or ["?"]) + ")"))
    for problem in store.problems:
        logger.warning(f"[{host.name}] {problem}")
    for line in listing_lines(store):
        logger.info(f"    {line}")


def summary(store) -> None:
    """This host's row; once every targeted host is read, the fleet's table (over several hosts) and, with
    fleet_summary=PATH, the rows as JSON (rollout.py reads it)."""
    ordered = fleet_summary.add(host.name, host_summary(store))  # every targeted host's row, once all are read
    if ordered is None:
        return
    if len(ordered) > 1:
        logger.info(f"fleet summary ({len(ordered)} hosts):")
        for line in summary_lines(ordered):
            logger.info(f"    {line}")
    if of(ReleasesArgs).fleet_summary:
        path = Path(of(ReleasesArgs).fleet_summary)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(ordered, indent=1) + "\n")
