"""List the releases retained on the host: time, SGLang version, verdict, gate, flags vs the active one.

    pyinfra inventory/sim.py releases.py
    pyinfra inventory/sim_fleet.py releases.py [--data fleet_summary=results/fleet.json]

Reads only; changes nothing. Over several hosts it ends with the fleet summary: each host's active release,
its verdict and gate result, and the newest release when it is not the active one (a deploy that failed and
was rolled back); `fleet_summary=PATH` also writes it as JSON (rollout.py reads it).
"""

from roles import releases_stages as stages

store = stages.read()  # one round trip: the retained releases and the active one
stages.listing(store)  # the table, and a warning when the host is not consistent with its active release
stages.summary(store)  # once every targeted host is read: the fleet's table, and fleet_summary=PATH as JSON
