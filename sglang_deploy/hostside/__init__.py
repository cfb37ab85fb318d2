"""Programs uploaded to and run on the target host with its system python3 (standard library only).

The programs are the modules below (`python3 -m hostside.<name>` from HOST_LIB, or by path where said); every other
module is their library: lib/ (the modules that are not programs) and contract/ (the typed documents and the host's
paths). Units already on hosts run some of them by these names (the recover and watch units, ExecStart's log
redactor): a program keeps its name. tests/test_host_robustness.py holds this table equal to the modules that have a
`__main__` block, and layout.host_program_argv runs only these.
"""

PROGRAMS = {  # module under hostside/ (a sub-package's, dotted): who runs it
    "bench": "the gate, the perf watch, the tune's runner and the doctor: the bench client's measurement",
    "deploy_facts": "every deploy's facts (roles/facts.py DeployFacts): the store's state and each snapshot's status",
    "doctor_collect": "the perf doctor (roles/doctor_stages.py)",
    "evidence": "by hand: what the journal says since the unit started (python3 -m hostside.evidence SERVICE)",
    "gpu_probe": "the doctor's --probe, by path in the release's python (-I)",
    "log_redactor": "the unit's ExecStart, first stage, by path (/usr/bin/python3 -I)",
    "preflight": "the deploy's, the rollback's and the doctor's preflight (its __main__ runs preflight/runner.py)",
    "preflight.allreduce": "the preflight probe's all-reduce step, by path in the release's python",
    "preflight.probe": "the preflight's probe inside the transient unit, by path in the release's python (-I)",
    "preflight.runner": "the preflight (python3 -m hostside.preflight runs it)",
    "recover": "<service>-recover.service, at boot before the server",
    "router_check": "the router's stage: wait until every worker is healthy",
    "router_launch": "the router's unit (ExecStart)",
    "safetensors_headers": "by hand: a checkpoint's bytes by role (python3 safetensors_headers.py MODEL_DIR)",
    "store": "the ReleaseStore fact (its state and history views), the prune",
    "switch": "the deploy's and the rollback's switch",
    "tune_session": "the tune and the doctor's A/B: open, poll, close, and run in its transient unit",
    "venv_hooks": "the VenvState fact (inline) and provision's hooks check (its source, -I -c)",
    "watch": "<service>-watch.timer: the perf watch",
    "weights": "the weights' stages and the WeightsStatus fact (its __main__)",
}
