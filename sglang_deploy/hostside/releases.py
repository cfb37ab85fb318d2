#!/usr/bin/env python3
"""The release store on a deployed host, and the one program that switches the service between releases.

Layout (``/var/lib/sglang-deploy/<service>/``):
  releases/<id>/      sglang.service, sglang.env (0600), profile.json, meta.json (written last = complete)
  state.json          {"active", "last_good", "auto_rollbacks_in_row", "switching"}
  lock                flock held for the whole switch; lock.json says who holds it

Commands (state, mark and prune print JSON on stdout; switch writes last_switch.json; progress on stderr):
  state    --service S                       releases, active/last good, lock holder, installed vs running
  switch   --service S --release ID ...      install, daemon-reload, restart, staged readiness; on failure
                                             roll back to the last good release (--auto-rollback)
  mark     --service S --release ID --verdict good|bad [--gate-file F]
  history  --service S                       every release's switches, gate medians and watch.jsonl
  prune    --service S --keep N              drop old releases (never the active or last good one) and
                                             virtualenvs no retained release points at

Standard library only: runs with the host's python3. SIGHUP is ignored, so a dropped SSH connection
or a killed controller does not stop a switch half-way; the flock dies with the process.
"""

import argparse
import datetime
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

STORE_ROOT = os.environ.get("SGLANG_DEPLOY_STORE", "/var/lib/sglang-deploy")
VENV_ROOT = "/opt/sglang-deploy/venvs"
RELEASE_ID = re.compile(r"(\d{4,})-([0-9a-f]{8})\Z")
SERVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}")
# Readiness and the gate send the API key: only ever to a loopback address of this host.
LOOPBACK_URL = re.compile(r"http://(127(?:\.\d{1,3}){3}|\[::1\]):(\d{1,5})")
EXIT_FAILED_ROLLED_BACK = 1
EXIT_LOCKED = 4
EXIT_ROLLBACK_FAILED = 3


# --- pure helpers (imported by the controller's tests) --------------------------------------------

def content_hash(unit: str, env: str) -> str:
    """A release is defined by its unit and its environment file (the secrets file is not part of it)."""
    return hashlib.sha256(unit.encode() + b"\0" + env.encode()).hexdigest()


def next_release_id(existing_ids, digest: str) -> str:
    sequence = max((int(RELEASE_ID.match(i).group(1)) for i in existing_ids if RELEASE_ID.match(i)), default=0)
    return f"{sequence + 1:04d}-{digest[:8]}"


def last_used(meta) -> str:
    """When a release last became active (a redeploy reuses an old release), else when it was created."""
    activations = [e["at"] for e in meta.get("history", []) if e.get("event", "").startswith("activated")]
    return max(activations + [meta.get("created") or ""])


def releases_to_prune(ids_least_recent_first, keep: int, protected) -> list:
    """Everything but the `keep` most recently used, except protected ids (active, last good)."""
    keep_ids = set(ids_least_recent_first[-keep:]) if keep > 0 else set()
    return [i for i in ids_least_recent_first if i not in keep_ids and i not in protected]


def cmdline_matches(cmdline, exec_start) -> bool:
    """A script's process shows its interpreter first (`python3 /venv/bin/sglang serve ...`)."""
    if not cmdline or not exec_start:
        return False
    if cmdline == exec_start:
        return True
    return os.path.basename(cmdline[0]).startswith("python") and cmdline[1:] == exec_start


def release_auth(meta) -> str:
    """api-key or none; releases from before the field existed: from their command line (--config carries the key)."""
    if meta.get("auth") in ("api-key", "none"):
        return meta["auth"]
    return "api-key" if "--config" in (meta.get("exec_start") or []) else "none"


def auth_change(from_meta, to_meta):
    """A sentence when switching between the two releases changes whether the server requires the API key."""
    if not from_meta or not to_meta:
        return None
    before, after = release_auth(from_meta), release_auth(to_meta)
    if before == after:
        return None
    if after == "none":
        return (f"AUTHENTICATION CHANGES: release {to_meta.get('id', '?')} runs WITHOUT an API key (auth none); the "
                f"release it replaces required one")
    return (f"authentication changes: release {to_meta.get('id', '?')} requires the API key (auth api-key); the "
            f"release it replaces ran without one")


def flag_differences(argv, reference) -> list:
    """'--flag: reference -> argv' for every flag whose value differs (launcher excluded)."""
    def flags(args):
        out, current = {}, None
        for arg in args:
            if arg.startswith("--"):
                current = arg
                out[current] = []
            elif current:
                out[current].append(arg)
        return {k: " ".join(v) or "on" for k, v in out.items()}

    mine, theirs = flags(argv or []), flags(reference or [])
    return [f"{name}: {theirs.get(name, '(absent)')} -> {mine.get(name, '(absent)')}"
            for name in sorted(set(mine) | set(theirs)) if mine.get(name) != theirs.get(name)]


