"""The typed contract between the controller and the host, filed by where each document lives: document.py (the
mechanism), release.py (releases/<id>/), store.py (the store's state, lock and last switch), session.py (a tune
session's files and answers), answers.py (the everyday programs' stdout: store, weights, hooks), probes.py (the diagnostic programs'
answers: the preflight's report and probe, the GPU probe, the doctor's collection) and paths.py (the host's paths, one table).
Standard library only: shipped to the host with the rest of the package, and imported by the controller."""
