"""One client connection: read frames, dispatch, answer in order, send with sendfile.

Concurrency contract (one asyncio loop per worker process, no threads):

* The reader decodes request frames as they arrive and starts each request at once;
  requests of one connection run concurrently (a long-polling Fetch does not hold up a
  Metadata behind it), but responses leave **in request order** (Kafka clients match
  responses by position as much as by correlation id).
* A handler returns a response body dict, or an awaitable of one, or None (acks=0
  produce: no response at all). The ordered queue holds one entry per request that
  expects a response, except one answered at once with nothing owed before it and no
  file slices: the reader sends that itself, the answers of all the frames of one read
  in one `sendmsg` (`_send_now`, `_flush_direct`; what the socket does not take is queued
  first), so the write loop's task is not woken for it. An answer that comes later is
  an `EncodedLater` (workers/answers.py): its future's done callback encodes it and,
  when nothing before it is still owed, sends it with the answers ready behind it
  (`_pump`), again without the write loop, which takes over only what cannot leave at
  once (a large slice, a socket that does not take it all, an answer held back by a
  quota). The write loop, too, sends the responses that are ready together in one go
  (`_gather_ready`).
* Response bodies may contain `FileSlice`s (record data of Fetch). The writer sends one
  response with as few system calls as it can: its bytes and its small slices
  (INLINE_SLICE_MAX, read from the page cache with `pread`) go out in one `sendmsg` of
  several buffers; a large slice goes by `os.sendfile` straight from the page cache, the
  bytes before it sent with MSG_MORE. It waits for writability itself (the socket is
  non-blocking and owned by this class, not by an asyncio transport, precisely so that
  sendfile is possible).
* Slice fds: a slice of a local partition carries the segment's own fd; a slice from
  another worker carries none (fd -1) and is sent through a handle of this connection,
  kept per path (`_files`: path -> open fd and its st_dev/st_ino). A slice is only ever
  sent through an fd whose file has the slice's identity (`FileSlice.dev/ino`, taken by
  the owner when it read): a path can name another file by now (topic deleted and
  created again, compaction swapping a cleaned segment in at the same name), and a
  local fd may have been closed and its number reused. On a mismatch the path is opened
  again, then `<path>.deleted` (a segment retired by compaction or retention stays
  readable under that name for `file.delete.delay.ms`); when neither is the file, the
  slice is stale. The router pins remote slices when their answer arrives (`pin`), so a
  stale one becomes a retriable NOT_LEADER_OR_FOLLOWER for its partition; one found
  stale only while sending (or a file shorter than the slice: `sendfile` sends 0 bytes,
  `pread` reads short) closes the connection (the response size may be on the wire
  already), and the client fetches again. Handles unused for FILE_IDLE_S are closed so
  that deleted segments do not stay allocated behind a long-lived connection.
  Limit: an inode number is unique only among files that exist. Once the owner closed
  and unlinked a file (topic deletion removes the directory at once), a new file at the
  same path may get the freed number; so between the owner's read and the pin (one mesh
  hop, hence the pin on arrival) or, for this worker's own slices, between the read and
  the send, a topic deleted, created again and written to at once is not told apart.
* Memory (issue #15): a connection reads only when its socket is readable, with a
  plain `recv_into` into the worker's one read buffer (`ReadBuffer`, shared by every
  connection: `FrameReader.feed` copies what it keeps, so an idle connection holds no
  read buffer of its own), at most what the worker's `MemoryPool`
  (`queued.max.request.bytes`) has room for. The bytes read are charged to the pool
  until their request is answered (or the connection closes); an exhausted pool mutes
  the connection (no reads) until memory is released, as Kafka's SocketServer does.
  `last_active` (monotonic seconds of the last byte in or out) lets the server close
  idle connections (`connections.max.idle.ms`).
* Security (issue #17): a connection knows its listener (`listener_name`,
  `security_protocol`, `security`: workers/listener_security.py) and its `principal`
  ("User:ANONYMOUS" until TLS client certificates or SASL say otherwise; handlers see
  all three on their `ctx`). On a SASL listener `sasl` (mpbroker/security/sasl.py)
  gates the requests: before authentication only ApiVersions, SaslHandshake and
  SaslAuthenticate are served, anything else closes the connection, as does a frame
  over `sasl.server.max.receive.size`, a failed authentication (after its delayed
  answer) and, once `connections.max.reauth.ms` has passed, any request but a
  re-authentication. After a v0 SaslHandshake the next frame is a bare token
  (`_raw_token`). TLS listeners use `TlsConnection` (workers/tls_connection.py), which
  replaces the byte-moving methods (`_recv_into`, `_send_iov`, `_sendfile_fd`).
* Client quotas (KIP-219, workers/quotas.py): `throttle(ms)` mutes the connection (no
  reads) until then; responses already owed still go out.
* An unreadable frame (bad size, header that cannot be parsed, an unknown API key or an
  unsupported version of any API but ApiVersions) closes the connection, as Kafka does;
  an error inside a handler is logged and answered with the API's generic error where
  one exists, never allowed to kill the worker.
"""
from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import socket
import time
from typing import Callable

