"""The release history of a host: gate results and perf-watch samples of every retained release, as a table
a self-contained HTML page with inline SVG charts (decode tok/s and acceptance over time, release
switches marked) and a PNG (matplotlib: switches marked by id and flag changes, watch restarts, the gate's
floors, the decode roofline), written to results/<host>/history.{txt,html,json,png}. Without matplotlib
(the optional `plot` extra) the PNG is left out with a warning.

    pyinfra inventory/sim.py history.py

Reads only; changes nothing on the host.
"""

from pyinfra import host, logger

from roles.facts import ReleaseHistory
from roles.settings import host_settings
from sglang_deploy import history
from sglang_deploy.gate import RESULTS_DIR
from sglang_deploy.history_png import PlotUnavailable, picture
from sglang_deploy.release_plan import service_of

service = service_of(host_settings())
document = host.get_fact(ReleaseHistory, service=service)
directory = RESULTS_DIR / host.name
directory.mkdir(parents=True, exist_ok=True)
text = history.table(document)
(directory / "history.json").write_text(document.dump())
(directory / "history.txt").write_text(text + "\n")
(directory / "history.html").write_text(history.page(document, host.name, history.floors(document)))
logger.info(f"[{host.name}] history of {service}.service ({len(document.releases)} releases)")
for line in text.splitlines():
    logger.info(f"    {line}")
try:
    drawn = picture(document, directory / "history.png", host.name)
    logger.info(f"[{host.name}] history.png: {drawn['points']} points, {len(drawn['switches'])} switches and "
                f"restarts, {drawn['roofline_points']} roofline points")
except PlotUnavailable as error:
    logger.warning(f"[{host.name}] {error}")
logger.info(f"[{host.name}] written to {directory}/history.txt, history.html and history.png")
