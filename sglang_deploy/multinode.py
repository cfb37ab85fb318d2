"""Tensor parallelism over several hosts: each host's place in the server (SGLang's --nnodes/--node-rank).

A profile with `nodes: N` (N > 1) is deployed to the N hosts of the inventory group `nodes` (host data
`node_group` names another), in rank order: the first host is rank 0, whose address (`worker_address`, else
`ssh_hostname`) and `multinode.dist_init_port` make `--dist-init-addr`. Rank 0 serves HTTP and is gated; the
other ranks join it over TCP and serve nothing (as in SGLang). SGLang turns its custom all-reduce off when a
process group spans nodes ("... is disabled because this process group spans across nodes."): by design, so
neither the gate nor the doctor counts it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from .safety import SOCKET_IFNAME
from .settings import HostSettings, SettingsError

HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")


class NodeError(ValueError):
    pass


@dataclass(frozen=True)
class Node:
    rank: int
    nnodes: int
    dist_init_addr: str  # host:port of rank 0 ([v6]:port)
    socket_ifname: str | None = None

    def args(self) -> list[str]:
        return ["--nnodes", str(self.nnodes), "--node-rank", str(self.rank), "--dist-init-addr", self.dist_init_addr]

    def environment(self) -> dict[str, str]:
        """NCCL's and Gloo's bootstrap sockets on the interface the nodes share (none set: NCCL picks one)."""
        if not self.socket_ifname:
            return {}
        return {"NCCL_SOCKET_IFNAME": self.socket_ifname, "GLOO_SOCKET_IFNAME": self.socket_ifname}

    @property
    def serves_http(self) -> bool:
        return self.rank == 0


def node_address(name: str, settings: HostSettings) -> str:
    """The address other hosts reach host `name` at: its worker_address, else its ssh_hostname, else its name; an
    IPv6 literal in brackets (a URL's or --dist-init-addr's host part)."""
    address = str(settings.worker_address or settings.ssh_hostname or name)
    try:
        literal = ipaddress.ip_address(address)
        return f"[{literal}]" if literal.version == 6 else str(literal)
    except ValueError:
        if not HOSTNAME.fullmatch(address):
            raise NodeError(f"{name}: worker_address: {address!r}: an IP literal or a host name") from None
        return address


def placement(nodes: int, dist_init_port: int, socket_ifname: str | None, host_name: str, settings: HostSettings,
              groups: dict[str, list[tuple[str, dict]]]) -> Node | None:
    """This host's Node for a profile with `nodes` hosts (None for a one-host profile). settings: this host's;
    groups: the inventory's groups as (host name, host data) lists. Errors name the group and what is accepted."""
    group = settings.node_group
    if nodes == 1:
        return None
    members = groups.get(group)
    if not members:
        raise NodeError(f"nodes: the profile spans {nodes} hosts but the inventory has no group {group!r} listing "
                        "them in rank order (the first is rank 0)")
    names = [name for name, _ in members]
    if len(names) != nodes or len(set(names)) != nodes:
        raise NodeError(f"nodes: the profile spans {nodes} hosts but the inventory group {group!r} lists "
                        f"{len(names)} ({', '.join(names)}); accepted: exactly {nodes} distinct hosts")
    if host_name not in names:
        raise NodeError(f"nodes: {host_name} is not in the inventory group {group!r} ({', '.join(names)}), which "
                        f"runs this {nodes}-node profile")
    rank0_name, rank0_data = members[0]
    try:
        rank0_settings = HostSettings.of(rank0_data)
    except SettingsError as error:
        raise NodeError(f"{rank0_name} (rank 0 of the group {group!r}): " + "; ".join(error.problems)) from None
    ifname = settings.nccl_socket_ifname or socket_ifname
    if ifname is not None and not SOCKET_IFNAME.fullmatch(str(ifname)):
        raise NodeError(f"nccl_socket_ifname: {ifname!r}: interface names such as eth0, comma-separated, "
                        "optionally prefixed with ^ or =")
    return Node(rank=names.index(host_name), nnodes=nodes,
                dist_init_addr=f"{node_address(rank0_name, rank0_settings)}:{dist_init_port}",
                socket_ifname=str(ifname) if ifname else None)
