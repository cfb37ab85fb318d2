"""Operations pyinfra does not have: a managed file whose --diff output never shows a secret."""

from __future__ import annotations

import difflib
from io import StringIO

from pyinfra import host, logger, state
from pyinfra.api import operation
from pyinfra.facts.files import File, FileContents
from pyinfra.operations import files

from sglang_deploy.render import mask_secrets


@operation()
def managed_file(dest: str, content: str, mode: int, user: str = "root", group: str = "root"):
    """Upload ``content`` to ``dest`` when it differs; the diff is printed with secrets masked."""
    if state.config.DIFF:
        current = host.get_fact(FileContents, path=dest) if host.get_fact(File, path=dest) else None
        old_text = "\n".join(current) + "\n" if current else ""
        if old_text != content:
            old, new = mask_secrets(old_text), mask_secrets(content)
            verb = "modify" if current is not None else "create"
            host.log(f"Will {verb} {dest}", logger.info)
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"{dest} (host)", f"{dest} (release)",
                                        lineterm="", n=2)
            for line in diff:
                logger.info("  %s", line)
            if old == new:
                logger.info("  (only secret values differ; they are not shown)")
    # files.put decides what to upload from checksums; its own diff is switched off (it would show secrets).
    show_diff, state.config.DIFF = state.config.DIFF, False
    try:
        commands = list(files.put._inner(src=StringIO(content), dest=dest, user=user, group=group, mode=mode))
    finally:
        state.config.DIFF = show_diff
    yield from commands
