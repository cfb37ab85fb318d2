#!/usr/bin/env python3
"""Wait until a freshly restarted SGLang service is ready; print why not when it is not.

Stages: the unit stays active past a settle time, then GET /health answers 200. Exit 0 when ready,
1 when the unit failed or the timeout passed (with the last journal lines), 2 on bad arguments.
Standard library only: runs with the host's python3.
"""
import argparse
import datetime
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request


def unit_state(unit):
    result = subprocess.run(["systemctl", "is-active", unit], capture_output=True, text=True)
    return result.stdout.strip()


def journal_tail(unit, since, lines=30):
    result = subprocess.run(["journalctl", "-u", unit, "--no-pager", "-o", "cat", "-n", str(lines),
                             "--since", since], capture_output=True, text=True)
    return result.stdout.rstrip()


def health(url):
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--unit", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--settle", type=float, default=2.0)
    args = parser.parse_args()

    start = time.monotonic()
    since = (datetime.datetime.now() - datetime.timedelta(seconds=10)).strftime("%Y-%m-%d %H:%M:%S")
    last_status = None
    while time.monotonic() - start < args.timeout:
        state = unit_state(args.unit)
        if state in ("failed", "inactive") or (state != "active" and time.monotonic() - start > args.settle):
            print(json.dumps({"ready": False, "stage": "active", "state": state,
                              "elapsed_s": round(time.monotonic() - start, 1)}))
            print(f"{args.unit} is {state}, not active. Last journal lines:\n{journal_tail(args.unit, since)}",
                  file=sys.stderr)
            return 1
        last_status = health(args.url)
        if last_status == 200 and time.monotonic() - start >= args.settle:
            print(json.dumps({"ready": True, "stage": "health", "elapsed_s": round(time.monotonic() - start, 1)}))
            return 0
        time.sleep(0.5)
    print(json.dumps({"ready": False, "stage": "health", "last_status": last_status,
                      "elapsed_s": round(time.monotonic() - start, 1)}))
    print(f"{args.unit} did not answer /health with 200 within {args.timeout:.0f} s (last answer: {last_status}). "
          f"Last journal lines:\n{journal_tail(args.unit, since)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
