"""Roll a deploy out over a fleet: the canary first, then the rest in batches; stop at the first failed batch.

    python rollout.py inventory/sim_fleet.py [--batch-size 2|25%] [--canary-group canary] [--fleet-group fleet]
                      [--fail-percent 0] [--data key=value ...] [--log results/rollout.log]

The same as `sglang-deploy rollout ...` (sglang_deploy/rollout.py says what it does), for a checkout without the
command installed.
"""

from roles import rollout_stages as stages

arguments = stages.arguments(__name__)  # refused when pyinfra runs this file as a deploy: it drives pyinfra itself
stages.rollout(arguments)  # `sglang-deploy rollout ARGUMENTS`: the canary, then the batches
