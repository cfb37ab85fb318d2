"""Operations pyinfra does not have: managed files and previews whose --diff never shows a secret."""

from __future__ import annotations

import difflib
import hashlib
import shlex
from io import BytesIO, StringIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.facts.files import File, FileContents, Sha256File
from pyinfra.facts.server import Home
from pyinfra.operations import files

from roles.settings import sudo
from sglang_deploy.render import mask_secrets


def _log_masked_diff(dest: str, content: str) -> None:
    current = host.get_fact(FileContents, path=dest) if host.get_fact(File, path=dest) else None
    old_text = "\n".join(current) + "\n" if current else ""
    if old_text == content:
        return
    old, new = mask_secrets(old_text), mask_secrets(content)
    host.log(f"Will {'modify' if current is not None else 'create'} {dest}", logger.info)
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), f"{dest} (host)", f"{dest} (new)",
                                     lineterm="", n=2):
        logger.info("  %s", line)
    if old == new:
        logger.info("  (only secret values differ; they are not shown)")


@operation()
def managed_file(dest: str, content: str, mode: int, user: str = "root", group: str = "root", diff: bool = True):
    """Upload ``content`` to ``dest`` when it differs; with --diff the change is printed, secrets masked."""
    if state.config.DIFF and diff:
        _log_masked_diff(dest, content)
    # files.put decides what to upload from checksums; its own diff is switched off (it would show secrets).
    show_diff, state.config.DIFF = state.config.DIFF, False
    try:
        commands = list(files.put._inner(src=StringIO(content), dest=dest, user=user, group=group, mode=mode))
    finally:
        state.config.DIFF = show_diff
    yield from commands


@operation()
def preview_diff(dest: str, content: str):
    """With --diff, print how ``content`` differs from ``dest`` on the host (secrets masked); change nothing."""
    if state.config.DIFF:
        _log_masked_diff(dest, content)
    yield from ()


STAGING_DIR = ".sglang-deploy-staging"  # in the SSH user's home, 0700: where a sudo deploy stages a secret


@operation()
def secret_file(dest: str, content: str, mode: int, group: str, digest=None):
    """Install a secret file as root:group with `mode`, its content never on the console or in a shared /tmp.

    - No fact reads the file (`-vvv` prints every fact's output): the change is decided by its sha256, or with
      `digest` (render.secrets_digest) by the host's SecretsDigest of it.
    - --diff says "changed (secret)", never the lines.
    - Uploaded over SFTP directly to `dest` when the SSH user is root; under sudo (pyinfra would stage a 0644
      file at a predictable /tmp/pyinfra-<sha1>) into a 0700 directory of the SSH user, then installed with
      `install -m` by sudo and removed. The commands carry paths only."""
    if digest is not None:
        # deferred: 13 ms (roles.facts) on router.py, for a secret with a digest (the deploy's) only
        from roles.facts import SecretsDigest

        in_place = host.get_fact(SecretsDigest, path=dest) == digest(content)
    else:
        in_place = host.get_fact(Sha256File, path=dest) == hashlib.sha256(content.encode()).hexdigest()
    if in_place:
        yield from files.file._inner(path=dest, user="root", group=group, mode=mode)
        return
    if state.config.DIFF:
        host.log(f"Will write {dest}: changed (secret: its content is not shown)", logger.info)
    data = BytesIO(content.encode())
    if not (sudo() or state.config.SUDO):
        yield StringCommand("install", "-m", "600", "/dev/null", dest)  # 0600 before a byte arrives
        yield FileUploadCommand(data, dest)
    else:
        home = host.get_fact(Home, _sudo=False)
        staged = f"{home}/{STAGING_DIR}/{hashlib.sha256(dest.encode()).hexdigest()[:16]}"
        yield StringCommand(f"umask 077 && mkdir -p {shlex.quote(f'{home}/{STAGING_DIR}')} && "
                            f"chmod 700 {shlex.quote(f'{home}/{STAGING_DIR}')}", _sudo=False)
        yield FileUploadCommand(data, staged, _sudo=False)
        yield StringCommand("install", "-m", "600", staged, dest)
        yield StringCommand("rm", "-f", staged, _sudo=False)
    yield StringCommand("chown", f"root:{group}", dest)
    yield StringCommand("chmod", str(mode), dest)  # pyinfra's modes: 640 means 0640


class HostRemote:
    """The current host as the tune's host session (sglang_deploy/tune/host.py) uses it: run(command) -> (ok, stdout,
    stderr) and put(text, path), both with the deploy's sudo."""

    def run(self, command):
        ok, output = host.run_shell_command(command, _sudo=sudo())
        return ok, output.stdout, output.stderr

    def put(self, text, path):
        host.put_file(StringIO(text), path, _sudo=sudo())
