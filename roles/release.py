"""Releases on the host: stage a release directory, switch the service to it, prune old ones.

The switch itself runs on the host (`python3 -m hostside.switch`, under the store's lock, immune to a
dropped SSH connection); this role ships the host package, stages files, starts the switch and reports
its outcome.
"""

import base64
import json
import shlex
from io import BytesIO

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import FileContents
from pyinfra.operations import files, python, server

from roles.ops import preview_diff
from roles.settings import sudo
from sglang_deploy import shipment
from sglang_deploy.hostside.lib.service import server_argv
from sglang_deploy.provision import PACKAGES_FILE as VENV_PACKAGES_FILE
from sglang_deploy.results import save_result
from sglang_deploy.hostside.contract.document import DocumentError
from sglang_deploy.hostside.contract.files import ReleaseFiles
from sglang_deploy.hostside.contract.release import PACKAGES_FILE, ReleaseMeta
from sglang_deploy.hostside.contract.switch import SwitchOutcome
from sglang_deploy.layout import HOST_LIB, HOST_PACKAGE, PREFLIGHT_DIR, ServicePaths, host_package, host_program
from sglang_deploy.release_plan import controller_identity, release_dir
from sglang_deploy.switch_options import SwitchOptions


@deploy("Release: host programs")
def install_programs(installed_digest: str | None = None):
    """Upload the host programs as one archive when its hash differs from the host's `.manifest`
    (installed_digest: what the deploy's DeployState fact read; None reads it here)."""
    ship = host_package()
    if installed_digest is None:
        installed_digest = "\n".join(host.get_fact(FileContents, path=ship.manifest) or []).strip()
    if installed_digest == ship.digest:
        return
    files.put(name=f"Host package archive ({ship.digest[:12]})",
              src=BytesIO(ship.data), dest=ship.upload_path, mode=600, create_remote_dir=True)
    # A new package replaces the old one whole (a module removed here must not linger there). Its bytecode is
    # written once here, so that neither the facts nor the host programs compile it in each run; a module the
    # host's python cannot compile fails where it runs, as before (the bytecode is only a cache).
    server.shell(name=f"Unpack the host package into {HOST_LIB}/{HOST_PACKAGE}",
                 commands=[shlex.join(["rm", "-rf", f"{HOST_LIB}/{HOST_PACKAGE}"]),
                           shipment.unpack_command(ship),
                           f"python3 -m compileall -q {shlex.quote(f'{HOST_LIB}/{HOST_PACKAGE}')} >/dev/null || true"])


@deploy("Release: stage")
def stage(service: str, release_id: str, release_files: ReleaseFiles):
    """Write releases/<id>/ (ReleaseFiles) from one archive: one upload and one command, instead of an upload and
    its checks per file (about 0.25 s each). meta.json is unpacked last, after the venv's packages.json, so a
    directory without it is never used; the archive waits 0600 in root's upload directory and the same command
    removes it.

    resolved.json is what SGLang resolves for the unit's command line (sglang_deploy.validate.resolution): the
    gate's expectations come from it, and a simulated host's server serves it as /server_info. roofline.json
    (sglang_deploy.roofline.release_inputs) is what the perf watch needs for decode / roofline."""
    directory = release_dir(service, release_id)
    members = release_files.members()
    upload = ServicePaths(service).release_upload(release_id)
    files.put(name=f"Release files {release_id} ({', '.join(name for name, _, _ in members)})",
              src=BytesIO(shipment.archive([(name, content.encode(), mode) for name, content, mode in members])),
              dest=upload, mode=600, create_remote_dir=True)
    unpack = ["tar", "-C", directory, "--no-same-owner", "--touch", "-xf", upload]  # --touch: now, not the archive's 0
    commands = [shlex.join(["install", "-d", "-m", "755", directory]),
                shlex.join([*unpack, "--exclude", ReleaseMeta.FILE])]
    if release_files.meta.venv:  # what the venv's install recorded, before meta.json
        source = shlex.quote(f"{release_files.meta.venv}/{VENV_PACKAGES_FILE}")
        dest = shlex.quote(f"{directory}/{PACKAGES_FILE}")
        commands.append(f"if [ -f {source} ]; then install -m 644 {source} {dest}; fi")
    commands += [shlex.join([*unpack, ReleaseMeta.FILE]), shlex.join(["rm", "-f", upload])]
    server.shell(name=f"Release directory {release_id}: unpacked, meta.json last", commands=[" && ".join(commands)])


