"""One end of a worker <-> worker channel of the mesh (ARCHITECTURE §2, cross-process
transport): framed messages over an AF_UNIX socket pair made by the supervisor.

Frame (little-endian):

    u32 length of the rest
    u32 meta_len, u32 nbufs, nbufs x u32 buffer length
    meta: a pickle (protocol 5) of the message dict
    the nbufs raw buffers, back to back

The raw buffers are the data path's payloads (forwarded Produce record batches): they
are never pickled.  The sender hands them to ONE `sendmsg` as scatter/gather entries
next to the header and the meta pickle (no concatenation, no copy in user space), and
the receiver reads a large frame with `recv_into` straight into one bytearray of the
frame's size, so the owner gets writable memoryviews over that buffer as `msg["raw"]`
(a frame that arrived whole inside the read chunk costs one copy out of the chunk).
Pickle is safe for the meta for the same reason as on the supervisor's channels: both
ends are forks of one program and the socket pair is reachable from nowhere else.

A frame that cannot be read (size over MAX_FRAME, inconsistent lengths, a meta that
does not unpickle, raw buffers on a message that is not a dict) closes the channel
with an error log line; the router then treats that peer as gone (parts are answered
locally, and the supervisor's replacement socket reconnects it).

Writes go straight to the socket while nothing is queued; when the socket is full, the
queued chunks of several messages are written together with one `sendmsg` each time it
becomes writable.  Reads parse every whole frame of a `recv_into` before the callbacks
run.

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

LENGTH = struct.Struct("<I")
META = struct.Struct("<II")          # meta_len, nbufs
_HEAD0 = struct.Struct("<III")       # length, meta_len, nbufs=0
MAX_FRAME = 1 << 30
MAX_BUFS = 1 << 16
RECV_BYTES = 256 * 1024
BIG_FRAME = 64 * 1024                # larger partial frames are read into their own buffer
IOV_CHUNKS = 512                     # scatter/gather entries per sendmsg (IOV_MAX is 1024)
SOCK_BUF = 4 << 20


class MeshFrameError(ValueError):
    """An unreadable mesh frame."""


_HEADS: dict[int, struct.Struct] = {}


def _head(n: int) -> struct.Struct:
    """Struct of length, meta_len, nbufs and n buffer lengths (cached per n)."""
    st = _HEADS.get(n)
    if st is None:
        st = struct.Struct(f"<III{n}I")
        if len(_HEADS) < 256:
            _HEADS[n] = st
    return st


_LENS: dict[int, struct.Struct] = {}


def _lens(n: int) -> struct.Struct:
    """Struct of n buffer lengths (cached per n)."""
    st = _LENS.get(n)
    if st is None:
        st = struct.Struct(f"<{n}I")
        if len(_LENS) < 256:
            _LENS[n] = st
    return st


def encode(msg: Any, buffers=()) -> tuple[list, int]:
    """The chunks of one frame, [header, meta pickle, *buffers] (buffers not copied), and
    its total size."""
    meta = pickle.dumps(msg, 5)
    n = len(buffers)
    if n:
        lens = [memoryview(b).nbytes for b in buffers]
        body = 8 + 4 * n + len(meta) + sum(lens)
        return [_head(n).pack(body, len(meta), n, *lens), meta, *buffers], body + 4
    body = 8 + len(meta)
    return [_HEAD0.pack(body, len(meta), 0), meta], body + 4


def decode(view: memoryview, owned: bool = False) -> Any:
    """The message of one frame body (`view`: the bytes after the length field).

    `owned`: `view` is over a buffer of this frame alone, so raw buffers may be views of
    it; otherwise (a reused read chunk) they are copied out once.  Raises MeshFrameError.
    """
    size = len(view)
    if size < META.size:
        raise MeshFrameError(f"frame of {size} bytes is shorter than its header")
    meta_len, nbufs = META.unpack_from(view, 0)
    if nbufs > MAX_BUFS:
        raise MeshFrameError(f"frame announces {nbufs} buffers")
    off = META.size + 4 * nbufs
    if off + meta_len > size:
        raise MeshFrameError(f"frame of {size} bytes cannot hold its meta ({meta_len} bytes)")
    lens = _lens(nbufs).unpack_from(view, META.size) if nbufs else ()
    raw_start = off + meta_len
    if raw_start + sum(lens) != size:
        raise MeshFrameError(f"frame of {size} bytes: buffer lengths do not add up")
    try:
        msg = pickle.loads(view[off:raw_start])
    except Exception as e:
        raise MeshFrameError(f"frame meta does not unpickle: {type(e).__name__}: {e}") from None
    if nbufs:
        if not isinstance(msg, dict):
            raise MeshFrameError(f"raw buffers on a {type(msg).__name__} message")
        raw = view[raw_start:] if owned else memoryview(bytearray(view[raw_start:]))
        bufs, pos = [], 0
        for n in lens:
            bufs.append(raw[pos:pos + n])
            pos += n
        msg["raw"] = bufs
    return msg


class PeerLink:
    def __init__(self, sock: socket.socket, on_message: Callable[[Any], None],
                 on_close: Callable[["PeerLink"], None] | None = None):
        sock.setblocking(False)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCK_BUF)
            except OSError:
                pass
        self.sock = sock
        self.fd = sock.fileno()
        self.on_message = on_message
        self.on_close = on_close
        self._chunk = bytearray(RECV_BYTES)        # read chunk; a partial frame stays at 0
        self._cview = memoryview(self._chunk)
        self._have = 0                             # bytes of a partial frame in the chunk
        self._big: bytearray | None = None         # a large frame being read in place
        self._big_got = 0
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
            if self._big is not None:
                n = self.sock.recv_into(memoryview(self._big)[self._big_got:])
            else:
                n = self.sock.recv_into(self._cview[self._have:])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.debug("mesh read failed: %s", e)
            n = 0
        if not n:
            self.close()
            return
        self.bytes_received += n
        try:
            msgs = self._parse(n)
        except MeshFrameError as e:
            log.error("mesh: unreadable frame (%s): closing the channel", e)
            self.close()
            return
        for m in msgs:
            if self.closed:
                return
            try:
                self.on_message(m)
            except Exception:
                log.exception("mesh message handler failed")

    def _parse(self, n: int) -> list:
        if self._big is not None:
            self._big_got += n
            if self._big_got < len(self._big):
                return []
            body, self._big = self._big, None
            return [decode(memoryview(body), owned=True)]
        view = self._cview
        pos, end = 0, self._have + n
        msgs = []
        while end - pos >= 4:
            (size,) = LENGTH.unpack_from(view, pos)
            if size > MAX_FRAME:
                raise MeshFrameError(f"frame of {size} bytes")
            if end - pos - 4 < size:
                if size > BIG_FRAME or size + 4 > len(self._chunk):
                    have = end - pos - 4
                    body = bytearray(size)
                    body[:have] = view[pos + 4:end]
                    self._big, self._big_got = body, have
                    pos = end
                break
            msgs.append(decode(view[pos + 4:pos + 4 + size]))
            pos += 4 + size
        rest = end - pos
        if rest and pos:
            self._chunk[:rest] = bytes(view[pos:end])
        self._have = rest
        return msgs

    # ------------------------------------------------------------ writing
    def send(self, msg: Any, buffers=()) -> None:
        """Queue one message; `buffers` (bytes-like) travel raw after it, not pickled,
        and arrive as `msg["raw"]`, a list of memoryviews (so `msg` must be a dict)."""
        if self.closed:
            raise ConnectionError("mesh channel closed")
        chunks, total = encode(msg, buffers)
        if not self.out and len(chunks) <= IOV_CHUNKS:
            try:
                n = self.sock.sendmsg(chunks)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as e:
                self.close()
                raise ConnectionError(f"mesh channel write failed: {e}")
            self.bytes_sent += n
            if n == total:
                return
            for c in chunks:
                c = memoryview(c).cast("B")
                if n >= len(c):
                    n -= len(c)
                    continue
                self.out.append(c[n:] if n else c)
                n = 0
            if not self.out:
                return
        else:
            self.out.extend(memoryview(c).cast("B") for c in chunks)
        self._arm_writer()

    def _arm_writer(self) -> None:
        if self.loop is not None and not self._writer and not self.closed:
            self.loop.add_writer(self.fd, self._writable)
            self._writer = True

    def _writable(self) -> None:
        out = self.out
        while out and not self.closed:
            chunks = list(out) if len(out) <= IOV_CHUNKS else \
                [out[i] for i in range(IOV_CHUNKS)]
            try:
                n = self.sock.sendmsg(chunks)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.debug("mesh write failed: %s", e)
                self.close()
                return
            self.bytes_sent += n
            for c in chunks:
                if n >= len(c):
                    n -= len(c)
                    out.popleft()
                else:
                    out[0] = c[n:]
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
        self._big = None
        try:
            self.sock.close()
        except OSError:
            pass
        if self.on_close:
            self.on_close(self)
