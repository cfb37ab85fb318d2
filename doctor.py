"""The perf doctor: roofline from the checkpoint's bytes and a ranked list of what leaves perf on the table.

    pyinfra inventory/X.py doctor.py [--data probe=true] [--data probe_force=true]
    pyinfra inventory/X.py doctor.py --data bisect=<release> [--data tune_budget_s=N] [--data tune_samples=N] ...
    pyinfra inventory/X.py doctor.py --data ab=nospec [--data tune_samples=N] ...

Reads the running server, its process and the GPUs; `probe=true` also runs the GPU probe (bandwidth,
P2P, all-reduce latency) in the release's venv, which refuses while the GPUs are in use (stop the
service first, or probe_force=true). The report is printed, saved with the active release
(doctor.json) and locally in results/<host>/.

`bisect=<release>`: the regression bisect (sglang_deploy/bisect_run.py). The release the gate refused as slower is
compared with the active (good) release, deployed from host data `profile`: each difference between them (a flag,
a variable, the drafter, the weights) is measured alone as a temporary release in the tune's host session (the lock
held, the active release restored), and the change that costs the speed is named with its figures.

`ab=nospec`: the short A/B on request (sglang_deploy/doctor/ab.py). The active release against the same release
without speculation, a temporary release in the same host session; speculation slower than none is named from it,
with both speeds and spreads and the profile edit that tests it.
"""

from roles import doctor_stages as stages, release

args = stages.arguments()  # probe, bisect= or ab=: one measurement at a time, refused before anything runs
release.install_programs()  # the host package the collector and the measuring sessions run
stages.measure(args)  # the diagnosis, the regression bisect or the A/B, on the variant chosen once
