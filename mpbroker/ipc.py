"""Framed messages between the processes of one broker (ARCHITECTURE §1, §2): one end of
an AF_UNIX SOCK_STREAM socket pair made by the supervisor before the fork that hands the
other end to a child. Every channel of the process tree uses it: supervisor <-> child
("control"), worker <-> controller (the controller RPC, mpbroker/controller_rpc.py) and
worker <-> worker (the mesh, workers/mesh.py).

Frame (little-endian):

    u32 length of the rest
    u32 meta_len, u32 nbufs, nbufs x u32 buffer length
    meta: a pickle (protocol 5) of the message
    the nbufs raw buffers, back to back

The raw buffers are the data path's payloads (forwarded Produce record batches): they
are never pickled.  The sender hands them to ONE `sendmsg` as scatter/gather entries
next to the header and the meta pickle (no concatenation, no copy in user space), and
the receiver reads a large frame with `recv_into` straight into one bytearray of the
frame's size, so the owner gets writable memoryviews over that buffer as `msg["raw"]`
(a frame that arrived whole inside the read chunk costs one copy out of the chunk).
Pickle is safe because both ends are forks of one program and the socket pair is
reachable from nowhere else.

File descriptors (`pass_fds=True` channels: the supervisor's control channels and the
mesh, which hands client connections between workers) travel with SCM_RIGHTS on the
first byte of a frame and queue in `fds` in arrival order (received close-on-exec),
before the frame's message is handed over (so `on_message` can `take_fd()` its own). A
frame whose descriptors the kernel does not pass now (ETOOMANYREFS, ENOMEM) is not
sent and leaves the channel open (`send` raises ConnectionError).

A frame that cannot be read (size over MAX_FRAME, inconsistent lengths, a meta that
does not unpickle, raw buffers on a message that is not a dict) closes the channel
with an error log line; the owner's `on_close` then treats that peer as gone.  An
exception of `on_message` is logged and does not close the channel.

Writes go straight to the socket while nothing is queued; when the socket is full, the
queued chunks of several messages are written together with one `sendmsg` each time it
becomes writable (`attach`ed to an asyncio loop) or until `flush` returns (a caller
without a running loop: the supervisor, a worker that is booting).  A `batch=True`
channel (the mesh) attached to a loop does not write in `send`: the frames sent during
one loop iteration are written together, in order, by one `sendmsg` from a `call_soon`
callback (one syscall and one wake-up of the peer for all of them); `flush`, a frame
with fds and `close` (which drops them, like the rest of the queue) see them first, and
`write_batched` writes them at once.
Reads parse every whole frame of a `recv_into` before the callbacks run; `poll` reads
without a loop.

Not thread-safe: one asyncio loop (or one blocking caller) drives a channel.
"""
from __future__ import annotations

import array
import collections
import errno
import logging
import os
import pickle
import select
import socket
import struct
import time
from typing import Any, Callable

log = logging.getLogger(__name__)

LENGTH = struct.Struct("<I")
META = struct.Struct("<II")          # meta_len, nbufs
_HEAD0 = struct.Struct("<III")       # length, meta_len, nbufs=0
MAX_FRAME = 1 << 30
MAX_BUFS = 1 << 16
MAX_FDS = 16                         # file descriptors one read takes
RECV_BYTES = 256 * 1024
BIG_FRAME = 64 * 1024                # larger partial frames are read into their own buffer
IOV_CHUNKS = 512                     # scatter/gather entries per sendmsg (IOV_MAX is 1024)
# errors of a write that mean the channel itself is gone
_BROKEN = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN)
FLUSH_TIMEOUT_S = 30.0


class FrameError(ValueError):
    """An unreadable frame."""


class _StructCache(dict):
    """Structs of `fmt` with n repeated u32 (cached per n, up to 256 of them)."""

    def __init__(self, fmt: str):
        super().__init__()
        self.fmt = fmt

    def __missing__(self, n: int) -> struct.Struct:
        st = struct.Struct(self.fmt.format(n))
        if len(self) < 256:
            self[n] = st
        return st


_HEADS = _StructCache("<III{}I")     # length, meta_len, nbufs and n buffer lengths
_LENS = _StructCache("<{}I")         # n buffer lengths


