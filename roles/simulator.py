"""Simulated hosts only: put the simulated host's SGLang where the real SGLang would be installed.

The unit then runs `<venv>/bin/sglang serve ...` exactly as on a GPU host (byte-identical ExecStart). Behind that
executable, by host data `sim_server`:
- `sglang` (the default): the profile's SGLang release's own `sglang serve` from the simulated host's SGLang install (mounted by
  testbed/simhost.py: the validator environment with its front-end layer, testbed/sglang_env.py), with its
  Scheduler class replaced by sglang_sim.sglang_scheduler through SGLang's plugin hook (an entry point beside it);
- `model`: the model-only simulator (sglang_sim.server: SGLang's option table and HTTP API rebuilt, the same
  hardware model; 3 s to start instead of ~25, 0.1 GB instead of ~4), for tests that restart servers often.
Both say they are simulated (the journal, /server_info). The files travel as one archive, uploaded only when its
hash differs from the one the host recorded. A profile without managed weights (model.path) gets the synthetic
checkpoint (sim/synthetic_checkpoint.py: real safetensors headers with Qwen3.6-27B FP8's tensors, no data, the
profile's config.json and a tokenizer) through the weights path: made on the controller, pushed over SSH,
verified against its manifest before the switch (roles/weights.py).
"""

import functools
import hashlib
import json
import os
import shutil
import tempfile
from io import BytesIO
from pathlib import Path

from pyinfra.api import deploy
from pyinfra.operations import files, server

from sglang_deploy import releases, shipment
from sglang_deploy.hostside.weights.manifest import manifest_hash
from sglang_deploy.layout import venv_path
from sglang_deploy.profile import Profile
from sglang_deploy.validate.resolution import load_model_config
from sglang_deploy.sim import synthetic_checkpoint
from sglang_deploy.validate.validator_env import CACHE_DIR
from sglang_deploy.weights import Source, Weights, manifest_from_directory, write_manifest

PACKAGE = Path(__file__).resolve().parent.parent / "sglang_deploy"
SIM_PACKAGE = PACKAGE / "sim"
# The files of sglang_deploy the simulator imports, shipped beside it (each imports only these and releases/__init__).
SIM_SHIPS = ("__init__.py", "validate/__init__.py", "validate/gpu_facts.py", "validate/flag_table.py",
             "validate/start_feasibility.py", "token_map/__init__.py", "token_map/size.py")
SHIM = """#!/usr/bin/python3
# SIMULATED SGLang: sglang-deploy's model-only stand-in for the GPU server (sglang_deploy.sim), not the real sglang.
# It serves SGLang {version}'s option table and reports that release in /server_info (the profile's sglang.version).
import os
import sys
os.environ["SGLANG_SIM_SGLANG_VERSION"] = "{version}"
sys.path.insert(0, "{lib}")
from sglang_sim.server import main
sys.exit(main(sys.argv[1:]))
"""
# The simulated host's python3, in a virtualenv that adds its SGLang install (testbed/simhost.py mounts it).
SGLANG_PYTHON = "/opt/sglang-sim/python/bin/python"
SGLANG_SHIM = """#!{python}
# SIMULATED HOST: SGLang {version}'s own `sglang serve` (the simulated host's SGLang install); only its Scheduler
# class is replaced, by sglang_sim.sglang_scheduler (an sglang.srt.plugins entry point in {lib}).
import sys
sys.path.insert(0, "{lib}")
from sglang.cli.main import main
if __name__ == "__main__":
    sys.exit(main())
"""
PLUGIN_DIST = "sglang_sim_scheduler-0.dist-info"
PLUGIN_FILES = {
    "METADATA": "Metadata-Version: 2.1\nName: sglang-sim-scheduler\nVersion: 0\n",
    "entry_points.txt": "[sglang.srt.plugins]\nsimulated_scheduler = sglang_sim.sglang_scheduler:register\n",
}
SIM_SERVERS = ("sglang", "model")


class SimServerError(ValueError):
    """A profile the chosen simulated server cannot serve: the message names the field and what to run instead."""


def check_server(profile: Profile, server: str) -> None:
    """`sglang` runs the simulated host's one SGLang install (the newest reviewed release); any other release the
    tool has data for is served by the model-only simulator, labelled (docs/sglang-releases.md: fitting another
    release's own front end onto the simulated host is not done)."""
    if server not in SIM_SERVERS:
        raise SimServerError(f"sim_server: {server!r}; accepted: {', '.join(SIM_SERVERS)}")
    host_release = releases.newest_reviewed()
    if server == "sglang" and profile.sglang.version != host_release:
        raise SimServerError(
            f"sglang.version {profile.sglang.version}: the simulated host's SGLang install (sim_server=sglang) is "
            f"SGLang {host_release} only; serve SGLang {profile.sglang.version} with the model-only simulator "
            "(--data sim_server=model), whose option table and /server_info are that release's")


