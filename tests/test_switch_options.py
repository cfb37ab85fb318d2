"""The switch's options are spelled once (sglang_deploy/switch_options.py) and parse on the host side as meant."""

import pytest

from sglang_deploy.hostside import switch as host_switch
from sglang_deploy.switch_options import SwitchOptions

DEPLOY = SwitchOptions(service="sglang", release_id="0002-1a2b3c4d", probe_url="http://127.0.0.1:30000",
                       timeout=3600, reason="deploy", max_auto_rollbacks=3, gate=True, on_inconclusive="keep")


@pytest.fixture
def parsed(monkeypatch):
    """What hostside/switch.py's own parser makes of a SwitchOptions' argv (the switch itself is not run)."""
    seen = []
    monkeypatch.setattr(host_switch, "switch", lambda args: seen.append(args) or 0)
    monkeypatch.setattr(host_switch, "guard_unit", lambda service: None)
    monkeypatch.setattr(host_switch, "StderrShield", lambda path: type("S", (), {"close": lambda self: None})())
    monkeypatch.setattr(host_switch.signal, "signal", lambda *a: None)

    def parse(options: SwitchOptions):
        assert host_switch.main(options.argv("me@controller")) == 0
        return seen.pop()
    return parse


def test_a_deploys_options_arrive_as_set(parsed):
    args = parsed(DEPLOY)
    assert (args.service, args.release, args.probe_url, args.timeout, args.reason, args.owner) == \
        ("sglang", "0002-1a2b3c4d", "http://127.0.0.1:30000", 3600.0, "deploy", "me@controller (deploy)")
    assert (args.auto_rollback, args.mark_good_on_ready, args.gate, args.on_inconclusive, args.force,
            args.stop_only, args.mark_previous_bad, args.max_auto_rollbacks) == (True, False, True, "keep", False,
                                                                                 False, False, 3)


def test_every_option_changes_what_the_host_parses(parsed):
    baseline = vars(parsed(DEPLOY.but(gate=False)))
    changes = {"auto_rollback": False, "mark_good": True, "force": True, "gate": True, "stop_only": True,
               "mark_previous_bad": True, "max_auto_rollbacks": 1000, "reason": "rollback", "timeout": 60}
    for field, value in changes.items():
        differs = {key for key, parsed_value in vars(parsed(DEPLOY.but(**{"gate": False, field: value}))).items()
                   if baseline[key] != parsed_value}
        assert differs, f"{field}={value!r} does not reach the host"


def test_a_rank_following_rank0_back_is_one_change_of_the_deploys_options(parsed):
    back = DEPLOY.but(release_id="0001-aaaaaaaa", reason="rollback (rank 0 failed)", auto_rollback=False,
                      max_auto_rollbacks=1000, force=True, gate=False, on_inconclusive="keep", mark_previous_bad=True)
    args = parsed(back)
    assert (args.release, args.auto_rollback, args.force, args.gate, args.mark_previous_bad) == \
        ("0001-aaaaaaaa", False, True, False, True)
    assert "automatic rollback" not in back.describe() and "gate" in DEPLOY.describe()
