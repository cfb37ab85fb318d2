"""history.py's stages, in the order it runs them: read -> write -> picture. They only read the host.

The tables and pages are sglang_deploy/history.py's, the PNG sglang_deploy/history_png.py's; all of them land in
results/<host>/ on the controller.
"""

from __future__ import annotations

from pathlib import Path

from pyinfra import host, logger

from roles.facts import ReleaseStore
from roles.settings import host_settings
from sglang_deploy import history
from sglang_deploy.results import RESULTS_DIR
from sglang_deploy.history_png import PlotUnavailable, picture as draw
from sglang_deploy.release_plan import service_of


def directory() -> Path:
    """results/<host>/ on the controller, made when missing."""
    path = RESULTS_DIR / host.name
    path.mkdir(parents=True, exist_ok=True)
    return path


def read():
    """The ReleaseStore fact's history view (the store's history document): every retained release's gate results
    and perf-watch samples, in one round trip."""
    return host.get_fact(ReleaseStore, service=service_of(host_settings()), view="history")


def write(document) -> None:
    """history.json, history.txt (the table, also logged) and history.html (inline SVG charts)."""
    out = directory()
    text = history.table(document)
    (out / "history.json").write_text(document.dump())
    (out / "history.txt").write_text(text + "\n")
    (out / "history.html").write_text(history.page(document, host.name, history.floors(document)))
    logger.info(f"[{host.name}] history of {service_of(host_settings())}.service ({len(document.releases)} releases)")
    for line in text.splitlines():
        logger.info(f"    {line}")


def picture(document) -> None:
    """history.png (matplotlib, the optional `plot` extra); without it, a warning and no PNG."""
    out = directory()
    try:
        drawn = draw(document, out / "history.png", host.name)
        logger.info(f"[{host.name}] history.png: {drawn['points']} points, {len(drawn['switches'])} switches and "
                    f"restarts, {drawn['roofline_points']} roofline points")
    except PlotUnavailable as error:
        logger.warning(f"[{host.name}] {error}")
    logger.info(f"[{host.name}] written to {out}/history.txt, history.html and history.png")
