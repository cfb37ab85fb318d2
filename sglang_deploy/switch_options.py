"""One switch of a service to a release, as the controller asks the host's switch (hostside/switch.py) for it.

The options are spelled here once and serialised once (`argv`); deploy.py, rollback.py and the multi-node
steps build a SwitchOptions and change what differs with `but(...)`. tests/test_switch_options.py checks that
every argv parses with the host side's own parser.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SwitchOptions:
    service: str
    release_id: str
    probe_url: str  # loopback only: readiness and the gate never send the key off the host
    timeout: float  # readiness, in seconds
    reason: str = "deploy"  # recorded in the store's history: deploy, rollback, ...
    auto_rollback: bool = True  # a failed readiness or gate brings the previous release back
    mark_good: bool = False  # ready is good (no gate: skip_gate, or a rank that serves no HTTP)
    max_auto_rollbacks: int = 3  # automatic rollbacks in a row before the switch refuses (force overrides)
    force: bool = False
    gate: bool = False  # run the release's gate once ready
    on_inconclusive: str = "rollback"  # rollback or keep, when the gate cannot decide
    mark_previous_bad: bool = False  # the release being left is recorded bad (a node following rank 0 back)
    stop_only: bool = False  # stop the running release under the store's lock, start nothing (multi-node)

    def but(self, **changes) -> "SwitchOptions":
        return replace(self, **changes)

    def argv(self, owner: str) -> list[str]:
        """hostside/switch.py's arguments."""
        argv = ["--service", self.service, "--release", self.release_id, "--probe-url", self.probe_url,
                "--timeout", str(self.timeout), "--reason", self.reason, "--owner", f"{owner} ({self.reason})",
                "--max-auto-rollbacks", str(self.max_auto_rollbacks)]
        argv += ["--auto-rollback"] * self.auto_rollback + ["--mark-good-on-ready"] * self.mark_good
        argv += ["--force"] * self.force
        argv += ["--gate", "--on-inconclusive", self.on_inconclusive] if self.gate else []
        argv += ["--mark-previous-bad"] * self.mark_previous_bad + ["--stop-only"] * self.stop_only
        return argv

    def describe(self) -> str:
        return (f"Switch {self.service} to release {self.release_id} ({self.reason}): restart, readiness"
                + (", gate" if self.gate else "") + (", automatic rollback on failure" if self.auto_rollback else ""))