# --- store ----------------------------------------------------------------------------------------

class Store:
    def __init__(self, service):
        self.service = service
        self.root = os.path.join(STORE_ROOT, service)
        self.releases_dir = os.path.join(self.root, "releases")
        self.state_path = os.path.join(self.root, "state.json")
        self.unit_path = f"/etc/systemd/system/{service}.service"
        self.env_path = f"/etc/sglang-deploy/{service}/sglang.env"
        self.secrets_path = f"/etc/sglang-deploy/{service}/secrets.yaml"
        self.problems = []  # files found corrupted and set aside, for the controller to show

    def release_dir(self, release_id):
        return os.path.join(self.releases_dir, release_id)

    def set_aside(self, path, error):
        """A corrupted store file must not wedge deploys, rollbacks and listings: rename it, say so."""
        aside = f"{path}.corrupt-{datetime.datetime.now().strftime('%Y%m%dT%H%M%S')}"
        try:
            os.replace(path, aside)
        except OSError:
            aside = "(could not be renamed)"
        message = f"{path} is corrupted ({type(error).__name__}: {error}); set aside as {aside}"
        self.problems.append(message)
        log(message)

    def ids(self):
        """Complete releases (a readable meta.json present), oldest first; a corrupted meta.json is set aside."""
        if not os.path.isdir(self.releases_dir):
            return []
        ids = []
        for i in os.listdir(self.releases_dir):
            path = os.path.join(self.releases_dir, i, "meta.json")
            if not RELEASE_ID.match(i) or not os.path.exists(path):
                continue
            try:
                with open(path) as f:
                    if not isinstance(json.load(f), dict):
                        raise ValueError("not a JSON object")
            except (ValueError, UnicodeDecodeError) as error:
                self.set_aside(path, error)
                continue
            ids.append(i)
        return sorted(ids, key=lambda i: int(RELEASE_ID.match(i).group(1)))

    def meta(self, release_id):
        with open(os.path.join(self.release_dir(release_id), "meta.json")) as f:
            return json.load(f)

    def write_meta(self, release_id, meta):
        atomic_write(os.path.join(self.release_dir(release_id), "meta.json"), json.dumps(meta, indent=1) + "\n", 0o644)

    def state(self):
        empty = {"active": None, "last_good": None, "auto_rollbacks_in_row": 0, "switching": None}
        try:
            with open(self.state_path) as f:
                state = json.load(f)
            if not isinstance(state, dict):
                raise ValueError("not a JSON object")
            return state
        except FileNotFoundError:
            return empty
        except (ValueError, UnicodeDecodeError) as error:
            # The next deploy converges: the host is inconsistent with "no active release".
            self.set_aside(self.state_path, error)
            return empty

    def save_state(self, state):
        os.makedirs(self.root, exist_ok=True)
        atomic_write(self.state_path, json.dumps(state, indent=1) + "\n", 0o644)

    def read(self, path):
        try:
            with open(path) as f:
                return f.read()
        except FileNotFoundError:
            return None


