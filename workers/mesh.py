"""One end of a worker <-> worker channel of the mesh (ARCHITECTURE §2, cross-process
transport): framed messages over an AF_UNIX socket pair made by the supervisor.

Frame: 4-byte little-endian length + a pickle (protocol 5). Pickle is safe here for the
same reason as on the supervisor's channels: both ends are forks of one program and the
socket pair is reachable from nowhere else. This is the same frame format as
`mpbroker.supervisor.Link`, re-done in layer 3 (workers may not import the supervisor)
and tuned for the data path: a write goes straight to the socket with one `sendmsg` of
header + payload (no concatenation) while nothing is queued, and reads parse every whole
frame of a `recv` before the callbacks run.

Not thread-safe: one asyncio loop (the worker's) drives it.
"""
from __future__ import annotations

import collections
import logging
import pickle
import socket
import struct
from typing import Any, Callable

log = logging.getLogger(__name__)

HEADER = struct.Struct("<I")
MAX_FRAME = 1 << 30
RECV_BYTES = 1 << 20


class PeerLink:
    def __init__(self, sock: socket.socket, on_message: Callable[[Any], None],
                 on_close: Callable[["PeerLink"], None] | None = None):
        sock.setblocking(False)
        self.sock = sock
        self.fd = sock.fileno()
        self.on_message = on_message
        self.on_close = on_close
        self.inbuf = bytearray()
        self.out: collections.deque = collections.deque()   # memoryviews still to send
        self.loop = None
        self.closed = False
        self._writer = False
        self.bytes_sent = 0
        self.bytes_received = 0

    def attach(self, loop) -> None:
        self.loop = loop
        loop.add_reader(self.fd, self._readable)
        if self.out:
            self._arm_writer()

    # ------------------------------------------------------------ reading
    def _readable(self) -> None:
        if self.closed:
            return
        try:
            data = self.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.debug("mesh read failed: %s", e)
            data = b""
        if not data:
            self.close()
            return
        self.bytes_received += len(data)
        buf = self.inbuf
        buf += data
        msgs = []
        pos, end = 0, len(buf)
        view = memoryview(buf)
        try:
            while end - pos >= 4:
                (size,) = HEADER.unpack_from(buf, pos)
                if size > MAX_FRAME:
                    log.error("mesh frame of %d bytes: closing the channel", size)
                    view.release()
                    self.close()
                    return
                if end - pos - 4 < size:
                    break
                frame = view[pos + 4:pos + 4 + size]
                msgs.append(pickle.loads(frame))
                frame.release()
                pos += 4 + size
        finally:
            view.release()
        if pos:
            del buf[:pos]
        for m in msgs:
            if self.closed:
                return
            try:
                self.on_message(m)
            except Exception:
                log.exception("mesh message handler failed")

    # ------------------------------------------------------------ writing
    def send(self, msg: Any) -> None:
        if self.closed:
            raise ConnectionError("mesh channel closed")
        payload = pickle.dumps(msg, 5)
        header = HEADER.pack(len(payload))
        if not self.out:
            try:
                n = self.sock.sendmsg([header, payload])
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as e:
                self.close()
                raise ConnectionError(f"mesh channel write failed: {e}")
            self.bytes_sent += n
            total = 4 + len(payload)
            if n == total:
                return
            if n < 4:
                self.out.append(memoryview(header)[n:])
                self.out.append(memoryview(payload))
            else:
                self.out.append(memoryview(payload)[n - 4:])
        else:
            self.out.append(memoryview(header))
            self.out.append(memoryview(payload))
        self._arm_writer()

    def _arm_writer(self) -> None:
        if self.loop is not None and not self._writer and not self.closed:
            self.loop.add_writer(self.fd, self._writable)
            self._writer = True

    def _writable(self) -> None:
        while self.out and not self.closed:
            chunk = self.out[0]
            try:
                n = self.sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.debug("mesh write failed: %s", e)
                self.close()
                return
            self.bytes_sent += n
            if n == len(chunk):
                self.out.popleft()
            else:
                self.out[0] = chunk[n:]
                return
        if self._writer and not self.closed:
            self.loop.remove_writer(self.fd)
        self._writer = False

    # ------------------------------------------------------------ closing
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.loop is not None:
            try:
                self.loop.remove_reader(self.fd)
                if self._writer:
                    self.loop.remove_writer(self.fd)
            except (ValueError, OSError, RuntimeError):
                pass
        self._writer = False
        self.out.clear()
        try:
            self.sock.close()
        except OSError:
            pass
        if self.on_close:
            self.on_close(self)
