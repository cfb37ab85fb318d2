# CT129: Proxmox LXC container with 2x RTX A6000 on PCIe (no NVLink bridge), TP 2.
# The SSH address comes from ~/.ssh/config (Host ct129), so a ProxyJump through the Proxmox host works.
ct129 = [
    ("ct129", {
        "ssh_user": "root",
        "profile": "profiles/qwen3.6-27b-mtp-2xa6000.yaml",
        "gpus": 2,
        "gpu_topology": "pcie",
        "api_key_file": "secrets/ct129.api_key",
    }),
]