def show_changes(service: str, unit: str, env: str):
    """With --diff: what the switch will change in the installed unit and environment (secrets masked)."""
    layout = ServicePaths(service)
    preview_diff(name="Diff: unit", dest=layout.unit_path, content=unit)
    preview_diff(name="Diff: environment", dest=layout.env_path, content=env)


def switch_command(options: SwitchOptions) -> str:
    return host_program("switch", *options.argv(controller_identity()))


def _report(service):
    """After a successful switch: print the outcome and the gate table, keep the document locally.

    (The host program's own summary is shown by pyinfra only when the switch fails.)
    """
    path = f"{ServicePaths(service).root}/{SwitchOutcome.FILE}"
    outcome, problem = None, f"{path} could not be read"
    for _ in range(3):  # one SSH round trip; a busy host may drop one
        ok, output = host.run_shell_command(shlex.join(["cat", path]), _sudo=sudo())
        try:
            outcome = SwitchOutcome.loads(output.stdout, path) if ok else None
        except DocumentError as error:
            problem = str(error)
        if outcome is not None:
            break
    else:
        host.log(f"the switch succeeded, but its report {problem}: see releases.py", logger.warning)
        return
    # deferred: 12 ms (hostside.lib.gate, client: urllib, http.client) on every deploy, only after a switch
    from sglang_deploy.hostside.lib.client import printable
    from sglang_deploy.hostside.lib.gate import table as gate_table

    saved = save_result(host.name, outcome.to_dict())
    if outcome.auth_change:
        host.log(printable(outcome.auth_change), logger.warning)
    if outcome.forensics:  # a rollback: what the service user wrote is kept there (hostside/lib/forensics.py)
        host.log(printable(f"what the service user wrote was moved aside for forensics: {outcome.forensics}"),
                 logger.warning)
    elapsed = outcome.readiness.elapsed_s if outcome.readiness else "?"
    host.log(printable(f"release {outcome.release} is active ({outcome.verdict or 'unverified'}); ready "
                       f"after {elapsed} s; result saved to {saved}"), logger.info)
    if outcome.gate:
        if outcome.gate.simulated:
            host.log("the gate measured a SIMULATED server (sglang_deploy.sim)", logger.warning)
        for line in gate_table(outcome.gate).splitlines():
            logger.info(f"    {line}")


@deploy("Release: switch")
def switch(options: SwitchOptions):
    server.shell(name=options.describe(), commands=[switch_command(options)])
    python.call(name="Report", function=_report, service=options.service)


@deploy("Release: prune")
def prune(service: str, keep: int):
    server.shell(name=f"Keep the last {keep} releases (and the active and last good one); drop weights snapshots "
                      "no retained release uses",
                 commands=[host_program("store", "prune", "--service", service, "--keep", str(keep), "--prune-venvs"),
                           host_program("weights", "prune")])


PREFLIGHT_FIELDS = ("tp_size", "speculative_algorithm", "speculative_num_steps", "speculative_num_draft_tokens",
                    "attention_backend", "page_size", "chunked_prefill_size")


def preflight_inputs(exec_start: list[str], resolved: dict | None) -> tuple[list[str], dict]:
    """(SGLang's argv after `serve`, the resolved fields the host's resolution is compared with)."""
    argv = server_argv(exec_start)
    argv = argv[argv.index("serve") + 1:] if "serve" in argv else argv[1:]
    expected = {key: (resolved or {}).get(key) for key in PREFLIGHT_FIELDS if key in (resolved or {})}
    return argv, expected


