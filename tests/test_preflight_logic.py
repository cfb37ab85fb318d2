"""The preflight's decisions, from fixture facts (no host): what each finding says and which fix it names."""

import copy

import pytest

from roles.release import preflight_command, preflight_inputs
from sglang_deploy.hostside.preflight import findings as preflight_findings, runner as preflight

GOLDEN_UNIT = (__import__("pathlib").Path(__file__).parent / "golden" / "proven.service").read_text()


def node(path, mode="0666", errno=None, char=True, exists=True, major=195, minor=0):
    if not exists:
        return {"path": path, "exists": False}
    return {"path": path, "exists": True, "char": char, "mode": mode, "uid": 0, "gid": 0, "owner": "root",
            "group": "root", "major": major, "minor": minor,
            "open": {None: None, 13: "Permission denied", 6: "No such device or address"}[errno], "errno": errno}


FACTS = {
    "uid": 999, "user": "sglang", "groups": ["render", "sglang", "video"],
    "nodes": [node("/dev/nvidiactl", minor=255), node("/dev/nvidia-uvm", major=508), node("/dev/nvidia0"),
              node("/dev/nvidia1", minor=1)],
    "limits": {"nofile": {"soft": "1048576", "hard": "1048576"}, "memlock": {"soft": "unlimited", "hard": "unlimited"}},
    "toolchain": {"gcc": "/usr/bin/gcc", "g++": "/usr/bin/g++", "python_h": "/usr/include/python3.11/Python.h",
                  "python_h_present": True},
    "sandbox": {"usr_read_only": True, "home_hidden": True, "proc_sys_read_only": True,
                "device_outside_allow_refused": True, "no_new_privs": True, "seccomp": True, "cap_bounding_empty": True,
                "uid_map": ["0", "100000", "65536"], "lxc_nesting_mounts": False},
    "caches": {"HOME": None, "TRITON_CACHE_DIR": None, "SGLANG_CACHE_DIR": None},
    "shm_bytes": 32 << 30,
    "resolution": {"error": None, "step": None, "steps": 90,
                   "resolved": {"tp_size": 2, "page_size": 1, "mem_fraction_static": 0.88}},
    "driver": {"kernel_module": "580.95.05", "libcuda": "580.95.05", "cu_init": 0, "cu_init_name": "CUDA_SUCCESS",
               "error": None},
    "outside": {"serving": False, "port": 30000, "listening": False, "listener": None, "gpu_processes": []},
    "torch": {"error": None, "count": 2, "torch": "2.9.1", "free_mib": [48000, 48000], "total_mib": [49140, 49140],
              "p2p": {"0-1": True, "1-0": True}, "all_reduce_ms": 3.1, "all_reduce_ok": True},
    "triton": {"error": None, "seconds": 4.2, "cache_dir": "/var/cache/sglang/triton"},
    "timings": {"resolution": 2.1, "torch": 6.0, "triton": 4.2}, "seconds": 12.5,
}


def facts_with(**changes):
    facts = copy.deepcopy(FACTS)
    for key, value in changes.items():
        facts[key] = value
    return facts


def failures(findings):
    return [f for f in findings if f["status"] == "fail"]


def test_a_healthy_host_passes_every_step():
    findings = preflight_findings.diagnose(FACTS, gpus=2, expected={"tp_size": 2})
    assert not failures(findings)
    assert [f["step"] for f in findings] == ["sandbox", "devices", "shm", "toolchain", "caches", "resolution", "port",
                                             "driver", "torch", "p2p", "triton", "memory", "limits"]


def test_proxmox_default_0660_root_nodes_name_every_node_and_the_devn_fix():
    nodes = [node(n["path"], mode="0660", errno=13) for n in FACTS["nodes"]]
    [fail] = failures(preflight_findings.diagnose(facts_with(nodes=nodes), gpus=2, video_gid=44, container_id=129))
    assert "cannot open /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia0, /dev/nvidia1" in fail["detail"]
    assert "mode 0660, owner root:root" in fail["detail"] and "sglang" in fail["detail"]
    assert "/etc/pve/lxc/129.conf" in fail["fix"] and "mode=0666" in fail["fix"] and "gid=44" in fail["fix"]


