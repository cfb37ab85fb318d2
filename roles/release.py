"""Releases on the host: stage a release directory, switch the service to it, prune old ones.

The switch itself runs on the host (hostside/releases.py, under a lock, immune to a dropped SSH
connection); this role stages files, starts the switch and reports its outcome.
"""

import json
import shlex
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import OperationError
from pyinfra.operations import files, python, server

from roles.ops import managed_file, preview_diff
from sglang_deploy.layout import TOOL_BIN, ServiceLayout
from sglang_deploy.releases import controller_identity, release_dir

HOSTSIDE = Path(__file__).resolve().parent.parent / "sglang_deploy" / "hostside"
HOST_PROGRAMS = ("releases.py", "bench.py")


@deploy("Release: host programs")
def install_programs():
    for program in HOST_PROGRAMS:
        files.put(name=f"{TOOL_BIN}/{program}", src=str(HOSTSIDE / program), dest=f"{TOOL_BIN}/{program}",
                  mode=755, create_remote_dir=True)


@deploy("Release: stage")
def stage(service: str, release_id: str, unit: str, env: str, profile_json: str, meta: dict):
    """Write releases/<id>/; meta.json goes last, so a directory without it is never used."""
    directory = release_dir(service, release_id)
    files.directory(name=f"Release directory {release_id}", path=directory, mode=755)
    managed_file(name=f"{release_id}/sglang.service", dest=f"{directory}/sglang.service", content=unit, mode=644,
                 diff=False)
    managed_file(name=f"{release_id}/sglang.env (0600)", dest=f"{directory}/sglang.env", content=env, mode=600,
                 diff=False)
    managed_file(name=f"{release_id}/profile.json", dest=f"{directory}/profile.json", content=profile_json, mode=644,
                 diff=False)
    managed_file(name=f"{release_id}/meta.json", dest=f"{directory}/meta.json",
                 content=json.dumps(meta, indent=1) + "\n", mode=644, diff=False)


def show_changes(service: str, unit: str, env: str):
    """With --diff: what the switch will change in the installed unit and environment (secrets masked)."""
    layout = ServiceLayout(service)
    preview_diff(name="Diff: unit", dest=layout.unit_path, content=unit)
    preview_diff(name="Diff: environment", dest=layout.env_path, content=env)


def _switch(service, release_id, probe_url, timeout, reason, auto_rollback, mark_good, max_auto_rollbacks, force):
    command = [
        "python3", f"{TOOL_BIN}/releases.py", "switch", "--service", service, "--release", release_id,
        "--probe-url", probe_url, "--timeout", str(timeout), "--reason", reason,
        "--owner", f"{controller_identity()} ({reason})",
        "--max-auto-rollbacks", str(max_auto_rollbacks),
    ]
    command += ["--auto-rollback"] * auto_rollback + ["--mark-good-on-ready"] * mark_good + ["--force"] * force
    ok, output = host.run_shell_command(" ".join(shlex.quote(c) for c in command))
    try:
        result = json.loads(output.stdout)
    except ValueError:
        raise OperationError(f"switch to {release_id} gave no result:\n{output.stderr}") from None
    host.data.switch_result = result
    if result.get("ok"):
        ready = result["readiness"]
        host.log(f"release {release_id} is active and ready ({ready['stage']} after {ready['elapsed_s']} s)",
                 logger.info)
        return
    raise OperationError(describe_failure(result))


def describe_failure(result: dict) -> str:
    if result.get("locked") or "readiness" not in result:
        return result.get("error", "switch failed")
    ready = result["readiness"]
    lines = [f"release {result['release']} FAILED at stage '{ready['stage']}': {ready.get('detail')} "
             f"(after {ready['elapsed_s']} s)"]
    if ready.get("journal"):
        lines += ["last journal lines of the failed start:", *("  " + l for l in ready["journal"].splitlines())]
    target = result.get("rolled_back_to")
    if target:
        back = result.get("rollback_readiness", {})
        lines.append(f"automatic rollback to {target}: " + ("healthy again" if back.get("ready")
                                                               else f"ALSO FAILED ({back.get('detail')})"))
    else:
        lines.append("no good release to roll back to: the service is left as it is")
    return "\n".join(lines)


@deploy("Release: switch")
def switch(service: str, release_id: str, probe_url: str, timeout: int, reason: str, auto_rollback: bool = True,
           mark_good: bool = True, max_auto_rollbacks: int = 3, force: bool = False):
    python.call(name=f"Switch {service} to release {release_id} ({reason})", function=_switch,
                service=service, release_id=release_id, probe_url=probe_url, timeout=timeout, reason=reason,
                auto_rollback=auto_rollback, mark_good=mark_good, max_auto_rollbacks=max_auto_rollbacks, force=force)


@deploy("Release: prune")
def prune(service: str, keep: int):
    server.shell(name=f"Keep the last {keep} releases (and the active and last good one)",
                 commands=[f"python3 {TOOL_BIN}/releases.py prune --service {service} --keep {keep} --prune-venvs"])
