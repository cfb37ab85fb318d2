"""The boot recovery: <service>-recover.service (hostside/recover.py) runs before the server at every boot.

Installed with the host package, before any switch, so that a cut during the very next switch is recovered.
Installed and enabled only when the file or its enablement differ from what the deploy's DeployState fact found:
a no-op redeploy stays one fact round trip. Not started here: it runs at the next boot (or when the server's unit
is started while it is inactive; under a running switch it finds the lock held and does nothing).
"""

import hashlib
import shlex
from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files, server

from sglang_deploy.render import RenderedRecover, recover_path


def unit_name(service: str) -> str:
    return f"{service}-recover.service"


def in_place(found_files: dict, found_units: dict, rendered: RenderedRecover, service: str) -> bool:
    digest = hashlib.sha256(rendered.service.encode()).hexdigest()
    return (found_files.get(recover_path(service), []) == ["644", "root", "root", digest]
            and (found_units.get(unit_name(service)) or [])[:1] == ["enabled"])


@deploy("Boot recovery")
def install(rendered: RenderedRecover, service: str):
    path = recover_path(service)
    files.put(name=path, src=StringIO(rendered.service), dest=path, mode=644, user="root", group="root")
    server.shell(name=f"Enable {unit_name(service)} (runs before {service}.service at boot)",
                 commands=[f"systemctl daemon-reload && systemctl enable {shlex.quote(unit_name(service))}"])
