"""The host programs' HTTP client for the server they deploy: the API key, JSON requests, loopback only.

Readiness, the gate, the benchmark client, the perf watch and the doctor's collector share it. The API
key is only ever sent to a loopback address of this host, and once a program has called
listener.guard_unit(), only over a connection the unit's own processes accepted (listener.py).
Server answers are read up to MAX_BODY_BYTES, and server text is shown through `printable`.
"""

import argparse
import json
import re
import urllib.error
import urllib.request

LOOPBACK_URL = re.compile(r"http://(127(?:\.\d{1,3}){3}|\[::1\]):(\d{1,5})")
MAX_BODY_BYTES = 16 << 20  # the largest answer read (/server_info is tens of KiB, a /metrics page < 1 MiB)
GUARD = None  # listener.guard_unit() sets both: keyed requests then go through GUARDED_OPENER
GUARDED_OPENER = None


class TooLarge(ValueError):
    pass


def read_bounded(response, limit=MAX_BODY_BYTES):
    """The body, at most `limit` bytes: a larger answer is an error, never a root process's memory."""
    body = response.read(limit + 1)
    if len(body) > limit:
        raise TooLarge(f"the server's answer is larger than {limit >> 20} MiB: not read")
    return body


def urlopen(request, timeout):
    """urllib's urlopen; a request that carries the API key goes through the listener guard when one is set."""
    if GUARD is not None and request.has_header("Authorization"):
        return GUARDED_OPENER.open(request, timeout=timeout)
    return urllib.request.urlopen(request, timeout=timeout)


def printable(text, limit=None):
    """Server-provided text as it may reach a terminal or a log: printable characters kept, control characters
    (ANSI/OSC escapes, carriage returns, bidi overrides) written as \\xNN / \\uNNNN; bytes are decoded first."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = str(text)[:limit] if limit else str(text)
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


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
        with urlopen(request, timeout) as response:
            return response.status, read_bounded(response)
    except urllib.error.HTTPError as error:
        try:
            return error.code, read_bounded(error)
        except (TooLarge, OSError) as too_large:
            return error.code, str(too_large).encode()
    except (urllib.error.URLError, OSError, TooLarge) as error:
        return None, str(error).encode()


def get_json(url, api_key, timeout=30):
    """GET and decode JSON; raises on any failure (callers that tolerate failure use http())."""
    request = urllib.request.Request(url, headers=headers(api_key, content_type=False))
    with urlopen(request, timeout) as response:
        return json.loads(read_bounded(response))


def is_simulated(server_info):
    """Whether /server_info comes from a simulated server: the model-only simulator says so at the top, the
    Scheduler that replaces SGLang's own under its real front end in its internal state."""
    states = (server_info or {}).get("internal_states") or [{}]
    return bool((server_info or {}).get("simulated") or (isinstance(states[0], dict) and states[0].get("simulated")))
