"""Simulated hosts only: put the SGLang simulator where the real SGLang would be installed.

The unit then runs `<venv>/bin/sglang serve ...` exactly as on a GPU host; that executable is
sglang_deploy.sim (it says so in its logs and in /server_info). A stub checkpoint directory with a
config.json stands in for the model weights.
"""

import json
import shlex
from io import StringIO
from pathlib import Path

from pyinfra.api import deploy
from pyinfra import host
from pyinfra.facts.files import File
from pyinfra.operations import files, server

from sglang_deploy.layout import venv_path
from sglang_deploy.profile import Profile

SIM_PACKAGE = Path(__file__).resolve().parent.parent / "sglang_deploy" / "sim"
SHIM = """#!/usr/bin/python3
# SIMULATED SGLang: sglang-deploy's stand-in for the GPU server (sglang_deploy.sim), not the real sglang.
import sys
sys.path.insert(0, "{lib}")
from sglang_sim.server import main
sys.exit(main(sys.argv[1:]))
"""


@deploy("SGLang simulator (simulated host)")
def install(profile: Profile):
    if profile.sglang.launcher != "serve":
        raise ValueError("the simulator implements the 'serve' launcher only; set sglang.launcher: serve")
    venv = venv_path(profile)
    checkpoint_present = bool(host.get_fact(File, path=f"{profile.model.path}/model.safetensors.index.json"))
    lib = f"{venv}/lib/sglang-sim"
    package = files.sync(name="Simulator package", src=str(SIM_PACKAGE), dest=f"{lib}/sglang_sim",
                         exclude=["*.pyc", "__pycache__"], delete=True)
    shim = files.put(name="Simulated `sglang` executable", src=StringIO(SHIM.format(lib=lib)),
                     dest=f"{venv}/bin/sglang", mode=755, create_remote_dir=True)
    files.put(name="Stub checkpoint (config.json only)", dest=f"{profile.model.path}/config.json",
              src=StringIO(json.dumps({"architectures": ["Qwen3_5ForConditionalGeneration"], "simulated": True,
                                       "note": "stub checkpoint for the SGLang simulator"}, indent=2) + "\n"),
              mode=644, create_remote_dir=True)
    if not checkpoint_present:
        server.shell(name="Synthetic checkpoint headers (sparse files, Qwen3.6-27B FP8 byte counts)",
                     commands=[shlex.join(["python3", f"{lib}/sglang_sim/checkpoint.py", profile.model.path])])
    return [package, shim]

