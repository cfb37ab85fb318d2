"""Simulated hosts only: put the SGLang simulator where the real SGLang would be installed.

The unit then runs `<venv>/bin/sglang serve ...` exactly as on a GPU host; that executable is
sglang_deploy.sim (it says so in its logs and in /server_info). The simulator travels as one archive,
uploaded only when its hash differs from the one the host recorded. A profile without managed weights
(model.path) gets the synthetic checkpoint (sim/synthetic_checkpoint.py: real safetensors headers with
Qwen3.6-27B FP8's tensors, no data, and a stub config.json) through the weights path: made on the
controller, pushed over SSH, verified against its manifest before the switch (roles/weights.py).
"""

import hashlib
import json
import os
import tempfile
from io import BytesIO
from pathlib import Path

from pyinfra.api import deploy
from pyinfra.operations import files, server

from sglang_deploy import shipment
from sglang_deploy.hostside.weights import manifest_hash
from sglang_deploy.layout import venv_path
from sglang_deploy.profile import Profile
from sglang_deploy.sim import synthetic_checkpoint
from sglang_deploy.validator_env import CACHE_DIR
from sglang_deploy.weights import Source, Weights, manifest_from_directory, write_manifest

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
    members = shipment.tree(SIM_PACKAGE, f"{lib.lstrip('/')}/sglang_sim")
    # The simulator parses its command line with SGLang's exported option table (sglang_deploy.flag_table).
    members += [(f"{lib.lstrip('/')}/sglang_deploy/{name}", (PACKAGE / name).read_bytes(), 0o644)
                for name in ("__init__.py", "flag_table.py")]
    members += shipment.tree(PACKAGE / "flag-tables", f"{lib.lstrip('/')}/sglang_deploy/flag-tables")
    members += [(f"{venv.lstrip('/')}/bin/sglang", SHIM.format(lib=lib).encode(), 0o755)]
    return shipment.build("simulator", "/", f"{venv}/.manifest-simulator", members)


def synthetic_weights(profile: Profile) -> Weights:
    """The synthetic checkpoint for a profile without managed weights, made once on the controller (cached by the
    generator's content and the architecture), with its manifest; served at the profile's model.path."""
    architecture = profile.model.architecture or "Qwen3_5ForConditionalGeneration"
    digest = hashlib.sha256(Path(synthetic_checkpoint.__file__).read_bytes() + architecture.encode()).hexdigest()[:16]
    directory = CACHE_DIR / "synthetic" / f"qwen3.6-27b-fp8-{digest}"
    manifest_file = directory.with_suffix(".manifest.json")
    if not manifest_file.exists():
        directory.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=directory.parent))
        synthetic_checkpoint.write(str(scratch), header_only=True, architecture=architecture)
        try:
            os.rename(scratch, directory)
        except OSError:  # another worker made it first
            import shutil
            shutil.rmtree(scratch, ignore_errors=True)
        manifest = manifest_from_directory(directory, f"file://{directory}")
        tmp = manifest_file.with_suffix(f".tmp-{os.getpid()}")
        write_manifest(manifest, tmp)
        os.replace(tmp, manifest_file)
    manifest = json.loads(manifest_file.read_text())
    return Weights(Source("dir", None, None, str(directory)), manifest_file, manifest, manifest_hash(manifest),
                   profile.model.path, None)


@deploy("SGLang simulator (simulated host)")
def install(profile: Profile, installed_digest: str | None):
    """Returns the operations that changed the server program (a restart follows when they did)."""
    if profile.sglang.launcher != "serve":
        raise ValueError("the simulator implements the 'serve' launcher only; set sglang.launcher: serve")
    ship = simulator_shipment(profile)
    ops = []
    if installed_digest != ship.digest:
        ops.append(files.put(name=f"Simulator archive (package, `sglang` shim; {ship.digest[:12]})",
                             src=BytesIO(ship.data), dest=ship.upload_path, mode=600, create_remote_dir=True))
        ops.append(server.shell(name="Unpack the simulator", commands=[shipment.unpack_command(ship)]))
    return ops
