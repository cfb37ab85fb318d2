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

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import python

from roles import release
from roles.facts import GpuHost
from roles.ops import HostRemote
from roles.settings import host_settings
from sglang_deploy.hostfacts import detected_hardware
from sglang_deploy.tune.controller import Runner, TuneError

detected = None if host_settings().simulated else detected_hardware(host.get_fact(GpuHost))


def run_tune():
    if host_settings().simulated:
        logger.warning(f"[{host.name}] SIMULATED HOST: every number below comes from sglang_deploy.sim's hardware "
                       "model of 2x RTX A6000, not from SGLang on a GPU")
    try:
        Runner(host.name, host.data, HostRemote(), lambda line: logger.info(f"[{host.name}] {line}"), detected).run()
    except TuneError as error:
        raise DeployError(f"{host.name}: tune: {error}") from None


release.install_programs()
python.call(name="Tune", function=run_tune)
