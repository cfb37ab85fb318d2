"""Profile -> the files a release installs on the host (unit, environment, secrets)."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .drafter import draft_weights, offered_weights
from .flags import exec_start_args, exec_start_line
from .hardening import DIRECTIVES as HARDENING_DIRECTIVES, directives as hardening_directives
from .layout import HOST_LIB, ServicePaths, host_program_argv, venv_path
from .profile import Profile
from .results import cache_dir
from .safety import control_message
from .units import recover_path, watch_paths  # noqa: F401 - the unit files render.py writes
from .weights import WeightsSourceError, profile_weights

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
_ENV_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]*")
SECRET_MASK = "********"


SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def base_environment(layout: ServicePaths, venv: str, cuda_home: str | None = None,
                     max_jobs: int | None = None) -> dict[str, str]:
    """Settings every SGLang service needs; the profile's environment is applied on top."""
    state, cache = layout.own_dirs
    environment = {
        "HOME": state,
        "SGLANG_CACHE_DIR": cache,  # parent of the Triton/Inductor/FlashInfer JIT caches
        "HF_HOME": f"{cache}/huggingface",
        "HF_HUB_OFFLINE": "1",  # local checkpoint only: no hub access at start
        # python -m (launcher launch_server) would put the working directory, the service user's own state
        # directory, first on sys.path: what a compromised service user wrote there would be imported at the next
        # start, past a rollback (security review 3, finding 6). Safe path: no implicit directory on sys.path.
        "PYTHONSAFEPATH": "1",
    }
    if cuda_home:  # the pinned toolkit's nvcc for SGLang's JIT-compiled kernels, not whatever is on PATH
        environment["CUDA_HOME"] = cuda_home
        environment["PATH"] = f"{cuda_home}/bin:{venv}/bin:{SYSTEM_PATH}"
    # /tmp is private to the service (PrivateTmp) and wiped at each start: the JIT caches live in the
    # cache directory, which ProtectSystem=strict leaves writable and a restart keeps.
    environment["TRITON_CACHE_DIR"] = f"{cache}/triton"
    environment["TORCHINDUCTOR_CACHE_DIR"] = f"{cache}/torchinductor"
    if max_jobs:  # FlashInfer's and torch's JIT size their parallel compiles by it, else by os.cpu_count(), which
        # in a CT with nesting sees the Proxmox host's CPUs (the unit's fresh /proc) and can exhaust its memory
        environment["MAX_JOBS"] = str(int(max_jobs))
    return environment


class RenderError(ValueError):
    """A value that would change the structure of a rendered file (a bug: validation should have refused it)."""


def unit_value(value) -> str:
    """A value printed into a unit file: no line breaks or control characters, systemd specifiers escaped."""
    text = str(value)
    message = control_message(text)
    if message:
        raise RenderError(f"a value printed into the unit {message}: {text!r}")
    return text.replace("%", "%%")


def env_quote(value: str) -> str:
    message = control_message(value)
    if message:
        raise RenderError(f"an environment value {message}: {value!r}")
    if _ENV_SAFE.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


@dataclass(frozen=True)
class Rendered:
    unit: str
    env: str
    secrets: str
    exec_start: list[str]
    environment: dict[str, str]


@functools.cache
def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """The templates' compiled code in the tool's cache ($SGLANG_DEPLOY_CACHE/jinja, keyed by each template's source
    and the Python version, written atomically): compiling the six templates costs about 12 ms of every deploy, a
    no-op's included, loading them 1 ms (measured 2026-12-06). None where the cache cannot be created."""
    directory = cache_dir() / "jinja"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(directory)) if os.access(directory, os.W_OK) else None


def _jinja() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters["unit"] = unit_value
    return env


