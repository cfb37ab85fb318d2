#!/usr/bin/env python3
"""The perf watch: measure the active release between deploys (run by <service>-watch.timer; stdlib only).

    python3 -m hostside.watch --service S [--samples 3] [--max-running-requests 0] [--on-drift record|restart]
                     [--drift-min-accept-length X] [--drift-runs 2] [--max-restarts-per-day 3]
                     [--history-lines 500]
                     [--textfile-dir /var/lib/prometheus/node-exporter]

One run, under the release store's lock (a deploy or rollback never runs at the same time):
  1. read the active release (state.json) and its meta.json, gate-config.json;
  2. read sglang:num_running_reqs from the server's /metrics; above --max-running-requests the run records
     "busy" and measures nothing (so does a server without /metrics, or one that is down);
  3. measure with the gate's own client (bench.py: the same prompts, --samples requests, single stream);
  4. drift: acceptance below --drift-min-accept-length (default: the gate's min_accept_length), decode
     below the gate's min_decode_tok_s, or a failed short output check (the first --output-prompts known-answer
     prompts of the gate's output check, hostside/lib/output_check.py: a wrong or degenerate answer); after --drift-runs drifting measurements in a row, --on-drift
     restart restarts the service, waits until it is ready and measures again, at most
     --max-restarts-per-day times in 24 h (then it records "restart-withheld" instead); a restart or a
     withheld one is a line in watch.jsonl and a warning in the journal, a restart also in meta.json's history;
  5. decode / roofline: the release's roofline.json (staged by the deploy), the checkpoint's bytes and the
     measured acceptance length give the bandwidth bound (hostside/lib/roofline.py, the doctor's arithmetic);
  6. append one JSON line per event to releases/<id>/watch.jsonl (the last --history-lines kept) and write
     node_exporter textfile metrics (<textfile-dir>/sglang-deploy-<service>.prom: temporary file, atomic
     rename, no timestamps).
The API key is read from the secrets file, sent only to the release's loopback probe URL, never printed.
"""

import argparse
import datetime
import json
import os
import re
import sys
import time

from . import evidence, safetensors_headers
from .lib import gate, output_check, roofline
from .lib.client import LOOPBACK_URL, http, read_api_key
from .contract.document import DocumentError
from .contract.findings import DoctorReport, WatchEntry, WatchOutput
from .contract.gate import GateConfig
from .contract.release import WATCH_HISTORY_FILE, Roofline
from .lib.listener import foreign_listener, guard_unit
from .lib.readiness import wait_healthy
from .lib.service import systemctl
from .store import Lock, Locked, Store, atomic_write, now, service_name

METRIC_PREFIX = "sglang_deploy_watch"
WARNING = 4  # syslog priority of drift and restart lines in the journal
RUNNING = re.compile(r"^sglang:num_running_reqs(?:\{[^}]*\})?\s+([0-9.eE+-]+|NaN)\s*$", re.MULTILINE)


# --- pure helpers (imported by the controller's tests) --------------------------------------------

def running_requests(metrics_text):
    """Sum of sglang:num_running_reqs over its series (one per TP/DP rank label set); None when absent."""
    values = [float(v) for v in RUNNING.findall(metrics_text or "") if v != "NaN"]
    return sum(values) if values else None


def drift_reasons(entry, min_accept, min_decode):
    """Why one measurement counts as drift ([] when it does not): too slow, too little acceptance, or wrong answers
    (a server that keeps its speed but answers garbage drifts too)."""
    reasons = list((entry.get("output") or {}).get("reasons") or [])
    tau, decode = entry.get("accept_length"), entry.get("decode_tok_s")
    if gate.below_floor(tau, min_accept):
        reasons.append(f"acceptance length {tau:.2f} is below {min_accept}")
    if gate.below_floor(decode, min_decode):
        reasons.append(f"decode {decode:.1f} tok/s is below the gate's floor {min_decode}")
    return reasons


def drift_streak(history):
    """Drifting measurements in a row at the end of the history; skipped runs neither count nor break it,
    a restart or a measurement without drift ends it."""
    streak = 0
    for entry in reversed(history):  # WatchEntry (contract/findings.py)
        if entry.event == "restart":
            break
        if entry.status != "ok":
            continue
        if not entry.drift:
            break
        streak += 1
    return streak


