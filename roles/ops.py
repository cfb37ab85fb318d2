"""Operations pyinfra does not have: managed files and previews whose --diff never shows a secret."""

from __future__ import annotations

import difflib
from io import StringIO

from pyinfra import host, logger, state
from pyinfra.api import operation
from pyinfra.facts.files import File, FileContents
from pyinfra.operations import files

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