def snapshots_comment(profile: Profile) -> str | None:
    """The unit's lines naming every snapshot the release serves or offers (weights, draft model, the tune's
    drafters), with their manifests' hashes: another snapshot makes another release, which records it."""
    lines = []
    weights = profile_weights(profile)
    if weights:
        lines.append(weights.unit_comment())
    try:
        draft = draft_weights(profile)
        offered = offered_weights(profile)
    except WeightsSourceError:  # an unfrozen drafter: the check refuses the profile and names the command
        draft, offered = None, []
    if draft:
        lines.append(draft.unit_comment().replace("# Weights:", "# Draft model:", 1))
    lines += [w.unit_comment().replace("# Weights:", "# Drafter offered to the tune:", 1) for w in offered]
    return "\n".join(lines) or None


def render(profile: Profile, api_key: str | None = None, port: int | None = None,
           cuda_home: str | None = None, node=None, max_jobs: int | None = None,
           admin_key: str | None = None) -> Rendered:
    """Same profile and keys -> byte-identical files. The keys only ever land in the secrets file.

    admin_key: SGLang's --admin-api-key, which the tool generates (plan.py) and gives to nobody: with it SGLang's
    admin endpoints (ADMIN_OPTIONAL: weight updates, logging, profiling, pause...) refuse the API key
    (sglang/srt/utils/auth.py). It is written only with an API key, and the host keeps the one it has while the
    rest of the file is unchanged (secrets_digest)."""
    layout = ServicePaths(profile.service.name)
    secrets_file = layout.secrets_path if api_key else None
    venv = venv_path(profile)
    argv = exec_start_args(profile, venv, secrets_file, port, node)
    environment = {**base_environment(layout, venv, cuda_home, max_jobs),
                   **(node.environment() if node is not None else {}), **profile.env_values()}
    env = _jinja()
    admin_key = admin_key if api_key else None
    context = dict(profile=profile, service=profile.service, layout=layout, api_key=api_key, admin_key=admin_key,
                   weights_comment=snapshots_comment(profile))
    hardening, relaxed = hardening_directives(*(unit_value(d) for d in layout.own_dirs), profile.service.relax)
    unit = env.get_template("sglang.service.j2").render(exec_start=exec_start_line(argv), hardening=hardening,
                                                        relaxed=relaxed, **context)
    check_unit_structure(unit, argv)
    env_file = env.get_template("sglang.env.j2").render(
        environment={key: env_quote(value) for key, value in environment.items()}, **context)
    secrets = env.get_template("secrets.yaml.j2").render(**context)
    for key in (api_key, admin_key):
        if key and (key in unit or key in env_file):
            raise AssertionError("a key leaked into the unit or the environment file")
    return Rendered(unit=unit, env=env_file, secrets=secrets, exec_start=argv, environment=environment)


@dataclass(frozen=True)
class RenderedWatch:
    service: str
    timer: str
    exec_start: list[str]


def render_watch(profile: Profile) -> RenderedWatch:
    """The perf watch's oneshot service and timer (same profile -> byte-identical files)."""
    watch, gate = profile.watch, profile.gate
    argv = host_program_argv("watch", "--service", profile.service.name, "--samples", str(watch.samples),
                             "--max-running-requests", str(watch.max_running_requests), "--on-drift", watch.on_drift,
                             "--drift-runs", str(watch.drift_runs), "--max-restarts-per-day",
                             str(watch.max_restarts_per_day), "--history-lines", str(watch.history_lines),
                             "--textfile-dir", watch.textfile_dir, "--output-prompts", str(watch.output_prompts))
    if watch.drift_min_accept_length is not None:
        argv += ["--drift-min-accept-length", str(watch.drift_min_accept_length)]
    # One bench run at its own deadline (hostside/lib/gate.py measure_builtin), twice with a restart in between.
    bench_s = 120 + (watch.samples + 3) * (60 + gate.max_new_tokens) + 120 * watch.output_prompts
    timeout = 2 * bench_s + (profile.service.start_timeout_s if watch.on_drift == "restart" else 0)
    # The watch runs as root: a profile's relaxations of the server's sandbox do not reach it, except the two a
    # container without nesting needs for any unit to start at all (hostside/preflight/findings.py NESTING_DIRECTIVES).
    watch_relax = [name for name in profile.service.relax if name in ("ProtectKernelTunables", "ProtectControlGroups")]
    hardening, relaxed = hardening_directives(unit_value(ServicePaths(profile.service.name).root),
                                              unit_value(watch.textfile_dir), watch_relax, comments=False)
    env = _jinja()
    context = dict(profile=profile, service=profile.service, watch=watch)
    service = env.get_template("sglang-watch.service.j2").render(
        exec_start=exec_start_line(argv), working_directory=unit_value(HOST_LIB), hardening=hardening,
        relaxed=relaxed, timeout_s=timeout, **context)
    timer = env.get_template("sglang-watch.timer.j2").render(**context)
    check_unit_structure(service, argv, sections=("Unit", "Service"), keys=WATCH_KEYS)
    check_unit_structure(timer, None, sections=("Unit", "Timer", "Install"), keys=WATCH_TIMER_KEYS)
    return RenderedWatch(service=service, timer=timer, exec_start=argv)


