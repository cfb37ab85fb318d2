"""Container facts (roles/facts.py container_facts, sglang_deploy/container.py) from fixture text, and the Proxmox
configuration derived from them."""

import json
import os
import subprocess

import pytest

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
    assert facts["compilers"] == {"gcc": None, "g++": None, "python_h": False, "venv": None} and facts["video_gid"] == 44


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


def test_the_proxmox_config_is_commands_without_comment_lines_and_the_notes_have_this_hosts_majors():
    facts = {"lxc": container_facts(CT129_TEXT), "gpus": [{}, {}]}
    config = container.proxmox_config(facts, 129)
    lines = config.splitlines()
    # Pasted into /etc/pve/lxc/129.conf a `#` line would become the CT's Notes: commands only.
    assert not [line for line in lines if line.lstrip().startswith("#")]
    assert subprocess.run(["sh", "-n"], input=config, text=True).returncode == 0  # valid shell
    assert ["pct set 129 --dev0 /dev/nvidia0,gid=44", "pct set 129 --dev1 /dev/nvidia1,gid=44",
            "pct set 129 --dev2 /dev/nvidiactl,gid=44", "pct set 129 --dev3 /dev/nvidia-uvm,gid=44",
            "pct set 129 --dev4 /dev/nvidia-uvm-tools,gid=44"] == [line for line in lines if "--dev" in line]
    assert lines[-1] == "pct reboot 129"
    # The host unit creates uvm's and every GPU's node before the containers start (else `pct start` fails).
    assert "Before=pve-guests.service" in lines and "ExecStart=/usr/bin/nvidia-modprobe -u -c=0" in lines
    assert "ExecStart=/usr/bin/nvidia-modprobe -c=1" in lines
    assert lines.index("Before=pve-guests.service") < lines.index("pct set 129 --dev0 /dev/nvidia0,gid=44")
    notes = container.proxmox_notes(facts, 129)
    assert "mode=0666" in notes and "c 195:* rwm" in notes and "c 508:* rwm" in notes
    # without the uvm module loaded, the uvm major is not made up
    facts = container_facts({**CT129_TEXT, "proc_devices": "Character devices:\n195 nvidia-frontend\n"})
    assert "nvidia-uvm's major from the host's /proc/devices" in container.proxmox_notes({"lxc": facts})


def test_every_gpu_the_profile_needs_gets_its_node_whether_visible_now_or_not():
    only_first = container_facts({**CT129_TEXT, "nodes": CT129_TEXT["nodes"].replace(
        "/dev/nvidia1|character special file|660|root|root|c3|1\n", "")})
    config = container.proxmox_config({"lxc": only_first, "gpus": []}, 129, gpus=2)
    assert "pct set 129 --dev1 /dev/nvidia1,gid=44" in config and "-c=1" in config
    # A node the container sees beyond the count is kept (not silently dropped from the config).
    seen = container_facts({**CT129_TEXT, "nodes": "/dev/nvidia3|character special file|660|root|root|c3|3\n"})
    assert [line.split()[-1] for line in container.proxmox_config({"lxc": seen}, 129, gpus=2).splitlines()
            if "--dev" in line][:3] == ["/dev/nvidia0,gid=44", "/dev/nvidia1,gid=44", "/dev/nvidia3,gid=44"]


@pytest.mark.parametrize("current, merged", [
    ("features: keyctl=1,fuse=1", "keyctl=1,fuse=1,nesting=1"),
    ("features: nesting=0,keyctl=1", "keyctl=1,nesting=1"),
    ("features: nesting=1", "nesting=1"),
    ("", "nesting=1"),
])
def test_the_features_line_adds_nesting_to_what_the_container_has(tmp_path, current, merged):
    """The printed line run by a shell against a stand-in `pct` (its config, then what `pct set` is given)."""
    pct = tmp_path / "pct"
    pct.write_text(f"#!/bin/sh\nif [ \"$1\" = config ]; then printf 'arch: amd64\\n{current}\\nhostname: ct129\\n'; "
                   f"else printf '%s\\n' \"$@\" > {tmp_path}/set; fi\n")
    pct.chmod(0o755)
    line = next(line for line in container.proxmox_config({"lxc": container_facts(CT129_TEXT)}, 129).splitlines()
                if "--features" in line)
    subprocess.run(["sh", "-c", line], env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}, check=True)
    assert (tmp_path / "set").read_text().split() == ["set", "129", "--features", merged]


def test_the_cli_prints_it_from_a_saved_facts_file(tmp_path, capsys):
    saved = tmp_path / "facts.json"
    saved.write_text(json.dumps({"gpus": [{}, {}], "lxc": container_facts(CT129_TEXT)}))
    assert cli.main(["proxmox-config", "--facts", str(saved), "--container-id", "129"]) == 0
    printed = capsys.readouterr()
    assert "pct set 129 --dev1 /dev/nvidia1,gid=44" in printed.out and "mode=0666" in printed.err
    assert "mode=0666" not in printed.out  # stdout is the commands alone
    old = tmp_path / "old.json"
    old.write_text("{}")
    assert cli.main(["proxmox-config", "--facts", str(old)]) == 1
    assert "no container facts" in capsys.readouterr().err
