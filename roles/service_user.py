"""The dedicated, unprivileged system user the SGLang service runs as."""

from pyinfra.api import deploy
from pyinfra.operations import server

from sglang_deploy.safety import USER_MARKER

# GPU device nodes are group-owned by these on hosts where they are not world-accessible.
DEVICE_GROUPS = ("video", "render")


def in_place(found: dict | None, user: str, home: str) -> bool:
    """Whether the account the deploy's DeployState fact found is already what install() makes."""
    return bool(found and found["gecos"] == USER_MARKER and found["home"] == home
                and found["shell"] == "/usr/sbin/nologin" and set(found["groups"]) >= {user, *DEVICE_GROUPS})


@deploy("Service user")
def install(user: str, home: str):
    for group in DEVICE_GROUPS:
        server.group(name=f"Group {group} exists", group=group, system=True)
    server.group(name=f"Group {user}", group=user, system=True)
    server.user(
        name=f"System user {user} (no login, member of {', '.join(DEVICE_GROUPS)})",
        user=user, group=user, groups=list(DEVICE_GROUPS), system=True, home=home,
        shell="/usr/sbin/nologin", create_home=False, comment=USER_MARKER,
    )
