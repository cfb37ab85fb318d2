"""A fleet of simulated CT129s on this machine (testbed/simhost.py hosts with distinct ports), for
inventory/sim_fleet.py: `python -m testbed.simctl up --count N`."""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from testbed.rootfs import shared_lower_rootfs
from testbed.simhost import REPO_ROOT, SimHost, SimHostError, check_prerequisites, ensure_api_key, log, port_in_use

DEFAULT_FLEET_DIR = Path(os.environ.get("SGLANG_DEPLOY_SIMFLEET_DIR", REPO_ROOT / ".simfleet"))
DEFAULT_FLEET_SSH_PORT = 2300
DEFAULT_FLEET_SERVICE_PORT = 30300


@dataclass
class Fleet:
    """N simulated hosts on this machine: host i listens for SSH on ssh_port + i, its GPU server on
    service_port + i and node_exporter on ssh_port + i + 7000 (the containers share this machine's network
    namespace, so each host gets its own ports). fleet.json in the state directory describes them for
    inventory/sim_fleet.py: the first host is the group `canary`, all of them the group `fleet`."""

    state_dir: Path = DEFAULT_FLEET_DIR
    count: int = 3
    ssh_port: int = DEFAULT_FLEET_SSH_PORT
    service_port: int = DEFAULT_FLEET_SERVICE_PORT
    machine: str = "ct129-fleet"
    start_seconds: float | None = None  # each host's (SimHost.start_seconds)

    @classmethod
    def load(cls, state_dir: Path) -> "Fleet":
        try:
            data = json.loads((state_dir / "fleet.json").read_text())
        except FileNotFoundError:
            raise SimHostError(f"no fleet in {state_dir} (fleet.json missing): `simhost up --count N` first") from None
        return cls(state_dir=state_dir, count=data["count"], ssh_port=data["ssh_port_base"],
                   service_port=data["service_port_base"], machine=data["machine_prefix"])

    def name(self, index: int) -> str:
        return f"{self.machine}-{index}"

    def hosts(self, lower: Path | None = None) -> list[SimHost]:
        lower = lower or shared_lower_rootfs()
        return [SimHost(state_dir=self.state_dir / self.name(i), ssh_port=self.ssh_port + i, machine=self.name(i),
                        overlay_lower=lower, start_seconds=self.start_seconds) for i in range(self.count)]

    def up(self, fresh: bool = False) -> None:
        check_prerequisites()
        if self.count < 1:
            raise SimHostError(f"--count: {self.count}: a fleet has at least one host")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        busy = [port for i in range(self.count) for port in (self.service_port + i,) if port_in_use(port)]
        if busy:
            raise SimHostError(f"service port(s) {', '.join(map(str, busy))} on 127.0.0.1 already in use; "
                               "choose another --service-port base")
        hosts = self.hosts()
        # One API key for the fleet: SGLang's router sends a single key to every worker behind it.
        ensure_api_key(self.state_dir)
        with ThreadPoolExecutor(max_workers=self.count) as pool:
            errors = [f for f in [pool.submit(host.up, fresh) for host in hosts]]
            problems = [str(f.exception()) for f in errors if f.exception()]
        (self.state_dir / "fleet.json").write_text(json.dumps(self.info(hosts), indent=2) + "\n")
        if problems:
            raise SimHostError("; ".join(problems))
        log(f"fleet up: {self.count} hosts, ssh 127.0.0.1:{self.ssh_port}-{self.ssh_port + self.count - 1}, "
            f"service ports {self.service_port}-{self.service_port + self.count - 1}")

    def down(self) -> None:
        with ThreadPoolExecutor(max_workers=max(1, self.count)) as pool:
            list(pool.map(lambda host: host.down(), self.hosts()))

    def remove(self) -> None:
        """After down: the hosts' own layers (the shared lower rootfs stays in the cache)."""
        for host in self.hosts():
            if not os.path.ismount(host.rootfs):
                shutil.rmtree(host.state_dir, ignore_errors=True)

    def info(self, hosts: list[SimHost] | None = None) -> dict:
        hosts = hosts or self.hosts()
        entries = []
        for index, host in enumerate(hosts):
            entries.append({**host.info(), "name": host.machine, "service_port": self.service_port + index,
                            "api_key_file": str(self.state_dir / "api_key")})
        return {"count": self.count, "ssh_port_base": self.ssh_port, "service_port_base": self.service_port,
                "machine_prefix": self.machine, "groups": {"canary": [hosts[0].machine] if hosts else [],
                                                            "fleet": [h.machine for h in hosts]},
                "hosts": entries}
