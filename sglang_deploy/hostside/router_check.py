"""Wait until SGLang's router is up and reports every expected worker healthy (stdlib; runs on the router host).

    router_check.py --url http://127.0.0.1:30080 --key-file PATH --worker URL [--worker URL ...] [--timeout 120]

Reads the router's /workers (its registered workers with is_healthy; with a workers' key configured the router
asks for it on its control plane too, so the key file is read here, as root, and sent as a bearer token). Prints a JSON document;
exit 0 when every expected worker is registered and healthy, 1 otherwise (with what is missing).
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def get(url, key=None, timeout=5):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
        return response.status, response.read()


def snapshot(base, key):
    status, body = get(base + "/workers", key)
    workers = json.loads(body).get("workers", [])
    return {w.get("url"): bool(w.get("is_healthy")) for w in workers}


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--worker", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--key-file")
    args = parser.parse_args(argv)
    key = None
    if args.key_file:
        with open(args.key_file) as f:
            key = f.read().strip() or None
    deadline = time.monotonic() + args.timeout
    seen, error = {}, None
    while time.monotonic() < deadline:
        try:
            seen = snapshot(args.url, key)
            error = None
            if all(seen.get(w) for w in args.worker):
                print(json.dumps({"ok": True, "workers": seen}))
                return 0
        except (urllib.error.URLError, OSError, ValueError) as exc:
            error = str(exc)
        time.sleep(1)
    missing = [w for w in args.worker if w not in seen]
    unhealthy = [w for w in args.worker if w in seen and not seen[w]]
    print(json.dumps({"ok": False, "workers": seen, "missing": missing, "unhealthy": unhealthy, "error": error}))
    print(f"router at {args.url} not ready within {args.timeout:.0f} s: "
          + (f"unreachable ({error}); " if error else "")
          + (f"not registered: {', '.join(missing)}; " if missing else "")
          + (f"unhealthy: {', '.join(unhealthy)}" if unhealthy else ""), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