def preflight_command(service: str, release_id: str, python: str, gpus: int, variant_args=(),
                      container_id=None, resolve: bool = True, fresh: bool = False) -> str:
    """variant_args: the host variant's options (roles/target.py preflight_args: the simulated host's)."""
    directory = f"{PREFLIGHT_DIR}/{service}-{release_id}"
    args = ["--service", service, "--unit", f"{directory}/sglang.service", "--env", f"{directory}/sglang.env",
            "--python", python, "--gpus", str(gpus), "--json", ServicePaths(service).preflight_report(),
            "--expected", f"{directory}/expected.json"]
    args += ["--argv-json", f"{directory}/argv.json"] if resolve else []
    args += [*variant_args] + (["--container-id", str(container_id)] if container_id else [])
    args += ["--fresh"] * fresh  # a rollback: never an acceptance cached in the service user's directory
    return f"{host_program('preflight', *args)}; rc=$?; rm -rf {shlex.quote(directory)}; exit $rc"


def _preflight_report(service):
    """The passed preflight's warnings and steps (contract/probes.PreflightReport); a report that cannot be read as
    one is a DeployError naming the field (the preflight itself passed: its exit status decided)."""
    # deferred: 9 ms (contract.probes) on every deploy, only after a preflight
    from sglang_deploy.hostside.contract.probes import PreflightReport

    path = ServicePaths(service).preflight_report()
    ok, output = host.run_shell_command(shlex.join(["cat", path]), _sudo=sudo())
    if not ok:
        return
    try:
        document = PreflightReport.loads(output.stdout, path)
    except DocumentError as error:
        raise DeployError(f"{host.name}: the preflight passed, but its report cannot be read: {error}") from None
    for item in document.warnings():
        host.log(f"preflight {item.step}: {item.detail}" + (f" (fix: {item.fix})" if item.fix else ""),
                 logger.warning)
    host.log(f"preflight passed in {document.seconds} s: "
             + ", ".join(f"{f.step} {f.status}" for f in document.findings), logger.info)


@deploy("Release: preflight")
def preflight(service: str, release_id: str, unit: str, env: str, interpreter: str, gpus: int,
              variant_args: list[str], exec_start: list[str], resolved: dict | None, container_id=None,
              resolve: bool = True, fresh: bool = False):
    """Before the switch touches anything running: the release's server checks on the host, under the release's
    own unit properties (hostside/preflight/runner.py). A failure stops the deploy here, before the store changes."""
    directory = f"{PREFLIGHT_DIR}/{service}-{release_id}"
    argv, expected = preflight_inputs(exec_start, resolved)
    # One operation: the inputs (nothing secret: the key stays in the secrets file) written by the same command
    # that runs the preflight and removes them.
    inputs = [(name, content, mode) for name, content, mode in (
        ("sglang.service", unit, "644"), ("sglang.env", env, "600"), ("argv.json", json.dumps(argv), "644"),
        ("expected.json", json.dumps(expected), "644"))]
    write = [f"install -d -m 755 {shlex.quote(directory)}"]
    for name, content, mode in inputs:
        path = shlex.quote(f"{directory}/{name}")
        encoded = base64.b64encode(content.encode()).decode()
        write.append(f"(umask 077; echo {encoded} | base64 -d > {path}) && chmod {mode} {path}")
    server.shell(name=f"Preflight of release {release_id}: sandbox, devices, shm, toolchain, caches, "
                      + ("SGLang's resolution, " if resolve else "") + "torch, P2P/NCCL, Triton (as the service, "
                      "under its unit's sandbox)",
                 commands=[" && ".join(write) + " && { " + preflight_command(service, release_id, interpreter, gpus,
                                                                             variant_args, container_id, resolve,
                                                                             fresh) + "; }"])
    python.call(name="Preflight report", function=_preflight_report, service=service)


def preflight_gpus(resolved: dict | None, nnodes: int = 1) -> int:
    resolved = resolved or {}
    return max(1, int(resolved.get("tp_size") or 1) * int(resolved.get("pp_size") or 1) // max(1, nnodes))