def advance(iov: list, n: int) -> list:
    """What is left of buffer list `iov` once its first `n` bytes are sent (a partial
    `sendmsg`): the buffers after them, the first cut as a byte memoryview. The mesh and
    the client connections (workers/connection.py) both resume this way."""
    for i, buf in enumerate(iov):
        size = len(buf) if type(buf) in (bytes, bytearray) else memoryview(buf).nbytes
        if n < size:
            return [memoryview(buf).cast("B")[n:] if n else buf, *iov[i + 1:]]
        n -= size
    return []


def encode(msg: Any, buffers=()) -> tuple[list, int]:
    """The chunks of one frame, [header, meta pickle, *buffers] (buffers not copied), and
    its total size."""
    meta = pickle.dumps(msg, 5)
    n = len(buffers)
    if n:
        lens = [memoryview(b).nbytes for b in buffers]
        body = 8 + 4 * n + len(meta) + sum(lens)
        return [_HEADS[n].pack(body, len(meta), n, *lens), meta, *buffers], body + 4
    body = 8 + len(meta)
    return [_HEAD0.pack(body, len(meta), 0), meta], body + 4


def decode(view: memoryview, owned: bool = False) -> Any:
    """The message of one frame body (`view`: the bytes after the length field).

    `owned`: `view` is over a buffer of this frame alone, so raw buffers may be views of
    it; otherwise (a reused read chunk) they are copied out once.  Raises FrameError.
    """
    size = len(view)
    if size < META.size:
        raise FrameError(f"frame of {size} bytes is shorter than its header")
    meta_len, nbufs = META.unpack_from(view, 0)
    if nbufs > MAX_BUFS:
        raise FrameError(f"frame announces {nbufs} buffers")
    off = META.size + 4 * nbufs
    if off + meta_len > size:
        raise FrameError(f"frame of {size} bytes cannot hold its meta ({meta_len} bytes)")
    lens = _LENS[nbufs].unpack_from(view, META.size) if nbufs else ()
    raw_start = off + meta_len
    if raw_start + sum(lens) != size:
        raise FrameError(f"frame of {size} bytes: buffer lengths do not add up")
    try:
        msg = pickle.loads(view[off:raw_start])
    except Exception as e:
        raise FrameError(f"frame meta does not unpickle: {type(e).__name__}: {e}") from None
    if nbufs:
        if not isinstance(msg, dict):
            raise FrameError(f"raw buffers on a {type(msg).__name__} message")
        raw = view[raw_start:] if owned else memoryview(bytearray(view[raw_start:]))
        bufs, pos = [], 0
        for n in lens:
            bufs.append(raw[pos:pos + n])
            pos += n
        msg["raw"] = bufs
    return msg


