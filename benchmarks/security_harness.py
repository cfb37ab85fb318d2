"""Allowed dests with hostile values, checked by what SGLang's own front end does with them (security review 4, issue
49 item 2). Not CI: each group starts SGLang 0.5.23's `sglang serve` (the Scheduler modelled, testbed/local_sglang.py;
about 20-40 s of CPU and 4 GB each).

    python benchmarks/security_harness.py [--groups baseline,logging,...] [--json out.json]

Each group runs the proven profile's flags plus the group's dests (every one `allowed` by the classes file, at the
edge of what flag-value-range accepts or at a value chosen to open something), with the tool's own keys (--config:
api-key and admin-api-key) and its --allowed-media-domains, in a private mount namespace whose /tmp, /var/tmp and
/dev/shm are fresh tmpfs (so whatever the server puts there is its own). Invariants, each counted:

- listeners: the process tree listens on TCP on the declared port only;
- no key: every route of SGLang's table (sglang_deploy/validate/routes.py, registered) but the reviewed public ones refuses;
- API key: every admin route of http_server.py refuses it (those of included routers are reported, see
  docs/refusals.md);
- shared directories: nothing in /dev/shm whose name another user could know first (a pid of the tree in it);
  in /tmp and /var/tmp (the unit's own: PrivateTmp=yes) only names of tempfile.mkdtemp's kind; every file the
  server left in /tmp, /var/tmp or /dev/shm is listed.
- written outside: the server's HOME, caches and cwd are the group's work directory (the service directories'
  stand-in); the files it writes elsewhere are those listed above (the persistent file system is not watched).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from sglang_deploy.validate import flag_classes, flag_table, routes  # noqa: E402
from sglang_deploy.flags import MEDIA_DOMAINS_FLAG, NO_MEDIA_DOMAIN  # noqa: E402
from testbed.calibration import PROVEN  # noqa: E402
from testbed.local_sglang import LocalSGLang, model_dir  # noqa: E402

VERSION = "0.5.23"
WORK = Path.home() / ".cache" / "sglang-deploy-security-harness"
# dests -> values: allowed by the classes file (checked below), hostile within what the tool accepts
GROUPS = {
    "baseline": [],
    "logging": ["--log-level", "warning", "--log-level-http", "warning", "--enable-request-time-stats-logging",
                "--decode-log-interval", "1", "--gc-warning-threshold-secs", "0.0001",
                "--uvicorn-access-log-exclude-prefixes", "/health", "/metrics"],
    "limits-at-the-edge": ["--media-url-max-file-size-mb", "1024", "--max-queued-requests", "1",
                           "--watchdog-timeout", "86400", "--soft-watchdog-timeout", "86400",
                           "--sampling-mask-max-tokens", "262144"],
    "workers-and-tokenizer": ["--tokenizer-worker-num", "1", "--detokenizer-worker-num", "1",
                              "--enable-dynamic-batch-tokenizer", "--dynamic-batch-tokenizer-batch-size", "256"],
    "metrics-and-scheduling": ["--enable-metrics-for-all-schedulers",
                               "--schedule-policy", "lpm", "--schedule-conservativeness", "0.3"],
}

# Controls: a dest the tool now refuses (security review 4, A2), run anyway to show the invariants can fail.
CONTROLS = {"control-root-path-health": ["--fastapi-root-path", "/health"]}


def dest_of(table, option):
    return next((a["dest"] for a in table["actions"] if option in a["options"]), None)


def check_allowed(flags):
    """Every group flag is `allowed` and within flag-value-range (else the group is not a test of allowed dests)."""
    table, classes = flag_table.load(VERSION), flag_classes.load(VERSION)
    problems, names = [], [f for f in flags if f.startswith("--")]
    for name in names:
        dest = dest_of(table, name)
        if classes.get(dest, ("?",))[0] != "allowed":
            problems.append(f"{name}: class {classes.get(dest, ('none',))[0]}")
    return problems, [dest_of(table, name) for name in names]


class Private(LocalSGLang):
    """SGLang in a private mount namespace with fresh /tmp, /var/tmp and /dev/shm."""

    def argv(self):
        script = ("mount -t tmpfs tmpfs /tmp && mount -t tmpfs tmpfs /var/tmp && mount -t tmpfs tmpfs /dev/shm && "
                  'exec "$@"')
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", *super().argv()]


def tree(root_pid):
    pids, frontier = {root_pid}, [root_pid]
    while frontier:
        pid = frontier.pop()
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            if child not in pids:
                pids.add(child)
                frontier.append(child)
    return pids


def listeners(pids):
    """(address, port) of every TCP socket in LISTEN state that one of pids holds."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                address, port = fields[1].split(":")
                found.add((address, int(port, 16)))
    return found


