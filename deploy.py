"""Deploy the SGLang server described by the host's profile, as a new release when anything changed.

    pyinfra inventory/sim.py deploy.py [--data profile=profiles/X.yaml] [--dry --diff]

Each line below is one stage (roles/stages.py says what each does). Up to the refusals nothing changes on the
host: a bad profile, bad host data, or a host that must not be touched stops the deploy there and the running
release keeps running. The switch restarts the server, waits for staged readiness, runs the gate and rolls
back by itself on failure; prune keeps the last releases and the weights snapshots they use.
"""

from roles import stages

plan = stages.plan()  # host settings -> SGLang's own resolution of the profile -> the rendered unit
snapshots = stages.snapshots(plan)  # the weights, the draft, the offered drafters
facts = stages.facts(plan, snapshots)  # one round trip: store, lock, unit, user, files, weights status
stages.refuse(plan, facts, snapshots)  # service user, unit owner, simulated marker, lock
stages.announce(plan, facts)  # the variant's warnings, the profile and port, hardware notes, rules skipped
runtime_ops = stages.prepare_host(plan, facts)  # provision (real hosts), service user, host package, simulator
stages.weights(plan, facts, snapshots)  # fetched or pushed, verified against their manifests
restart_needed = stages.secrets(plan, facts, runtime_ops)  # the API key file; does it restart the server?
decision = stages.decide(plan, facts, restart_needed)  # new release, switch back, or nothing
stages.preflight(plan, decision)  # can the release's server start here, under its own sandbox?
if decision.switch:
    stages.stage(plan, decision, snapshots)  # releases/<id>/, meta.json last
    stages.switch(plan, decision, facts)  # restart, readiness, gate, automatic rollback
    stages.prune(plan)  # keep_releases, never the active or the last good one
else:
    stages.announce_unchanged(decision)  # the active release is unchanged: nothing to switch
stages.watch(plan, facts)  # the perf watch's timer on the active release
