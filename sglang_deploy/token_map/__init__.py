"""The hot-vocabulary token map (FR-Spec) SGLang's `--speculative-token-map` reads (`sglang-deploy token-map`).

file.py reads a corpus, freezes a map's digest and holds the check's rule for a map in a verified snapshot; build.py
is the counter that runs inside SGLang's validator environment (by path, from validate/token_counter.py; nothing
imports it); part.py is the map as a release part of its own (speculative.token_map, tune.token_maps), shipped by
digest; size.py reads how many ids a map holds without torch (on the controller and on the simulated host).
Import the module you need; this package imports none of them, and none of them imports validate/ (the check
imports them).
"""