@dataclass(frozen=True)
class RenderedRecover:
    service: str
    exec_start: list[str]


def render_recover(profile: Profile) -> RenderedRecover:
    """The boot recovery's oneshot unit: the service's, not the profile's (every profile of a service -> one
    byte-identical file, so a deploy refused after the host's preparation leaves it as it was)."""
    argv = host_program_argv("recover", "--service", profile.service.name)
    service = _jinja().get_template("sglang-recover.service.j2").render(
        exec_start=exec_start_line(argv), working_directory=unit_value(HOST_LIB), service=profile.service)
    check_unit_structure(service, argv, keys=RECOVER_KEYS)
    return RenderedRecover(service=service, exec_start=argv)


# The longest logical line (continuations joined) a rendered unit may have: systemd 252 refused a unit whose
# ExecStart= was 1.2 MB ("No buffer space available"); the longest the tool's profiles need is about 2 KB.
MAX_UNIT_LINE_BYTES = 128 * 1024
UNIT_SECTIONS = ("Unit", "Service", "Install")
# Every directive the template writes, by section: anything else in a rendered unit came from a value.
UNIT_KEYS = {
    "Unit": {"Description", "Documentation", "After", "Wants", "StartLimitIntervalSec", "StartLimitBurst"},
    "Service": {"Type", "User", "Group", "SupplementaryGroups", "EnvironmentFile", "WorkingDirectory", "StateDirectory",
                "CacheDirectory", "StateDirectoryMode", "CacheDirectoryMode", "ExecStart", "KillMode", "Restart",
                "RestartSec", "TimeoutStartSec", "TimeoutStopSec", "LimitNOFILE", "LimitMEMLOCK", "LimitSTACK",
                *HARDENING_DIRECTIVES},
    "Install": {"WantedBy"},
}
REPEATABLE_KEYS = {"DeviceAllow"}
WATCH_KEYS = {"Unit": {"Description", "After"},
              "Service": {"Type", "User", "WorkingDirectory", "ExecStart", "TimeoutStartSec",
                          *HARDENING_DIRECTIVES}}
RECOVER_KEYS = {"Unit": {"Description", "After", "Before"},
                "Service": {"Type", "RemainAfterExit", "User", "WorkingDirectory", "ExecStart", "TimeoutStartSec"},
                "Install": {"WantedBy"}}
WATCH_TIMER_KEYS = {"Unit": {"Description"}, "Timer": {"OnActiveSec", "OnUnitActiveSec", "RandomizedDelaySec"},
                    "Install": {"WantedBy"}}


