"""The current host's typed settings (sglang_deploy/settings.py), made once per host and model.

Verbs and roles read host data only through here: `host_settings()` for what describes the host,
`settings.of(DeployArgs)` (and the other verbs' models) for one run's arguments. A bad value stops the verb
before any operation is queued, naming where it was set.
"""

from pyinfra import host
from pyinfra.api.exceptions import DeployError

from sglang_deploy.settings import HostSettings, SettingsError



def of(model):
    """`model` (a sglang_deploy.settings model) of the current host, made once per pyinfra Host object."""
    current = host._get_module()  # the Host itself, not pyinfra's context proxy
    made = current.__dict__.setdefault("_sglang_deploy_settings", {})
    if model not in made:
        try:
            made[model] = model.of(host.data)
        except SettingsError as error:
            raise DeployError(f"{host.name}: nothing was changed on the host; invalid host data:\n{error}") from None
    return made[model]


def host_settings() -> HostSettings:
    return of(HostSettings)


def sudo() -> bool:
    """pyinfra's `_sudo` host data: run this host's ad-hoc commands with sudo too."""
    return host_settings().sudo
