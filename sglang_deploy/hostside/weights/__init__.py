"""Model weights on the host: `python3 -m hostside.weights` (__main__.py: fetch, verify, promote, prune, status),
the manifest's checks and hashing (manifest.py), filling a snapshot (fetch.py), bookkeeping and pruning
(prune.py). Standard library only."""
