"""The client port's sockets (mpbroker/reuseport.py): a reservation, workers' sockets
in its group, and a port another broker listens on is refused."""
from __future__ import annotations

import errno
import socket

import pytest

from mpbroker.reuseport import reserve_port, worker_socket


def test_workers_share_the_reserved_port_and_only_listeners_get_connections():
    reserve = reserve_port("127.0.0.1", 0)
    addr = reserve.getsockname()
    a, b = worker_socket(addr), worker_socket(addr)
    try:
        assert a.getsockname() == b.getsockname() == addr
        a.listen(8)
        with socket.create_connection(addr, timeout=2):
            conn, _ = a.accept()
            conn.close()
    finally:
        for s in (reserve, a, b):
            s.close()


def test_a_port_another_broker_listens_on_is_refused():
    other = worker_socket(("127.0.0.1", 0))
    other.listen(8)
    try:
        with pytest.raises(OSError) as e:
            reserve_port("127.0.0.1", other.getsockname()[1])
        assert e.value.errno == errno.EADDRINUSE
    finally:
        other.close()
