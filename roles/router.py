"""SGLang's router on a host: its venv from a controller-side wheelhouse, the credential, the hardened unit.

Installed or restarted only when something differs from what the host has (the wheelhouse archive's hash,
the unit, the key); then the router must report every worker healthy (hostside/router_check.py).
"""

import shlex
from functools import lru_cache
from io import BytesIO, StringIO
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import OperationError
from pyinfra.operations import files, server, systemd

from roles.ops import managed_file
from roles.settings import sudo
from sglang_deploy import shipment
from sglang_deploy.gate import gate_settings
from sglang_deploy.hostside.contract.gate import Measurement
from sglang_deploy.results import save_result
from sglang_deploy.hostside.contract.document import DocumentError
from sglang_deploy.layout import HOSTSIDE, host_program
from sglang_deploy.router import (ROUTER_CONFIG_DIR, ROUTER_KEY_PATH, ROUTER_LIB, ROUTER_SERVICE, ROUTER_UNIT_PATH,
                                  ROUTER_VENV, ROUTER_VERSION, gate_verdict)

PROGRAMS = ("router_launch.py", "router_check.py")


@lru_cache(maxsize=4)
def router_shipment(wheel_dir: str) -> shipment.Shipment:
    members = [(f"wheels/{p.name}", p.read_bytes(), 0o644) for p in sorted(Path(wheel_dir).glob("*.whl"))]
    members += [(name, (HOSTSIDE / name).read_bytes(), 0o755) for name in PROGRAMS]
    return shipment.build("router", ROUTER_LIB, f"{ROUTER_LIB}/.manifest", members)


@deploy("SGLang router")
def install(ship: shipment.Shipment, installed_digest: str, unit: str, api_key: str, check_url: str,
            workers: list):
    changed = []
    if installed_digest != ship.digest:
        changed.append(files.put(name=f"Router archive (sglang-router {ROUTER_VERSION} wheels, launcher; "
                                      f"{ship.digest[:12]})",
                                 src=BytesIO(ship.data), dest=ship.upload_path, mode=600,
                                 create_remote_dir=True))
        venv = shlex.quote(ROUTER_VENV)
        changed.append(server.shell(
            name=f"Router venv {ROUTER_VENV} (offline, from the wheelhouse)",
            commands=[shipment.unpack_command(ship),
                      f"rm -rf {venv} && python3 -m venv {venv} && {venv}/bin/pip install --quiet --no-index "
                      f"--disable-pip-version-check --find-links {shlex.quote(ROUTER_LIB)}/wheels "
                      f"sglang-router=={ROUTER_VERSION}"]))
    files.directory(name="Router config directory", path=ROUTER_CONFIG_DIR, user="root", group="root", mode=700)
    changed.append(managed_file(name=f"Workers' API key {ROUTER_KEY_PATH} (0600, masked)", dest=ROUTER_KEY_PATH,
                                content=api_key + "\n", mode=600, diff=False))
    changed.append(files.put(name=ROUTER_UNIT_PATH, src=StringIO(unit), dest=ROUTER_UNIT_PATH, mode=644,
                             user="root", group="root"))
    restart = any(op.will_change for op in changed)
    systemd.service(name=f"{ROUTER_SERVICE}.service enabled and running" + (" (restarted)" if restart else ""),
                    service=f"{ROUTER_SERVICE}.service", running=True, enabled=True, restarted=restart,
                    daemon_reload=restart)
    server.shell(name=f"Router ready with {len(workers)} healthy worker(s)",
                 commands=[shlex.join(["python3", f"{ROUTER_LIB}/router_check.py", "--url", check_url, "--key-file", ROUTER_KEY_PATH, "--timeout",
                                       "120", *[a for w in workers for a in ("--worker", w)]])])


def gate_through_router(check_url, workers, gate):
    """The gate's client through the router, on the router host; the verdict on the workers' floors."""
    command = host_program("bench", "--url", check_url, "--api-key-file", ROUTER_KEY_PATH,
                           "--samples", str(gate.samples), "--max-new-tokens", str(gate.max_new_tokens),
                           "--concurrency", str(gate.concurrency * len(workers)), "--aggregate-rounds", "1")
    ok, output = host.run_shell_command(command, _sudo=sudo())
    if not ok:
        raise OperationError(f"the gate's client could not run through the router:\n{output.stderr[-2000:]}")
    try:  # the bench's answer through its class: a field renamed on either side is named here
        measurement = Measurement.loads(output.stdout, Measurement.FILE)
    except DocumentError as error:
        raise OperationError(f"the gate's client through the router answered unreadably: {error}") from None
    verdict = gate_verdict(measurement, gate_settings(gate), len(workers))
    saved = save_result(host.name, {"release": "router", "router": check_url, "workers": workers,
                                    "gate": verdict, "measurement": measurement.to_dict()}, kind="router-gate")
    host.log(f"gate through the router over {len(workers)} workers: {verdict['verdict'].upper()}: decode "
             f"{verdict['decode_tok_s'] or 0:.1f} tok/s single stream, tau {verdict['accept_length'] or 0:.2f}, "
             f"aggregate {verdict['aggregate_tok_s'] or 0:.1f} tok/s at {gate.concurrency * len(workers)} streams "
             f"({verdict['aggregate_per_worker_tok_s'] or 0:.1f} per worker); saved to {saved}",
             logger.info if verdict["verdict"] == "pass" else logger.error)
    if verdict["verdict"] != "pass":
        raise OperationError("the fleet's gate through the router failed: " + "; ".join(verdict["reasons"]))