def atomic_write(path, content, mode):
    """Write, fsync, rename, then fsync the directory: the rename survives a power loss."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def log(message):
    try:
        print(f"[releases] {message}", file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError):
        pass  # the controller went away; carry on


def emit(document):
    try:
        print(json.dumps(document, indent=1), flush=True)
    except (BrokenPipeError, OSError):
        pass


class StderrShield:
    """Progress of the switch and of the programs it starts (gate, bench) goes to a pipe this process drains
    into a log file and, while it is still there, to the controller's stderr. A dropped SSH connection then
    breaks only that copy: no program gets a BrokenPipeError, so a good release is not rolled back for it."""

    def __init__(self, log_path):
        import threading

        self.original = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        self.log = open(log_path, "wb")  # the last switch's progress
        self.thread = threading.Thread(target=self._pump, args=(read_end,), daemon=True)
        self.thread.start()

    def _pump(self, read_end):
        forward = True
        while True:
            data = os.read(read_end, 65536)
            if not data:
                break
            self.log.write(data)
            self.log.flush()
            if forward:
                try:
                    os.write(self.original, data)
                except OSError:
                    forward = False  # the controller is gone; keep logging
        os.close(read_end)

    def close(self):
        try:
            sys.stderr.flush()
        except OSError:
            pass
        os.dup2(self.original, 2)  # closes the pipe's last write end: the pump sees EOF
        self.thread.join(timeout=5)
        self.log.close()


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --- service inspection ---------------------------------------------------------------------------

def systemctl(*args):
    return subprocess.run(["systemctl", *args], capture_output=True, text=True)


def service_status(service):
    show = systemctl("show", "-p", "ActiveState", "-p", "SubState", "-p", "Result", "-p", "MainPID",
                     "-p", "ExecMainStartTimestampMonotonic", f"{service}.service").stdout
    props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    pid = int(props.get("MainPID") or 0)
    cmdline = None
    if pid:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = [a.decode() for a in f.read().split(b"\0") if a]
        except FileNotFoundError:
            pass
    return {"active_state": props.get("ActiveState"), "sub_state": props.get("SubState"),
            "result": props.get("Result"), "main_pid": pid, "cmdline": cmdline,
            "started_monotonic_us": props.get("ExecMainStartTimestampMonotonic")}


# --- who listens on the port (before the API key is sent) ------------------------------------------

def listening_inodes(port, tables=("/proc/net/tcp", "/proc/net/tcp6")):
    """Socket inodes in LISTEN state on the port (any local address)."""
    inodes = set()
    for table in tables:
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def unit_pids(service):
    """Every process of the unit's cgroup (SGLang's schedulers and detokenizer included)."""
    group = systemctl("show", "-p", "ControlGroup", "--value", f"{service}.service").stdout.strip()
    pids = set()
    if group:
        for directory, _, files in os.walk("/sys/fs/cgroup" + group):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(directory, "cgroup.procs")) as f:
                        pids.update(int(line) for line in f if line.strip())
                except OSError:
                    pass
    main_pid = service_status(service)["main_pid"]
    return pids | ({main_pid} if main_pid else set())


def socket_owners(inodes):
    """inode -> pids holding it open (the processes this host's /proc shows)."""
    owners = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    owners.setdefault(target[8:-1], set()).add(int(entry))
        except OSError:
            continue
    return owners


def process_label(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} ({comm}, uid {uid})"


def foreign_listener(service, probe_url):
    """None when every socket listening on the probe's port belongs to the unit's processes; else why not.
    SGLang binds its port only after minutes of loading: a local user who binds it first would otherwise
    receive the API key and could fake readiness and the gate."""
    port = int(LOOPBACK_URL.fullmatch(probe_url).group(2))
    inodes = listening_inodes(port)
    if not inodes:
        return f"nothing listens on port {port}"
    pids = unit_pids(service)
    owners = socket_owners(inodes)
    strangers = sorted({pid for held in owners.values() for pid in held if pid not in pids})
    unowned = [inode for inode in inodes if not owners.get(inode)]
    if strangers or unowned:
        who = ", ".join(process_label(pid) for pid in strangers) or "a process outside this host's view"
        return (f"port {port} is held by {who}, not by {service}.service: the API key is not sent "
                "(another process bound the port first)")
    return None


def journal_since(service, since):
    result = subprocess.run(["journalctl", "-u", f"{service}.service", "--no-pager", "-o", "cat", "--since", since],
                            capture_output=True, text=True)
    return result.stdout.rstrip()


def failed_start(service, since, api_key, lines=25):
    """The journal of a failed start, secrets redacted: its last lines and what SGLang's own log says."""
    journal = journal_since(service, since)
    evidence = evidence_module()
    tail = evidence.redact("\n".join(journal.splitlines()[-lines:]), [api_key])
    findings = evidence.log_findings(journal)
    cause = None
    if findings["graph_capture_failed"]:
        cause = ("decode CUDA graph capture failed and SGLang exited (0.5.23 has no eager fallback): "
                 + evidence.redact(findings["graph_capture_failed"], [api_key]))
    return tail, cause


def read_api_key(path):
    try:
        for line in open(path):
            if line.strip().startswith("api-key:"):
                value = line.split(":", 1)[1].strip()
                return json.loads(value) if value.startswith('"') else value
    except FileNotFoundError:
        pass
    return None


def http(url, body=None, api_key=None, timeout=10):
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, OSError) as error:
        return None, str(error).encode()


