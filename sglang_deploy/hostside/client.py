"""The host programs' HTTP client for the server they deploy: the API key, JSON requests, loopback only.

Readiness, the gate, the benchmark client, the perf watch and the doctor's collector share it. The API
key is only ever sent to a loopback address of this host.
"""

import argparse
import json
import re
import urllib.error
import urllib.request

LOOPBACK_URL = re.compile(r"http://(127(?:\.\d{1,3}){3}|\[::1\]):(\d{1,5})")


def loopback_url(value):
    """argparse type: the API key is sent to this URL, so it must be a loopback address of this host."""
    if not LOOPBACK_URL.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not http://127.x.x.x:PORT or http://[::1]:PORT; readiness and "
                                         "the gate connect over loopback only")
    return value


def read_api_key(path):
    """The `api-key:` of the service's secrets file (root-only), or the whole content of a file that holds only
    the key (the router's workers-api-key); None: no path, no file, no key."""
    if not path:
        return None
    try:
        lines = [line.strip() for line in open(path) if line.strip()]
    except FileNotFoundError:
        return None
    for line in lines:
        if line.startswith("api-key:"):
            value = line.split(":", 1)[1].strip()
            return json.loads(value) if value.startswith('"') else value
    if len(lines) == 1 and ":" not in lines[0] and " " not in lines[0]:
        return lines[0]
    return None


def headers(api_key, content_type=True):
    out = {"Content-Type": "application/json"} if content_type else {}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    return out


def http(url, body=None, api_key=None, timeout=10):
    """(status or None, body bytes): never raises for HTTP or connection errors."""
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     headers=headers(api_key))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, OSError) as error:
        return None, str(error).encode()


def get_json(url, api_key, timeout=30):
    """GET and decode JSON; raises on any failure (callers that tolerate failure use http())."""
    request = urllib.request.Request(url, headers=headers(api_key, content_type=False))
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def is_simulated(server_info):
    """Whether /server_info comes from a simulated server: the model-only simulator says so at the top, the
    Scheduler that replaces SGLang's own under its real front end in its internal state."""
    states = (server_info or {}).get("internal_states") or [{}]
    return bool((server_info or {}).get("simulated") or (isinstance(states[0], dict) and states[0].get("simulated")))
