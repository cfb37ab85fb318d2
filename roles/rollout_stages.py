"""rollout.py's stages: arguments -> rollout. rollout.py drives pyinfra itself (sglang_deploy/rollout.py says what
it does); it is `sglang-deploy rollout ...` for a checkout without the command installed.
"""

from __future__ import annotations

import sys

from sglang_deploy.cli import main


def arguments(name: str) -> list[str]:
    """The command line's arguments; refused when pyinfra runs rollout.py as a deploy file (name: its __name__)."""
    if name != "__main__":  # run by pyinfra as a deploy file by mistake
        raise SystemExit("rollout.py drives pyinfra itself: run `python rollout.py INVENTORY [options]`, "
                         "not `pyinfra INVENTORY rollout.py`")
    return sys.argv[1:]


def rollout(arguments: list[str]) -> None:
    """`sglang-deploy rollout ARGUMENTS`; exits with its status."""
    sys.exit(main(["rollout", *arguments]))