def test_missing_uvm_says_so_while_nvidia_smi_would_work():
    nodes = [n if n["path"] != "/dev/nvidia-uvm" else node("/dev/nvidia-uvm", exists=False) for n in FACTS["nodes"]]
    [fail] = failures(preflight_findings.diagnose(facts_with(nodes=nodes), gpus=2))
    assert "/dev/nvidia-uvm is missing" in fail["detail"] and "nvidia-modprobe -u -c=0" in fail["fix"]


def test_an_empty_placeholder_file_is_not_a_device():
    nodes = [n if n["path"] != "/dev/nvidia-uvm" else node("/dev/nvidia-uvm", char=False) for n in FACTS["nodes"]]
    [fail] = failures(preflight_findings.diagnose(facts_with(nodes=nodes), gpus=2))
    assert "not a character device" in fail["detail"] and "create=file" in fail["detail"]


def test_a_node_without_a_driver_is_told_apart_from_permissions():
    nodes = FACTS["nodes"][:3] + [node("/dev/nvidia1", errno=6, minor=1)]
    [fail] = failures(preflight_findings.diagnose(facts_with(nodes=nodes), gpus=2))
    assert "/dev/nvidia1" in fail["detail"] and "kernel module" in fail["fix"]


def test_fewer_gpu_nodes_than_the_profile_needs():
    [fail] = failures(preflight_findings.diagnose(facts_with(nodes=FACTS["nodes"][:3]), gpus=2))
    assert "needs 2 GPUs" in fail["detail"] and "1 /dev/nvidiaN" in fail["detail"]


def test_small_dev_shm_fails_only_with_several_ranks():
    assert failures(preflight_findings.diagnose(facts_with(shm_bytes=64 << 20), gpus=2))[0]["step"] == "shm"
    single = facts_with(shm_bytes=64 << 20, nodes=FACTS["nodes"][:3])
    single["torch"] = {**FACTS["torch"], "count": 1}
    assert not failures(preflight_findings.diagnose(single, gpus=1))


@pytest.mark.parametrize("missing, package", [("gcc", "gcc"), ("g++", "g++"), ("python_h_present", "python3-dev")])
def test_a_missing_compiler_or_header_names_the_package(missing, package):
    tools = {**FACTS["toolchain"], missing: None if missing != "python_h_present" else False}
    [fail] = failures(preflight_findings.diagnose(facts_with(toolchain=tools), gpus=2))
    assert fail["step"] == "toolchain" and f"package {package}" in fail["detail"]
    # a simulated host's server compiles nothing: a warning there
    assert not failures(preflight_findings.diagnose(facts_with(toolchain=tools), gpus=2, simulated=True))


def test_a_refusal_by_sglangs_resolution_names_the_step():
    refused = {"error": "ValueError: --language-model-only is not supported", "step": "handle_language_model_only",
               "steps": 12, "resolved": {}}
    [fail] = failures(preflight_findings.diagnose(facts_with(resolution=refused), gpus=2))
    assert "at handle_language_model_only: ValueError" in fail["detail"]


def test_a_resolution_that_differs_from_the_releases_is_a_warning():
    findings = preflight_findings.diagnose(FACTS, gpus=2, expected={"tp_size": 2, "page_size": 16})
    [warn] = [f for f in findings if f["step"] == "resolution"]
    assert warn["status"] == "warn" and "page_size 16 -> 1" in warn["detail"]


def test_torch_seeing_fewer_gpus_and_a_wrong_all_reduce_fail():
    short = facts_with(torch={**FACTS["torch"], "count": 1})
    assert "torch sees 1 of 2 GPUs" in failures(preflight_findings.diagnose(short, gpus=2))[0]["detail"]
    wrong = facts_with(torch={**FACTS["torch"], "all_reduce_ok": False})
    assert failures(preflight_findings.diagnose(wrong, gpus=2))[0]["step"] == "p2p"


def test_no_peer_access_is_a_warning_with_the_custom_all_reduce_fix():
    findings = preflight_findings.diagnose(facts_with(torch={**FACTS["torch"], "p2p": {"0-1": False, "1-0": False}}),
                                           gpus=2)
    [warn] = [f for f in findings if f["step"] == "p2p" and f["status"] == "warn"]
    assert "--disable-custom-all-reduce" in warn["fix"] and not failures(findings)


def test_a_triton_failure_is_a_failure():
    facts = facts_with(triton={"error": "CalledProcessError: gcc", "seconds": 1.0, "cache_dir": "/x"})
    assert failures(preflight_findings.diagnose(facts, gpus=2))[0]["step"] == "triton"


