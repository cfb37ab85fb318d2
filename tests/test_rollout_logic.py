"""`sglang-deploy rollout` (sglang_deploy/rollout.py) without hosts: its usage errors, and the driver's batches over a
stand-in for pyinfra (the fleet's release stores as releases.py's JSON would give them): the canary passes, a failed
batch stops the rollout, the later hosts get no deploy. The real run over a simulated fleet: tests/test_fleet_sim.py."""

import json

import pytest

from conftest import store_report
from sglang_deploy import results, rollout
from sglang_deploy.cli import main
from sglang_deploy.fleet import host_summary

FLEET = "canary = ['h0']\nfleet = ['h0', 'h1', 'h2']\n"


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "fleet.py"
    path.write_text(FLEET)
    return path


@pytest.mark.parametrize("text, argv, message", [
    (FLEET, ["--data", "skip_gate"], "--data 'skip_gate': expected key=value"),
    ("fleet = ['h0', 'h1']\n", [], "the inventory has no group 'canary' (or it is empty)"),
    (FLEET, ["--batch-size", "0"], "--batch-size: '0': a host count >= 1 (2) or a share of the fleet (25%)"),
    (FLEET, ["--fleet-group", "gpus"], "the inventory has no group 'gpus'; groups found: canary, fleet"),
    ("raise SystemExit('the fleet is not set up')\n", [], "fleet.py: the fleet is not set up"),
], ids=["data-without-value", "no-canary", "batch-size", "no-fleet-group", "inventory-refuses"])
def test_usage_errors_name_the_flag_and_deploy_nothing(tmp_path, monkeypatch, capsys, text, argv, message):
    path = tmp_path / "fleet.py"
    path.write_text(text)
    monkeypatch.setattr(rollout, "pyinfra", lambda *a, **k: pytest.fail("pyinfra ran"))
    assert main(["rollout", str(path), *argv]) == 2
    assert message in capsys.readouterr().err


def release(id_, verdict, gate):
    return {"id": id_, "verdict": verdict, "created": id_, "gate": {"verdict": gate, "summary": gate, "at": id_},
            "profile": "p", "history": [{"at": id_, "event": "activated (deploy)"}]}


class Fleet:
    """Three hosts on release 0001; a deploy brings 0002, which fails its gate on the `bad` hosts (rolled back
    there); with `noop`, the deploy finds nothing to change (the release stays, the server is not restarted)."""

    def __init__(self, bad=("h1",), noop=False):
        self.bad, self.noop = bad, noop
        self.stores = {h: {"state": {"active": "0001", "last_good": "0001"}, "consistent": True, "lock": None,
                           "running": {"main_pid": 100, "started_monotonic_us": 1},
                           "releases": [release("0001", "good", "pass")]} for h in ("h0", "h1", "h2")}
        self.deployed = []

    def pyinfra(self, inventory, verb, hosts, data, log_path):
        log_path.write_text(f"pyinfra {verb} {hosts}\n")
        if verb == "deploy.py":
            for h in hosts:
                self.deployed.append(h)
                if self.noop:
                    continue
                store = self.stores[h]
                bad = h in self.bad
                store["releases"].append(release("0002", "bad" if bad else "good", "fail" if bad else "pass"))
                store["state"]["active"] = "0001" if bad else "0002"
                store["running"] = {"main_pid": 200, "started_monotonic_us": 2}
                if bad:
                    store["releases"][0]["history"].append({"at": "0003", "event": "activated (automatic rollback)"})
            return 1 if set(self.bad) & set(hosts) else 0
        summary = next(item.split("=", 1)[1] for item in data if item.startswith("fleet_summary="))
        with open(summary, "w") as f:
            json.dump({h: host_summary(store_report(*self.stores[h]["releases"], **self.stores[h]["state"],
                                                    running=self.stores[h]["running"])) for h in hosts}, f)
        return 0


def rolled_out(fleet, inventory, monkeypatch, tmp_path, *argv):
    monkeypatch.setattr(rollout, "pyinfra", fleet.pyinfra)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path / "results")  # the summaries releases.py would write
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    code = main(["rollout", str(inventory), "--log", str(tmp_path / "rollout.log"), *argv])
    return code, (tmp_path / "rollout.log").read_text()


def test_the_canary_passes_a_failed_batch_stops_the_rollout_and_the_rest_is_untouched(inventory, monkeypatch,
                                                                                        tmp_path):
    fleet = Fleet()
    code, log = rolled_out(fleet, inventory, monkeypatch, tmp_path, "--batch-size", "1")
    assert (code, fleet.deployed) == (1, ["h0", "h1"]), log
    assert "canary: PASSED" in log and "h0: deployed: 0002 good (pass)" in log
    assert "h1: FAILED: release 0002 bad (fail); rolled back to 0001" in log
    assert "rollout STOPPED at batch 1; 1 host(s) not deployed:" in log and "h2: untouched" in log
    summary = log.split("fleet summary:\n", 1)[1].splitlines()
    assert [line.split()[3:5] for line in summary[1:]] == [["h0", "0002"], ["h1", "0001"], ["h2", "0001"]], summary
    assert summary[2].endswith("0002 bad: fail")
    assert len(list((tmp_path / "results" / "rollouts").rglob("*.json"))) == 4  # before, after each batch, final


def test_a_rollout_that_changes_nothing_passes_and_a_failed_lone_canary_stops_it(inventory, monkeypatch, tmp_path):
    """A fleet already on the release: every host deployed, none restarted, each "unchanged" (not "untouched",
    which names a host the rollout did not reach). A canary alone that fails: stopped, not complete."""
    fleet = Fleet(bad=(), noop=True)
    code, log = rolled_out(fleet, inventory, monkeypatch, tmp_path, "--batch-size", "2")
    assert (code, fleet.deployed) == (0, ["h0", "h1", "h2"]), log
    assert log.count("unchanged: 0001 stayed active (nothing to deploy)") == 3 and "rollout COMPLETE" in log
    alone = tmp_path / "alone.py"
    alone.write_text("canary = ['h0']\n")
    fleet = Fleet(bad=("h0",))
    (tmp_path / "second").mkdir()
    code, log = rolled_out(fleet, alone, monkeypatch, tmp_path / "second")
    assert code == 1 and "rollout STOPPED at the canary; 0 host(s) not deployed" in log and "COMPLETE" not in log
