"""The client port's sockets (ARCHITECTURE §1, gunicorn's sock.py): one SO_REUSEPORT
group per broker, made by the supervisor before any fork.

* The reservation (`reserve_port`): bound, never listening, held by the supervisor for
  its lifetime, so that a respawned worker finds the port free and port 0 resolves once
  for all workers. The kernel hands connections only to listening sockets of the group.
* A worker's socket (`worker_socket`): bound to the same address, not listening; the
  worker calls `listen()` once it can serve, which puts it in the group (a booting
  worker is not handed connections). The supervisor keeps its own handle of it, so that
  it can take a stalled worker out (`shutdown()`) and put it back (`listen()`).
"""
from __future__ import annotations

import socket


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def worker_socket(addr: tuple[str, int]) -> socket.socket:
    """A socket bound to `addr` with SO_REUSEPORT, not listening."""
    sock = socket.socket(_family(addr[0]), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
    except OSError:
        sock.close()
        raise
    return sock


def reserve_port(host: str, port: int) -> socket.socket:
    """The reservation of (host, port) (port 0: a free one; see getsockname)."""
    if port != 0:
        # SO_REUSEPORT would let us share a port that another broker (of the same
        # user) already listens on, and the kernel would then spread connections over
        # both brokers. A plain bind first fails with EADDRINUSE in that case, as
        # Kafka's own bind would.
        probe = socket.socket(_family(host), socket.SOCK_STREAM)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
        finally:
            probe.close()
    return worker_socket((host, port))
