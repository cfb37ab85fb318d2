"""Tune: search a profile's flags on the host for the best measured release.

search.py is the pure part (candidates, scores, the search and the choice), axes.py the lever axes, levers.py
SGLang's answer for a lever's values, edit.py a candidate's profile text, report.py the tables and the plot,
results.py which saved results are reused, controller.py the controller's side that runs candidates on the host.
Import the module you need; this package imports none of them.
"""
