"""Container facts (roles/facts.py container_facts, sglang_deploy/container.py) from fixture text, and the Proxmox
configuration derived from them."""

import json

from roles.facts import container_facts
from sglang_deploy import cli, container

CT129_TEXT = {
    "uid_map": "         0     100000      65536\n",
    "nodes": "/dev/nvidia0|character special file|660|root|root|c3|0\n"
             "/dev/nvidia1|character special file|660|root|root|c3|1\n"
             "/dev/nvidiactl|character special file|660|root|root|c3|ff\n"
             "/dev/nvidia-uvm|regular empty file|644|root|root|0|0\n",
    "proc_devices": "Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n510 nvidia-caps\n\n"
                    "Block devices:\n  8 sd\n",
    "shm": "67108864\n",
    "service_limits": "Limit  Soft Limit  Hard Limit  Units\nMax open files            524288               524288"
                      "               files\nMax locked memory         8388608              8388608              bytes\n",
    "nesting": "rc=226\n",
    "compilers": "gcc=\ng++=\npython_h=False\n",
    "video_gid": "44\n",
}


def test_ct129_like_facts_parse():
    facts = container_facts(CT129_TEXT)
    assert facts["unprivileged"] and facts["uid_map"] == "0 100000 65536" and facts["nesting"] is False
    assert facts["majors"] == {"nvidia-frontend": 195, "nvidia-uvm": 508, "nvidia-caps": 510}
    assert facts["nodes"][0] == {"path": "/dev/nvidia0", "char": True, "mode": "0660", "owner": "root", "group": "root",
                                 "major": 195, "minor": 0}
    assert facts["nodes"][3]["char"] is False and facts["shm_bytes"] == 64 << 20
    assert facts["service_limits"] == {"nofile": ("524288", "524288"), "memlock": ("8388608", "8388608")}
    assert facts["compilers"] == {"gcc": None, "g++": None, "python_h": False} and facts["video_gid"] == 44


def test_privileged_and_nesting_answers():
    assert container.parse_uid_map("0 0 4294967295")["unprivileged"] is False
    assert container.parse_nesting("rc=0") is True and container.parse_nesting("") is None
    assert container.parse_nesting("rc=1") is None  # not the namespace failure: unknown, not "no"


def test_the_summary_names_what_will_break():
    text = "\n".join(container.container_summary({"lxc": container_facts(CT129_TEXT)}))
    assert "unprivileged container, uid map 0 100000 65536" in text and "NO: a unit with" in text
    assert "/dev/nvidia0: 195:0 mode 0660 root:root (the service user needs" in text
    assert "/dev/nvidia-uvm: NOT a character device" in text and "missing gcc, g++, Python.h" in text
    assert "nofile 524288/524288" in text


def test_the_proxmox_config_has_nesting_the_devn_lines_and_this_hosts_majors():
    config = container.proxmox_config({"lxc": container_facts(CT129_TEXT), "gpus": [{}, {}]}, 129)
    lines = config.splitlines()
    assert lines[0].startswith("# /etc/pve/lxc/129.conf") and "features: nesting=1" in lines
    assert {"dev0: /dev/nvidia0,mode=0666", "dev1: /dev/nvidia1,mode=0666", "dev2: /dev/nvidiactl,mode=0666",
            "dev3: /dev/nvidia-uvm,mode=0666", "dev4: /dev/nvidia-uvm-tools,mode=0666"} <= set(lines)
    assert "#lxc.cgroup2.devices.allow: c 195:* rwm" in lines and "#lxc.cgroup2.devices.allow: c 508:* rwm" in lines
    assert "gid=44" in config
    # without the uvm module loaded, the uvm major is not made up
    facts = container_facts({**CT129_TEXT, "proc_devices": "Character devices:\n195 nvidia-frontend\n"})
    assert "<nvidia-uvm major from the Proxmox host's /proc/devices>" in container.proxmox_config({"lxc": facts})


def test_the_cli_prints_it_from_a_saved_facts_file(tmp_path, capsys):
    saved = tmp_path / "facts.json"
    saved.write_text(json.dumps({"gpus": [{}, {}], "lxc": container_facts(CT129_TEXT)}))
    assert cli.main(["proxmox-config", "--facts", str(saved), "--container-id", "129"]) == 0
    assert "dev1: /dev/nvidia1,mode=0666" in capsys.readouterr().out
    old = tmp_path / "old.json"
    old.write_text("{}")
    assert cli.main(["proxmox-config", "--facts", str(old)]) == 1
    assert "no container facts" in capsys.readouterr().err
