"""What a profile, inventory or `--data` value may be before it reaches a unit, a shell, a path or a URL.

Every check is a full match (``re.fullmatch``: Python's ``$`` also matches before a final newline), and
no value may carry a control character. Digits are ``[0-9]`` (a backslash-d also matches a fullwidth ``６``), and
every pattern runs in linear time (no repeated group whose separator is optional). Pure: used by the profile
schema, the plan and deploy.py's host checks (the service user and the unit name need what the host reports).
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata

from packaging.requirements import InvalidRequirement, Requirement

from .hostside.contract.paths import ServicePaths
from .units import ROUTER_SERVICE, UVM_UNIT, beside_suffixes

# Unicode categories refused in every value: control (C0, DEL, C1), format (bidi overrides, zero-width),
# line and paragraph separators, surrogates.
_REFUSED_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs"}
# Free text that reaches no unit, shell or path (profile description, an environment setting's reason)
# may span lines: a YAML folded or literal block scalar ends with a newline.
TEXT_ALLOWED = {"\n", "\t"}

SERVICE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}")
# Path components separated by one mandatory '/': each character has one place to go, so a mismatch fails in
# linear time (an optional separator let the engine try every way of cutting a component: minutes for a trailing
# space after a long directory name).
PATH_PART = r"[A-Za-z0-9_@+=:,-][A-Za-z0-9._@+=:,-]*"
MODEL_PATH = re.compile(rf"/(?:{PATH_PART}(?:/{PATH_PART})*/?)?")
FLAG_NAME = re.compile(r"--[a-z0-9][a-z0-9-]*")
ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
VERSION_PIN = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:\.post[0-9]+|rc[0-9]+)?")
EXTRA_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")  # PEP 508 / PEP 685 extra
DEB_PACKAGE = re.compile(r"[a-z0-9][a-z0-9.+-]+")
DEB_VERSION_GLOB = re.compile(r"[A-Za-z0-9.+~:*{}-]+")
CUDA_VERSION = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")
NCCL_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
ABS_PATH = re.compile(r"/[A-Za-z0-9._@+=:,/-]*")
# A systemd time span of one number and unit (the watch's interval and randomized delay).
TIME_SPAN = re.compile(r"[0-9]{1,6}(?:s|min|h|d)")
WRITABLE_DIR = re.compile(r"/(?:var/lib|run|var/spool)(?:/[A-Za-z0-9_][A-Za-z0-9._-]{0,63}){1,8}")
# An HF-compatible endpoint (host data hf_endpoint, hf_token_endpoint): https, or plain http on loopback only (the
# tests' stand-in Hub). One label or path part between mandatory separators: linear.
_HOST_NAME = r"[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*"
_URL_PATH = r"(?:/[A-Za-z0-9._~-]*)*"
HUB_ENDPOINT = re.compile(rf"(?:https://{_HOST_NAME}|http://(?:127\.0\.0\.1|localhost|\[::1\]))(?::[0-9]{{1,5}})?{_URL_PATH}")
DEFAULT_HUB = "https://huggingface.co"
URL = re.compile(r"(?:https?|file)://[A-Za-z0-9._~:/?#\[\]@!&'()*+,;=%{}-]+")

# The tool's marker: the first line of every unit it writes starts with it. A unit file without it
# belongs to someone else and is never overwritten.
UNIT_MARKER = "# Managed by sglang-deploy"
# GECOS of the service account the tool creates.
USER_MARKER = "sglang-deploy service user"

# Accounts and groups that exist on Debian/Ubuntu/RHEL hosts or grant privileges: the service user (and
# the group of the same name the tool creates) must be none of them.
RESERVED_USERS = frozenset("""
root daemon bin sys sync games man lp mail news uucp proxy www-data backup list irc gnats nobody nogroup
_apt messagebus sshd syslog polkitd avahi uuidd tcpdump tss landscape pollinate lxd dnsmasq usbmux ntp
chrony postfix rtkit colord geoclue pulse saned kernoops whoopsie cups-pk-helper sssd fwupd-refresh
ubuntu debian admin pi ec2-user centos fedora rocky almalinux cloud-user vagrant operator halt shutdown
adm sudo wheel disk kmem shadow staff users video render audio input kvm docker lxc tty dialout plugdev
netdev systemd-journal crontab utmp tape cdrom floppy voice src sasl scanner ssl-cert lpadmin sambashare
nvidia-persistenced
""".split())
RESERVED_USER_PREFIXES = ("systemd-", "_")

# Units (and their /var/lib, /var/cache directories, which StateDirectory= hands to the service user)
# that belong to the system. The host check (unit marker, directory owner) catches the rest.
RESERVED_SERVICES = frozenset("""
ssh sshd dbus cron anacron atd rsyslog syslog networking network networkmanager getty console-getty
docker containerd kubelet nvidia-persistenced nvidia-fabricmanager nvidia-dcgm dcgm apt dpkg udev polkit
user init emergency rescue multi-user graphical default reboot poweroff halt shutdown sudo login logind
journald resolved timesyncd ufw firewalld iptables nftables chrony chronyd ntp snapd lxc lxd libvirt
libvirtd sglang-deploy ucf misc pam private python pip git sshd-keygen getty-static systemd
""".split())
RESERVED_SERVICE_PREFIXES = ("systemd-", "dbus-", "getty", "serial-getty", "user@", "user-", "apt-", "dpkg-")

# Where a login shell can run: an existing account with one of these is not a service account.
NO_LOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false", "/usr/bin/false")


def control_characters(value: str, allowed: set[str] = frozenset()) -> list[str]:
    """The refused characters in value, as U+XXXX names."""
    found = []
    for char in value:
        if char not in allowed and unicodedata.category(char) in _REFUSED_CATEGORIES:
            code = f"U+{ord(char):04X}"
            name = unicodedata.name(char, "") or {"\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\t": "TAB",
                                                   "\x00": "NUL", "\x7f": "DELETE"}.get(char, "control")
            if f"{code} ({name})" not in found:
                found.append(f"{code} ({name})")
    return found


def control_message(value: str, allowed: set[str] = frozenset()) -> str | None:
    bad = control_characters(value, allowed)
    if not bad:
        return None
    return (f"contains the control character {', '.join(bad)}; accepted: printable characters only "
            "(a YAML block scalar `|` or `>` ends with a newline: use a plain or quoted scalar)")


def full(pattern: re.Pattern, value: str) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


# --- single fields ---------------------------------------------------------------------------------

def service_name_problem(name: str) -> str | None:
    if not full(SERVICE_NAME, name):
        return (f"must be a unit name of lower-case letters, digits, '_' and '-' (no '.', '@' or '.service', "
                f"at most 63 characters), got {name!r}")
    if name in RESERVED_SERVICES or name.startswith(RESERVED_SERVICE_PREFIXES):
        return (f"{name!r} is a system unit or directory name; the tool would overwrite {name}.service and take "
                f"/var/lib/{name}; accepted: a name of its own such as 'sglang' or 'sglang-qwen'")
    return service_unit_collision(name)


# Names of units the tool writes beside a service's own <service>.service: derived from the code that names them
# (units.py: the watch's service and timer, the boot recovery, the router's unit, the device-node unit), so a
# service named like one of them would overwrite it, and the host's marker check cannot tell them apart (review 4, R5).
def tool_unit_names() -> tuple[set[str], set[str]]:
    """(fixed unit names, suffixes the tool appends to a service's name), without .service/.timer."""
    return {ROUTER_SERVICE, UVM_UNIT.rsplit(".", 1)[0]}, beside_suffixes()


def service_unit_collision(name: str) -> str | None:
    fixed, suffixes = tool_unit_names()
    if name in fixed:
        return (f"{name!r} is the name of a unit the tool writes itself ({name}.service); accepted: a name of its own "
                "such as 'sglang' or 'sglang-qwen'")
    for suffix in sorted(suffixes):
        if suffix and name.endswith(suffix) and name != suffix:
            owner = name[: -len(suffix)]
            return (f"{name!r} is the name of the unit the tool writes for service {owner!r} ({name}.service, "
                    f"{owner}'s {suffix.strip('-')} unit): the two deploys would overwrite each other's unit; "
                    f"accepted: a name that does not end in {', '.join(sorted(s for s in suffixes if s))}")
    return None


# A waiver's or an environment setting's reason is read by a reviewer: printable, not blank, real words.
REASON_MIN_LETTERS = 8
REASON_MIN_WORDS = 2


def reason_problem(reason: str) -> str | None:
    """Why a reason says nothing (None: it says something): control or invisible characters, fewer than
    REASON_MIN_WORDS words of letters or REASON_MIN_LETTERS letters in all."""
    bad = control_message(reason)
    if bad:
        return f"the reason {bad}"
    words = re.findall(r"[^\W\d_]+", reason)
    letters = sum(len(word) for word in words)
    if len(words) < REASON_MIN_WORDS or letters < REASON_MIN_LETTERS:
        return (f"the reason {reason!r} says nothing a reviewer can read; accepted: at least {REASON_MIN_WORDS} words "
                f"and {REASON_MIN_LETTERS} letters saying why (the unit, meta.json and releases.py show it)")
    return None


def service_user_problem(user: str) -> str | None:
    if not full(USER_NAME, user):
        return f"must be a system account name ([a-z_][a-z0-9_-]*, at most 32 characters), got {user!r}"
    if user in RESERVED_USERS or user.startswith(RESERVED_USER_PREFIXES):
        return (f"{user!r} is an existing system, login or privileged account or group; the service needs a "
                "dedicated system account the tool creates, such as 'sglang'")
    return None


def listen_host_problem(host: str) -> str | None:
    """A local listen address: readiness and the gate connect over loopback, so the address must accept
    loopback connections (a loopback address or a wildcard). Names are refused: they resolve elsewhere."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return (f"must be an IP address literal the server listens on (127.0.0.1, ::1, or 0.0.0.0 / :: for every "
                f"interface), got {host!r}; host names are refused (the gate sends the API key to this address)")
    if not (address.is_loopback or address.is_unspecified):
        return (f"{host} is not a loopback or wildcard address: readiness and the gate connect over loopback "
                "(the API key never leaves the host); accepted: 127.0.0.1, ::1, 0.0.0.0 or ::")
    return None


def probe_url(host: str, port: int) -> str:
    """Where readiness and the gate reach a server listening on `host`: always a loopback address, a URL the host's
    rule accepts (hostside/lib/client.py LOOPBACK_URL, which client.loopback_url checks the switch's --probe-url by)."""
    address = ipaddress.ip_address(host)
    if address.version == 6:
        return f"http://[::1]:{port}"
    return f"http://{host if address.is_loopback else '127.0.0.1'}:{port}"


def model_path_problem(path: str) -> str | None:
    if not path.startswith("/"):
        return f"must be an absolute path on the host, got {path!r}"
    if not full(MODEL_PATH, path) or "/../" in path + "/" or "/./" in path + "/" or "//" in path:
        return (f"must be a normalized absolute path of letters, digits and ._@+=:,- (no '..', '//', spaces or "
                f"shell characters), got {path!r}")
    return model_path_location_problem(path)


# Directories other users (or the service user) write: weights there can be swapped under the server, and root's
# readers (the watch, the doctor) would read a planted FIFO or symlink.
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/shm", "/run/user", "/run/lock", "/var/crash")


def model_path_location_problem(path: str, service: str | None = None) -> str | None:
    """model.path must not be in a directory that other users write, nor (with `service`) in the directories
    the service user writes."""
    writable = SHARED_DIRS + (ServicePaths(service).own_dirs if service else ())
    for directory in writable:
        if path == directory or path.startswith(directory + "/"):
            return (f"{path!r} is under {directory}, which "
                    + ("other local users can write" if directory in SHARED_DIRS else
                       f"the service user writes ({service}.service's state or cache directory)")
                    + ": the weights could be replaced under the server and root's watch and doctor read them; "
                      "accepted: a root-owned directory such as /srv/models/... (or a model.source the tool "
                      "manages)")
    return None


def abs_path_problem(path: str) -> str | None:
    """A directory the watch (running as root in a sandbox) may write: under /var/lib, /run or /var/spool."""
    if not full(WRITABLE_DIR, path) or "/../" in path + "/" or "/./" in path + "/":
        return (f"must be a normalized absolute directory under /var/lib, /run or /var/spool of letters, digits "
                f"and ._- (no '..', spaces or shell characters), got {path!r}")
    return None


def served_name_problem(name: str) -> str | None:
    if not full(SERVED_NAME, name):
        return (f"must be letters, digits and ._:/@+- (starting with a letter or digit, at most 128 characters), "
                f"got {name!r}")
    return None


def extra_problem(extra: str, version: str = "0") -> str | None:
    """A pip extra of the sglang package, as PEP 508 defines it (parsed by `packaging`)."""
    if not full(EXTRA_NAME, extra):
        return f"extra {extra!r} is not a PEP 508 extra name (letters, digits, '.', '_', '-'); e.g. 'all'"
    try:
        requirement = Requirement(f"sglang[{extra}]=={version}")
    except InvalidRequirement as error:
        return f"extra {extra!r} does not make a PEP 508 requirement: {error}"
    if len(requirement.extras) != 1:
        return f"extra {extra!r} must be one extra name"
    return None


def pin_problem(pin: str) -> str | None:
    """An exact PEP 508 pin: name[extras]==version, no URL, no environment marker."""
    example = "accepted: an exact pin such as 'nvidia-nccl-cu13==2.28.9'"
    if control_message(pin) or any(c.isspace() for c in pin):
        return f"pin {pin!r} contains whitespace or control characters; {example}"
    try:
        requirement = Requirement(pin)
    except InvalidRequirement as error:
        return f"pin {pin!r} is not a PEP 508 requirement ({str(error).splitlines()[0]}); {example}"
    specifiers = list(requirement.specifier)
    if requirement.url or requirement.marker:
        return f"pin {pin!r} carries a URL or an environment marker; {example}"
    if len(specifiers) != 1 or specifiers[0].operator != "==" or "*" in specifiers[0].version:
        return f"pin {pin!r} must be an exact requirement (one '==' without wildcards); {example}"
    if requirement.name.lower().replace("_", "-") == "sglang":
        return "pin sglang through sglang.version, not sglang.pins"
    return None


def hub_endpoint_problem(url: str) -> str | None:
    if not full(HUB_ENDPOINT, url):
        return (f"{url!r} is not an HF-compatible endpoint the tool talks to; accepted: https://host[:port][/path] "
                "(plain http only on loopback, http://127.0.0.1 or http://localhost, for a test Hub)")
    return None


# --- host data (inventory and --data) --------------------------------------------------------------

def int_in(value, low: int, high: int) -> str | None:
    try:
        if isinstance(value, bool) or not re.fullmatch(r"-?[0-9]+", str(value)):  # int() takes "６" and " 6"
            raise ValueError(value)
        number = int(str(value), 10)
    except ValueError:
        return f"must be an integer between {low} and {high}, got {value!r}"
    if not low <= number <= high:
        return f"must be between {low} and {high}, got {number}"
    return None


# --- what the host reports -------------------------------------------------------------------------

def account_problem(user: str, service: str, passwd: str | None, uid_min: int = 1000) -> str | None:
    """An existing account may serve only when the tool created it (its GECOS marker) or it is a plain
    system account made for this service (system uid, no login shell, home /var/lib/<service>)."""
    if not passwd:
        return None  # the tool creates it
    fields = passwd.strip().split(":")
    if len(fields) < 7:
        return None
    uid, gecos, home, shell = fields[2], fields[4], fields[5], fields[6]
    if uid == "0":
        return f"{user!r} has uid 0 on the host; the service needs a dedicated unprivileged system account"
    if USER_MARKER in gecos:
        if home != ServicePaths(service).state_dir:  # the tool gives each service's user the home /var/lib/<service>
            return (f"{user!r} is the service user of another service on this host (home {home}): it would read that "
                    f"service's secrets and state (review 4, R4); one service user per service; accepted: a user of "
                    f"this service's own, such as {service!r}")
        return None
    if shell not in NO_LOGIN_SHELLS:
        return (f"{user!r} is an existing login account on the host (shell {shell}); the tool would change its shell, "
                "home and groups. Use a dedicated name such as 'sglang' (the tool creates it)")
    if int(uid) >= uid_min or home != ServicePaths(service).state_dir:
        return (f"{user!r} is an existing account on the host (uid {uid}, home {home}) that the tool did not create; "
                "use a dedicated name such as 'sglang' (the tool creates it)")
    return None


def unit_problem(service: str, report: dict) -> str | None:
    """report: what the host says about <service>.service (roles.facts.UnitOwnership)."""
    foreign = [path for path, marked in (report.get("files") or {}).items() if not marked]
    if foreign:
        return (f"{service}.service exists on the host and is not managed by sglang-deploy ({', '.join(foreign)} "
                f"lacks the line '{UNIT_MARKER}'); the tool never overwrites another unit. Choose another service.name")
    for path, owner in (report.get("directories") or {}).items():
        if owner not in (None, "", report.get("user"), "(sglang-deploy)"):
            return (f"{path} exists on the host, owned by {owner}: StateDirectory=/CacheDirectory= would hand it to the "
                    f"service user. Choose another service.name")
    return None


# NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME: interface names (15 characters at most), comma-separated, with NCCL's
# ^ (exclude) or = (exact match) prefix. Applied with fullmatch.
SOCKET_IFNAME = re.compile(r"[\^=]?[A-Za-z0-9_.:-]{1,15}(,[A-Za-z0-9_.:-]{1,15})*")
