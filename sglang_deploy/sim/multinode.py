"""SIMULATED multi-node tensor parallelism: --nnodes, --node-rank, --dist-init-addr as SGLang uses them.

SGLang (torch.distributed) rendezvouses at --dist-init-addr: rank 0 hosts the TCP store there and waits
for the other nodes; they connect to it. Only rank 0 serves HTTP. The simulator does the same over a real TCP
socket: rank 0 listens on the address and waits for nnodes - 1 peers, each peer connects (retrying until the
timeout) and says its rank; a missing peer fails the start with torch's messages. Once joined, losing a peer
kills the survivors as a NCCL communicator error would. Across nodes SGLang's custom all-reduce is off by
design; its own warning is logged. The speed model does not add a cross-node link (the interconnect between
nodes is not modelled).
"""

from __future__ import annotations

import logging
import socket
import threading
import time

log = logging.getLogger("sglang_sim")

# custom_all_reduce_utils.py, logged by every rank when the TP group spans nodes.
SPANS_NODES = "CustomAllreduce is disabled because this process group spans across nodes."


def parse_addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def rendezvous(nnodes: int, rank: int, dist_init_addr: str | None, timeout: float, on_peer_lost) -> str | None:
    """Join the other nodes; None when joined (a watcher thread calls on_peer_lost(message) if a peer goes away),
    else the error SGLang's launch would die with."""
    if nnodes <= 1:
        return None
    if not dist_init_addr:
        return "ValueError: --dist-init-addr is required when --nnodes > 1 (the rank 0 host:port to rendezvous at)"
    try:
        host, port = parse_addr(dist_init_addr)
    except ValueError:
        return f"ValueError: --dist-init-addr {dist_init_addr!r} is not host:port"
    log.info("Init torch distributed begin. nnodes=%d, node_rank=%d, dist_init_addr=%s (SIMULATED rendezvous)",
             nnodes, rank, dist_init_addr)
    if rank == 0:
        return _serve(host, port, nnodes, timeout, on_peer_lost)
    return _join(host, port, rank, timeout, on_peer_lost)


def _watch(sock: socket.socket, what: str, on_peer_lost) -> None:
    def run():
        try:
            while sock.recv(64):
                pass
        except OSError:
            pass
        on_peer_lost(f"RuntimeError: NCCL communicator was aborted: {what} went away (remote process exited or "
                     "there was a network error) (SIMULATED)")
    threading.Thread(target=run, daemon=True, name=f"peer-{what}").start()


def _serve(host: str, port: int, nnodes: int, timeout: float, on_peer_lost) -> str | None:
    server = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((host, port))
    except OSError as error:
        return (f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                f"address. port: {port}, useIpv6: {':' in host}, code: -98, name: EADDRINUSE, message: {error}")
    server.listen(nnodes)
    deadline = time.monotonic() + timeout
    joined: dict[int, socket.socket] = {}
    while len(joined) < nnodes - 1:
        left = deadline - time.monotonic()
        if left <= 0:
            server.close()
            return (f"torch.distributed.DistStoreError: Timed out after {timeout:.0f} seconds waiting for clients. "
                    f"{len(joined) + 1}/{nnodes} clients joined.")
        server.settimeout(left)
        try:
            peer, _ = server.accept()
            peer.settimeout(10)
            rank = int(peer.recv(32).decode().strip() or "-1")
            peer.settimeout(None)
        except (OSError, ValueError):
            continue
        joined[rank] = peer
        log.info("node rank %d joined from %s (SIMULATED)", rank, peer.getpeername()[0])
    for rank, peer in joined.items():
        _watch(peer, f"node rank {rank}", on_peer_lost)
    log.info("Init torch distributed ends. %d nodes joined (SIMULATED)", nnodes)
    return None


def _join(host: str, port: int, rank: int, timeout: float, on_peer_lost) -> str | None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=5)
            sock.sendall(f"{rank}\n".encode())
            sock.settimeout(None)
            break
        except OSError:
            if time.monotonic() > deadline:
                return (f"torch.distributed.DistNetworkError: The client socket has timed out after "
                        f"{timeout * 1000:.0f}ms while trying to connect to ({host}, {port}).")
            time.sleep(0.5)
    log.info("Init torch distributed ends. joined rank 0 at %s:%d as node rank %d (SIMULATED)", host, port, rank)
    _watch(sock, "node rank 0", on_peer_lost)
    return None
