"""The perf doctor: what leaves perf on the table, ranked, with the fix (doctor.py).

diagnosis.py is the pure diagnosis (roofline, suspects, the report), levers.py the lever suspects (speculation
slower than none, the all-reduce path, a token map, KV), ab.py the A/B on request (`doctor.py --data ab=nospec`).
Import the module you need; this package imports none of them.
"""
