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
no release). Each line below is one stage (roles/router_stages.py says what each does).
"""

from roles import router_stages as stages

router = stages.workers()  # None off the group `router`; else the workers, the unit, the key: refused before any change
found = stages.found(router)  # one command: the host's Python and machine, the installed archive's digest
stages.install(router, found)  # the wheelhouse's venv, the key, the hardened unit; every worker healthy through it
stages.gate(router)  # with router_gate=true: the fleet's gate through the router, on the workers' floors
