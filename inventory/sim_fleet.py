# A fleet of simulated CT129s on this machine (python -m testbed.simctl up --count N), each a systemd
# container reached over real SSH on loopback with its own SSH and GPU-server ports. Their GPU servers are
# sglang_deploy.sim, not SGLang. Groups: `canary` (the first host) and `fleet` (all of them); rollout.py
# deploys and gates the canary first, then the rest of the fleet in batches.
import json
import os
from pathlib import Path

state_dir = Path(os.environ.get("SGLANG_DEPLOY_SIMFLEET_DIR", Path(__file__).resolve().parent.parent / ".simfleet"))
# The simulated host's API key file lives in its state directory: name that directory as one host data may use
# (api_key_file is accepted only under secrets/ or $SGLANG_DEPLOY_DATA_DIRS).
os.environ["SGLANG_DEPLOY_DATA_DIRS"] = ":".join(filter(None, (os.environ.get("SGLANG_DEPLOY_DATA_DIRS"), str(state_dir))))
try:
    info = json.loads((state_dir / "fleet.json").read_text())
except FileNotFoundError:
    raise SystemExit(f"the simulated fleet is not set up ({state_dir}/fleet.json missing): "
                     "run `python -m testbed.simctl up --count N` first") from None

fleet = [
    (entry["name"], {
        "ssh_hostname": entry["ssh_host"],
        "ssh_port": entry["ssh_port"],
        "ssh_user": entry["ssh_user"],
        "ssh_key": entry["ssh_key"],
        "ssh_known_hosts_file": entry["known_hosts"],
        "ssh_strict_host_key_checking": "accept-new",
        "simulated": True,
        "gpus": 2,
        "gpu_topology": "pcie",
        "api_key_file": entry["api_key_file"],
        "port": entry["service_port"],
        # N servers on one machine: the model-only simulator by default (SGLang's own front end takes 4 GB each);
        # --data sim_server=sglang runs the real one on every host.
        "sim_server": "model",
        # ... and the preflight without its SGLang-stack steps (its resolution and torch import: about 10 s of CPU
        # per host and command line, the same SGLang install the controller's check resolved with moments before);
        # --data preflight_stack=true runs them.
        "preflight_stack": False,
    })
    for entry in info["hosts"]
]
canary = [host for host in fleet if host[0] in info["groups"]["canary"]]
# The host that runs SGLang's router in front of the fleet (router.py).
router = [fleet[0]]
# A server spanning two hosts (a profile with `nodes: 2`): the hosts in rank order, the first is rank 0.
nodes = fleet[:2]
