"""The SGLang service's secrets: the API key and the admin key, the file SGLang reads through --config.

The unit and the environment file are part of a release and are installed by the switch
(roles/release.py); the secrets file is not part of a release, so a rollback never resurrects an
old key.
"""

from pyinfra.api import deploy
from pyinfra.operations import files

from roles.ops import secret_file
from sglang_deploy.layout import ServicePaths
from sglang_deploy.render import secrets_digest


def in_place(found_files: dict, secrets: str, service: str, user: str, found_digest: str | None = None) -> bool:
    """Whether config dir and secrets file (as the DeployState fact found them: modes, owners, and the file's
    render.secrets_digest) need no change."""
    layout = ServicePaths(service)
    return (found_files.get(layout.config_dir, [])[:3] == ["750", "root", user]
            and found_files.get(layout.secrets_path, [])[:3] == ["640", "root", user]
            and not content_changed(found_digest, secrets))


def content_changed(found_digest: str | None, secrets: str) -> bool:
    """Whether the server must restart for its secrets: the file's content differs but for the admin key's value
    (its mode or owner being repaired needs no restart: SGLang reads the file, through --config, only at start).
    found_digest: the host file's render.secrets_digest, None if absent or unreadable."""
    return found_digest != secrets_digest(secrets)


@deploy("SGLang service: secrets")
def configure_secrets(secrets: str, service: str, user: str):
    layout = ServicePaths(service)
    files.directory(name="Config directory", path=layout.config_dir, user="root", group=user, mode=750)
    # not managed_file: its --diff reads the file through a fact, which -vvv prints (roles/ops.py secret_file)
    return secret_file(name=f"Secrets {layout.secrets_path} (0640, never shown)", dest=layout.secrets_path,
                       content=secrets, mode=640, group=user, digest=secrets_digest)
