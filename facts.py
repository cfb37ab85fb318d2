"""Print what a GPU host reports: GPUs, driver (kernel and user space), container, CUDA toolkit,
NCCL (system and the venv's torch), GPU topology and P2P, and whether the driver is adequate; for a
container, what it is (privileged, nesting, device nodes, /dev/shm, limits, compilers) and the Proxmox CT
configuration it needs (`features: nesting=1`, the devN: lines with their modes, the cgroup majors).

    pyinfra inventory/X.py facts.py [--data python=/opt/sglang-deploy/venvs/.../bin/python] [--data container_id=129]

Reads only; changes nothing on the host (the nesting and limits facts start two transient units that run
/bin/true and cat, collected when they exit). Saves results/<host>/facts.json on the controller, which
`sglang-deploy check PROFILE --facts results/<host>/facts.json` checks a profile against.
"""

from roles import facts_stages as stages

facts = stages.collect()  # the GpuHost fact and the release venv's torch
stages.judge(facts)  # the driver's verdict, what validation uses, the NCCL and UVM warnings
stages.report(facts)  # the facts; for a container, what it is and the Proxmox CT configuration it needs
stages.save(facts)  # results/<host>/facts.json, which `sglang-deploy check --facts` reads
