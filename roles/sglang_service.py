"""The SGLang systemd service: configure (unit, environment, secrets) -> activate (reload, restart, ready).

Restart and daemon-reload follow from which files change; a run that changes nothing restarts nothing.
"""

from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from roles.ops import managed_file
from sglang_deploy.layout import TOOL_BIN, ServiceLayout
from sglang_deploy.render import Rendered

HOSTSIDE = Path(__file__).resolve().parent.parent / "sglang_deploy" / "hostside"


@deploy("SGLang service: configure")
def configure(rendered: Rendered, service: str, user: str):
    layout = ServiceLayout(service)
    files.directory(name="Config directory", path=layout.config_dir, user="root", group=user, mode=750)
    unit = managed_file(name=f"Unit {layout.unit_path}", dest=layout.unit_path, content=rendered.unit, mode=644)
    env = managed_file(name=f"Environment {layout.env_path} (0600)", dest=layout.env_path, content=rendered.env,
                       mode=600)
    secrets = managed_file(name=f"Secrets {layout.secrets_path} (0640, masked)", dest=layout.secrets_path,
                           content=rendered.secrets, mode=640, group=user)
    return unit, env, secrets


@deploy("SGLang service: activate")
def activate(service: str, probe_url: str, start_timeout_s: int, unit, changed: list):
    files.put(name="Readiness probe", src=str(HOSTSIDE / "wait_ready.py"), dest=f"{TOOL_BIN}/wait_ready.py",
              mode=755, create_remote_dir=True)
    restart = any(op.will_change for op in changed)
    systemd.service(
        name=f"{service}.service enabled and running" + (" (restart: release changed)" if restart else ""),
        service=f"{service}.service", running=True, enabled=True,
        restarted=restart, daemon_reload=unit.will_change,
    )
    server.shell(
        name=f"Wait until {service} is ready (up to {start_timeout_s} s)",
        commands=[f"python3 {TOOL_BIN}/wait_ready.py --unit {service}.service --url {probe_url} "
                  f"--timeout {start_timeout_s}"],
        _if=any_changed(*changed),
    )
