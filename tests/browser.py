"""A real headless browser for the tests: Debian's Chromium (scripts/bootstrap installs it).

Chromium parses and lays out the page as a user's browser does: `--dump-dom` gives the DOM it built
(inline SVG elements in the SVG namespace, serialized back), `--screenshot` what it painted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str:
    """The browser's path; skips the test where there is none, except under SGLANG_DEPLOY_REQUIRE_SIMHOST=1 (CI)."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    reason = "Chromium is not installed (apt-get install chromium; scripts/bootstrap does)"
    if os.environ.get("SGLANG_DEPLOY_REQUIRE_SIMHOST") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def _run(page: Path, *flags: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        # --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start.
        command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                   "--disable-extensions", "--hide-scrollbars", f"--user-data-dir={profile}", *flags,
                   page.resolve().as_uri()]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                env={**os.environ, "HOME": profile})
    if result.returncode != 0:
        raise AssertionError(f"{command} failed ({result.returncode}): {result.stderr[-2000:]}")
    return result


def dump_dom(page: Path) -> str:
    return _run(page, "--dump-dom").stdout


def screenshot(page: Path, out: Path, width: int = 1000, height: int = 1200) -> Path:
    _run(page, f"--screenshot={out}", f"--window-size={width},{height}")
    assert out.exists(), f"Chromium wrote no screenshot to {out}"
    return out