def roofline_bound(inputs, checkpoint, entry, measured_bandwidth=None, draft=None):
    """The roofline at the measured acceptance length and decode / roofline, for one measurement:
    {roofline_tok_s, roofline_fraction, bandwidth_source}, or {} when an input is missing.

    inputs: the release's Roofline (roofline.json, written at stage time); checkpoint and draft (a separate draft
    model's): safetensors_headers.summarize(); measured_bandwidth: (GB/s, source) from the doctor's GPU probe,
    preferred over the datasheet's."""
    if not inputs or not checkpoint or entry.get("decode_tok_s") is None:
        return {}
    bandwidth, source = measured_bandwidth or (inputs.bandwidth_gbs, inputs.bandwidth_source)
    tau = entry.get("accept_length") if inputs.algorithm else 1.0
    if not bandwidth or not tau:
        return {}
    bound = roofline.roofline(checkpoint, inputs.tp, inputs.steps, float(tau), float(bandwidth), entry["decode_tok_s"],
                              draft=draft)
    return {"roofline_tok_s": float(f"{bound['roofline_tok_s']:.5g}"), "roofline_fraction": float(f"{bound['mbu']:.4g}"),
            "bandwidth_source": source}


DAY_S = 86400


def restarts_within(history, now, window_s=DAY_S):
    """Restarts the watch made (or tried) in the last window_s seconds of this release's history."""
    return sum(1 for e in history if e.event == "restart" and now - float(e.unix) < window_s)


def bounded(lines, keep):
    return lines[-keep:] if keep > 0 else lines


def _label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def textfile(service, release_id, history, verdict, now, floors=None, recovered=None):
    """node_exporter's textfile format (no timestamps): the last successful measurement, the last run's
    status, the drift streak and the release's gate verdict, labelled with service and release; `floors`
    ({"decode": tok/s, "accept": tau}, the floors drift is judged by) as gauges the alert rules compare with
    (dashboards/sglang-deploy.rules.yml)."""
    labels = f'service="{_label(service)}",release="{_label(release_id)}"'
    last_ok = next((e for e in reversed(history) if e.status == "ok"), None)  # WatchEntry (contract/findings.py)
    last = history[-1] if history else None
    lines = []

    def gauge(name, help_text, value, extra=""):
        if value is None:
            return
        lines.append(f"# HELP {METRIC_PREFIX}_{name} {help_text}")
        lines.append(f"# TYPE {METRIC_PREFIX}_{name} gauge")
        lines.append(f"{METRIC_PREFIX}_{name}{{{labels}{extra}}} {float(value)!r}")

    if last_ok:
        gauge("decode_tokens_per_second", "Single-stream decode tokens/s, median of the last successful run.",
              last_ok.decode_tok_s)
        gauge("accept_length", "Speculative acceptance length (tau), median of the last successful run.",
              last_ok.accept_length)
        gauge("ttft_seconds", "Time to first token, median of the last successful run.", last_ok.ttft_s)
        gauge("roofline_tokens_per_second", "Bandwidth roofline of decode at the measured acceptance length "
              "(checkpoint bytes per cycle over the GPU's memory bandwidth).", last_ok.roofline_tok_s)
        gauge("roofline_fraction", "Decode tokens/s over the roofline (memory-bandwidth utilisation, 0-1).",
              last_ok.roofline_fraction)
        gauge("last_success_timestamp_seconds", "Unix time of the last successful measurement.", last_ok.unix)
    gauge("last_run_timestamp_seconds", "Unix time of the last run (measured or skipped).", last.unix if last else now)
    gauge("last_run_ok", "1 when the last run measured, 0 when it was skipped or failed.",
          1 if last and last.status == "ok" else 0, f',status="{_label(last.status if last else "none")}"')
    output = last_ok and last_ok.output
    if output:
        gauge("output_ok", "1 when the last run's short output check passed (known answers right, nothing degenerate).",
              1 if output.verdict == "pass" else 0, f',verdict="{_label(output.verdict)}"')
        gauge("output_known_right", "Known answers right in the last run's short output check.",
              output.known_right)
    if recovered is not None:  # store.Recovery: the last boot that found an interrupted switch
        try:
            at = datetime.datetime.fromisoformat(recovered.at).timestamp()
        except ValueError:
            at = None
        gauge("boot_recovery_timestamp_seconds", "Unix time of the last boot recovery that changed something (an "
              "interrupted switch rolled back or committed, installed files put back).", at,
              f',action="{_label(recovered.action)}",interrupted="{_label(recovered.interrupted or "")}"')
    gauge("decode_floor_tokens_per_second", "The gate's min_decode_tok_s, the floor drift is judged by.",
          (floors or {}).get("decode"))
    gauge("accept_length_floor", "The acceptance length floor drift is judged by (gate min_accept_length or "
          "--drift-min-accept-length).", (floors or {}).get("accept"))
    gauge("drift_streak", "Drifting measurements in a row.", drift_streak(history))
    gauge("restarts", "Restarts by the watch recorded in this release's history.",
          sum(1 for e in history if e.event == "restart"))
    gauge("restarts_last_day", "Restarts by the watch in the last 24 h (capped by --max-restarts-per-day).",
          restarts_within(history, now))
    gauge("restarts_withheld", "Drift restarts withheld because the day's cap was reached (recorded instead).",
          sum(1 for e in history if e.event == "restart-withheld"))
    gauge("gate_verdict", "The release's gate verdict at its switch (1 = pass), as a label.",
          1 if verdict == "pass" else 0, f',verdict="{_label(verdict or "none")}"')
    return "\n".join(lines) + "\n"


