# The simulated CT129: a systemd container on this machine (python -m testbed.simctl up),
# reached over real SSH on loopback. Its GPU server is sglang_deploy.sim, not SGLang.
import json
import os
from pathlib import Path

state_dir = Path(os.environ.get("SGLANG_DEPLOY_SIMHOST_DIR", Path(__file__).resolve().parent.parent / ".simhost"))
# The simulated host's API key file lives in its state directory: name that directory as one host data may use
# (api_key_file is accepted only under secrets/ or $SGLANG_DEPLOY_DATA_DIRS).
os.environ["SGLANG_DEPLOY_DATA_DIRS"] = ":".join(filter(None, (os.environ.get("SGLANG_DEPLOY_DATA_DIRS"), str(state_dir))))
try:
    info = json.loads((state_dir / "info.json").read_text())
except FileNotFoundError:
    raise SystemExit(f"the simulated host is not set up ({state_dir}/info.json missing): "
                     "run `python -m testbed.simctl up` first") from None

sim = [
    ("ct129-sim", {
        "ssh_hostname": info["ssh_host"],
        "ssh_port": info["ssh_port"],
        "ssh_user": info["ssh_user"],
        "ssh_key": info["ssh_key"],
        "ssh_known_hosts_file": info["known_hosts"],
        "ssh_strict_host_key_checking": "accept-new",
        "simulated": True,
        "gpus": 2,
        "gpu_topology": "pcie",
        "api_key_file": str(state_dir / "api_key"),
        **({"port": int(os.environ["SGLANG_DEPLOY_SIM_PORT"])} if os.environ.get("SGLANG_DEPLOY_SIM_PORT") else {}),
    }),
]
