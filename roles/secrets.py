"""The SGLang service's secrets: the API key file SGLang reads through --config.

The unit and the environment file are part of a release and are installed by the switch
(roles/release.py); the secrets file is not part of a release, so a rollback never resurrects an
old key.
"""

from pyinfra.api import deploy
from pyinfra.operations import files

from roles.ops import secret_file
from sglang_deploy.layout import ServiceLayout


def in_place(found_files: dict, secrets: str, service: str, user: str) -> bool:
    """Whether config dir and secrets file (as the DeployState fact found them) need no change."""
    import hashlib

    layout = ServiceLayout(service)
    return (found_files.get(layout.config_dir, [])[:3] == ["750", "root", user]
            and found_files.get(layout.secrets_path, []) == ["640", "root", user,
                                                             hashlib.sha256(secrets.encode()).hexdigest()])


def found_hash(found_files: dict, service: str) -> str | None:
    """The secrets file's sha256 as the DeployState fact found it (mode, owner, group, sha256), None if absent."""
    found = found_files.get(ServiceLayout(service).secrets_path) or []
    return found[3] if len(found) > 3 else None


def content_changed(found_hash: str | None, secrets: str) -> bool:
    """Whether the server must restart for its secrets: the file's content differs (its mode or owner being
    repaired needs no restart: SGLang reads the file, through --config, only at start). found_hash: the file's
    sha256, None if absent or unreadable."""
    import hashlib

    return found_hash != hashlib.sha256(secrets.encode()).hexdigest()


@deploy("SGLang service: secrets")
def configure_secrets(secrets: str, service: str, user: str):
    layout = ServiceLayout(service)
    files.directory(name="Config directory", path=layout.config_dir, user="root", group=user, mode=750)
    # not managed_file: its --diff reads the file through a fact, which -vvv prints (roles/ops.py secret_file)
    return secret_file(name=f"Secrets {layout.secrets_path} (0640, never shown)", dest=layout.secrets_path,
                       content=secrets, mode=640, group=user)
