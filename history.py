"""The release history of a host: gate results and perf-watch samples of every retained release, as a table
a self-contained HTML page with inline SVG charts (decode tok/s and acceptance over time, release
switches marked) and a PNG (matplotlib: switches marked by id and flag changes, watch restarts, the gate's
floors, the decode roofline), written to results/<host>/history.{txt,html,json,png}. Without matplotlib
(the optional `plot` extra) the PNG is left out with a warning.

    pyinfra inventory/sim.py history.py

Reads only; changes nothing on the host.
"""

from roles import history_stages as stages

document = stages.read()  # one round trip: every retained release's gate results and watch samples
stages.write(document)  # results/<host>/history.{json,txt,html}; the table in the log
stages.picture(document)  # history.png, or a warning without matplotlib
