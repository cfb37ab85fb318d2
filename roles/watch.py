"""The perf watch: <service>-watch.timer runs <service>-watch.service (hostside/watch.py) between deploys.

Not part of a release (a rollback keeps the current watch settings). Installed and enabled only when the
files or the timer's state differ from what the deploy's DeployState fact found, so a no-op redeploy
stays one fact round trip.
"""

import hashlib
import shlex
from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files, server

from sglang_deploy.layout import host_program
from sglang_deploy.render import RenderedWatch, watch_paths


def _file_ok(found: list, content: str) -> bool:
    return found == ["644", "root", "root", hashlib.sha256(content.encode()).hexdigest()]


def in_place(found_files: dict, found_timers: dict, rendered: RenderedWatch, service: str, enabled: bool,
             textfile_dir_present: bool) -> bool:
    unit_path, timer_path = watch_paths(service)
    timer_state = found_timers.get(f"{service}-watch.timer") or []
    if not enabled:
        return "enabled" not in timer_state[:1] and "active" not in timer_state[1:2]
    return (_file_ok(found_files.get(unit_path, []), rendered.service)
            and _file_ok(found_files.get(timer_path, []), rendered.timer)
            and timer_state[:2] == ["enabled", "active"] and textfile_dir_present)


@deploy("Perf watch")
def install(rendered: RenderedWatch, service: str, textfile_dir: str, enabled: bool = True):
    unit_path, timer_path = watch_paths(service)
    timer = shlex.quote(f"{service}-watch.timer")
    if not enabled:
        server.shell(name=f"Disable {service}-watch.timer (watch.enabled: false)",
                     commands=[f"systemctl disable --now {timer} 2>/dev/null || true"])
        return
    files.put(name=f"{unit_path}", src=StringIO(rendered.service), dest=unit_path, mode=644, user="root",
              group="root")
    files.put(name=f"{timer_path}", src=StringIO(rendered.timer), dest=timer_path, mode=644, user="root",
              group="root")
    server.shell(name=f"Textfile directory {textfile_dir}; enable {service}-watch.timer",
                 # not `install -d`: it chmods through a symlink; the host program opens each component
                 # without following links and refuses one that is not root's alone (hostside/watch.py)
                 commands=[host_program("watch", "--service", service, "--textfile-dir", textfile_dir,
                                        "--prepare-textfile-dir"),
                           f"systemctl daemon-reload && systemctl enable {timer} && systemctl restart {timer}"])
