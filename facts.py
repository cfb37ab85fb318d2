"""Print what a GPU host reports: GPUs, driver (kernel and user space), container, CUDA toolkit,
NCCL (system and the venv's torch), GPU topology and P2P, and whether the driver is adequate; for a
container, what it is (privileged, nesting, device nodes, /dev/shm, limits, compilers) and the Proxmox CT
configuration it needs (`features: nesting=1`, the devN: lines with their modes, the cgroup majors).

    pyinfra inventory/X.py facts.py [--data python=/opt/sglang-deploy/venvs/.../bin/python] [--data container_id=129]

Reads only; changes nothing on the host (the nesting and limits facts start two transient units that run
/bin/true and cat, collected when they exit). Saves results/<host>/facts.json on the controller, which
`sglang-deploy check PROFILE --facts results/<host>/facts.json` checks a profile against.
"""

import json
from pathlib import Path

from pyinfra import host, logger

from roles.facts import GpuHost, VenvTorch
from roles.settings import host_settings, of
from sglang_deploy.settings import FactsArgs
from sglang_deploy.container import container_summary, proxmox_config, proxmox_notes
from sglang_deploy.hostfacts import detected_hardware, driver_verdict, nccl_differs, uvm_warning

facts = host.get_fact(GpuHost)
python = of(FactsArgs).python  # a release venv's runs as the service user (layout.python_argv)
facts["venv_torch"] = host.get_fact(VenvTorch, python=python, user=of(FactsArgs).user)
facts["driver"] = driver_verdict(facts["gpus"], facts["kernel_driver"], facts["container"],
                                 cuda_major=host_settings().cuda_major, libcuda=facts["libcuda"])
facts["validation_uses"] = detected_hardware(facts)  # GPU count and topology deploy.py checks the profile against
torch_nccl = (facts["venv_torch"] or {}).get("nccl")
if nccl_differs(facts["system_nccl"], torch_nccl):
    facts["nccl_warning"] = f"system libnccl2 {facts['system_nccl']} differs from the NCCL torch loads ({torch_nccl})"
if uvm_warning(facts):
    facts["uvm_warning"] = uvm_warning(facts)
    logger.warning(f"[{host.name}] {facts['uvm_warning']}")
logger.info(f"[{host.name}] host facts:\n" + json.dumps(facts, indent=1))
if facts["container"] != "none" or (facts.get("lxc") or {}).get("unprivileged"):
    logger.info(f"[{host.name}] container ({facts['container']}):\n    " + "\n    ".join(container_summary(facts)))
    facts["proxmox_config"] = proxmox_config(facts, host_settings().container_id, host_settings().gpus)
    logger.info(f"[{host.name}] the Proxmox CT configuration this host needs:\n"
                + proxmox_notes(facts, host_settings().container_id, host_settings().gpus)
                + "\ncommands for the Proxmox host's shell:\n" + facts["proxmox_config"])
saved = Path(__file__).resolve().parent / "results" / host.name / "facts.json"
saved.parent.mkdir(parents=True, exist_ok=True)
saved.write_text(json.dumps(facts, indent=1) + "\n")
logger.info(f"[{host.name}] saved {saved}")