def test_simulated_hosts_skip_the_gpu_steps_and_say_so():
    facts = facts_with(torch={"error": None, "count": 2, "torch": "2.14.1"}, triton=None)
    findings = preflight_findings.diagnose(facts, gpus=2, simulated=True)
    assert {f["step"]: f["status"] for f in findings}["p2p"] == "skip" and not failures(findings)


def test_namespace_failure_names_nesting_and_only_the_directives_still_set():
    full = preflight_findings.namespace_failure("Failed to set up mount namespacing: /run/systemd/unit-root/proc: "
                                       "Permission denied", relaxed=[], container_id=129)
    assert "226/NAMESPACE" in full["detail"] and "pct set 129 --features keyctl=1,nesting=1" in full["fix"]
    assert "replaces the whole list" in full["fix"]  # --features nesting=1 alone would drop keyctl/fuse
    assert "service.relax: [ProtectKernelTunables, ProtectControlGroups]" in full["fix"]
    partly = preflight_findings.namespace_failure(None, relaxed=["ProtectKernelTunables"])
    assert "service.relax: [ProtectControlGroups]" in partly["fix"]


def test_unit_properties_take_the_sandbox_and_identity_but_not_how_it_starts():
    properties = preflight.unit_properties(GOLDEN_UNIT, "/run/x/sglang.env")
    keys = [p.split("=", 1)[0] for p in properties]
    assert "EnvironmentFile=/run/x/sglang.env" in properties and "User=sglang" in properties
    assert "SupplementaryGroups=video render" in properties and "ProtectKernelTunables=yes" in properties
    assert "ReadWritePaths=-/var/lib/sglang -/var/cache/sglang" in properties and "CapabilityBoundingSet=" in properties
    for skipped in ("ExecStart", "Type", "Restart", "TimeoutStartSec", "KillMode", "StartLimitBurst", "WantedBy"):
        assert skipped not in keys
    assert not any(p.startswith("--") or "serve" in p for p in properties)  # the continued ExecStart lines too
    assert preflight.relaxed_directives(GOLDEN_UNIT) == []
    relaxed = GOLDEN_UNIT.replace("ProtectControlGroups=yes\n", "")
    assert preflight.relaxed_directives(relaxed) == ["ProtectControlGroups"]


def test_the_sandbox_report_separates_declared_from_enforced():
    facts = facts_with(limits={"nofile": {"soft": "20000", "hard": "20000"},
                               "memlock": {"soft": "8388608", "hard": "8388608"}})
    facts["sandbox"]["device_outside_allow_refused"] = False
    rows = preflight_findings.sandbox_enforcement(facts, GOLDEN_UNIT)
    inert = {directive for directive, _, enforced, _ in rows if enforced is False}
    assert inert == {"DevicePolicy", "LimitNOFILE", "LimitMEMLOCK"}
    text = preflight_findings.sandbox_report(rows, {"uid_map": ["0", "100000", "65536"], "unprivileged": True,
                                                    "nesting": False})
    assert "unprivileged container (uid map 0 100000 65536)" in text and "NO (units with" in text
    assert "NOT enforced here: " in text and "LimitNOFILE=1048576" in text
    assert preflight_findings.unprivileged(["0", "0", "4294967295"]) is False


def test_the_preflight_inputs_are_sglangs_argv_and_the_compared_fields():
    exec_start = ["/usr/bin/python3", "-I", "/opt/sglang-deploy/lib/hostside/log_redactor.py",
                  "/opt/v/bin/sglang", "serve", "--model-path", "/srv/m", "--tp-size", "2"]
    argv, expected = preflight_inputs(exec_start, {"tp_size": 2, "host": "x", "page_size": 1})
    assert argv == ["--model-path", "/srv/m", "--tp-size", "2"] and expected == {"tp_size": 2, "page_size": 1}
    command = preflight_command("sglang", "0003-abc", "/opt/v/bin/python", 2, container_id=129)
    assert "--container-id 129" in command and "rm -rf /run/sglang-deploy/preflight/sglang-0003-abc" in command
    assert command.endswith("exit $rc")