def parse_unit(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file as systemd reads it: comments skipped, continuation lines joined."""
    entries, section, pending = [], None, ""
    for raw in text.split("\n"):
        line = pending + raw
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1]
            entries.append((section, "", ""))
            continue
        key, _, value = stripped.partition("=")
        entries.append((section, key.strip(), value.strip()))
    return entries


def unquote_exec(value: str) -> list[str]:
    """ExecStart= as systemd splits it (double quotes, backslash escapes, %% and $$)."""
    return [arg.replace("\x00", "$") for arg in shlex.split(value.replace("%%", "%").replace("$$", "\x00"))]


def check_unit_structure(unit: str, argv: list[str] | None, sections: tuple = UNIT_SECTIONS,
                         keys: dict | None = None) -> None:
    """The rendered unit has exactly the template's sections, one ExecStart that hands argv to the process
    unchanged (argv None: a unit without ExecStart, a timer), and no directive outside its section: whatever
    a value holds, it stays a value."""
    keys = UNIT_KEYS if keys is None else keys
    entries = parse_unit(unit)
    for section, key, value in entries:
        if len(f"{key}={value}".encode()) > MAX_UNIT_LINE_BYTES:
            raise RenderError(f"{key}= in [{section}] is {len(value.encode())} bytes long; accepted: at most "
                              f"{MAX_UNIT_LINE_BYTES} bytes (systemd loads no unit with a longer line)")
    found = [section for section, key, _ in entries if not key]
    if tuple(found) != tuple(sections):
        raise RenderError(f"the unit's sections are {found}, expected {list(sections)}")
    exec_starts = [value for section, key, value in entries if key == "ExecStart"]
    if argv is None:
        if exec_starts:
            raise RenderError("unexpected ExecStart= in the rendered unit")
    elif len(exec_starts) != 1 or unquote_exec(exec_starts[0]) != argv:
        raise RenderError("the unit's ExecStart= does not hand the command line to the process unchanged")
    seen = set()
    for section, key, _ in entries:
        if not key:
            continue
        if key not in keys.get(section, ()):
            raise RenderError(f"unexpected directive {key}= in [{section}] of the rendered unit")
        if (section, key) in seen and key not in REPEATABLE_KEYS:
            raise RenderError(f"directive {key}= appears twice in [{section}] of the rendered unit")
        seen.add((section, key))


ADMIN_KEY_LINE = "admin-api-key: "
# Every admin key the tool generates starts with this (plan.py): SGLang merges the --config file into its argv as
# `--admin-api-key <key>`, and argparse reads a key that starts with '-' as an option and refuses to start
# (token_urlsafe gives one in 64). A host's admin key without it is not counted as one, so the file is rewritten.
ADMIN_KEY_PREFIX = "sgladm-"
ADMIN_KEY_WRITTEN = f'{ADMIN_KEY_LINE}"{ADMIN_KEY_PREFIX}'  # the line as the template writes it (tojson)


def secrets_digest(text: str) -> str:
    """The secrets file's digest without its admin key's value: what the controller compares with the host's file
    (secrets_digest_command) to decide whether to rewrite it. A file that is the same but for the admin key is in
    place (the host keeps its admin key, the server keeps running); one without an admin key line is not."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    public = "".join(line + "\n" for line in lines if not line.startswith(ADMIN_KEY_LINE))
    count = sum(line.startswith(ADMIN_KEY_WRITTEN) for line in lines)
    return hashlib.sha256(f"{public}{count}\n".encode()).hexdigest()


def secrets_digest_command(path: str) -> str:
    """The host's side of secrets_digest (grep and sha256sum: no key in any command line or output); prints nothing
    when the file is absent."""
    quoted = shlex.quote(path)
    return (f"test -f {quoted} && {{ grep -v '^{ADMIN_KEY_LINE}' {quoted}; grep -c '^{ADMIN_KEY_WRITTEN}' {quoted}; }} "
            "| sha256sum | cut -d' ' -f1")


def mask_secrets(text: str) -> str:
    """Hide the value of every secret line (api-key: ...) for diffs and logs."""
    return re.sub(r"^(\s*(?:api-key|admin-api-key)\s*:\s*).*$", r"\1" + SECRET_MASK, text, flags=re.MULTILINE)