# --- running on the host ---------------------------------------------------------------------------

def log(message, priority=None):
    """stdout: the journal of <service>-watch.service; under systemd a "<N>" prefix sets the line's syslog
    priority (SyslogLevelPrefix=, on by default), so `journalctl -p warning` lists drift and restarts."""
    prefix = f"<{priority}>" if priority is not None and os.environ.get("JOURNAL_STREAM") else ""
    print(prefix + message, flush=True)


class UnsafeDirectory(Exception):
    pass


def open_root_directory(directory, create=True):
    """An fd of `directory`, each component opened without following symlinks (created 0755 when missing and
    `create`), the directory itself required to be root-owned and not writable by group or others: the root
    watch writes only where nobody else can plant a symlink or swap a file. UnsafeDirectory names the part."""
    if not os.path.isabs(directory):
        raise UnsafeDirectory(f"watch.textfile_dir {directory!r} is not an absolute path")
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    path = ""
    try:
        for part in [p for p in directory.split("/") if p]:
            path += "/" + part
            if part == "..":
                raise UnsafeDirectory(f"watch.textfile_dir {directory}: '..' is not accepted")
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise UnsafeDirectory(f"watch.textfile_dir {directory}: {path} does not exist") from None
                os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as error:  # ELOOP: a symlink; ENOTDIR: a file
                raise UnsafeDirectory(f"watch.textfile_dir {directory}: {path} is a symlink or not a directory "
                                      f"({error.strerror}); the root watch follows no links there") from None
            os.close(fd)
            fd = child
            stat = os.fstat(fd)
            # Ancestors are held open as they are walked (a later swap changes nothing): no symlink among them
            # is enough. The directory itself is where the files go: nobody but root may add entries there.
            if len(path) == len(directory.rstrip("/")) and (stat.st_uid != 0 or stat.st_mode & 0o022):
                raise UnsafeDirectory(
                    f"watch.textfile_dir {directory}: {path} is owned by uid {stat.st_uid} with mode "
                    f"{stat.st_mode & 0o7777:04o}; accepted: a directory owned by root and writable by root alone "
                    "(e.g. 0755 root:root), since the root watch writes there")
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_textfile(directory, service, content):
    """<directory>/sglang-deploy-<service>.prom through a temporary file (node_exporter reads *.prom only) in a
    verified directory: created exclusively, no symlink followed, renamed in place."""
    name = f"sglang-deploy-{service}.prom"
    tmp = f".{name}.{os.getpid()}.tmp"
    directory_fd = open_root_directory(directory)
    try:
        try:
            os.unlink(tmp, dir_fd=directory_fd)  # a leftover of a killed run
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=directory_fd)
        with os.fdopen(fd, "w") as f:
            os.fchmod(fd, 0o644)
            f.write(content)
            f.flush()
            os.fsync(fd)
        os.replace(tmp, name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    finally:
        os.close(directory_fd)
    return os.path.join(directory, name)


def read_history(path):
    """The release's watch.jsonl (release.WatchEntry.lines; a DocumentError names the file's line)."""
    try:
        with open(path) as f:
            return WatchEntry.lines(f.read(), path)
    except FileNotFoundError:
        return []


def save_history(path, entries, keep):
    atomic_write(path, "".join(entry.line() for entry in bounded(entries, keep)), 0o644)


def release_roofline(release_dir, model_path):
    """(Roofline, the checkpoint's bytes, the doctor's measured bandwidth or None, the draft model's bytes or None);
    an error is logged once and leaves the metric out, never the measurement."""
    try:
        inputs = Roofline.load(release_dir)
    except FileNotFoundError:
        return None, None, None, None  # staged before the watch knew rooflines, or by hand
    except (OSError, ValueError) as error:  # DocumentError included
        log(f"{Roofline.FILE} unreadable ({error}): no roofline fraction")
        return None, None, None, None
    path = inputs.model_path or model_path
    try:
        checkpoint = safetensors_headers.summarize(path) if path else None
    except (OSError, ValueError, KeyError) as error:
        log(f"checkpoint {path}: {error}: no roofline fraction")
        checkpoint = None
    draft = None
    if inputs.draft_path:  # a separate draft model: its bytes are part of every cycle
        try:
            draft = safetensors_headers.summarize(inputs.draft_path)
        except (OSError, ValueError, KeyError) as error:
            log(f"draft model {inputs.draft_path}: {error}: no roofline fraction")
            checkpoint = None
    measured = None
    try:  # the doctor's probe measured this host's bandwidth: better than the datasheet's
        measured = DoctorReport.load(release_dir).measured_bandwidth()
    except FileNotFoundError:  # the doctor never ran for this release
        pass
    except (OSError, DocumentError) as error:
        log(f"{error}: the datasheet's bandwidth instead")
    return inputs, checkpoint, measured, draft


def idle_check(probe_url, api_key, threshold, service=None):
    """(status, detail, running): status None when the unit's own server listens (listener.py) and is idle
    enough to measure."""
    stranger = foreign_listener(service, probe_url) if service else None
    if stranger:  # nothing listening is a failed run too: the key goes only to the unit's processes
        return "no-listener", stranger, None
    status, body = http(probe_url + "/metrics", api_key=api_key, timeout=10)
    if status != 200:
        return "no-metrics", f"/metrics answered {status} (is --enable-metrics on?)", None
    running = running_requests(body.decode(errors="replace"))
    if running is None:
        return "no-metrics", "/metrics has no sglang:num_running_reqs", None
    if running > threshold:
        return "busy", f"busy, skipped: {running:g} running requests (threshold {threshold})", running
    return None, None, running


def measure(probe_url, secrets_path, max_new_tokens, samples):
    """samples single-stream requests of the gate's prompts, max_new_tokens each (the release's gate's)."""
    measurement = gate.measure_builtin(probe_url, secrets_path, samples=samples, warmup=1,
                                       max_new_tokens=max_new_tokens, concurrency=1)
    entry = {"samples": len(measurement.samples), "decode_tok_s": measurement.decode_median,
             "accept_length": measurement.tau_median, "ttft_s": measurement.ttft_median}
    errors = measurement.errors
    entry["status"] = "ok" if entry["decode_tok_s"] is not None and not errors else "error"
    if errors:
        entry["errors"] = errors[:3]
    return entry


def stamp(entry, release_id):
    return dict(entry, at=now(), unix=round(time.time(), 3), release=release_id)


def run(args):
    store = Store(args.service)
    release_id = store.state().active
    if not release_id or release_id not in store.ids():
        log("no active release: nothing to watch")
        return 0
    meta = store.meta(release_id)
    probe_url = meta.probe_url
    if not LOOPBACK_URL.fullmatch(str(probe_url)):
        log(f"release {release_id} has no loopback probe URL: refusing to send the API key")
        return 2
    try:  # the gate's settings: max_new_tokens (the same requests) and the floors drift is judged by
        config = GateConfig.load(store.release_dir(release_id))
        settings, expect = config.settings, config.expect
    except (OSError, DocumentError) as error:  # said, not silent: the watch measures, without floors
        log(f"the release's gate config is unreadable ({error}): drift is judged without the gate's floors", WARNING)
        settings = expect = None
    min_accept = args.drift_min_accept_length if args.drift_min_accept_length is not None \
        else settings and settings.min_accept_length
    min_decode = settings and settings.min_decode_tok_s
    bound_cache = {}
    history_path = os.path.join(store.release_dir(release_id), WATCH_HISTORY_FILE)
    try:
        history = read_history(history_path)
    except DocumentError as error:  # its restart cap counts the history: nothing measured, nothing restarted
        log(f"{error}: the watch's history is not one it reads; move the file aside to start a new one", WARNING)
        return 2
    api_key = read_api_key(store.secrets_path)

    def record(entry):
        entry = WatchEntry.from_dict(evidence.redact(stamp(entry, release_id), [api_key]), "the watch's entry")
        history.append(entry)
        save_history(history_path, history, args.history_lines)
        log(entry.line().strip())
        return entry

    def measured(label):
        entry = measure(probe_url, store.secrets_path, settings.max_new_tokens if settings else 256, args.samples)
        entry["event"] = label
        if entry["status"] == "ok" and args.output_prompts:
            check = output_check.run(probe_url, api_key, expect and expect.served_name or "default",
                                     limit=args.output_prompts)
            entry["output"] = {name: getattr(check, name) for name in WatchOutput.field_names()}  # its short form
        if entry["status"] == "ok":
            entry["drift"] = drift_reasons(entry, min_accept, min_decode)
            if "inputs" not in bound_cache:  # once per run (the safetensors headers), only when measured
                bound_cache["inputs"] = release_roofline(store.release_dir(release_id), expect and expect.model_path)
            inputs, checkpoint, bandwidth, draft = bound_cache["inputs"]
            entry.update(roofline_bound(inputs, checkpoint, entry, bandwidth, draft))
        return record(entry)

    skipped, detail, running = idle_check(probe_url, api_key, args.max_running_requests, args.service)
    if skipped:
        record({"event": "measure", "status": skipped, "detail": detail, "running": running})
    else:
        entry = measured("measure")
        streak = drift_streak(history)
        if entry.drift:
            log(f"DRIFT ({streak} in a row, acting at {args.drift_runs}): " + "; ".join(entry.drift), WARNING)
        done_today = restarts_within(history, time.time())
        if streak >= args.drift_runs and args.on_drift == "restart" and done_today >= args.max_restarts_per_day:
            reason = (f"drift {streak} times in a row, but {done_today} restarts in the last 24 h reached "
                      f"--max-restarts-per-day {args.max_restarts_per_day}: recorded, not restarted")
            log(f"NOT restarting {args.service}.service: {reason}", WARNING)
            record({"event": "restart-withheld", "status": "capped", "detail": reason})
        elif streak >= args.drift_runs and args.on_drift == "restart":
            reason = f"drift {streak} times in a row: " + "; ".join(entry.drift)
            log(f"restarting {args.service}.service: {reason}", WARNING)
            code = systemctl("restart", f"{args.service}.service").returncode
            ready = code == 0 and wait_healthy(probe_url, float(meta.start_timeout_s or 1800))
            record({"event": "restart", "status": "restarted" if ready else "restart-failed", "detail": reason})
            meta = meta.with_event(now(), f"restarted by the watch ({reason})")
            store.write_meta(release_id, meta)
            if ready:
                measured("after-restart")
    verdict = meta.gate.verdict if meta.gate else None
    try:
        path = write_textfile(args.textfile_dir, args.service, textfile(args.service, release_id, history, verdict,
                                                                        time.time(), {"decode": min_decode,
                                                                                      "accept": min_accept},
                                                                        store.state().recovered))
    except UnsafeDirectory as error:
        log(f"metrics NOT written: {error}", WARNING)
        return 1
    log(f"metrics written to {path}")
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--service", type=service_name, required=True)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--max-running-requests", type=int, default=0)
    parser.add_argument("--on-drift", choices=["record", "restart"], default="record")
    parser.add_argument("--drift-min-accept-length", type=float)
    parser.add_argument("--drift-runs", type=int, default=2)
    parser.add_argument("--max-restarts-per-day", type=int, default=3)
    parser.add_argument("--history-lines", type=int, default=500)
    parser.add_argument("--output-prompts", type=int, default=3,
                        help="known-answer prompts of the output check per run (0: none)")
    parser.add_argument("--textfile-dir", default="/var/lib/prometheus/node-exporter")
    parser.add_argument("--prepare-textfile-dir", action="store_true",
                        help="create or check --textfile-dir (the deploy's step), then exit")
    args = parser.parse_args()
    if args.prepare_textfile_dir:
        try:
            os.close(open_root_directory(args.textfile_dir))
        except UnsafeDirectory as error:
            print(error, file=sys.stderr)
            return 2
        return 0
    store = Store(args.service)
    guard_unit(args.service)  # every keyed request: only to the unit's own processes
    try:
        with Lock(store, f"sglang-deploy watch ({args.service}-watch.service)"):
            return run(args)
    except Locked as error:
        log(f"a deploy or rollback holds the lock ({error}): skipped")
        return 0


if __name__ == "__main__":
    sys.exit(main())