def test_the_preflights_cached_acceptance_is_keyed_by_the_units_environment(monkeypatch):
    """SGLang's hooks read SGLANG_* variables while resolving: a release whose environment alone changed is resolved
    again on the host, not answered by an earlier acceptance; what systemd sets per invocation is not part of it."""
    from sglang_deploy.hostside.preflight import probe as preflight_probe

    argv = ["--model-path", "/nonexistent", "--tp-size", "2"]
    monkeypatch.delenv("SGLANG_GRPC_PORT", raising=False)
    before = preflight_probe.resolution_key(argv)
    monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef")
    assert preflight_probe.resolution_key(argv) == before
    monkeypatch.setenv("SGLANG_SIM_CRASH_AT_START", "1")  # the simulator's: SGLang never reads it
    assert preflight_probe.resolution_key(argv) == before
    monkeypatch.setenv("SGLANG_GRPC_PORT", "50051")
    assert preflight_probe.resolution_key(argv) != before
    assert preflight_probe._resolution_module().__name__ == "sglang_deploy_resolution"  # found by path, above preflight/


def test_no_sglang_code_reads_the_simulators_variables():
    """What lets the preflight's key leave out SGLANG_SIM_*: SGLang's installed source (and its kernel packages)
    never names that prefix, so those variables cannot change its resolution."""
    from sglang_deploy.validate import validator_env
    from sglang_deploy.hostside.preflight import probe as preflight_probe

    validator_env.ensure_full_layer("0.5.23", quiet=True)
    site = next((validator_env.env_dir("0.5.23") / "lib").glob("python3*/site-packages"))
    sources = [path for package in ("sglang", "flashinfer", "sgl_kernel") if (site / package).is_dir()
               for path in (site / package).rglob("*.py")]
    assert len(sources) > 1000  # SGLang's own tree is there
    prefix = preflight_probe.SIMULATOR_ENV_PREFIX.encode()
    assert [str(path) for path in sources if prefix in path.read_bytes()] == []


# --- the real cause named: driver/library mismatch, cgroup EPERM, GPUs or the port held by someone else ----------------

