"""Custom pyinfra facts read from the target host."""

import base64
import json
from pathlib import Path

from pyinfra.api import FactBase

RELEASES_PY = Path(__file__).resolve().parent.parent / "sglang_deploy" / "hostside" / "releases.py"


class ReleaseStore(FactBase):
    """`releases.py state` on the host: releases, active/last good, lock holder, installed vs running.

    The program is sent inline (base64 on stdin), so the fact works before anything was uploaded and
    always matches this checkout's version of the store format.
    """

    requires_command = "python3"

    def command(self, service: str) -> str:
        program = base64.b64encode(RELEASES_PY.read_bytes()).decode()
        return f"echo {program} | base64 -d | python3 - state --service {service}"

    def process(self, output):
        return json.loads("\n".join(output))
