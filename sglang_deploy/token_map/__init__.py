"""The hot-vocabulary token map (FR-Spec) SGLang's `--speculative-token-map` reads (`sglang-deploy token-map`).

file.py builds a map from a corpus, freezes its digest and holds the check's rule for a map in a verified snapshot;
build.py is the counter it runs inside SGLang's validator environment (by path; nothing imports it); part.py is the
map as a release part of its own (speculative.token_map, tune.token_maps), shipped by digest.
Import the module you need; this package imports none of them.
"""