def banner(profile: Profile, sim_server: str) -> str:
    """Every deploy to the simulated host says what stands in for the GPU server."""
    server = (f"the GPU server is SGLang {profile.sglang.version}'s own front end with a modelled Scheduler (a "
              "hardware model of 2x RTX A6000)" if sim_server == "sglang" else
              "the GPU server is the model-only simulator sglang_deploy.sim (a hardware model of 2x RTX A6000) with "
              f"SGLang {profile.sglang.version}'s option table, MODEL-ONLY: not SGLang's front end")
    return f"SIMULATED HOST: {server}; systemd, SSH and HTTP are real."


def simulator_shipment(profile: Profile, server: str = "sglang") -> shipment.Shipment:
    """The simulator's archive for the profile's release venv: its package, the release data and the shim."""
    check_server(profile, server)
    return _simulator_shipment(venv_path(profile), profile.sglang.version, server)


@functools.cache
def _simulator_shipment(venv: str, version: str, server: str) -> shipment.Shipment:
    """Built once per process (a deploy needs it three times: the facts' manifest, the install's digest and data;
    about 10 ms each, a 0.7 MB archive, measured 2026-12-06)."""
    lib = f"{venv}/lib/sglang-sim"
    members = shipment.tree(SIM_PACKAGE, f"{lib.lstrip('/')}/sglang_sim")
    # The simulator parses its command line with SGLang's exported option table (validate/flag_table.py), judges a
    # backend x KV x draft combination at start with the release's start-feasibility data, and reads a token map's
    # size without torch (token_map/size.py). Both package files import nothing.
    members += [(f"{lib.lstrip('/')}/sglang_deploy/{name}", (PACKAGE / name).read_bytes(), 0o644)
                for name in SIM_SHIPS]
    # The release folders' data and their loader (the model-only simulator serves the profile's release).
    members += [member for member in shipment.tree(PACKAGE / "releases", f"{lib.lstrip('/')}/sglang_deploy/releases")
                if not member[0].endswith(".py") or member[0].endswith("/releases/__init__.py")]
    if server == "sglang":
        shim = SGLANG_SHIM.format(python=SGLANG_PYTHON, version=version, lib=lib)
        members += [(f"{lib.lstrip('/')}/{PLUGIN_DIST}/{name}", text.encode(), 0o644)
                    for name, text in PLUGIN_FILES.items()]
    else:
        shim = SHIM.format(lib=lib, version=version)
    members += [(f"{venv.lstrip('/')}/bin/sglang", shim.encode(), 0o755)]
    return shipment.build("simulator", "/", f"{venv}/.manifest-simulator", members)


def synthetic_weights(profile: Profile) -> Weights:
    """The synthetic checkpoint for a profile without managed weights, made once on the controller (cached by the
    generator's content and the profile's config.json), with its manifest; served at the profile's model.path."""
    architecture = profile.model.architecture or "Qwen3_5ForConditionalGeneration"
    config = load_model_config(profile.model.config) if profile.model.config else None
    digest = hashlib.sha256(Path(synthetic_checkpoint.__file__).read_bytes() + architecture.encode()
                            + json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    directory = CACHE_DIR / "synthetic" / f"qwen3.6-27b-fp8-{digest}"
    manifest_file = directory.parent / f"{directory.name}.manifest.json"  # (with_suffix would cut at "3.6")
    if not manifest_file.exists():
        directory.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=directory.parent))
        synthetic_checkpoint.write(str(scratch), header_only=True, architecture=architecture, config=config)
        try:
            os.rename(scratch, directory)
        except OSError:  # another worker made it first
            shutil.rmtree(scratch, ignore_errors=True)
        manifest = manifest_from_directory(directory, f"file://{directory}")
        tmp = manifest_file.with_suffix(f".tmp-{os.getpid()}")
        write_manifest(manifest, tmp)
        os.replace(tmp, manifest_file)
    manifest = json.loads(manifest_file.read_text())
    return Weights(Source("dir", None, None, str(directory)), manifest_file, manifest, manifest_hash(manifest),
                   profile.model.path)


@deploy("SGLang simulator (simulated host)")
def install(profile: Profile, installed_digest: str | None, sim_server: str = "sglang"):
    """Returns the operations that changed the server program (a restart follows when they did)."""
    if profile.sglang.launcher != "serve":
        raise ValueError("the simulator implements the 'serve' launcher only; set sglang.launcher: serve")
    ship = simulator_shipment(profile, sim_server)
    ops = []
    if installed_digest != ship.digest:
        ops.append(files.put(name=f"Simulator archive (package, `sglang` shim; {ship.digest[:12]})",
                             src=BytesIO(ship.data), dest=ship.upload_path, mode=600, create_remote_dir=True))
        ops.append(server.shell(name="Unpack the simulator", commands=[shipment.unpack_command(ship)]))
    return ops