class Channel:
    """One end of a channel: messages in through `on_message(msg)`, out through `send`;
    `on_close(channel)` once, when it closes (EOF, an error, an unreadable frame, `close`).

    `sock_buf`: SO_SNDBUF/SO_RCVBUF to ask for (the mesh's bulk data); `pass_fds`: this
    end receives file descriptors (any end may send them); `name`: how its log lines
    call it; `batch`: with a loop, the frames of one loop iteration leave in one write."""

    def __init__(self, sock: socket.socket, on_message: Callable[[Any], None],
                 on_close: Callable[["Channel"], None] | None = None, *,
                 sock_buf: int | None = None, pass_fds: bool = False, name: str = "channel",
                 batch: bool = False):
        sock.setblocking(False)
        if sock_buf:
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                try:
                    sock.setsockopt(socket.SOL_SOCKET, opt, sock_buf)
                except OSError:
                    pass
        self.sock = sock
        self.fd = sock.fileno()
        self.on_message = on_message
        self.on_close = on_close
        self.name = name
        self._recv = self._recv_with_fds if pass_fds else sock.recv_into
        self.fds: list[int] = []                   # received, not taken yet
        self._chunk = bytearray(RECV_BYTES)        # read chunk; a partial frame stays at 0
        self._cview = memoryview(self._chunk)
        self._have = 0                             # bytes of a partial frame in the chunk
        self._big: bytearray | None = None         # a large frame being read in place
        self._big_got = 0
        self.out: collections.deque = collections.deque()   # memoryviews still to send
        self.batch = batch
        self._batched: list = []                   # chunks of this iteration's frames
        self._batched_bytes = 0
        self._batch_armed = False                  # a `_send_batch` is scheduled
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
    def _recv_with_fds(self, view) -> int:
        fds = array.array("i")
        n, ancdata, _, _ = self.sock.recvmsg_into([view], socket.CMSG_SPACE(MAX_FDS * fds.itemsize),
                                                  socket.MSG_CMSG_CLOEXEC)
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        self.fds.extend(fds)
        return n

    def _readable(self) -> None:
        if self.closed:
            return
        try:
            if self._big is not None:
                n = self._recv(memoryview(self._big)[self._big_got:])
            else:
                n = self._recv(self._cview[self._have:])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.debug("%s read failed: %s", self.name, e)
            n = 0
        if not n:
            self.close()
            return
        self.bytes_received += n
        try:
            msgs = self._parse(n)
        except FrameError as e:
            log.error("%s: unreadable frame (%s): closing the channel", self.name, e)
            self.close()
            return
        for m in msgs:
            if self.closed:
                return
            try:
                self.on_message(m)
            except Exception:
                log.exception("%s message handler failed", self.name)

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
                raise FrameError(f"frame of {size} bytes")
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

    def poll(self, timeout: float) -> None:
        """Without a loop: wait up to `timeout` for the socket to be readable, read once."""
        if self.closed:
            return
        r, _, _ = select.select([self.sock], [], [], max(timeout, 0))
        if r:
            self._readable()

    def take_fd(self) -> int:
        """The oldest received file descriptor (the caller owns it now)."""
        return self.fds.pop(0)

    # ------------------------------------------------------------ writing
    def send(self, msg: Any, buffers=(), fds=()) -> None:
        """Queue one message; `buffers` (bytes-like) travel raw after it, not pickled,
        and arrive as `msg["raw"]`, a list of memoryviews (so `msg` must be a dict);
        `fds` ride on the frame's first byte (this blocks until the queue is empty)."""
        self.send_frame(encode(msg, buffers), fds)

    def send_frame(self, frame: tuple[list, int], fds=()) -> None:
        """Queue a frame from `encode` (one encoding may go to several channels)."""
        if self.closed:
            raise ConnectionError(f"{self.name} closed")
        chunks, total = frame
        if fds:
            self.flush()
        elif self.batch and self.loop is not None:
            self._batched.extend(chunks)
            self._batched_bytes += total
            if not self._batch_armed:
                self._batch_armed = True
                self.loop.call_soon(self._send_batch)
            return
        self._write(chunks, total, fds)

    def write_batched(self) -> None:
        """Write what `send` batched now, without blocking (an owner about to `close`)."""
        self._send_batch()

    def _send_batch(self) -> None:
        """The frames `send` batched during the last loop iteration, in one write."""
        self._batch_armed = False
        if self.closed or not self._batched:
            return
        chunks, total = self._batched, self._batched_bytes
        self._batched, self._batched_bytes = [], 0
        try:
            self._write(chunks, total)
        except ConnectionError:
            pass        # closed: `on_close` told the owner

    def _write(self, chunks: list, total: int, fds=()) -> None:
        if not self.out and len(chunks) <= IOV_CHUNKS:
            ancdata = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
            try:
                n = self.sock.sendmsg(chunks, ancdata)
            except (BlockingIOError, InterruptedError):
                if fds:
                    raise ConnectionError(f"{self.name}: cannot pass file descriptors now")
                n = 0
            except OSError as e:
                if fds and e.errno not in _BROKEN:
                    # nothing was sent (a descriptor the kernel would not pass now:
                    # ETOOMANYREFS, ENOMEM, EBADF): the channel itself is fine
                    raise ConnectionError(f"{self.name}: cannot pass file descriptors: {e}")
                self.close()
                raise ConnectionError(f"{self.name} write failed: {e}")
            self.bytes_sent += n
            if n == total:
                return
            self.out.extend(memoryview(c).cast("B") for c in advance(chunks, n))
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
                log.debug("%s write failed: %s", self.name, e)
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

    def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> None:
        """Block until everything queued is written (TimeoutError after `timeout`)."""
        if self._batched:
            self._send_batch()
        deadline = time.monotonic() + timeout
        while self.out and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.name} write timed out")
            select.select([], [self.sock], [], left)
            self._writable()

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
        self._batched.clear()
        self._batched_bytes = 0
        self._big = None
        try:
            self.sock.close()
        except OSError:
            pass
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()
        if self.on_close:
            self.on_close(self)
