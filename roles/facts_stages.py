"""facts.py's stages, in the order it runs them: collect -> judge -> report -> save. They only read the host.

The judgements are sglang_deploy's (hostfacts, container): the driver against the CUDA the profiles need, the GPU
count and topology a profile is checked against, and the warnings; the report is the facts as JSON, and for a
container what it is and the Proxmox CT configuration it needs.
"""

from __future__ import annotations

import json

from pyinfra import host, logger

from roles.facts import GpuHost, VenvTorch
from roles.settings import host_settings, of
from sglang_deploy.container import container_summary, proxmox_config, proxmox_notes
from sglang_deploy.results import RESULTS_DIR
from sglang_deploy.hostfacts import detected_hardware, driver_verdict, nccl_differs, uvm_warning
from sglang_deploy.settings import FactsArgs


def collect() -> dict:
    """The GpuHost fact, and the torch of a release venv (facts.py's `python`, run as `user`)."""
    facts = host.get_fact(GpuHost)
    python = of(FactsArgs).python  # a release venv's runs as the service user (layout.python_argv)
    facts["venv_torch"] = host.get_fact(VenvTorch, python=python, user=of(FactsArgs).user)
    return facts


def judge(facts: dict) -> None:
    """Adds the driver's verdict, what validation uses, and the NCCL and UVM warnings (the UVM one logged)."""
    facts["driver"] = driver_verdict(facts["gpus"], facts["kernel_driver"], facts["container"],
                                     cuda_major=host_settings().cuda_major, libcuda=facts["libcuda"])
    facts["validation_uses"] = detected_hardware(facts)  # GPU count and topology deploy.py checks the profile against
    torch_nccl = (facts["venv_torch"] or {}).get("nccl")
    if nccl_differs(facts["system_nccl"], torch_nccl):
        facts["nccl_warning"] = (f"system libnccl2 {facts['system_nccl']} differs from the NCCL torch loads "
                                 f"({torch_nccl})")
    if uvm_warning(facts):
        facts["uvm_warning"] = uvm_warning(facts)
        logger.warning(f"[{host.name}] {facts['uvm_warning']}")


def report(facts: dict) -> None:
    """The facts as JSON; for a container (or an unprivileged LXC), its summary and the Proxmox CT configuration it
    needs, which is also added to the facts."""
    logger.info(f"[{host.name}] host facts:\n" + json.dumps(facts, indent=1))
    if facts["container"] != "none" or (facts.get("lxc") or {}).get("unprivileged"):
        logger.info(f"[{host.name}] container ({facts['container']}):\n    "
                    + "\n    ".join(container_summary(facts)))
        facts["proxmox_config"] = proxmox_config(facts, host_settings().container_id, host_settings().gpus)
        logger.info(f"[{host.name}] the Proxmox CT configuration this host needs:\n"
                    + proxmox_notes(facts, host_settings().container_id, host_settings().gpus)
                    + "\ncommands for the Proxmox host's shell:\n" + facts["proxmox_config"])


def save(facts: dict) -> None:
    """results/<host>/facts.json on the controller (`sglang-deploy check PROFILE --facts` reads it)."""
    saved = RESULTS_DIR / host.name / "facts.json"
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(facts, indent=1) + "\n")
    logger.info(f"[{host.name}] saved {saved}")