from mpbroker.ipc import advance
from mpbroker.protocol import framing
from mpbroker.security import sasl as sasl_states
from mpbroker.security.principal import ANONYMOUS
from storage.slices import FileSlice
from workers.answers import EncodedLater
from workers.memory_pool import MemoryPool

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024
MAX_IN_FLIGHT = 128  # requests per connection started but not yet answered
MAX_FILES = 64       # open segment handles per connection (slices of other workers)
FILE_IDLE_S = 30.0   # a handle unused this long is closed (see the module docstring)
DELETED_SUFFIX = ".deleted"     # storage/segment.py: a retired segment's name
MUTED_CHECK_S = 0.2  # a muted connection looks whether its client left this often
TCP_ESTABLISHED = 1  # tcp_info.tcpi_state (linux/tcp_states.h)
IOV_MAX = 1024       # buffers per sendmsg (Linux UIO_MAXIOV)
# Slices up to this size are read (pread) into the response and sent with its bytes in
# one sendmsg; larger ones go by sendfile. Measured on a 2-core VM, sender CPU per
# response over TCP loopback, inline/sendfile: 1-16 KiB 0.3-0.9, 32 KiB 0.6-0.9,
# 64 KiB 0.8-1.1, 128-256 KiB 1.1-1.45 (one and ten slices per response).
INLINE_SLICE_MAX = 32 * 1024
# Bytes read in that a response holds before they are sent (with MSG_MORE): a Fetch of
# many partitions does not hold its whole size in memory, as sendfile did not.
INLINE_BATCH_MAX = 256 * 1024
# Responses ready together that the write loop sends as one (`_gather_ready`).
GATHER_MAX = 64
# A connection is handed to another worker (workers/handoff.py) once its requests that
# went whole to that worker, one after the other, weigh MOVE_AT: a Fetch FETCH_WEIGHT (3
# Fetches), a Produce 1 (24 Produce requests: a producer whose requests go to both
# workers of two at random sends that many to one in a row once in 2**24). A client
# whose requests alternate between workers does not move back and forth.
# Each move of a connection doubles what its next one takes (`move_at`, up to
# MOVE_AT << MOVE_BACKOFF_MAX): a client whose requests go to one worker for a while,
# then to another (the Java producer's sticky partitioner sends records without keys to
# one partition until a batch is full), does not chase them from worker to worker.
MOVE_AT = 24
FETCH_WEIGHT = 8
MOVE_BACKOFF_MAX = 10


class ReadBuffer:
    """The worker's one receive buffer: connections `recv_into` it and feed their
    FrameReader at once, with no await in between, so one buffer serves them all."""

    __slots__ = ("buf", "view")

    def __init__(self, size: int = READ_CHUNK):
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)


class StaleSlice(ConnectionAbortedError):
    """The file a FileSlice was read from is gone or replaced: its bytes are not there."""


class _Closing(Exception):
    """A response cannot be made or sent: the connection closes (already marked)."""


class RequestContext:
    """What a handler knows about the request besides its body."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "client_host",
                 "connection", "principal", "listener_name", "security_protocol")

    def __init__(self, header, client_host: str, connection: "Connection"):
        self.api_key = header.api_key
        self.api_version = header.api_version
        self.correlation_id = header.correlation_id
        self.client_id = header.client_id
        self.client_host = client_host
        self.connection = connection
        self.principal = getattr(connection, "principal", ANONYMOUS)
        self.listener_name = getattr(connection, "listener_name", None)
        self.security_protocol = getattr(connection, "security_protocol", "PLAINTEXT")


class _RawToken:
    """The pending entry's header of a v0 SASL token frame (no request header)."""
    api_key = -1


class _Taken:
    """The pending entry's header of the unsent rest of answers already taken off the
    queue (one or more requests' bytes)."""
    api_key = -1


