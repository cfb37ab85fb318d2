"""The layout's walks, counted by running them (docs/layout.md, "Three walks"; layout review 4's three data paths).

    python benchmarks/walks.py [-v]

Two walks run on the controller, without a host, under sys.setprofile:
  - path 1: a profile from load_profile through check_profile to render (profiles/qwen3.6-27b-mtp-2xa6000.yaml,
    SGLang's whole resolution under 2x RTX A6000 facts, from the probe's cache after a first run);
  - path 3, the controller's side of one tune candidate: tune/host.stage_files (the candidate's profile, its plan:
    path 1 again, its release files) and run_item up to the queue/<seq>.json the host's session reads (the stand-in
    host refuses the queue).
How it counts: a hop is a call site that crosses from one file of sglang_deploy/ to another, counted the first time
it runs (a loop over the flags is one hop, not one per flag); "entered" counts the distinct files (or folders) the
hops lead into, "re-entries" the hops into one entered before, and "stops" the walk of calls and returns with
consecutive repeats collapsed. Each count is given per file and per folder (a sub-package of sglang_deploy as one
unit, as tests/test_imports.py counts loops), for path 1 whole and for its detour (check_profile alone). Prints one
line per walk and level; -v prints the folder walk.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
PACKAGE = str(REPO / "sglang_deploy") + os.sep


class Walk:
    def __init__(self):
        self.events, self.sites, self.open, self.phase = [], set(), {}, None

    def __enter__(self):
        sys.setprofile(self.profile)
        return self

    def __exit__(self, *_):
        sys.setprofile(None)

    def profile(self, frame, event, arg):
        if event == "call":
            callee, back = _file(frame.f_code.co_filename), frame.f_back
            caller = _file(back.f_code.co_filename) if back is not None else None
            if callee is None or caller is None or callee == caller:
                return
            site = (back.f_code, back.f_lineno, frame.f_code)
            if site not in self.sites:
                self.sites.add(site)
                self.open[id(frame)] = caller
                self.events.append((self.phase, callee, caller))
        elif event == "return" and id(frame) in self.open:
            self.events.append((self.phase, self.open.pop(id(frame)), None))

    def counts(self, level, phase=None) -> tuple[dict, list[str]]:
        hops, entered, reentries, stops = 0, [], 0, []
        for when, where, caller in self.events:
            if phase is not None and when != phase:
                continue
            unit = level(where)
            if caller is not None:  # a call
                if level(caller) == unit:
                    continue
                hops += 1
                if unit in entered:
                    reentries += 1
                else:
                    entered.append(unit)
            if not stops or stops[-1] != unit:
                stops.append(unit)
        return {"hops": hops, "entered": len(entered), "re-entries": reentries, "stops": len(stops)}, stops


def _file(path: str) -> str | None:
    return path[len(PACKAGE):] if path.startswith(PACKAGE) else None


def per_file(name: str) -> str:
    return name.removesuffix(".py")


def per_folder(name: str) -> str:
    return name.split("/")[0].removesuffix(".py")


def path1() -> Walk:
    from sglang_deploy.profile import load_profile
    from sglang_deploy.render import render
    from sglang_deploy.validate import gpu_facts
    from sglang_deploy.validate.check import check_profile

    def once(walk):
        with walk:
            profile = load_profile(REPO / "profiles" / "qwen3.6-27b-mtp-2xa6000.yaml")
            walk.phase = "check"
            check_profile(profile, gpus=2, topology="pcie", gpu=gpu_facts.model("a6000"))
            walk.phase = "render"
            render(profile, api_key="sk-" + "x" * 30, port=30000, admin_key="adm-" + "y" * 30)

    once(Walk())  # the probe's answer cached, as on a redeploy
    walk = Walk()
    once(walk)
    return walk


def path3() -> Walk:
    import yaml

    from conftest import INCIDENT
    from sglang_deploy.profile import load_profile
    from sglang_deploy.tune import controller, search

    class Host:  # refuses everything: nothing runs on a host
        def run(self, command):
            return False, "", "not on a host"

        def put(self, text, path):
            pass

    work = Path(tempfile.mkdtemp(prefix="walks-"))
    os.environ["SGLANG_DEPLOY_PROFILE_DIRS"] = str(work)
    os.environ.setdefault("SGLANG_DEPLOY_API_KEY", "k" * 24)
    profile = work / "incident.yaml"
    profile.write_text(INCIDENT.read_text())
    data = {"profile": str(profile), "simulated": True, "gpus": 2, "gpu_topology": "pcie", "tune_budget_s": "3600",
            "tune_max_new_tokens": "64", "tune_samples": "2"}
    runner = controller.Runner("host", data, Host(), lambda line: None, results_dir=work / "results")
    runner.profile, runner.profile_text = load_profile(profile), profile.read_text()
    runner.settings = controller.settings_from(data, runner.profile)
    runner.work = work / "work"
    (runner.work / "candidates").mkdir(parents=True)
    runner.release_ids, runner.by_hash, runner.saved, runner.all_results = ["0001-aaaaaaaa"], {}, {}, []
    runner.active, runner.service, runner.session, runner.started = "0001-aaaaaaaa", "sglang", "s1", time.monotonic()
    runner.stamp = "20261130T000000Z"
    flags = yaml.safe_load(INCIDENT.read_text())["sglang"]["flags"]

    def once(walk, candidate):
        with walk:
            item, problem = runner.stage_files(candidate)
            if problem:
                raise SystemExit(f"the candidate is refused: {problem}")
            try:
                runner.run_item(candidate, item, restart=True)
            except controller.TuneError:
                pass  # the stand-in host refuses the queue

    once(Walk(), search.spec_candidate(flags, 3, 2))
    walk = Walk()
    once(walk, search.spec_candidate(flags, 2, 1))
    return walk


def main() -> None:
    one, three = path1(), path3()
    for name, walk, phase in (("path 1, load -> check -> render", one, None), ("path 1's detour, check_profile", one, "check"),
                              ("path 3, one candidate, controller", three, None)):
        for level_name, level in (("files", per_file), ("folders", per_folder)):
            counts, stops = walk.counts(level, phase)
            print(f"{name}, {level_name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
            if "-v" in sys.argv and level is per_folder:
                print("    " + " > ".join(stops))


if __name__ == "__main__":
    main()