def status(url, method, key=None):
    request = urllib.request.Request(url, method=method, data=b"{}" if method in ("POST", "PUT", "PATCH") else None,
                                     headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except (TimeoutError, urllib.error.URLError, ConnectionError) as error:  # a handler that ran and hangs
        return f"no answer ({type(error).__name__})"


def run_group(name, flags, checkpoint, control=False):
    problems, dests = check_allowed(flags)
    if problems and not control:
        return {"group": name, "skipped": problems}
    work = WORK / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    api_key, admin_key = secrets.token_urlsafe(24), secrets.token_urlsafe(32)
    config = work / "secrets.yaml"
    config.write_text(f"api-key: {json.dumps(api_key)}\nadmin-api-key: {json.dumps(admin_key)}\n")
    config.chmod(0o600)
    home = work / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "TRITON_CACHE_DIR": str(home / "triton"),
           "SGLANG_SIM_FAULT_OUTPUT": ""}
    server = Private([*PROVEN, MEDIA_DOMAINS_FLAG, NO_MEDIA_DOMAIN, "--served-model-name", "qwen3.6-27b", *flags,
                      "--config", str(config)], env, checkpoint)
    server.work = work  # not under /tmp: the namespace mounts a fresh one there
    started = time.monotonic()
    result = {"group": name, "dests": dests, "invariants": {}, "findings": {}, "control": control}
    try:
        server.start(work / "sglang.log")
        try:
            server.wait_ready(timeout=300)
        except Exception as error:  # noqa: BLE001
            return {**result, "started": False, "error": str(error)[-300:], "log": server.log()[-1500:]}
        result["start_s"] = round(time.monotonic() - started, 1)
        pids = tree(server.process.pid)
        found = listeners(pids)
        result["findings"]["listeners"] = sorted(f"{a}:{p}" for a, p in found)
        result["invariants"]["only the declared port listens"] = {p for _, p in found} == {server.port}
        table = routes.registered(routes.load(VERSION))
        walk = sorted({(m, re.sub(r"\{[^}]*\}", "x", r["path"]), r["path"]) for r in table for m in r["methods"]
                       if m != "WEBSOCKET"} | {("GET", "/openapi.json", "/openapi.json"), ("GET", "/docs", "/docs")})
        answered = [(m, p) for m, p, _ in walk if p not in routes.REVIEWED_PUBLIC
                    and status(server.url + p, m) not in (401, 403)]
        result["findings"]["routes walked"] = len(walk)
        result["findings"]["answered without a key"] = answered
        result["invariants"]["no route answers without the key"] = not answered
        admin = [r for r in table if r["level"] != "normal"]
        opened = [(m, r["path"], r["module"]) for r in admin for m in r["methods"]
                  if status(server.url + re.sub(r"\{[^}]*\}", "x", r["path"]), m, api_key) not in (401, 403)]
        result["findings"]["admin routes taking the API key"] = opened
        result["invariants"]["the API key opens no admin route of http_server.py"] = not [
            o for o in opened if o[2] == routes.ENTRYPOINT]
        listing = subprocess.run(["nsenter", "-t", str(server.process.pid), "-m", "find", "/tmp", "/var/tmp",
                                  "/dev/shm", "-mindepth", "1"], capture_output=True, text=True).stdout.split()
        result["findings"]["left in /tmp, /var/tmp, /dev/shm"] = listing
        shm = [path for path in listing if path.startswith("/dev/shm/")]
        predictable = [path for path in shm if any(str(pid) in path for pid in pids)]
        result["invariants"]["no predictable /dev/shm object"] = not predictable
        # /tmp and /var/tmp are the unit's own (PrivateTmp=yes); what SGLang puts there must still not be a name
        # another process of the unit's user could take first: top-level entries of tempfile.mkdtemp's kind only
        top = [path for path in listing if path.count("/") == 2 and not path.startswith("/dev/shm/")]
        fixed = [path for path in top if not re.fullmatch(r"/(var/)?tmp/tmp[a-z0-9_]{8}", path)]
        result["findings"]["predictable names in /tmp, /var/tmp"] = fixed
        result["invariants"]["nothing with a predictable name in /tmp or /var/tmp"] = not fixed
        result["started"] = True
        return result
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", default=",".join(GROUPS))
    parser.add_argument("--json")
    parser.add_argument("--controls", action="store_true", help="also run the controls (each must fail)")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    checkpoint = model_dir(WORK / "model") if not (WORK / "model" / "config.json").exists() else str(WORK / "model")
    results = []
    began = time.monotonic()
    for name in [g for g in args.groups.split(",") if g]:
        result = run_group(name, GROUPS[name], checkpoint)
        results.append(result)
        print(json.dumps(result), flush=True)
    controls = []
    if args.controls:
        for name, flags in CONTROLS.items():
            result = run_group(name, flags, checkpoint, control=True)
            controls.append(result)
            print(json.dumps(result), flush=True)
    checked = [r for r in results if r.get("started")]
    summary = {"groups": len(results), "started": len(checked),
               "dests tried": len({d for r in checked for d in r["dests"]}),
               "invariants checked": sum(len(r["invariants"]) for r in checked),
               "failures": sum(not ok for r in checked for ok in r["invariants"].values()),
               "controls caught": sum(any(not ok for ok in r.get("invariants", {}).values()) for r in controls),
               "controls": len(controls),
               "wall_s": round(time.monotonic() - began, 1)}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "groups": results}, indent=1) + "\n")
    return 1 if (summary["failures"] or summary["started"] < summary["groups"]
                 or summary["controls caught"] < summary["controls"]) else 0


if __name__ == "__main__":
    sys.exit(main())
