"""Roll the SGLang service back to the previous good release, or to any retained one.

    pyinfra inventory/sim.py rollback.py [--data release=0003-1a2b3c4d] [--dry --diff]

The target's unit and environment are installed, the service restarts and must become ready; if it
does not, the release that was running comes back. `pyinfra inventory/X.py releases.py` lists them.
A release of a multi-node server (`--limit nodes`) restarts in the deploy's order: every node stops, the
joining ranks start, then rank 0. Each line below is one stage (roles/rollback_stages.py says what each does);
the lock refusal and the preflight are the deploy's own.
"""

from roles import rollback_stages as stages

rollback = stages.target()  # the store, the lock, the release to go back to: refused before any change
stages.announce(rollback)  # from -> to, and an authentication change
candidate = stages.prepare(rollback)  # the host programs; with --diff, the unit and environment it installs
stages.preflight(rollback, candidate)  # the deploy's preflight, for the target, resolved afresh (skip_preflight skips it)
stages.switch(rollback)  # restart, readiness, the release that ran back on failure; nodes in order