@pytest.mark.parametrize("driver, detail, fix", [
    ({"kernel_module": "580.95.05", "libcuda": "580.65.06", "cu_init": 803,
      "cu_init_name": "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
     "driver/library version mismatch: kernel module 580.95.05 (/proc/driver/nvidia/version), libcuda 580.65.06; "
     "cuInit returns 803 CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "user space must be exactly 580.95.05: run provision.py"),
    ({"kernel_module": "570.86.10", "libcuda": "580.95.05", "cu_init": 35, "cu_init_name": "CUDA_ERROR_INSUFFICIENT_DRIVER"},
     "driver/library version mismatch: kernel module 570.86.10", "exactly 570.86.10"),
    ({"kernel_module": "575.51.03", "libcuda": "575.51.03", "cu_init": 35, "cu_init_name": "CUDA_ERROR_INSUFFICIENT_DRIVER"},
     "cuInit returns 35 CUDA_ERROR_INSUFFICIENT_DRIVER", "R580 or newer"),
    ({"kernel_module": "580.95.05", "libcuda": "580.95.05", "cu_init": 100, "cu_init_name": "CUDA_ERROR_NO_DEVICE"},
     "the service sees no GPU", "CUDA_VISIBLE_DEVICES"),
    ({"kernel_module": "580.95.05", "libcuda": None, "cu_init": None,
      "error": "libcuda.so.1 does not load: libcuda.so.1: cannot open shared object file"},
     "libcuda.so.1 does not load", "exactly 580.95.05"),
])
def test_a_driver_that_does_not_initialise_is_named_and_torchs_count_points_at_it(driver, detail, fix):
    torch = {**FACTS["torch"], "count": 0, "error": None}
    findings = preflight_findings.diagnose(facts_with(driver={"error": None, **driver}, torch=torch), gpus=2)
    by_step = {f["step"]: f for f in failures(findings)}
    assert detail in by_step["driver"]["detail"] and fix in by_step["driver"]["fix"]
    assert "torch sees 0 of 2 GPUs" in by_step["torch"]["detail"] and "driver finding" in by_step["torch"]["fix"]


def test_eperm_on_a_node_is_the_cgroup_device_filter_with_the_current_major():
    nodes = FACTS["nodes"][:1] + [{**node("/dev/nvidia-uvm", major=508), "open": "Operation not permitted", "errno": 1}] \
        + FACTS["nodes"][2:]
    [fail] = failures(preflight_findings.diagnose(facts_with(nodes=nodes), gpus=2, video_gid=44, container_id=129))
    assert "/dev/nvidia-uvm (508:0)" in fail["detail"] and "cgroup device filter (EPERM" in fail["detail"]
    assert "`lxc.cgroup2.devices.allow: c 508:* rwm`" in fail["fix"] and "pct set 129 --devN /dev/nvidia-uvm,gid=44" in fail["fix"]
    assert "driver does not answer" not in fail["fix"]


@pytest.mark.parametrize("processes, serving, status, named", [
    ([], False, "fail", "another container or the Proxmox host holds it"),
    (["4242, python3, 30000"], False, "fail", "nvidia-smi sees: 4242, python3, 30000"),
    ([], True, "info", "the running release's server holds memory now"),
])
def test_gpu_memory_held_beyond_what_mem_fraction_static_leaves(processes, serving, status, named):
    torch = {**FACTS["torch"], "free_mib": [12000, 48000]}  # 36 GiB of GPU 0 held by someone
    outside = {**FACTS["outside"], "gpu_processes": processes, "serving": serving}
    [memory] = [f for f in preflight_findings.diagnose(facts_with(torch=torch, outside=outside), gpus=2)
                if f["step"] == "memory"]
    assert memory["status"] == status and named in memory["detail"]
    assert "GPU 0: 36116 MiB of 49140 in use, mem_fraction_static 0.88 needs 43243 MiB, 12000 free" in memory["detail"]
    assert "GPU 1" not in memory["detail"]


def test_the_port_already_bound_by_another_process_is_named():
    taken = {**FACTS["outside"], "listening": True, "listener": 'LISTEN 0 128 0.0.0.0:30000 users:(("python3",pid=77))'}
    [fail] = failures(preflight_findings.diagnose(facts_with(outside=taken), gpus=2))
    assert fail["step"] == "port" and 'users:(("python3",pid=77))' in fail["detail"] and "--port" in fail["fix"]
    ours = preflight_findings.diagnose(facts_with(outside={**taken, "serving": True}), gpus=2)
    assert not failures(ours) and "held by the running release" in next(f for f in ours if f["step"] == "port")["detail"]


PROC_NET_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
"""


def test_listening_reads_proc_net_tcp_and_the_runner_finds_the_port_in_the_argv():
    assert preflight_findings.listening(PROC_NET_TCP, 30000) is True  # 0x7530, LISTEN
    assert preflight_findings.listening(PROC_NET_TCP, 8080) is False  # 0x1F90 but ESTABLISHED
    assert preflight.argv_port(["sglang", "serve", "--port", "31400"]) == 31400
    assert preflight.argv_port(["sglang", "serve", "--port=31401"]) == 31401 and preflight.argv_port([]) == 30000


def test_the_probe_reads_both_driver_versions():
    from sglang_deploy.hostside.preflight import probe as preflight_probe

    assert preflight_probe.kernel_module_version(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16)\n") \
        == "580.95.05"
    maps = ("7f00-7f10 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06\n"
            "7f20-7f30 r-xp 00000000 08:01 124 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert preflight_probe.library_version(maps) == "580.65.06"
    assert preflight_probe.library_version("") is None


# --- P2P: the data that arrives, the IOMMU, a probe that hangs ------------------------------------------------------

def test_a_peer_copy_with_wrong_data_fails_with_the_iommu_fix():
    torch = {**FACTS["torch"], "p2p_copy": {"0-1": False, "1-0": True}, "iommu": {"0": "DMA-FQ", "1": "DMA-FQ"}}
    [fail] = failures(preflight_findings.diagnose(facts_with(torch=torch), gpus=2))
    assert fail["step"] == "p2p" and "between GPUs 0-1 arrived with wrong data" in fail["detail"]
    assert "iommu=pt" in fail["fix"] and "--disable-custom-all-reduce" in fail["fix"]


def test_a_translating_iommu_is_a_warning_when_the_copy_passed():
    torch = {**FACTS["torch"], "p2p_copy": {"0-1": True, "1-0": True}, "iommu": {"0": "DMA-FQ", "1": "identity"}}
    findings = preflight_findings.diagnose(facts_with(torch=torch), gpus=2)
    assert not failures(findings)
    [warn] = [f for f in findings if f["status"] == "warn"]
    assert "GPU 0: DMA-FQ" in warn["detail"] and "GPU 1" not in warn["detail"] and "iommu=pt" in warn["fix"]
    passthrough = {**torch, "iommu": {"0": "identity", "1": "identity"}}
    assert not [f for f in preflight_findings.diagnose(facts_with(torch=passthrough), gpus=2) if f["status"] == "warn"]


@pytest.mark.parametrize("stderr, step, fix", [
    ("step torch\nstep p2p\nstep nccl\n", "nccl", "iommu=pt"),
    (b"step torch\nstep p2p\n", "p2p", "--disable-custom-all-reduce"),
    ("", "unknown", "journalctl -u sglang-deploy-preflight-7.service"),
])
def test_a_probe_that_hangs_names_the_step_and_its_unit_was_stopped(stderr, step, fix):
    found = preflight_findings.timed_out("sglang-deploy-preflight-7", 600, stderr)
    assert found["status"] == "fail" and f"hung at step {step}" in found["detail"]
    assert "sglang-deploy-preflight-7.service was stopped" in found["detail"] and fix in found["fix"]


def test_the_runner_stops_the_hung_probes_unit_and_reports_it(tmp_path, monkeypatch, capsys):
    """systemd-run --pipe killed at the timeout leaves its transient unit running: the runner stops it."""
    import subprocess as real

    unit, env = tmp_path / "sglang.service", tmp_path / "sglang.env"
    unit.write_text(GOLDEN_UNIT)
    env.write_text("")
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        if command[0] == "systemd-run" and "--pipe" in command:
            raise real.TimeoutExpired(command, kwargs.get("timeout"), stderr="step torch\nstep p2p\n")
        return real.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(preflight.subprocess, "run", fake_run)
    rc = preflight.main(["--unit", str(unit), "--env", str(env), "--python", "/usr/bin/python3", "--gpus", "2",
                         "--json", str(tmp_path / "out.json"), "--timeout", "5"])
    assert rc == 1
    probe_unit = next(c for c in calls if c[0] == "systemd-run" and "--pipe" in c)[5].removeprefix("--unit=")
    assert ["systemctl", "stop", f"{probe_unit}.service"] in calls
    document = __import__("json").loads((tmp_path / "out.json").read_text())
    assert document["ok"] is False and "hung at step p2p" in document["findings"][0]["detail"]
    assert "hung at step p2p" in capsys.readouterr().err


@pytest.mark.parametrize("planted, named, not_named", [
    ({"driver": {"kernel_module": "580.95.05", "libcuda": "580.65.06", "cu_init": 803,
                 "cu_init_name": "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "error": None},
      "torch": {"error": None, "count": 0, "torch": "2.9.1"}},
     "driver/library version mismatch: kernel module 580.95.05 (/proc/driver/nvidia/version), libcuda 580.65.06",
     "check the device nodes"),
    ({"torch": {**FACTS["torch"], "free_mib": [9000, 48000]}},
     "GPU 0: 39116 MiB of 49140 in use, mem_fraction_static 0.88 needs 43243 MiB, 9000 free; nvidia-smi here sees no "
     "process using it: another container or the Proxmox host holds it", "GPU 1:"),
])
def test_the_runner_names_a_planted_driver_mismatch_and_a_busy_gpu(planted, named, not_named, tmp_path, monkeypatch,
                                                                    capsys):
    """The probe's output as the runner reads it (a container whose user space lags the host's module; a GPU held by
    another container, which nvidia-smi in this one cannot see): the report names the cause, not the device nodes."""
    import json
    import subprocess as real

    unit, env = tmp_path / "sglang.service", tmp_path / "sglang.env"
    unit.write_text(GOLDEN_UNIT)
    env.write_text("")
    probe_output = json.dumps(facts_with(**planted, outside=None)) + "\n"

    def fake_run(command, **kwargs):
        if command[0] == "systemd-run" and "--pipe" in command:
            return real.CompletedProcess(command, 0, probe_output, "step torch\n")
        if command[0] == "systemctl":  # is-active: the service is not running
            return real.CompletedProcess(command, 3, "", "")
        return real.CompletedProcess(command, 0, "", "")  # nvidia-smi: no compute process it can see

    monkeypatch.setattr(preflight.subprocess, "run", fake_run)
    rc = preflight.main(["--unit", str(unit), "--env", str(env), "--python", "/usr/bin/python3", "--gpus", "2"])
    report = capsys.readouterr().err
    assert rc == 1 and named in report and not_named not in report, report