def wait_ready(store, probe_url, timeout, settle, auth="api-key"):
    """Stages: unit active after the settle time -> /health 200 -> a real /generate returns tokens -> with
    auth api-key, a request without the key is refused (401)."""
    start = time.monotonic()
    since = (datetime.datetime.now() - datetime.timedelta(seconds=2)).strftime("%Y-%m-%d %H:%M:%S")
    api_key = read_api_key(store.secrets_path)
    if auth == "api-key" and not api_key:
        return {"ready": False, "stage": "auth", "elapsed_s": 0.0, "journal": "",
                "detail": f"the release requires an API key (auth api-key) but {store.secrets_path} holds none"}
    stage, detail = "active", ""
    while time.monotonic() - start < timeout:
        elapsed = time.monotonic() - start
        status = service_status(store.service)
        state = status["active_state"]
        if state in ("failed", "inactive") or (state != "active" and elapsed > settle):
            tail, cause = failed_start(store.service, since, api_key)
            detail = f"{store.service}.service is {state} ({status['sub_state']}, result {status['result']})"
            return {"ready": False, "stage": "active", "detail": detail + (f": {cause}" if cause else ""),
                    "elapsed_s": round(elapsed, 1), "journal": tail}
        if elapsed < settle:
            time.sleep(0.3)
            continue
        stage = "health"
        status, body = http(probe_url + "/health", timeout=5)
        if status != 200:
            detail = f"/health answered {status}"
            time.sleep(0.5)
            continue
        stage = "listener"
        stranger = foreign_listener(store.service, probe_url)
        if stranger and not stranger.startswith("nothing listens"):
            return {"ready": False, "stage": "listener", "detail": stranger, "journal": "",
                    "elapsed_s": round(time.monotonic() - start, 1)}
        stage = "generate"
        status, body = http(probe_url + "/generate", {"text": "Say hello.", "sampling_params": {
            "max_new_tokens": 8, "temperature": 0}}, api_key=api_key, timeout=max(5, timeout - elapsed))
        try:
            tokens = json.loads(body)["meta_info"]["completion_tokens"] if status == 200 else 0
        except (ValueError, KeyError, TypeError):
            tokens = 0
        if tokens > 0 and auth == "api-key":
            status, _ = http(probe_url + "/v1/models", timeout=10)  # no key: must be refused
            if status != 401:
                return {"ready": False, "stage": "auth", "elapsed_s": round(time.monotonic() - start, 1),
                        "journal": "", "detail": f"a request without the API key got {status}, not 401: the "
                                                 "server does not enforce authentication"}
        if tokens > 0:
            return {"ready": True, "stage": "generate", "elapsed_s": round(time.monotonic() - start, 1),
                    "auth": auth}
        detail = f"/generate answered {status}: {body[:200].decode(errors='replace')}"
        time.sleep(0.5)
    tail, cause = failed_start(store.service, since, api_key)
    return {"ready": False, "stage": stage, "detail": f"not ready within {timeout:.0f} s ({cause or detail})",
            "elapsed_s": round(time.monotonic() - start, 1), "journal": tail}


# --- switching ------------------------------------------------------------------------------------

class Locked(Exception):
    pass


