"""The perf doctor: a ranked list of concrete reasons a deployment is slower than it could be.

Input is what the host reports (the running server's /server_info, the server process's environment,
GPU facts, the checkpoint's bytes, the last gate measurement, optionally the GPU probe); output is a
roofline and suspects, each with what was seen, the expected gain and the profile change that fixes it.
Pure: unit-tested without a host. Expected gains come from ../shared/notes/perf-model.md.
"""

from __future__ import annotations

from dataclasses import asdict

from . import levers as doctor_levers
from .suspect import Suspect
from ..hostside.contract.probes import DoctorCollection, SandboxView
from ..hostside.lib.client import is_simulated, printable
from ..hostside.lib.gate import decode_backend, decode_graphs_captured
from ..roofline import datasheet_bandwidth, roofline, separate_draft
from ..rules import NCCL_DEBUG_KNOBS as VALIDATED_KNOBS

# The P2P knobs get their own suspect (p2p-unavailable); the rest are reported as debugging knobs.
NCCL_DEBUG_KNOBS = tuple(k for k in VALIDATED_KNOBS if k not in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"))
PROVEN_STEPS = 3
PROVEN_TAU = 2.8
# A DFlash drafter against MTP 3 on code: tau about 4.4 vs 3.4 (club-3090 docs/DUAL_CARD.md; anchors-2026.md §3).
DFLASH_TAU_RATIO = 4.4 / 3.4
# When the profile offers no drafter, one sized like the reconstructed Qwen3.6-27B DFlash drafter (3.46 GB of BF16
# against 24.3 GB of target layers: manifests/local--qwen3.6-27b-dflash.config.reconstructed.json).
DRAFT_SIZE_OF_LAYERS = 0.14
DRAFTER_WORTH_PCT = 10.0


def _tp(server_info: dict) -> int:
    return int(server_info.get("tp_size") or 1)


def suspects_from(server_info: dict, environ: dict, topology: dict | None, gpus: list[dict], gate, probe,
                  log_findings: dict | None = None, costly_env=()) -> list[Suspect]:
    """server_info: /server_info (SGLang's resolved values); gate: the last measurement (hostside/contract/gate.py
    Measurement, or None); probe: the GPU probe's answer (hostside/contract/probes.GpuProbe, or None); log_findings and
    costly_env: hostside/evidence.py."""
    found: list[Suspect] = []
    log_findings = log_findings or {}
    tp = _tp(server_info)
    # CUDA graphs: the backend after SGLang folds every graph flag, and what was captured
    captured, capture_evidence = decode_graphs_captured(server_info)
    if decode_backend(server_info) == "disabled" or (server_info.get("internal_states") and not captured):
        found.append(Suspect(
            "cuda-graphs", "decode CUDA graphs are off or were not captured",
            f"cuda_graph_config.decode.backend={decode_backend(server_info)!r}, {capture_evidence}",
            "+33 % or more (without graphs a 64-layer TP decode step is launch-bound)", 40.0,
            "remove --disable-cuda-graph, --disable-decode-cuda-graph and a 'disabled' decode backend in "
            "--cuda-graph-backend-decode / --cuda-graph-config; keep --cuda-graph-max-bs-decode >= "
            "--max-running-requests. A failed capture kills SGLang at start ('Capture cuda graph failed' "
            "in the journal)"))
    # Interconnect
    proto = (environ.get("NCCL_PROTO") or "").upper()
    interconnect = (topology or {}).get("interconnect")
    if "LL128" in proto and not proto.startswith("^") and interconnect != "nvlink":
        found.append(Suspect(
            "nccl-ll128-forced", "NCCL_PROTO=LL128 is forced without NVLink",
            f"server process environment has NCCL_PROTO={environ.get('NCCL_PROTO')}; interconnect {interconnect or 'unknown'}",
            "correctness first (NCCL enables LL128 only over NVLink; forced elsewhere it can corrupt data); "
            "latency: defaults were best at every decode size measured", 5.0,
            "remove NCCL_PROTO from the profile's environment (and from any systemd drop-in)", "correctness"))
    p2p_off_reason = None
    if environ.get("NCCL_P2P_DISABLE") == "1":
        p2p_off_reason = "NCCL_P2P_DISABLE=1 in the server process"
    elif (environ.get("NCCL_P2P_LEVEL") or "").upper() in ("LOC",) or (
            (environ.get("NCCL_P2P_LEVEL") or "").upper() == "NVL" and interconnect != "nvlink"):
        p2p_off_reason = f"NCCL_P2P_LEVEL={environ.get('NCCL_P2P_LEVEL')} on a {interconnect or 'non-NVLink'} host"
    elif (topology or {}).get("p2p_read_ok") is False:
        p2p_off_reason = f"nvidia-smi topo -p2p r reports {', '.join(topology.get('p2p_read_statuses', []))}"
    elif probe and probe.p2p and not probe.p2p.can_access_0_1:
        p2p_off_reason = "torch.cuda.can_device_access_peer(0, 1) is False"
    if tp > 1 and p2p_off_reason:
        found.append(Suspect(
            "p2p-unavailable", "GPU peer-to-peer is off: NCCL falls back to host memory",
            p2p_off_reason, "+10-20 % (all-reduce through host memory costs ~40-70 us instead of ~6-20 us)", 15.0,
            "remove NCCL_P2P_DISABLE / NCCL_P2P_LEVEL; if the board breaks P2P, fix ACS/IOMMU on the Proxmox host"))
    # Across nodes (--nnodes > 1) SGLang turns custom all-reduce off by design ("... spans across nodes."): no suspect.
    multinode = int(server_info.get("nnodes") or 1) > 1
    if multinode:
        pass
    elif tp > 1 and server_info.get("disable_custom_all_reduce"):
        pcie_ipc = doctor_levers.pcie_ipc_fix(doctor_levers.allreduce_path(server_info, environ, log_findings),
                                              server_info)
        found.append(Suspect(
            "custom-all-reduce", "SGLang's custom all-reduce is disabled",
            "/server_info disable_custom_all_reduce=true" + (f" ({p2p_off_reason})" if p2p_off_reason else ""),
            "+3-8 % (every decode all-reduce goes through NCCL; peers measured +7 to +12.5 % on a P2P pair)", 5.5,
            "remove --disable-custom-all-reduce (it needs working P2P)" + (f"; or {pcie_ipc}" if pcie_ipc else "")))
    elif tp > 1 and log_findings.get("custom_all_reduce_fallback"):
        # SGLang drops it at runtime and leaves disable_custom_all_reduce false: only its log says so.
        found.append(Suspect(
            "custom-all-reduce", "custom all-reduce fell back to NCCL at runtime",
            f"the server's journal since its start: {log_findings['custom_all_reduce_fallback']!r}"
            + (f"; {p2p_off_reason}" if p2p_off_reason else ""),
            "+3-8 % (every decode all-reduce goes through NCCL)", 5.5,
            "make GPU P2P work (ACS/IOMMU on the Proxmox host; nvidia-smi topo -p2p r must say OK), or declare "
            "--disable-custom-all-reduce so the profile says what runs"
            + (f"; {fix}" if (fix := doctor_levers.pcie_ipc_fix(doctor_levers.allreduce_path(
                server_info, environ, log_findings), server_info)) else "")))
    for name, value, what, source in costly_env or ():
        found.append(Suspect(
            "costly-environment", f"{name}={value} is set on the server process but not declared",
            f"set by {source}: {what}", "a few % to 2x (debugging switches serialize or log the decode path)", 20.0,
            f"remove {name} from {source}; declare variables in the profile's environment"))
    ll128_reported = any(s.id == "nccl-ll128-forced" for s in found)
    knobs = [k for k in NCCL_DEBUG_KNOBS if k in environ and not (k == "NCCL_PROTO" and ll128_reported)]
    if knobs:
        measured = ""
        if probe and probe.allreduce_profile and probe.allreduce_default:
            default, forced = probe.allreduce_default.latency_us, probe.allreduce_profile.latency_us
            measured = "; probe: " + ", ".join(f"{size} {default[size]:.0f} -> {forced[size]:.0f} us" for size in default)
        found.append(Suspect(
            "nccl-debug-knobs", "NCCL debugging knobs are forced",
            ", ".join(f"{k}={environ[k]}" for k in knobs) + measured,
            "a few % (NCCL's defaults were best at every decode size measured)", 3.0,
            "remove them unless an A/B measurement shows a reproducible gain; record the reason in the profile"))
    # Speculation
    algorithm = server_info.get("speculative_algorithm")
    steps = int(server_info.get("speculative_num_steps") or 0) if algorithm else 0
    if not algorithm:
        found.append(Suspect(
            "no-speculation", "speculative decoding (MTP) is off",
            "/server_info speculative_algorithm is empty", "+70-80 % (about 30 -> 52 tok/s on CT129)", 75.0,
            "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4 (the proven profile)"))
    elif steps < PROVEN_STEPS and not separate_draft(server_info):  # a drafter forces steps 1
        found.append(Suspect(
            "weak-speculation", f"speculation is weaker than the proven {PROVEN_STEPS} steps",
            f"{algorithm} with {steps} step(s), {server_info.get('speculative_num_draft_tokens')} draft tokens",
            "+25-35 % (the incident: 1 step ~40 tok/s, 3 steps ~52 tok/s)", 30.0,
            f"--speculative-num-steps {PROVEN_STEPS} --speculative-num-draft-tokens {PROVEN_STEPS + 1}"))
    tau = gate and gate.tau_median  # measured on the prompt mix, not a probe
    if algorithm and steps >= PROVEN_STEPS and tau and tau < PROVEN_TAU:
        found.append(Suspect(
            "low-acceptance", "acceptance length is low for the prompt mix",
            f"tau {tau:.2f} with {steps} steps (the proven configuration reaches 3.0-3.5)",
            f"+{(3.25 / tau - 1) * 100:.0f} % if tau reached 3.25", (3.25 / tau - 1) * 100,
            "check that the MTP heads loaded (draft weights), the chat template, and sampling (temperature 0 "
            "accepts most); compare tau on the gate's prompt mix"))
    # Batch limits
    concurrency = gate and gate.concurrency
    # Effective values: the scheduler's batch limit and the resolved decode graph batch limit.
    running = ((server_info.get("internal_states") or [{}])[0].get("effective_max_running_requests_per_dp")
               or server_info.get("max_running_requests"))
    graph_bs = ((server_info.get("cuda_graph_config") or {}).get("decode") or {}).get("max_bs")
    if concurrency and running and concurrency > running:
        found.append(Suspect("batch-limit", "max-running-requests is below the measured concurrency",
                             f"concurrency {concurrency} > --max-running-requests {running}",
                             "aggregate throughput at that concurrency", 8.0,
                             f"--max-running-requests {concurrency} (and --cuda-graph-max-bs-decode to match)"))
    elif concurrency and graph_bs and concurrency > graph_bs:
        found.append(Suspect("graph-batch-limit", "decode CUDA graphs do not cover the measured batch",
                             f"concurrency {concurrency} > --cuda-graph-max-bs-decode {graph_bs}",
                             "batches above the graph size decode eagerly (+25 % or more for them)", 8.0,
                             f"--cuda-graph-max-bs-decode {max(concurrency, running or 0)}"))
    # GPUs
    for gpu in gpus or []:
        width, gen = gpu.get("pcie.link.width.current"), gpu.get("pcie.link.gen.max")
        if (width and width < 16) or (gen and gen < 4):
            found.append(Suspect("pcie-link", f"GPU {gpu.get('index')} PCIe link below x16 Gen4",
                                 f"link width x{width}, max generation {gen}", "+5-15 % (all-reduce and P2P traffic)",
                                 8.0, "reseat the card / check the slot and BIOS link settings"))
        reasons = gpu.get("clocks_event_reasons")
        if reasons and reasons not in ("0x0000000000000000", "0x0000000000000001"):
            found.append(Suspect("clocks", f"GPU {gpu.get('index')} clocks are held back",
                                 f"clocks_event_reasons.active={reasons}, SM {gpu.get('clocks.sm')} of "
                                 f"{gpu.get('clocks.max.sm')} MHz, power {gpu.get('power.draw')} of {gpu.get('power.limit')} W",
                                 "up to the clock deficit", 5.0, "check cooling and the power limit (nvidia-smi -q -d PERFORMANCE)"))
    return sorted(found, key=Suspect.rank_key)


def diagnose(collected: DoctorCollection, gpus: list[dict], topology: dict | None) -> dict:
    """collected: the host's collection (hostside/contract/probes.DoctorCollection: /server_info, the server's
    environment, the checkpoint's bytes, the last gate measurement, the last tune and A/B, optionally the GPU probe);
    gpus and topology: the controller's GPU facts (facts.GpuHost), each GPU with its clock-limit reasons."""
    server_info = collected.server_info
    gate = collected.gate
    suspects = suspects_from(server_info, collected.environ, topology, gpus or [], gate, collected.probe,
                             collected.log_findings, collected.costly_env)
    state = (server_info.get("internal_states") or [{}])[0] or {}
    gpu_name = (gpus or [{}])[0].get("name") or state.get("simulated_gpu")
    probe = collected.probe
    if probe and probe.read_bandwidth():
        bandwidth, source = probe.read_bandwidth(), "measured (probe, read-only reduction)"
    else:
        bandwidth, source = datasheet_bandwidth(gpu_name), f"datasheet ({gpu_name})"
    algorithm = server_info.get("speculative_algorithm")
    steps = int(server_info.get("speculative_num_steps") or 0) if algorithm else 0
    tau = (gate and gate.tau_median) or (1.0 if not algorithm else 3.25)
    measured = gate and gate.decode_median
    bound = None
    if collected.checkpoint and bandwidth:
        bound = roofline(collected.checkpoint, _tp(server_info), steps, tau, bandwidth, measured,
                         draft=collected.draft_checkpoint)
        bound["bandwidth_source"] = source
    notes = []
    drafter = drafter_suspect(server_info, collected.checkpoint, tau, bandwidth, collected.offered_drafts,
                              measured) if bound and gate and gate.accept_length else None
    levers = lever_findings(collected, bound, gpu_name)
    suspects = sorted(suspects + levers["suspects"], key=Suspect.rank_key)
    if bound and bound.get("mbu") is not None and bound["mbu"] < 0.5 and not suspects:
        notes.append(f"MBU {bound['mbu'] * 100:.0f} % with no configuration suspect: the gap to the roofline is "
                     "kernel efficiency (weight-only FP8 on Ampere, draft-step overheads), not a setting")
    return {"roofline": bound, "suspects": [asdict(s) for s in suspects], "notes": notes + levers["notes"],
            "opportunities": [asdict(s) for s in [drafter] + levers["opportunities"] if s],
            "allreduce": levers["allreduce"],
            "memory": memory_budget(server_info, collected.checkpoint,
                                    collected.card_memory_mib or [gpu.get("memory.total") for gpu in gpus or []]),
            "simulated": is_simulated(server_info)}


def with_collection(result: dict, collected: DoctorCollection) -> dict:
    """The diagnosis with what the host's collector (hostside/doctor_collect.py, its probes.DoctorCollection) adds to
    the saved report: the release, the collector's errors, the GPU probe and the sandbox view
    (hostside/contract/findings.DoctorReport's fields)."""
    return {**result, "release": collected.active, "errors": list(collected.errors),
            "probe": collected.probe.to_dict() if collected.probe else None,
            "sandbox": collected.sandbox.to_dict()}


def lever_findings(collected: DoctorCollection, bound: dict | None, gpu_name: str | None) -> dict:
    """levers.py's findings: suspects (speculation slower than none, fp8 KV on Ampere), opportunities (a
    token map), notes (the all-reduce path and the KV/attention in use), and the PCIe-IPC arm added to the
    custom-all-reduce suspect's fix."""
    server_info = collected.server_info
    path = doctor_levers.allreduce_path(server_info, collected.environ, collected.log_findings)
    out = {"suspects": [], "opportunities": [], "notes": [], "allreduce": path}
    nospec = doctor_levers.speculation_vs_none(collected.last_tune, collected.active) or \
        doctor_levers.speculation_vs_none(collected.last_ab, collected.active, what="the doctor's A/B")
    if nospec:
        out["suspects"].append(nospec)
    line, kv = doctor_levers.kv_attention(server_info, gpu_name)
    out["suspects"] += [kv] if kv else []
    token_map = doctor_levers.token_map_opportunity(bound, collected.checkpoint, server_info)
    out["opportunities"] += [token_map] if token_map else []
    if path["path"] != "none":
        out["notes"].append(f"all-reduce: {path['path']} ({path['why']})")
    out["notes"] += [line] if line else []
    return out


def drafter_suspect(server_info: dict, checkpoint: dict | None, tau: float, bandwidth: float, offered,
                    measured: float | None) -> Suspect | None:
    """MTP through the checkpoint's own heads, while a drafter would raise the roofline: the expected gain is the
    ratio of the two rooflines at the same MBU (the drafter's tau from the cited DFlash/MTP ratio, its bytes from
    the offered drafter's manifest, else estimated)."""
    if not server_info.get("speculative_algorithm") or separate_draft(server_info) or not checkpoint:
        return None
    tp, steps = _tp(server_info), int(server_info.get("speculative_num_steps") or 0)
    offered = [entry for entry in offered or [] if entry.get("bytes")]
    draft_bytes = offered[0]["bytes"] if offered else DRAFT_SIZE_OF_LAYERS * checkpoint["bytes"]["layers"]
    mtp = roofline(checkpoint, tp, steps, tau, bandwidth)
    dflash = roofline(checkpoint, tp, 1, tau * DFLASH_TAU_RATIO, bandwidth, draft={"bytes": {"layers": draft_bytes}})
    gain = (dflash["roofline_tok_s"] / mtp["roofline_tok_s"] - 1) * 100
    if gain < DRAFTER_WORTH_PCT:
        return None
    at_mbu = f"; at today's MBU about {measured * (1 + gain / 100):.0f} tok/s" if measured else ""
    where = ("offered by the profile: " + ", ".join(str(entry.get("source")) for entry in offered)
             + " (tune.py measures it: tune_space=drafter)") if offered else \
        "the profile offers none: freeze a DFlash drafter for this model and offer it in tune.drafters (docs/drafters.md)"
    return Suspect(
        "drafter", "a separate drafter would raise the roofline past what MTP heads give",
        f"{server_info.get('speculative_algorithm')} {steps} steps at tau {tau:.2f}: roofline {mtp['roofline_tok_s']:.0f} "
        f"tok/s; a DFlash drafter at tau {tau * DFLASH_TAU_RATIO:.2f} (the cited 4.4/3.4) reading "
        f"{draft_bytes / 1e9:.2f} GB{'' if offered else ' (estimated)'} per cycle: {dflash['roofline_tok_s']:.0f} "
        f"tok/s{at_mbu}", f"+{gain:.0f} % (roofline ratio at the same MBU; peers measure +30-45 %)", gain, where)


def memory_budget(server_info: dict, checkpoint: dict | None, card_mib: list | None = None) -> dict | None:
    """Per GPU, GiB, as SGLang accounts it: the static pool is mem_fraction_static x the memory free before
    the weights load (about the card: nvidia-smi's memory.total), split into weights (the vision tower's share
    from the checkpoint's headers, which SGLang loads for Qwen3.5: it refuses --language-model-only), KV and state
    (internal_states[0].memory_usage.weight, .kvcache); outside it the graphs and activations, and what is still
    free once the server has started (memory_usage.startup_available: get_available_gpu_memory at the end of the
    scheduler's init, managers/scheduler.py; not the card's total)."""
    state = (server_info.get("internal_states") or [{}])[0] or {}
    usage = state.get("memory_usage") or {}
    fraction = server_info.get("mem_fraction_static")
    card_mib = [mib for mib in (card_mib or []) if isinstance(mib, (int, float)) and mib > 0]
    if not (usage and isinstance(fraction, (int, float)) and card_mib):
        return None
    total = min(card_mib) / 1024
    tp = _tp(server_info)
    vision = ((checkpoint or {}).get("bytes") or {}).get("vision")
    graphs = sum((usage.get("graph") or {}).values())
    free = usage.get("startup_available")
    return {"fraction": fraction, "total_gb": total, "pool_gb": fraction * total, "weight_gb": usage.get("weight"),
            "vision_gb": vision / tp / 1e9 if isinstance(vision, (int, float)) else None,
            "kv_gb": usage.get("kvcache"), "graph_gb": graphs, "outside_pool_gb": total - fraction * total,
            "free_after_start_gb": free if isinstance(free, (int, float)) else None}


def format_report(result: dict) -> str:
    lines = []
    bound = result.get("roofline")
    if bound:
        lines.append(f"roofline: {bound['roofline_tok_s']:.0f} tok/s at tau {bound['tau']:.2f}, {bound['steps']} draft "
                     f"steps ({bound['cycle_gb_per_gpu']:.1f} GB per GPU per cycle at {bound['bandwidth_gbs']:.0f} GB/s, "
                     f"{bound['bandwidth_source']}); {bound['at_75pct_mbu_tok_s']:.0f} tok/s at 75 % MBU")
        if bound.get("mbu") is not None:
            lines.append(f"measured: {bound['measured_tok_s']:.1f} tok/s = {bound['mbu'] * 100:.0f} % MBU")
    else:
        lines.append("roofline: unavailable (no checkpoint bytes or bandwidth)")
    memory = result.get("memory")
    if memory:
        vision = f" (vision tower {memory['vision_gb']:.2f} of it)" if memory.get("vision_gb") else ""
        lines.append(f"memory per GPU at --mem-fraction-static {memory['fraction']} of {memory['total_gb']:.1f} GB: "
                     f"static pool {memory['pool_gb']:.1f} GB = weights {memory['weight_gb']:.2f}{vision} + KV and "
                     f"state {memory['kv_gb']:.1f}; graphs {memory['graph_gb']:.2f} and activations in the "
                     f"{memory['outside_pool_gb']:.1f} GB outside it"
                     + (f"; {memory['free_after_start_gb']:.2f} GB still free after start (SGLang's startup_available)"
                        if memory.get("free_after_start_gb") is not None else ""))
    if result["suspects"]:
        lines.append("suspects, most likely gain first:")
        for i, s in enumerate(result["suspects"], 1):
            lines += [f"{i}. [{s['id']}] {s['title']}" + (" (CORRECTNESS)" if s["severity"] == "correctness" else ""),
                      f"   seen: {s['evidence']}", f"   expected gain: {s['expected_gain']}", f"   fix: {s['fix']}"]
    else:
        lines.append("suspects: none found")
    # Not a defect of this configuration: perf left on the table by its design (a stronger drafter).
    for s in result.get("opportunities") or []:
        lines += [f"opportunity: [{s['id']}] {s['title']}", f"   seen: {s['evidence']}",
                  f"   expected gain: {s['expected_gain']}", f"   how: {s['fix']}"]
    lines += result.get("notes", [])
    lines += sandbox_lines(result.get("sandbox"))
    if result.get("simulated"):
        lines.append("(SIMULATED server: sglang_deploy.sim)")
    return "\n".join(printable(line) for line in lines)  # server and host text: no escapes, no forged lines


def sandbox_lines(view: dict | None) -> list[str]:
    """The host and sandbox section: what the unit declares next to what this host enforces, and the preflight's
    findings that are not ok (devices, shm, toolchain)."""
    # deferred: 3.5 ms (hostside.preflight.findings) on doctor.py, for a report's sandbox section only
    from ..hostside.preflight.findings import sandbox_report

    if not view:
        return []
    view = SandboxView.from_dict(view, "doctor.json sandbox")  # a report's part: strict, naming the field
    if view.error:
        return [f"sandbox: {view.error}"]
    lines = sandbox_report([tuple(row) for row in view.sandbox], view.host).splitlines()
    for item in view.findings:
        if item.status in ("fail", "warn"):
            lines.append(f"{item.step}: {item.status.upper()}: {item.detail}"
                         + (f" (fix: {item.fix})" if item.fix else ""))
    return lines