class Connection:
    partial = 0         # bytes of our incomplete frame, counted in the pool's `partial`
    # Hand-off (workers/handoff.py): `on_move(conn, worker)` when the server lets this
    # connection move; `move_to`/`move_streak`: the one other worker that its last
    # requests went to whole, and their weight (`fetched_from`, `produced_to`)
    on_move: Callable | None = None
    move_to = -1
    move_streak = 0
    move_at = MOVE_AT       # the streak that moves it (doubled by each move it made)
    moves = 0               # moves made so far (carried by each hand-off)
    move_keys: list = []    # the partitions the last Fetch of the streak read
    move_session = 0        # the fetch session of its last Fetch on another's partitions
    moved = False       # handed to another worker: this end only lets go
    # its last sessionless consumer Fetch served here (workers/handlers/fetch/memo.py)
    fetch_memo = None

    def __init__(self, sock: socket.socket, dispatcher, max_request_bytes: int,
                 on_close: Callable[["Connection"], None] | None = None,
                 pool: MemoryPool | None = None, read_buffer: ReadBuffer | None = None,
                 clock: Callable[[], float] = time.monotonic, security=None,
                 credentials: Callable | None = None):
        self.sock = sock
        self.fd = sock.fileno()
        self.dispatcher = dispatcher
        self.loop = asyncio.get_running_loop()
        peer = sock.getpeername()
        self.client_host = peer[0] if isinstance(peer, tuple) else str(peer)
        self.frames = framing.FrameReader(max_request_bytes)
        self.pending: collections.deque = collections.deque()
        self.wakeup = asyncio.Event()
        self.closed = False
        self.on_close = on_close
        self.bytes_in = 0
        self.bytes_out = 0
        self.pool = pool if pool is not None else MemoryPool()
        self.read_buffer = read_buffer if read_buffer is not None else ReadBuffer()
        self.clock = clock
        self.last_active = clock()
        self.charged = 0          # bytes this connection holds in the pool
        self.muted = False        # waiting for the pool to have room
        self.throttled_until = 0.0  # KIP-219: not read before this (clock), workers/quotas.py
        self._waiter: asyncio.Future | None = None   # what the reader waits on
        self._readable: asyncio.Future | None = None  # ... when it waits for bytes
        self._reading = False     # the loop's reader callback is registered
        self._writing = False     # the write loop is sending a response
        # buffers of responses the reader sends after this read, and the pool bytes
        # their requests hold (`_send_now`; named apart from TlsConnection's `_out`)
        self._direct: list = []
        self._direct_charged = 0
        self.quota_host: str | None = None    # counted in the server's ConnectionQuotas
        self._files: dict[str, list] = {}     # path -> [fd, dev, ino, last use]
        self._files_timer: asyncio.TimerHandle | None = None
        self.security = security              # workers/listener_security.ListenerSecurity
        self.listener_name = security.name if security is not None else None
        self.security_protocol = security.protocol if security is not None else "PLAINTEXT"
        self.principal = ANONYMOUS
        self.sasl = security.new_session(credentials, clock) if security is not None else None
        # answers that come later are sent from their future's done callback (`_pump`);
        # not through TLS or SASL, whose answers all go by the write loop
        self._callbacks = self.DIRECT_SEND and self.sasl is None
        self._dead = False        # a response failed: the write loop stops, nothing more is sent
        self._gone = False        # closed: nothing is sent any more

    # ------------------------------------------------------------------ reading
    async def serve(self) -> None:
        writer = asyncio.ensure_future(self._write_loop())
        try:
            await self._read_loop()
        except (ConnectionError, OSError):
            pass
        except framing.FrameTooLarge as e:      # socket.request.max.bytes (Kafka: WARN)
            log.warning("closing %s: %s", self.client_host, e)
        except Exception:  # a bug of ours, never the client's bytes killing the worker
            log.exception("connection %s failed", self.client_host)
        finally:
            self.closed = True
            self._stop_reading()
            self._flush_direct()    # answers taken before a frame that ended the reading
            self.wakeup.set()
            try:
                await writer
            except Exception:
                log.exception("writer of %s failed", self.client_host)
            self._close()

    def abort(self) -> None:
        """Close from outside (idle, shutdown): the reader stops, requests in flight are
        still answered when the socket allows."""
        if self.moved:
            return      # the socket is another worker's now: never shut down from here
        self.closed = True
        self.wakeup.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self, fut: asyncio.Future) -> None:
        self._waiter = fut
        try:
            await fut
        finally:
            self._waiter = None

    async def _wait_readable(self) -> None:
        # The reader callback stays registered from one wait to the next (adding and
        # removing it per wait cost a poll handle and two epoll_ctl calls per request
        # on uvloop); it is removed whenever the loop waits for something else
        # (`_stop_reading`), as a level-triggered callback nobody waits on would fire
        # on every loop iteration while unread bytes are there.
        if self.move_streak >= self.move_at and self._move():
            return      # handed to another worker: the read loop ends
        if not self._reading:
            self.loop.add_reader(self.fd, self._on_readable)
            self._reading = True
        # (`_wait`, inline: a wait per request)
        fut = self._readable = self._waiter = self.loop.create_future()
        try:
            await fut
        finally:
            self._readable = self._waiter = None

    def moved_before(self, moves: int) -> None:
        """This connection was handed over `moves` times already (workers/handoff.py)."""
        self.moves = moves
        self.move_at = MOVE_AT << min(moves, MOVE_BACKOFF_MAX)

    def fetched_from(self, worker: int, keys: list = ()) -> None:
        """A Fetch of this connection read only `worker`'s partitions (another worker's),
        `keys` ((topic, partition) pairs); the Fetch fan-out tells
        (workers/handlers/fetch/fanout.py)."""
        self.move_keys = keys
        if worker == self.move_to:
            self.move_streak += FETCH_WEIGHT
        else:
            self.move_to, self.move_streak = worker, FETCH_WEIGHT

    def produced_to(self, worker: int) -> None:
        """A Produce of this connection went whole to `worker` (another worker; the
        router tells, workers/router.py)."""
        if worker == self.move_to:
            self.move_streak += 1
        else:
            self.move_to, self.move_streak, self.move_keys = worker, 1, ()

    def _move(self) -> bool:
        """Hand this connection (and its fetch session) to `move_to` when nothing of it
        is in this process: no request in flight or unanswered, no byte of a request
        read, no answer unsent, not throttled nor muted, plaintext without SASL (the
        server sets `on_move` only then). True: handed over, the connection is closed
        here (`moved`)."""
        if (self.on_move is None or self.closed or self.pending or self._writing
                or self._direct or self.charged or self.frames.buffered or self.muted
                or self.throttled_until > self.clock()):
            return False
        self.move_streak = 0        # tried once per streak: a refusal waits for the next
        if not self.on_move(self, self.move_to):
            return False
        # this process stops watching the socket before its fd here is closed (an
        # epoll registration outlives the fd while the other worker's keeps the file)
        self._stop_reading()
        self.moved = self.closed = True
        self.wakeup.set()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        return True

    def _on_readable(self) -> None:
        fut = self._readable
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self.loop.remove_reader(self.fd)

    async def _read_loop(self) -> None:
        pool = self.pool
        rb = self.read_buffer
        while not self.closed:
            while len(self.pending) >= MAX_IN_FLIGHT and not self.closed:
                self._stop_reading()
                self.wakeup.clear()
                await self.wakeup.wait()
            if self.closed:
                break           # closing (a failed response, abort): no more requests
            if self.throttled_until > self.clock():
                self._stop_reading()
                await self._wait_throttled()
                continue
            room = pool.room(len(rb.buf))
            if not room:
                room = self._finisher_room(pool, len(rb.buf))
            if not room:
                self._stop_reading()
                self.muted = True             # KIP-72: no reads until memory is released
                try:
                    await self._wait_muted()
                finally:
                    self.muted = False
                if self._peer_gone():
                    return                    # its bytes go back to the pool on close
                continue
            try:
                n = self._recv_into(rb.view, room)
            except (BlockingIOError, InterruptedError):
                await self._wait_readable()
                continue
            if n == 0:
                return
            pool.take(n)
            self.charged += n
            self.bytes_in += n
            self.last_active = self.clock()
            self.read_at = time.perf_counter()      # the request queue time starts (metrics)
            frames = self.frames
            for frame in frames.feed(rb.view[:n]):
                size = len(frame) + 4
                if not self._start_request(frame, size):
                    self._flush_direct()
                    self._partial_to(frames.buffered)
                    return
            if self._direct:
                self._flush_direct()
            left = frames.buffered
            if left != self.partial:    # (whole frames read: 0 before and after, no call)
                self._partial_to(left)
            # what feed kept of an incomplete frame stays charged to the connection
            if n < room and self.RECV_DRAINS and not self.closed:
                # A short read emptied the socket: wait for the next bytes instead of
                # asking for them (a recv failing with EAGAIN was a system call per
                # read); bytes that came meanwhile make the wait end at once.
                await self._wait_readable()

    # A `_recv_into` shorter than asked means nothing is left to read (not so through
    # TLS: decrypted bytes can wait in the SSLObject with the socket empty).
    RECV_DRAINS = True

    def _recv_into(self, view: memoryview, room: int) -> int:
        """Read what is there (at most `room` bytes); BlockingIOError when nothing is."""
        return self.sock.recv_into(view, room)

    async def _wait_muted(self) -> None:
        """Wait for room in the pool, or MUTED_CHECK_S: a muted connection does not read,
        so it looks at its TCP state now and then to let a client that left go (else
        its partial frame would hold pool memory until connections.max.idle.ms)."""
        fut = self.pool.wait()
        timer = self.loop.call_later(MUTED_CHECK_S, lambda: fut.done() or fut.set_result(None))
        try:
            await self._wait(fut)
        finally:
            timer.cancel()

    def throttle(self, ms: int) -> None:
        """KIP-219: a client quota was violated; the response goes out at once and the
        connection is not read for `ms` (Kafka's channel muting for throttling)."""
        self.throttled_until = max(self.throttled_until, self.clock() + ms / 1000)

    async def _wait_throttled(self) -> None:
        fut = self.loop.create_future()
        timer = self.loop.call_later(max(0.0, self.throttled_until - self.clock()),
                                     lambda: fut.done() or fut.set_result(None))
        try:
            await self._wait(fut)
        finally:
            timer.cancel()

    def _peer_gone(self) -> bool:
        """The client closed or reset (TCP state no longer ESTABLISHED), without a read."""
        try:
            state = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
        except OSError:
            return False          # not TCP (a socket pair in tests)
        return state != TCP_ESTABLISHED

    def _finisher_room(self, pool, want: int) -> int:
        """Room to read the rest of our incomplete frame over the pool's capacity, when
        the pool holds incomplete frames only and no other connection does so already
        (memory_pool.py); else 0 (muted)."""
        missing = self.frames.missing
        if not missing or not pool.stalled() or pool.finisher not in (None, self):
            return 0
        sasl = self.sasl
        if (sasl is not None and sasl.state != sasl_states.COMPLETE
                and self.frames.buffered + missing - 4 > sasl.max_receive_size):
            # not authenticated: no frame over sasl.server.max.receive.size is read past
            # the pool (once read, _start_request would refuse it)
            return 0
        if pool.finisher is None:
            pool.finisher = self
            log.debug("request pool full of incomplete requests: %s reads the rest of its "
                      "frame (%d bytes) over queued.max.request.bytes", self.client_host,
                      missing)
        return min(missing, want)

    def _partial_to(self, now: int) -> None:
        """Our incomplete frame now holds `now` bytes: the pool's count follows, and a
        finisher whose frame is complete (or closed) is one no longer."""
        pool = self.pool
        pool.partial += now - self.partial
        self.partial = now
        if now == 0 and pool.finisher is self:
            pool.finisher = None

    def _release(self, n: int) -> None:
        n = min(n, self.charged)
        self.charged -= n
        self.pool.release(n)

    def _start_request(self, frame: memoryview, size: int = 0) -> bool:
        """Dispatch one frame; `size` bytes stay charged to the pool until it is answered."""
        session = self.sasl
        if session is not None and session.state != sasl_states.COMPLETE:
            if len(frame) > session.max_receive_size:
                log.info("closing %s: SASL frame of %d bytes over sasl.server.max.receive.size",
                         self.client_host, len(frame))
                return False
            if session.raw_token_expected:
                return self._raw_token(frame, size)
        try:
            header, pos = framing.parse_request_header(frame)
        except Exception as e:
            log.info("closing %s: unreadable request header (%s)", self.client_host, e)
            return False
        if session is not None and not session.allows(header.api_key):
            log.info("closing %s (listener %s): %s request %s", self.client_host,
                     self.listener_name, "expired SASL session:" if session.expired()
                     else "unauthenticated", header.api_key)
            return False
        ctx = RequestContext(header, self.client_host, self)
        try:
            result = self.dispatcher.dispatch(ctx, frame, pos)
        except Exception as e:
            log.info("closing %s: %s v%d: %s", self.client_host,
                     header.api_key, header.api_version, e)
            return False
        if result is None:
            self._release(size)
            return True  # no response expected (acks=0)
        if (type(result) is list and not self.pending and not self._writing
                and self.DIRECT_SEND and session is None and not self.closed
                and self._send_now(result, size)):
            return True
        pending = self.pending
        pending.append((header, result, size))
        if self._callbacks and type(result) is EncodedLater:
            result.fut.add_done_callback(self._answered)
        elif not (self._callbacks and type(pending[0][1]) is EncodedLater):
            # (behind a later answer, whose callback sends what is ready behind it,
            # the write loop is not woken)
            self.wakeup.set()
        if session is not None:
            if session.state == sasl_states.FAILED:
                return False      # the answer goes out (delayed), then the connection closes
            if session.state == sasl_states.COMPLETE:
                self.principal = session.principal
        return True

    # A response answered at once with nothing owed before it leaves from the reader
    # (`_send_now`), without waking the write loop's task for it: one loop iteration
    # less per such request (a Produce, most of all). Not through TLS, whose sends
    # go through the SSLObject.
    DIRECT_SEND = True

    def _send_now(self, chunks: list, size: int) -> bool:
        """Take a response of bytes only (no file slices) for the reader's next send
        (`_flush_direct`, after the frames of one read): pipelined requests answered at
        once (a producer's Produce requests, one per partition for librdkafka) leave in
        one `sendmsg`, not one each. False when it has slices: the write loop sends it."""
        for c in chunks:
            if type(c) is FileSlice:
                return False
        out = self._direct
        if len(out) + len(chunks) > IOV_MAX:
            if len(chunks) > IOV_MAX:
                return False
            self._flush_direct()
            if self.pending:
                return False    # the socket did not take it all: the rest is owed first
            out = self._direct
        out.extend(chunks)
        self._direct_charged += size
        return True

    def _flush_direct(self) -> None:
        """Send what `_send_now` took, in one system call; what the socket does not take
        goes to the front of the write loop's queue (before any response owed after)."""
        out = self._direct
        if not out:
            return
        charged = self._direct_charged
        self._direct = []
        self._direct_charged = 0
        total = 0
        for c in out:
            total += len(c)
        try:
            n = self.sock.send(out[0]) if len(out) == 1 else self.sock.sendmsg(out)
        except OSError:         # EAGAIN, or an error the write loop meets again and closes on
            n = 0
        if n:
            self.bytes_out += n
            self.last_active = self.clock()
        if n < total:
            self.pending.appendleft((_Taken, advance(out, n) if n else out, charged))
            self.wakeup.set()
        else:
            self._release(charged)
            if self.move_streak >= self.move_at and self._readable is not None:
                self._move()        # the last answer left while the reader waits

    def _raw_token(self, frame: memoryview, size: int) -> bool:
        """A v0 SASL token (KIP-43: after SaslHandshake v0, tokens travel as bare
        length-prefixed frames); the challenge goes back the same way. A failure
        closes the connection after `connection.failed.authentication.delay.ms`."""
        try:
            challenge = self.sasl.authenticate(bytes(frame))
        except sasl_states.SaslAuthenticationError as e:
            log.info("Failed authentication with %s (%s)", self.client_host, e)
            self.pending.append((_RawToken, asyncio.ensure_future(
                asyncio.sleep(self.security.failure_delay_s)), size))
            self.wakeup.set()
            return False
        if self.sasl.state == sasl_states.COMPLETE:
            self.principal = self.sasl.principal
        self.pending.append((_RawToken, [len(challenge).to_bytes(4, "big"), challenge], size))
        self.wakeup.set()
        return True

    # ------------------------------------------------------------------ writing
    def _answered(self, fut) -> None:
        """Done callback of a later answer's future (registered by the reader)."""
        if self._gone or self._dead:
            _retrieve(fut)          # nobody answers it any more: its failure is not news
            return
        self._pump()

    def _pump(self) -> None:
        """Send what is ready at the head of the queue now, from a later answer's done
        callback: as `_send_now` does for an answer ready at once, no task is woken for
        it (a task finishing the answer, then the write loop, were two more loop
        iterations per such request). What cannot go out at once (a large slice, a full
        socket, an answer awaited by the write loop) is left to the write loop, woken."""
        if self._writing or self._dead or self._gone:
            return              # the write loop takes the head when its send is done
        pending = self.pending
        before = len(pending)
        if pending and type(pending[0][1]) in (list, EncodedLater):
            # (any other head is the write loop's own to await: it is never taken here)
            out = self._gather_ready(None)
            if pending:
                head = pending[0][1]
                if type(head) is not EncodedLater or head.fut.done():
                    # an awaitable (a quota's, another), or more than one go gathers:
                    # the write loop's; a later answer not ready yet: its callback comes
                    self.wakeup.set()
        else:
            out = None
            if pending:
                self.wakeup.set()               # the write loop awaits this one
        if before >= MAX_IN_FLIGHT > len(pending):
            self.wakeup.set()                   # the reader waits for room
        if out:
            self._send_ready(out)
        if self.closed:
            self.wakeup.set()   # a write loop draining before the close looks again

    def _send_ready(self, chunks: list) -> None:
        """Send `chunks` (of responses taken off the queue) now in one `sendmsg`, small
        slices read in; with a large slice, or more than one send's worth, they go back
        to the head of the queue for the write loop."""
        inlined = 0
        for c in chunks:
            if type(c) is FileSlice:
                inlined += c.length
                if c.length > INLINE_SLICE_MAX or inlined > INLINE_BATCH_MAX:
                    break
        else:
            if len(chunks) <= IOV_MAX:
                try:
                    iov = [self._read_slice(c) if type(c) is FileSlice else c for c in chunks]
                except (ConnectionAbortedError, OSError) as e:
                    log.info("closing %s: %s", self.client_host, e)
                    self._die()
                    return
                self._direct = iov
                self._flush_direct()
                return
        self.pending.appendleft((_Taken, chunks, 0))
        self.wakeup.set()

    def _finished(self, header, answer: EncodedLater):
        """The chunks (or None, or an awaitable) of a later answer whose future is done;
        raises _Closing, the connection marked to close, when it cannot be made."""
        try:
            return answer.finish(answer.fut)
        except asyncio.CancelledError:
            log.info("closing %s: the answer to api %d was cancelled", self.client_host,
                     header.api_key)
        except ConnectionAbortedError as e:
            log.info("closing %s: %s", self.client_host, e)
        except Exception:
            log.exception("handler for api %d failed", header.api_key)
        self._die()
        raise _Closing()

    def _die(self) -> None:
        """A response failed: nothing more is sent; the write loop ends, and so does the
        reader (woken if it waits)."""
        self.closed = True
        self._dead = True
        self.wakeup.set()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _write_loop(self) -> None:
        callbacks = self._callbacks
        while True:
            if self._dead:
                return
            if not self.pending:
                if self.closed:
                    return
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            header, result, size = self.pending[0]
            if type(result) is EncodedLater and callbacks:
                if not result.fut.done():
                    self.wakeup.clear()
                    await self.wakeup.wait()    # its done callback sends it, or wakes us
                    continue
                try:
                    result = self._finished(header, result)
                except _Closing:
                    return
                if result is not None and type(result) is not list:
                    self.pending[0] = (header, result, size)
                    continue
            elif not isinstance(result, list):
                try:
                    result = await result
                except asyncio.CancelledError:
                    if asyncio.current_task().cancelling():
                        raise           # this write loop is cancelled
                    log.info("closing %s: the answer to api %d was cancelled",
                             self.client_host, header.api_key)
                    self._die()
                    return
                except Exception:
                    log.exception("handler for api %d failed", header.api_key)
                    self._die()
                    return
                if self._dead:
                    return
            self.pending.popleft()
            self._release(size)
            self.wakeup.set()  # the reader may be waiting for room
            if self.pending:
                result = self._gather_ready(result)
            if result is None:
                continue
            self._writing = True        # no response may leave from the reader meanwhile
            try:
                await self._send_chunks(result)
            except StaleSlice as e:
                log.info("closing %s: %s", self.client_host, e)
                self._die()
                return
            except OSError:
                self._die()
                return
            except Exception:   # a bug of ours: nothing may follow a response cut short
                log.exception("sending to %s failed", self.client_host)
                self._die()
                return
            finally:
                self._writing = False
            if self.move_streak >= self.move_at and self._readable is not None:
                self._move()        # the last answer left while the reader waits

    def _gather_ready(self, result: list | None) -> list | None:
        """`result` followed by the responses queued behind it that are ready already,
        taken off the queue: responses that became ready together (the answers of one
        mesh reply, say) leave in one send, not one each."""
        pending = self.pending
        merged = None
        for _ in range(GATHER_MAX):
            if not pending:
                break
            header, nxt, size = pending[0]
            if type(nxt) is EncodedLater and self._callbacks:
                if not nxt.fut.done():
                    break
                try:
                    nxt = self._finished(header, nxt)
                except _Closing:
                    break       # what was taken before it still goes out
                if nxt is not None and type(nxt) is not list:
                    pending[0] = (header, nxt, size)    # held back: the loop awaits it
                    break
            elif type(nxt) is not list:
                if (not isinstance(nxt, asyncio.Future) or not nxt.done()
                        or nxt.cancelled() or nxt.exception() is not None):
                    break       # not ready, or failed: the loop meets it on its own
                nxt = nxt.result()
            self._release(pending.popleft()[2])
            if nxt is not None:
                if merged is None:
                    merged = [] if result is None else list(result)
                merged.extend(nxt)
        return result if merged is None else merged

    async def _send_chunks(self, chunks: list) -> None:
        """Send one response: its bytes and its small slices (read from the page cache)
        gathered into one `sendmsg`; a large slice goes by `sendfile`, the bytes before
        it sent with MSG_MORE so that they leave in full segments with the slice's."""
        iov: list = []
        size = inlined = 0
        for chunk in chunks:
            if type(chunk) is FileSlice:
                if chunk.length <= INLINE_SLICE_MAX:
                    if inlined + chunk.length > INLINE_BATCH_MAX:
                        await self._send_iov(iov, size, socket.MSG_MORE)
                        iov, size, inlined = [], 0, 0
                    iov.append(self._read_slice(chunk))
                    inlined += chunk.length
                    size += chunk.length
                    continue
                if iov:
                    await self._send_iov(iov, size, socket.MSG_MORE)
                    iov, size, inlined = [], 0, 0
                await self._sendfile(chunk)
            else:
                iov.append(chunk)
                size += len(chunk)
        if iov:
            await self._send_iov(iov, size, 0)

    def _read_slice(self, s: FileSlice) -> bytes:
        """The bytes of a small slice, read now through the same checked handle sendfile
        would use; a short read is a file shorter than promised (see `_sendfile_fd`)."""
        fd, temporary = self._handle(s)
        try:
            data = os.pread(fd, s.length, s.position)
        finally:
            if temporary:
                os.close(fd)
        if len(data) != s.length:
            raise ConnectionAbortedError("file slice shorter than promised")
        return data

    async def _wait_writable(self) -> None:
        fut = self.loop.create_future()
        self.loop.add_writer(self.fd, lambda: fut.done() or fut.set_result(None))
        try:
            await fut
        finally:
            self.loop.remove_writer(self.fd)

    async def _send_iov(self, iov: list, size: int, flags: int) -> None:
        """Send the `size` bytes of the buffers of `iov` in order with `sendmsg`, IOV_MAX
        buffers at a time, over partial sends; `flags` (MSG_MORE or 0) goes with the
        last call. (Joining small buffers to `send` them measured no cheaper.)"""
        sock = self.sock
        while True:
            try:
                if len(iov) == 1:
                    n = sock.send(iov[0], flags)
                elif len(iov) <= IOV_MAX:
                    n = sock.sendmsg(iov, (), flags)
                else:
                    n = sock.sendmsg(iov[:IOV_MAX], (), socket.MSG_MORE)
            except (BlockingIOError, InterruptedError):
                await self._wait_writable()
                continue
            self.bytes_out += n
            self.last_active = self.clock()
            if n == size:
                return
            size -= n
            iov = advance(iov, n)
            if not iov:
                return

    async def _sendfile(self, s: FileSlice) -> None:
        fd, temporary = self._handle(s)
        try:
            await self._sendfile_fd(fd, s)
        finally:
            if temporary:
                os.close(fd)

    async def _sendfile_fd(self, fd: int, s: FileSlice) -> None:
        pos, left = s.position, s.length
        while left > 0:
            try:
                n = os.sendfile(self.fd, fd, pos, left)
            except (BlockingIOError, InterruptedError):
                await self._wait_writable()
                continue
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    await self._wait_writable()
                    continue
                raise
            if n == 0:
                # The file is shorter than promised (segment deleted or truncated under
                # us): the response length is already on the wire, so the connection
                # cannot be saved. The client reconnects and fetches again.
                raise ConnectionAbortedError("file slice shorter than promised")
            self.bytes_out += n
            self.last_active = self.clock()
            pos += n
            left -= n

    # ------------------------------------------------------------ slice files
    def pin(self, s: FileSlice) -> FileSlice | None:
        """`s` (from another worker) with an fd of this connection reading its file, or
        None when that file is gone or replaced. Taken when the owner's answer arrives,
        so the file is looked up while the owner's read is fresh."""
        if not s.ino:
            return s
        try:
            fd, temporary = self._handle(s)
        except (StaleSlice, OSError):
            return None
        if temporary:           # only under its retired name: send it by path later
            os.close(fd)
            return s
        return s._replace(fd=fd)

    def _handle(self, s: FileSlice) -> tuple[int, bool]:
        """(fd reading the file of `s`, whether the caller closes it). Raises StaleSlice."""
        if s.fd >= 0 and (not s.ino or _identity(s.fd) == (s.dev, s.ino)):
            return s.fd, False
        now = time.monotonic()
        ent = self._files.get(s.path)
        if ent is not None:
            if not s.ino or (ent[1], ent[2]) == (s.dev, s.ino):
                ent[3] = now
                return ent[0], False
            del self._files[s.path]          # the path names another file now
            _close_fd(ent[0])
        fd, st = _open_identity(s.path)
        if fd >= 0 and (not s.ino or (st.st_dev, st.st_ino) == (s.dev, s.ino)):
            self._remember(s.path, fd, st, now)
            return fd, False
        if fd >= 0:
            _close_fd(fd)
        fd, st = _open_identity(s.path + DELETED_SUFFIX)
        if fd >= 0 and (st.st_dev, st.st_ino) == (s.dev, s.ino):
            return fd, True
        if fd >= 0:
            _close_fd(fd)
        raise StaleSlice(f"{s.path}: the file this slice was read from is gone")

    def _remember(self, path: str, fd: int, st, now: float) -> None:
        if len(self._files) >= MAX_FILES:
            oldest = min(self._files, key=lambda p: self._files[p][3])
            _close_fd(self._files.pop(oldest)[0])
        self._files[path] = [fd, st.st_dev, st.st_ino, now]
        if self._files_timer is None:
            self._files_timer = self.loop.call_later(FILE_IDLE_S, self._sweep_files)

    def _sweep_files(self) -> None:
        """Close the handles unused for FILE_IDLE_S; runs while any is open."""
        self._files_timer = None
        now = time.monotonic()
        for path, ent in list(self._files.items()):
            if now - ent[3] > FILE_IDLE_S:
                del self._files[path]
                _close_fd(ent[0])
        if self._files and not self.closed:
            self._files_timer = self.loop.call_later(FILE_IDLE_S / 2, self._sweep_files)

    def _close(self) -> None:
        self._gone = True
        if self.fetch_memo is not None:
            self.fetch_memo.forget()
            self.fetch_memo = None
        for _, result, _ in self.pending:   # never sent: their failures are not news
            if type(result) is EncodedLater and result.fut.done():
                _retrieve(result.fut)
        self._stop_reading()
        self._release(self.charged)       # incomplete frame and unanswered requests
        self._partial_to(0)
        if self._files_timer is not None:
            self._files_timer.cancel()
            self._files_timer = None
        for ent in self._files.values():
            _close_fd(ent[0])
        self._files.clear()
        try:
            self.sock.close()
        except OSError:
            pass
        if self.on_close:
            self.on_close(self)


def _retrieve(fut: asyncio.Future) -> None:
    """Mark a done future's failure as seen (asyncio logs an unseen one)."""
    if not fut.cancelled():
        fut.exception()


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _open_identity(path: str):
    """(fd, stat) of `path` opened read-only, or (-1, None) when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return -1, None
    try:
        return fd, os.fstat(fd)
    except OSError:
        _close_fd(fd)
        raise


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
