"""One client connection: read frames, dispatch, answer in order, send with sendfile.

Concurrency contract (one asyncio loop per worker process, no threads):

* The reader decodes request frames as they arrive and starts each request at once;
  requests of one connection run concurrently (a long-polling Fetch does not hold up a
  Metadata behind it), but responses leave **in request order** (Kafka clients match
  responses by position as much as by correlation id).
* A handler returns a response body dict, or an awaitable of one, or None (acks=0
  produce: no response at all). The ordered queue holds one entry per request that
  expects a response.
* Response bodies may contain `FileSlice`s (record data of Fetch); the writer sends the
  bytes around them with `send` and the slices with `os.sendfile` straight from the page
  cache, waiting for writability itself (the socket is non-blocking and owned by this
  class, not by an asyncio transport, precisely so that sendfile is possible).
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
from typing import Any, Callable

from mpbroker.protocol import codec, framing
from mpbroker.protocol.errors import ErrorCode
from storage.slices import FileSlice

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024
MAX_IN_FLIGHT = 128  # requests per connection started but not yet answered


class RequestContext:
    """What a handler knows about the request besides its body."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "client_host",
                 "connection")

    def __init__(self, header, client_host: str, connection: "Connection"):
        self.api_key = header.api_key
        self.api_version = header.api_version
        self.correlation_id = header.correlation_id
        self.client_id = header.client_id
        self.client_host = client_host
        self.connection = connection


class Connection:
    def __init__(self, sock: socket.socket, dispatcher, max_request_bytes: int,
                 on_close: Callable[["Connection"], None] | None = None):
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
        self._fd_cache: dict[str, int] = {}

    # ------------------------------------------------------------------ reading
    async def serve(self) -> None:
        writer = asyncio.ensure_future(self._write_loop())
        try:
            await self._read_loop()
        except (ConnectionError, OSError):
            pass
        except framing.FrameTooLarge as e:
            log.info("closing %s: %s", self.client_host, e)
        except Exception:  # a bug of ours, never the client's bytes killing the worker
            log.exception("connection %s failed", self.client_host)
        finally:
            self.closed = True
            self.wakeup.set()
            try:
                await writer
            except Exception:
                log.exception("writer of %s failed", self.client_host)
            self._close()

    async def _read_loop(self) -> None:
        buf = bytearray(READ_CHUNK)
        view = memoryview(buf)
        while not self.closed:
            while len(self.pending) >= MAX_IN_FLIGHT and not self.closed:
                self.wakeup.clear()
                await self.wakeup.wait()
            n = await self.loop.sock_recv_into(self.sock, view)
            if n == 0:
                return
            self.bytes_in += n
            for frame in self.frames.feed(view[:n]):
                if not self._start_request(frame):
                    return

    def _start_request(self, frame: memoryview) -> bool:
        try:
            header, pos = framing.parse_request_header(frame)
        except Exception as e:
            log.info("closing %s: unreadable request header (%s)", self.client_host, e)
            return False
        ctx = RequestContext(header, self.client_host, self)
        try:
            result = self.dispatcher.dispatch(ctx, frame, pos)
        except Exception as e:
            log.info("closing %s: %s v%d: %s", self.client_host,
                     header.api_key, header.api_version, e)
            return False
        if result is None:
            return True  # no response expected (acks=0)
        self.pending.append((header, result))
        self.wakeup.set()
        return True

    # ------------------------------------------------------------------ writing
    async def _write_loop(self) -> None:
        while True:
            if not self.pending:
                if self.closed:
                    return
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            header, result = self.pending[0]
            if not isinstance(result, list):
                try:
                    result = await result
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("handler for api %d failed", header.api_key)
                    self.closed = True
                    return
            self.pending.popleft()
            self.wakeup.set()  # the reader may be waiting for room
            if result is None:
                continue
            try:
                await self._send_chunks(result)
            except OSError:
                self.closed = True
                return

    async def _send_chunks(self, chunks: list) -> None:
        out = bytearray()
        for chunk in chunks:
            if isinstance(chunk, FileSlice):
                if out:
                    await self._send_bytes(out)
                    out = bytearray()
                await self._sendfile(chunk)
            else:
                out += chunk
        if out:
            await self._send_bytes(out)

    async def _wait_writable(self) -> None:
        fut = self.loop.create_future()
        self.loop.add_writer(self.fd, lambda: fut.done() or fut.set_result(None))
        try:
            await fut
        finally:
            self.loop.remove_writer(self.fd)

    async def _send_bytes(self, data) -> None:
        view = memoryview(data)
        while view:
            try:
                n = self.sock.send(view)
            except (BlockingIOError, InterruptedError):
                await self._wait_writable()
                continue
            self.bytes_out += n
            view = view[n:]

    async def _sendfile(self, s: FileSlice) -> None:
        fd = s.fd if s.fd >= 0 else self._open(s.path)
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
            pos += n
            left -= n

    def _open(self, path: str) -> int:
        fd = self._fd_cache.get(path)
        if fd is None:
            fd = os.open(path, os.O_RDONLY)
            if len(self._fd_cache) > 64:
                for old in self._fd_cache.values():
                    os.close(old)
                self._fd_cache.clear()
            self._fd_cache[path] = fd
        return fd

    def _close(self) -> None:
        for fd in self._fd_cache.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fd_cache.clear()
        try:
            self.sock.close()
        except OSError:
            pass
        if self.on_close:
            self.on_close(self)
