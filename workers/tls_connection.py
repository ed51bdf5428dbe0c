"""A client connection on a TLS listener (SSL, SASL_SSL): `Connection` with its bytes
going through an `ssl.SSLObject` over two `ssl.MemoryBIO`s, so the socket stays this
class's own non-blocking raw socket (same reader/writer/ordering as plaintext).

* `serve` runs the handshake first; a failed one (a plaintext client on the TLS port,
  an untrusted or expired certificate, no certificate with ssl.client.auth=required)
  is logged once at INFO, as Kafka's "Failed authentication with <host> (SSL handshake
  failed)", and closes the connection. The client certificate's DN then gives the
  principal through `ssl.principal.mapping.rules` (a DN no rule maps closes it too).
* Reads: `_recv_into` decrypts into the worker's read buffer; the ciphertext is read
  into one scratch buffer per worker (no await between that read and the BIO write).
* Writes: plaintext is encrypted into the outgoing BIO in TLS_CHUNK pieces and the
  ciphertext sent as the socket takes it (`_flush`); `_out` holds what the socket
  has not taken yet.
* A response's bytes and its small slices (read by `Connection._read_slice`) are joined
  and written as one (`_send_iov`), so they make full TLS records.
* Fetch: `sendfile` cannot encrypt, so a large FileSlice is `preadv`'d from the page cache in
  TLS_CHUNK pieces into one buffer per worker and written through the SSLObject: the
  plaintext is copied once (page cache -> buffer), encrypted once (-> BIO), and the
  ciphertext read once out of the BIO (bytes) before the kernel copies it.
  loadtest/bench_security.py measures it against Python's own TLS loopback.
"""
from __future__ import annotations

import logging
import os
import ssl

from mpbroker.security.principal import MappingError, map_dn, user
from mpbroker.security.tls import subject_dn
from workers.connection import Connection

log = logging.getLogger(__name__)

TLS_CHUNK = 256 * 1024
_scratch = memoryview(bytearray(TLS_CHUNK))      # ciphertext in (per worker process)
_slice_buf = memoryview(bytearray(TLS_CHUNK))    # FileSlice plaintext out (per worker)


class TlsConnection(Connection):
    def __init__(self, sock, dispatcher, max_request_bytes: int, **kw):
        super().__init__(sock, dispatcher, max_request_bytes, **kw)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = self.security.ssl_context.wrap_bio(self.incoming, self.outgoing,
                                                      server_side=True)
        self._out: memoryview | None = None

    async def serve(self) -> None:
        try:
            ok = await self._handshake()
        except (ConnectionError, OSError):
            ok = False
        if not ok:
            self.closed = True
            self._close()
            return
        await super().serve()

    async def _handshake(self) -> bool:
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    return False
            except ssl.SSLError as e:
                log.info("Failed authentication with %s (SSL handshake failed: %s)",
                         self.client_host, e.reason or e)
                self._pump_nowait()           # the alert, if the socket takes it
                return False
        await self._flush()
        try:
            dn = subject_dn(self.tls)
            if dn is not None:
                self.principal = user(map_dn(self.security.rules, dn))
        except (MappingError, ValueError) as e:
            log.info("Failed authentication with %s (%s)", self.client_host, e)
            return False
        return True

    async def _fill(self) -> bool:
        """Move ciphertext from the socket into the incoming BIO; False at EOF."""
        while True:
            try:
                n = self.sock.recv_into(_scratch)
            except (BlockingIOError, InterruptedError):
                await self._wait_readable()
                if self.closed:
                    return False
                continue
            if n == 0:
                return False
            self.incoming.write(_scratch[:n])
            self.bytes_in += n
            self.last_active = self.clock()
            return True

    # ----------------------------------------------------------------- reading
    RECV_DRAINS = False       # a short read may leave decrypted bytes in the SSLObject
    DIRECT_SEND = False       # every send goes through the SSLObject (_send_iov)

    def _recv_into(self, view: memoryview, room: int) -> int:
        while True:
            try:
                n = self.tls.read(room, view)
                if self.outgoing.pending:
                    self._pump_nowait()
                return n
            except ssl.SSLWantReadError:
                n = self.sock.recv_into(_scratch)     # BlockingIOError: wait readable
                if n == 0:
                    return 0
                self.incoming.write(_scratch[:n])
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return 0
            except ssl.SSLError as e:
                raise ConnectionResetError(f"TLS: {e.reason or e}") from None

    # ----------------------------------------------------------------- writing
    def _pump_nowait(self) -> bool:
        """Send ciphertext while the socket takes it; True when nothing is left."""
        while True:
            if self._out is None or not len(self._out):
                if not self.outgoing.pending:
                    self._out = None
                    return True
                self._out = memoryview(self.outgoing.read())
            try:
                n = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                return False
            self.bytes_out += n
            self._out = self._out[n:]

    async def _flush(self) -> None:
        while not self._pump_nowait():
            await self._wait_writable()
        self.last_active = self.clock()

    async def _send_iov(self, iov: list, size: int, flags: int) -> None:
        """One response's bytes (small slices read in already) as one write: joined,
        they make full TLS records instead of one record per piece."""
        await self._send_bytes(iov[0] if len(iov) == 1 else b"".join(iov))

    async def _send_bytes(self, data) -> None:
        view = memoryview(data)
        for i in range(0, len(view), TLS_CHUNK):
            self.tls.write(view[i:i + TLS_CHUNK])
            await self._flush()

    async def _sendfile_fd(self, fd: int, s) -> None:
        pos, left = s.position, s.length
        while left > 0:
            n = os.preadv(fd, [_slice_buf[:min(left, TLS_CHUNK)]], pos)
            if n == 0:
                raise ConnectionAbortedError("file slice shorter than promised")
            self.tls.write(_slice_buf[:n])        # copied into the BIO: the buffer is free
            pos += n
            left -= n
            await self._flush()
