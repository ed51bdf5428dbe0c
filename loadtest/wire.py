"""Blocking-socket helpers of the benches that speak the wire protocol themselves:
read exactly n bytes, read one size-prefixed response frame."""
from __future__ import annotations

import socket
import struct


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def recv_frame(s: socket.socket) -> bytes:
    """One response frame (`int32 size` + size bytes), without the size."""
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    return recv_exact(s, size)
