"""Profile -> SGLang command line. One place decides how every flag is spelled on the host."""

from __future__ import annotations

import re

from .drafter import draft_path
from .hostside.lib.service import LOG_REDACTOR
from .profile import Profile
from .token_map.part import map_flag

# systemd splits ExecStart= on whitespace and expands '%' specifiers and '$' variables.
_SYSTEMD_SAFE = re.compile(r"[A-Za-z0-9_@+=:,./-]+")  # fullmatch: `$` would match before a final newline


def render_value(value) -> str:
    if isinstance(value, float):
        return repr(value)  # shortest round-trip form: 0.88, not 0.88000000000000001
    return str(value)


def flag_args(flags: dict) -> list[str]:
    """sglang.flags in profile order: true -> bare flag, false -> omitted, list -> one flag, many values."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is True:
            argv.append(name)
        elif value is False:
            continue
        elif isinstance(value, list):
            argv += [name, *(render_value(item) for item in value)]
        else:
            argv += [name, render_value(value)]
    return argv


# With no media-domain list SGLang fetches any http(s) URL a client names (sglang/srt/utils/common.py
# _assert_media_url_allowed: an empty list allows every host): the host's loopback, the LAN, metadata endpoints. The
# tool sets the list to the one name that never resolves (RFC 6761 `invalid`) unless the profile names domains
# (class `exposure`: a waiver with its reason).
MEDIA_DOMAINS_FLAG = "--allowed-media-domains"
NO_MEDIA_DOMAIN = "invalid"


def server_args(profile: Profile, port: int | None = None, node=None) -> list[str]:
    """Everything after the launcher: the derived flags first (a multi-node host's --nnodes, --node-rank and
    --dist-init-addr among them, a draft model's verified snapshot, a shipped token map, no outbound media fetch
    unless the profile names domains), then sglang.flags as written."""

    draft, token_map = draft_path(profile), map_flag(profile)
    return [
        "--model-path", profile.model.path,
        "--served-model-name", profile.model.served_name,
        "--host", profile.service.host,
        "--port", str(port or profile.service.port),
        *(node.args() if node is not None else []),
        *(["--speculative-draft-model-path", draft] if draft else []),
        *(["--speculative-token-map", token_map] if token_map else []),
        *([] if MEDIA_DOMAINS_FLAG in profile.sglang.flags else [MEDIA_DOMAINS_FLAG, NO_MEDIA_DOMAIN]),
        *flag_args(profile.sglang.flags),
    ]


def launcher_args(profile: Profile, venv: str) -> list[str]:
    if profile.sglang.launcher == "serve":
        return [f"{venv}/bin/sglang", "serve"]
    return [f"{venv}/bin/python", "-m", "sglang.launch_server"]


def exec_start_args(profile: Profile, venv: str, config_file: str | None, port: int | None = None,
                    node=None) -> list[str]:
    """The service's full argv. The API key travels in --config FILE, never on the command line, and the server
    runs behind the log redactor, which keeps the key SGLang logs at start out of the journal."""

    argv = launcher_args(profile, venv) + server_args(profile, port, node)
    if config_file:
        argv = [*LOG_REDACTOR, *argv, "--config", config_file]
    return argv


def systemd_quote(arg: str) -> str:
    """Quote one argument for ExecStart= so that systemd hands it to the process unchanged."""
    if _SYSTEMD_SAFE.fullmatch(arg):
        return arg
    escaped = (arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
               .replace("\n", "\\n").replace("\t", "\\t"))
    return f'"{escaped}"'


def exec_start_line(argv: list[str]) -> str:
    """ExecStart value split over lines: the launcher, then one flag (with its values) per line."""
    groups: list[list[str]] = [[]]
    for arg in argv:
        if arg.startswith("--") and groups[-1]:
            groups.append([])
        groups[-1].append(systemd_quote(arg))
    return " \\\n    ".join(" ".join(group) for group in groups)
