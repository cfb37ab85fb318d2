"""Tune: find the fastest valid profile on the host, measured, and write it down as a profile.

    pyinfra inventory/X.py tune.py [--data tune_space=spec|drafter|graphs|nccl|all] [--data tune_budget_s=N]
                                   [--data tune_repeats=3] [--data tune_samples=6] [--data tune_max_new_tokens=128]
                                   [--data tune_steps=1-6] [--data tune_topk=1,2,4] [--data tune_min_aggregate=0.95]
                                   [--data tune_noise_pct=5] [--data tune_min_gain_pct=2]
                                   [--data tune_heartbeat_s=30] [--data tune_resume=false]

Candidates come from the active release's profile (host data `profile`); each is validated by SGLang's own
parser and resolution and the rules (an invalid one is never started), then runs on the host as a
temporary release through the switch's own restart and readiness, is checked against SGLang's resolution
of its command line and measured with the gate's client, `tune_repeats` times. It is never marked good.
The host-side session (hostside/tune_session.py) holds the release lock throughout and restores the
original release at the end, on Ctrl-C, on any failure, and when this controller stops polling (a dropped
SSH connection). Output: profiles/<name>.tuned.yaml (a comment on every changed flag: gain and spread),
the table of all candidates, results/<host>/tune-<release>.json and releases/<release>/tune-results.json
on the host; a later run with the same settings resumes from those results.
"""

from roles import doctor_stages as stages, release

release.install_programs()  # the host package the tune's session runs
stages.tune()  # the candidates, measured in the host session on the variant chosen once
