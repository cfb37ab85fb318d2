"""Simulated hosts only: put the SGLang simulator where the real SGLang would be installed.

The unit then runs `<venv>/bin/sglang serve ...` exactly as on a GPU host; that executable is
sglang_deploy.sim (it says so in its logs and in /server_info). A stub checkpoint directory with a
config.json stands in for the model weights. Everything travels as one archive, uploaded only when
its hash differs from the one the host recorded.
"""

import json
import shlex
from io import BytesIO
from pathlib import Path

from pyinfra.api import deploy
from pyinfra.operations import files, server

from sglang_deploy import shipment
from sglang_deploy.layout import venv_path
from sglang_deploy.profile import Profile

PACKAGE = Path(__file__).resolve().parent.parent / "sglang_deploy"
SIM_PACKAGE = PACKAGE / "sim"
SHIM = """#!/usr/bin/python3
# SIMULATED SGLang: sglang-deploy's stand-in for the GPU server (sglang_deploy.sim), not the real sglang.
import sys
sys.path.insert(0, "{lib}")
from sglang_sim.server import main
sys.exit(main(sys.argv[1:]))
"""


def simulator_shipment(profile: Profile) -> shipment.Shipment:
    venv = venv_path(profile)
    lib = f"{venv}/lib/sglang-sim"
    stub = json.dumps({"architectures": [profile.model.architecture or "Qwen3_5ForConditionalGeneration"],
                       "simulated": True, "note": "stub checkpoint for the SGLang simulator"}, indent=2) + "\n"
    members = shipment.tree(SIM_PACKAGE, f"{lib.lstrip('/')}/sglang_sim")
    # The simulator parses its command line with SGLang's exported option table (sglang_deploy.flag_table).
    members += [(f"{lib.lstrip('/')}/sglang_deploy/{name}", (PACKAGE / name).read_bytes(), 0o644)
                for name in ("__init__.py", "flag_table.py")]
    members += shipment.tree(PACKAGE / "flag-tables", f"{lib.lstrip('/')}/sglang_deploy/flag-tables")
    members += [(f"{venv.lstrip('/')}/bin/sglang", SHIM.format(lib=lib).encode(), 0o755),
                (f"{profile.model.path.strip('/')}/config.json", stub.encode(), 0o644)]
    return shipment.build("simulator", "/", f"{venv}/.manifest-simulator", members)


def checkpoint_marker(profile: Profile) -> str:
    return f"{profile.model.path}/model.safetensors.index.json"


@deploy("SGLang simulator (simulated host)")
def install(profile: Profile, installed_digest: str | None, checkpoint_present: bool):
    """Returns the operations that changed the server program (a restart follows when they did)."""
    if profile.sglang.launcher != "serve":
        raise ValueError("the simulator implements the 'serve' launcher only; set sglang.launcher: serve")
    ship = simulator_shipment(profile)
    ops = []
    if installed_digest != ship.digest:
        ops.append(files.put(name=f"Simulator archive (package, `sglang` shim, stub config.json; {ship.digest[:12]})",
                             src=BytesIO(ship.data), dest=ship.upload_path, mode=600, create_remote_dir=True))
        ops.append(server.shell(name="Unpack the simulator", commands=[shipment.unpack_command(ship)]))
    if not checkpoint_present:
        server.shell(name="Synthetic checkpoint headers (sparse files, Qwen3.6-27B FP8 byte counts)",
                     commands=[shlex.join(["python3", f"{venv_path(profile)}/lib/sglang-sim/sglang_sim/synthetic_checkpoint.py",
                                           profile.model.path])])
    return ops
