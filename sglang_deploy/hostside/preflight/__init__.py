"""The preflight: can this release's server start on this host? `python3 -m hostside.preflight` runs runner.py
(root, outside any sandbox); probe.py gathers the facts inside the transient unit (run by path), findings.py
judges them. Standard library only."""
