# CT129: Proxmox LXC container with 2x RTX A6000 on PCIe (no NVLink bridge), TP 2.
# The SSH address comes from ~/.ssh/config (Host ct129), so a ProxyJump through the Proxmox host works.
#
# Host keys: strict. CT129's key must already be in inventory/known_hosts, checked out of band, e.g. on
# the Proxmox host: `pct exec 129 -- ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`, then
# `ssh-keyscan -t ed25519 ct129 >> inventory/known_hosts` and compare the fingerprints. An unknown or
# changed key stops the run (pyinfra's default, accept-new, would trust whatever answers first and
# overrides StrictHostKeyChecking in ~/.ssh/config).
#
# Deploy user: root by default; SGLANG_DEPLOY_CT129_USER=deploy logs in as a user with passwordless sudo
# (every operation and fact then runs through sudo), so the host can set PermitRootLogin no.
import os
from pathlib import Path

deploy_user = os.environ.get("SGLANG_DEPLOY_CT129_USER", "root")

ct129 = [
    ("ct129", {
        "ssh_user": deploy_user,
        **({"_sudo": True} if deploy_user != "root" else {}),
        "ssh_known_hosts_file": str(Path(__file__).resolve().parent / "known_hosts"),
        "ssh_strict_host_key_checking": "yes",
        "ssh_forward_agent": False,
        "profile": "profiles/qwen3.6-27b-mtp-2xa6000.yaml",
        "gpus": 2,
        "gpu_topology": "pcie",
        "api_key_file": "secrets/ct129.api_key",
    }),
]
