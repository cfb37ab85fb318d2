"""The typed contract between the controller and the host, filed by where each document lives: document.py (the
mechanism); in releases/<id>/, release.py (what the deploy writes: meta.json, resolved.json, profile.json,
roofline.json), gate.py (the gate's config and result, with the measurement and output check it stores), findings.py
(the doctor's, the tune's and the perf watch's reports) and files.py (a release's set of files); at the store's root,
store.py (state and lock) and switch.py (the last switch); session.py (a tune session's files and answers);
answers.py (the everyday programs' stdout: store state, weights, hooks), history.py (the store's history), probes.py
(the diagnostic programs' answers: the preflight's report and probe, the GPU probe, the doctor's collection) and
paths.py (the host's paths, one table). A no-op deploy's host program loads document, paths, release, store and
answers alone (tests/test_documents.py).
Standard library only: shipped to the host with the rest of the package, and imported by the controller."""