class Lock:
    def __init__(self, store, owner):
        self.path = os.path.join(store.root, "lock")
        self.info_path = os.path.join(store.root, "lock.json")
        self.owner = owner
        self.handle = None

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.handle = open(self.path, "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Locked(holder(self.info_path)) from None
        atomic_write(self.info_path, json.dumps({"owner": self.owner, "pid": os.getpid(), "since": now()}) + "\n", 0o644)
        return self

    def __exit__(self, *exc):
        try:
            os.unlink(self.info_path)
        except FileNotFoundError:
            pass
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def holder(info_path):
    try:
        with open(info_path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return {"owner": "unknown"}


def lock_holder(store):
    """The current holder, or None (a stale lock.json of a dead process does not count)."""
    path = os.path.join(store.root, "lock")
    if not os.path.exists(path):
        return None
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return holder(os.path.join(store.root, "lock.json"))
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def install(store, release_id):
    """Put a release's unit and environment in place (atomic renames) and make systemd see them."""
    source = store.release_dir(release_id)
    os.makedirs(os.path.dirname(store.env_path), exist_ok=True)
    atomic_write(store.env_path, store.read(os.path.join(source, "sglang.env")), 0o600)
    atomic_write(store.unit_path, store.read(os.path.join(source, "sglang.service")), 0o644)
    if os.environ.get("SGLANG_DEPLOY_TEST_DIE_AFTER") == "unit-written":
        log("TEST HOOK: dying after the unit was written, before the restart")
        os._exit(9)
    systemctl("daemon-reload")
    systemctl("enable", f"{store.service}.service")


def activate(store, release_id, probe_url, timeout, settle):
    install(store, release_id)
    log(f"restarting {store.service}.service on release {release_id}")
    systemctl("reset-failed", f"{store.service}.service")  # the unit's start limit counts failures, not switches
    systemctl("restart", f"{store.service}.service")
    return wait_ready(store, probe_url, timeout, settle, auth=release_auth(store.meta(release_id)))


def cmd_switch(args):
    store = Store(args.service)
    if args.release not in store.ids():
        message = f"release {args.release} is not in {store.releases_dir}; retained: {', '.join(store.ids()) or 'none'}"
        log(message)
        return 2
    try:
        with Lock(store, args.owner):
            return switch_locked(store, args)
    except Locked as locked:
        info = locked.args[0]
        message = (f"another deploy or rollback is running: {info.get('owner')} (pid {info.get('pid')}, "
                   f"since {info.get('since')})")
        log(message)
        return EXIT_LOCKED


def switch_locked(store, args):
    state = store.state()
    previous = state.get("active")
    if args.auto_rollback and state.get("auto_rollbacks_in_row", 0) >= args.max_auto_rollbacks and not args.force:
        return finish(store, {"ok": False, "release": args.release, "error": (
            f"{state['auto_rollbacks_in_row']} automatic rollbacks in a row (cap {args.max_auto_rollbacks}); "
            "fix the cause, or deploy with --data force=true")}, 2)
    meta = store.meta(args.release)
    problem = weights_module().release_problem(meta)  # the weights must be in place and verified: else no switch
    if problem:
        return finish(store, {"ok": False, "release": args.release, "error": problem}, 2)
    state["switching"] = {"to": args.release, "from": previous, "since": now(), "reason": args.reason}
    store.save_state(state)
    change = auth_change(store.meta(previous) if previous in store.ids() else None, dict(meta, id=args.release))
    if change:
        log(change)
    result = activate(store, args.release, args.probe_url, args.timeout, args.settle)
    document = {"release": args.release, "previous": previous, "reason": args.reason, "readiness": result,
                "auth": release_auth(meta)}
    if change:
        document["auth_change"] = change
    if not result["ready"]:
        log(f"release {args.release} failed at stage {result['stage']}: {result.get('detail')}")
        return fail_and_roll_back(store, state, meta, document, args, f"failed to start: {result.get('detail')}")

    verdict = "good" if args.mark_good_on_ready else meta.get("verdict")
    if args.gate:
        try:
            gate_result = run_gate(store, args, meta, state)
        except Exception as error:  # noqa: BLE001 - a broken gate must not leave the switch half-done
            gate_result = {"verdict": "inconclusive", "reasons": [], "rows": [], "config_problems": [],
                           "inconclusive": [f"the gate could not run: {type(error).__name__}: {error}"]}
        document["gate"] = gate_result
        meta["gate"] = {"verdict": gate_result["verdict"], "summary": gate_summary(gate_result),
                        "at": now(), "simulated": gate_result.get("simulated"),
                        "baseline": gate_result.get("baseline_release")}
        if gate_result["verdict"] == "fail" or (gate_result["verdict"] == "inconclusive"
                                                and args.on_inconclusive == "rollback"):
            return fail_and_roll_back(store, state, meta, document, args,
                                      f"gate {gate_result['verdict']}: " + "; ".join(
                                          gate_result["reasons"] + gate_result["inconclusive"]),
                                      verdict="bad" if gate_result["verdict"] == "fail" else "inconclusive")
        verdict = "good" if gate_result["verdict"] == "pass" else "inconclusive"
    meta["verdict"] = verdict
    # What decided the verdict: "gate" (measured; meta["gate"] says how), "skip_gate" (marked good when ready,
    # not measured now: whatever meta["gate"] holds is an older measurement), or an earlier decision.
    meta["verdict_by"] = "gate" if args.gate else "skip_gate" if args.mark_good_on_ready else meta.get("verdict_by")
    meta.setdefault("history", []).append({"at": now(), "event": f"activated ({args.reason})"
                                           + (", marked good without the gate (skip_gate)"
                                              if args.mark_good_on_ready and not args.gate else "")})
    store.write_meta(args.release, meta)
    if verdict == "good":
        state.update(last_good=args.release, auto_rollbacks_in_row=0)
    state.update(active=args.release, switching=None)
    store.save_state(state)
    document.update(ok=True, active=args.release, verdict=verdict)
    return finish(store, document, 0)


def fail_and_roll_back(store, state, meta, document, args, event, verdict="bad"):
    meta["verdict"] = verdict
    meta["verdict_by"] = "gate" if "gate" in document else "readiness"
    meta.setdefault("history", []).append({"at": now(), "event": event})
    store.write_meta(args.release, meta)
    document.update(ok=False, failure=event)
    target = state.get("last_good")
    if not args.auto_rollback or not target or target == args.release:
        state.update(active=args.release if target != args.release else None, switching=None)
        store.save_state(state)
        document["rolled_back_to"] = None
        return finish(store, document, EXIT_FAILED_ROLLED_BACK)
    log(f"automatic rollback to the last good release {target}")
    change = auth_change(dict(meta, id=args.release), dict(store.meta(target), id=target))
    if change:
        log(change)
        document["rollback_auth_change"] = change
    # The target's own port and start timeout: a deploy that changed the port must not probe the new one.
    target_meta = store.meta(target)
    target_url = target_meta.get("probe_url") if LOOPBACK_URL.fullmatch(str(target_meta.get("probe_url"))) else None
    back = activate(store, target, target_url or args.probe_url,
                    args.rollback_timeout if args.rollback_timeout_given
                    else float(target_meta.get("start_timeout_s") or args.timeout), args.settle)
    if back["ready"]:
        target_meta = store.meta(target)
        target_meta.setdefault("history", []).append({"at": now(), "event": "activated (automatic rollback)"})
        store.write_meta(target, target_meta)
    state.update(active=target if back["ready"] else None, switching=None,
                 auto_rollbacks_in_row=state.get("auto_rollbacks_in_row", 0) + 1)
    store.save_state(state)
    document.update(rolled_back_to=target, rollback_readiness=back)
    return finish(store, document, EXIT_FAILED_ROLLED_BACK if back["ready"] else EXIT_ROLLBACK_FAILED)


def gate_module():
    try:
        from . import gate  # imported as sglang_deploy.hostside.releases
    except ImportError:
        import gate  # run as /opt/sglang-deploy/bin/releases.py
    return gate


def weights_module():
    try:
        from . import weights
    except ImportError:
        import weights
    return weights


def evidence_module():
    try:
        from . import evidence
    except ImportError:
        import evidence
    return evidence


def choose_baseline(candidates, last_good, current):
    """The measurement to compare a release with: (release id or None, a sentence saying which and why).

    candidates: [(release id, meta, gate-result.json's verdict or None)], oldest first. A baseline is a
    measurement that passed its gate (meta's gate verdict and the stored result both "pass"). A release
    marked good without passing (skip_gate: never measured, or measured and failed) is no baseline: the
    last good release when it passed, else the release whose gate passed last, else none (the verdict
    then rests on the floors). The release being measured is never its own baseline.
    """
    def passed(meta, stored_verdict):
        return (meta.get("gate") or {}).get("verdict") == "pass" and stored_verdict == "pass"

    eligible = [(release_id, meta) for release_id, meta, stored in candidates
                if release_id != current and passed(meta, stored)]
    last_good_meta = next((meta for release_id, meta, _ in candidates if release_id == last_good), None)
    why_not = None
    if last_good and last_good != current and last_good_meta is not None:
        if any(release_id == last_good for release_id, _ in eligible):
            return last_good, f"release {last_good}, the last good release (gate passed {last_good_meta['gate'].get('at')})"
        gate = (last_good_meta.get("gate") or {}).get("verdict")
        why_not = (f"the last good release {last_good} is no baseline: it was marked good without passing its gate ("
                   + ("never measured" if not gate else f"gate {gate}" if gate != "pass" else "no stored passed result")
                   + ")")
    if eligible:
        release_id, meta = max(eligible, key=lambda item: item[1]["gate"].get("at") or "")
        note = f"release {release_id}, the last release that passed its gate ({meta['gate'].get('at')})"
        return release_id, (f"{note}; {why_not}" if why_not else note)
    return None, ("no passed baseline, the verdict rests on the floors (no other release on this host passed its gate"
                  + (f"; {why_not})" if why_not else ")"))


def run_gate(store, args, meta, state):
    gate = gate_module()
    directory = store.release_dir(args.release)
    with open(os.path.join(directory, "gate-config.json")) as f:
        config = json.load(f)
    candidates, stored = [], {}
    for release_id in store.ids():
        text = store.read(os.path.join(store.release_dir(release_id), "gate-result.json"))
        try:
            stored[release_id] = json.loads(text) if text else {}
        except ValueError:  # a damaged result is no baseline
            stored[release_id] = {}
        candidates.append((release_id, store.meta(release_id), stored[release_id].get("verdict")))
    baseline_release, note = choose_baseline(candidates, state.get("last_good"), args.release)
    baseline = stored[baseline_release].get("measurement") if baseline_release else None
    status = service_status(store.service)
    log(f"gate: checking the running server against release {args.release}, then measuring; baseline: {note}")
    evidence = evidence_module()
    environ = evidence.process_environment(status["main_pid"])
    found = {"environ": environ, "findings": evidence.log_findings(evidence.journal_since_start(store.service)),
             "costly_env": evidence.costly_undeclared(environ, config["expect"].get("environment") or {},
                                                      evidence.environment_sources(store.service))}
    api_key = read_api_key(store.secrets_path)
    stranger = foreign_listener(store.service, args.probe_url)
    if stranger:
        return {"verdict": "fail", "reasons": [stranger], "rows": [], "config_problems": [], "inconclusive": []}
    result = gate.run(args.probe_url, store.secrets_path, api_key, status["main_pid"],
                      cmdline_matches(status["cmdline"], meta.get("exec_start")), status["cmdline"], config,
                      baseline, found)
    result = evidence.redact(result, [api_key])
    result["baseline_release"] = baseline_release
    result["baseline"] = {"release": baseline_release, "note": note}
    atomic_write(os.path.join(directory, "gate-result.json"), json.dumps(result, indent=1) + "\n", 0o644)
    log("gate result:\n" + gate.table(result))
    return result


def gate_summary(result):
    measurement = result.get("measurement") or {}
    decode, tau = measurement.get("decode_tok_s"), measurement.get("accept_length")
    parts = [result["verdict"]]
    if decode:
        parts.append(f"{decode['median']:.1f} tok/s")
    if tau:
        parts.append(f"tau {tau['median']:.2f}")
    return " ".join(parts)


def describe(document):
    """The switch's outcome for a person (stderr, and pyinfra shows it when the command fails)."""
    if "readiness" not in document:
        return f"switch refused: {document.get('error')}"
    ready = document["readiness"]
    if document.get("ok"):
        return (f"{document['auth_change']}\n" if document.get("auth_change") else "") + (
                f"release {document['release']} is active ({document.get('verdict') or 'unverified'}; ready after "
                f"{ready['elapsed_s']} s; previous: {document.get('previous')})")
    if ready.get("ready"):
        lines = [f"release {document['release']} FAILED: {document.get('failure')}"]
    else:
        lines = [f"release {document['release']} FAILED at stage '{ready['stage']}': {ready.get('detail')} "
                 f"(after {ready['elapsed_s']} s)"]
    if ready.get("journal"):
        lines += ["last journal lines of the failed start:", *("  " + l for l in ready["journal"].splitlines())]
    target = document.get("rolled_back_to")
    if document.get("rollback_auth_change"):
        lines.append(document["rollback_auth_change"])
    if target:
        back = document.get("rollback_readiness", {})
        lines.append(f"automatic rollback to {target}: " + ("healthy again" if back.get("ready")
                                                               else f"ALSO FAILED ({back.get('detail')})"))
    else:
        lines.append("no good release to roll back to: the service is left as it is")
    return "\n".join(lines)


def finish(store, document, code):
    document = evidence_module().redact(document, [read_api_key(store.secrets_path)])
    document["exit_code"] = code
    document["finished"] = now()
    os.makedirs(store.root, exist_ok=True)
    atomic_write(os.path.join(store.root, "last_switch.json"), json.dumps(document, indent=1) + "\n", 0o644)
    log(describe(document))  # the full document is in last_switch.json
    return code


def cmd_mark(args):
    store = Store(args.service)
    meta = store.meta(args.release)
    meta["verdict"] = args.verdict
    meta["verdict_by"] = "mark"
    if args.gate_file:
        with open(args.gate_file) as f:
            meta["gate"] = json.load(f)
    meta.setdefault("history", []).append({"at": now(), "event": f"marked {args.verdict}"})
    store.write_meta(args.release, meta)
    state = store.state()
    if args.verdict == "good":
        state.update(last_good=args.release, auto_rollbacks_in_row=0)
        store.save_state(state)
    emit({"ok": True, "release": args.release, "verdict": args.verdict})
    return 0


def cmd_state(args):
    store = Store(args.service)
    state = store.state()
    releases = []
    for release_id in store.ids():
        meta = store.meta(release_id)
        meta["id"] = release_id
        releases.append(meta)
    unit, env = store.read(store.unit_path), store.read(store.env_path)
    installed = content_hash(unit, env) if unit is not None and env is not None else None
    running = service_status(args.service)
    active_meta = next((r for r in releases if r["id"] == state.get("active")), None)
    consistent = bool(active_meta and installed == active_meta.get("content_hash")
                      and running["active_state"] == "active" and cmdline_matches(running["cmdline"], active_meta.get("exec_start"))
                      and not state.get("switching"))
    emit({"service": args.service, "state": state, "releases": releases, "lock": lock_holder(store),
          "installed_hash": installed, "running": running, "consistent": consistent, "problems": store.problems})
    return 0


def cmd_history(args):
    """Every retained release's switches, gate result (medians) and perf-watch history, oldest first."""
    store = Store(args.service)
    out = []
    for release_id in store.ids():
        meta = store.meta(release_id)
        directory = store.release_dir(release_id)
        try:
            gate = json.loads(store.read(os.path.join(directory, "gate-result.json")) or "{}")
        except ValueError:
            gate = {}
        measurement = gate.get("measurement") or {}
        try:
            settings = json.loads(store.read(os.path.join(directory, "gate-config.json")) or "{}").get("settings") or {}
        except (ValueError, AttributeError):
            settings = {}
        watch = []
        for line in (store.read(os.path.join(directory, "watch.jsonl")) or "").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                watch.append(entry)
        out.append({"id": release_id, "created": meta.get("created"), "history": meta.get("history") or [],
                    "verdict": meta.get("verdict"),
                    "floors": {"decode_tok_s": settings.get("min_decode_tok_s"),
                               "accept_length": settings.get("min_accept_length")},
                    "gate": {"verdict": gate.get("verdict"), "at": (meta.get("gate") or {}).get("at"),
                             **{key: (measurement.get(key) or {}).get("median")
                                for key in ("decode_tok_s", "accept_length", "ttft_s")}} if gate else None,
                    "watch": watch[-args.limit:]})
    emit({"service": args.service, "state": store.state(), "releases": out})
    return 0


def cmd_prune(args):
    store = Store(args.service)
    try:
        with Lock(store, "prune"):
            return prune_locked(store, args)
    except Locked as locked:
        log(f"prune skipped: another deploy or rollback is running ({locked.args[0].get('owner')})")
        emit({"ok": False, "skipped": "locked"})
        return 0


def prune_locked(store, args):
    state = store.state()
    protected = {state.get("active"), state.get("last_good"), (state.get("switching") or {}).get("to")}
    by_use = sorted(store.ids(), key=lambda release_id: last_used(store.meta(release_id)))
    removed = releases_to_prune(by_use, args.keep, protected)
    for release_id in removed:
        shutil.rmtree(store.release_dir(release_id))
    # Virtualenvs stay while any retained release of any service points at them.
    in_use = set()
    for service in os.listdir(STORE_ROOT) if os.path.isdir(STORE_ROOT) else []:
        other = Store(service)
        for release_id in other.ids():
            in_use.add(other.meta(release_id).get("venv"))
    dropped_venvs = []
    if os.path.isdir(VENV_ROOT) and in_use:
        for name in os.listdir(VENV_ROOT):
            path = os.path.join(VENV_ROOT, name)
            if path not in in_use and args.prune_venvs:
                shutil.rmtree(path)
                dropped_venvs.append(path)
    emit({"ok": True, "removed": removed, "kept": store.ids(), "removed_venvs": dropped_venvs})
    return 0


def service_name(value):
    """argparse type: a unit name that is also a safe path component."""
    if not SERVICE_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(f"not a service name: {value!r}")
    return value


def loopback_url(value):
    """argparse type: the API key is sent to this URL, so it must be a loopback address of this host."""
    if not LOOPBACK_URL.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not http://127.x.x.x:PORT or http://[::1]:PORT; readiness and "
                                         "the gate connect over loopback only")
    return value


def main():
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    parser = argparse.ArgumentParser(prog="releases.py")
    sub = parser.add_subparsers(dest="command", required=True)
    state = sub.add_parser("state")
    state.add_argument("--service", required=True, type=service_name)
    switch = sub.add_parser("switch")
    switch.add_argument("--service", required=True, type=service_name)
    switch.add_argument("--release", required=True)
    switch.add_argument("--probe-url", required=True, type=loopback_url)
    switch.add_argument("--timeout", type=float, required=True)
    switch.add_argument("--rollback-timeout", type=float)
    switch.add_argument("--settle", type=float, default=2.0)
    switch.add_argument("--reason", default="deploy")
    switch.add_argument("--owner", default="unknown")
    switch.add_argument("--auto-rollback", action="store_true")
    switch.add_argument("--mark-good-on-ready", action="store_true")
    switch.add_argument("--max-auto-rollbacks", type=int, default=3)
    switch.add_argument("--force", action="store_true")
    switch.add_argument("--gate", action="store_true", help="run the gate (releases/<id>/gate-config.json) once ready")
    switch.add_argument("--on-inconclusive", choices=["rollback", "keep"], default="rollback")
    mark = sub.add_parser("mark")
    mark.add_argument("--service", required=True, type=service_name)
    mark.add_argument("--release", required=True)
    mark.add_argument("--verdict", choices=["good", "bad"], required=True)
    mark.add_argument("--gate-file")
    history = sub.add_parser("history")
    history.add_argument("--service", required=True, type=service_name)
    history.add_argument("--limit", type=int, default=500)
    prune = sub.add_parser("prune")
    prune.add_argument("--service", required=True, type=service_name)
    prune.add_argument("--keep", type=int, default=5)
    prune.add_argument("--prune-venvs", action="store_true")
    args = parser.parse_args()
    args.rollback_timeout_given = getattr(args, "rollback_timeout", None) is not None
    if getattr(args, "rollback_timeout", 0) is None:
        args.rollback_timeout = args.timeout
    shield = StderrShield(os.path.join(STORE_ROOT, args.service, "switch.log")) if args.command == "switch" else None
    try:
        return {"state": cmd_state, "switch": cmd_switch, "mark": cmd_mark, "prune": cmd_prune,
                "history": cmd_history}[args.command](args)
    finally:
        if shield:
            shield.close()


if __name__ == "__main__":
    sys.exit(main())
