"""The systemd units the tool writes, by name: a service's own `<service>.service`, the units it writes beside it
and the fixed ones. One home, imported by what renders them (render.py, router.py, container.py) and by what must
keep a service's name from colliding with them (safety.py); it imports nothing of the project."""

from __future__ import annotations

from .hostside.contract.paths import UNIT_DIR
ROUTER_SERVICE = "sglang-router"  # router.py: SGLang's router in front of the fleet's workers
UVM_UNIT = "sglang-deploy-nvidia-nodes.service"  # container.py: the device nodes a container host lacks


def watch_paths(service: str) -> tuple[str, str]:
    """The watch's unit files: <service>-watch.service and <service>-watch.timer."""
    return (f"{UNIT_DIR}/{service}-watch.service", f"{UNIT_DIR}/{service}-watch.timer")


def recover_path(service: str) -> str:
    """The boot recovery's unit (hostside/recover.py), ordered before the server's."""
    return f"{UNIT_DIR}/{service}-recover.service"


def beside_suffixes() -> set[str]:
    """The suffixes the tool appends to a service's name for the units it writes beside it (without .service or
    .timer), read from the functions that name them."""
    probe = "x"
    return {path.rsplit("/", 1)[1].rsplit(".", 1)[0][len(probe):] for path in (*watch_paths(probe),
                                                                                recover_path(probe))}
