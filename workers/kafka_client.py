"""An asyncio Kafka wire-protocol client: one TCP connection, pipelined requests.

Used inside the broker by the replica fetchers (workers/replication.py: Fetch,
OffsetForLeaderEpoch to the partition leaders) and by the ZooKeeper controller for its
controller->broker requests (LeaderAndIsr, UpdateMetadata, StopReplica). It speaks
the project's own codec (`mpbroker.protocol.codec`), so any API/version the codec
defines can be sent.

    conn = await KafkaConnection.connect(host, port, client_id="mpbroker-1",
                                         timeout_ms=10000)
    resp: dict = await conn.request(api_key, version, body: dict, timeout_ms=None)
    versions = await conn.api_versions()      # {api_key: (min, max)} (ApiVersions v0)
    await conn.close()            # or conn.abort(): close now, from sync code

Security (issue #17): `connect(..., security=ClientSecurity)` (mpbroker/security/
client.py) opens TLS with its SSLContext (asyncio's transport; the host name is checked
when the context says so) and, for SASL_*, authenticates before returning: SaslHandshake
v1 with the mechanism, then SaslAuthenticate v1 rounds driven by the mechanism's client
steps (`CLIENT_MECHANISMS`, mpbroker/security/sasl.py: PLAIN here, SCRAM in its
module). A refused mechanism or failed authentication raises `AuthenticationError`
(a ConnectionError) with the broker's message; the connection is closed.

Wire format (Kafka's): every frame is `int32 size` + payload. Request header v1
(api_key int16, api_version int16, correlation_id int32, client_id int16-length string)
for non-flexible versions, v2 (v1 + an empty tagged-field section) for flexible ones
(ControlledShutdown v0: header v0). Response header v0 (correlation_id) or v1 (+ tagged
fields) for flexible versions, except ApiVersions whose responses always use v0
(`mpbroker.protocol.framing` decides both).

Pipelining: `request` may be called concurrently; each call gets the next correlation
id, its frame is written at once, and one reader task matches responses to waiting
calls by correlation id. A Kafka broker answers a connection's requests in order, so
a response with an unknown correlation id means the stream is out of step: the
connection is closed and every waiting call fails.

Decoded responses are plain dicts (docs/INTERFACES.md "Message dicts"); `records`
fields are memoryviews over the response frame (no copy; the frame stays alive as long
as the view does).

Errors:
* connecting, writing, reading or a closed connection raise `ConnectionError`
  (every `OSError` is turned into one; calls waiting when the connection dies get it too);
* a response that does not decode raises `ConnectionError` (the connection is closed);
* a request that got no response within its timeout (`timeout_ms` of the call, else of
  the connection; None/0 = no timeout) raises `asyncio.TimeoutError` and closes the
  connection, as Kafka's NetworkClient disconnects on a request timeout: the broker
  answers in order, so a stuck request means a stuck peer;
* Produce with acks=0 gets no response: `request` returns None once the frame is written.
* encoding errors (a body that does not fit the schema) raise before anything is sent,
  and the connection stays usable.

Ownership: a connection belongs to the event loop that created it (one worker or the
controller process); it is not thread-safe.
"""
from __future__ import annotations

import asyncio
import struct

from mpbroker.protocol import api_keys, codec, framing
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.sasl import CLIENT_MECHANISMS

_i = struct.Struct(">i")
DEFAULT_MAX_RESPONSE_BYTES = 1 << 30      # a Fetch response is bounded by fetch.max.bytes


class AuthenticationError(ConnectionError):
    """SASL refused: unknown mechanism or bad credentials (the broker's message)."""


class KafkaConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 host: str, port: int, client_id: str | None, timeout_ms: int | None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_ms = timeout_ms
        self.max_response_bytes = max_response_bytes
        self._reader = reader
        self._writer = writer
        self._next_correlation_id = 0
        # correlation id -> (api_key, version, future)
        self._pending: dict[int, tuple[int, int, asyncio.Future]] = {}
        self._closed = False
        self._error: ConnectionError | None = None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(cls, host: str, port: int, *, client_id: str | None = "mpbroker",
                      timeout_ms: int | None = 30000,
                      max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                      security=None) -> "KafkaConnection":
        """Open a TCP connection (TLS and SASL per `security`); `timeout_ms` bounds the
        connect and is the default request timeout. Raises ConnectionError or
        asyncio.TimeoutError."""
        ctx = security.ssl_context if security is not None else None
        try:
            coro = asyncio.open_connection(host, port, ssl=ctx,
                                           server_hostname=host if ctx is not None else None)
            if timeout_ms:
                reader, writer = await asyncio.wait_for(coro, timeout_ms / 1000)
            else:
                reader, writer = await coro
        except asyncio.TimeoutError:
            raise
        except OSError as e:
            raise ConnectionError(f"cannot connect to {host}:{port}: {e}") from e
        conn = cls(reader, writer, host=host, port=port, client_id=client_id,
                   timeout_ms=timeout_ms, max_response_bytes=max_response_bytes)
        if security is not None and security.sasl:
            try:
                await conn._authenticate(security)
            except BaseException:
                conn.abort()
                raise
        return conn

    async def _authenticate(self, security) -> None:
        factory = CLIENT_MECHANISMS.get(security.mechanism)
        if factory is None:
            raise AuthenticationError(f"SASL mechanism {security.mechanism} is not supported "
                                      f"by this client (supported: {', '.join(sorted(CLIENT_MECHANISMS))})")
        resp = await self.request(api_keys.SASL_HANDSHAKE, 1, {"mechanism": security.mechanism})
        if resp["error_code"] != ErrorCode.NONE:
            raise AuthenticationError(
                f"{ErrorCode(resp['error_code']).name}: {self.host}:{self.port} does not enable "
                f"{security.mechanism} (enabled: {', '.join(resp['mechanisms'])})")
        client = factory(security.username, security.password)
        token = client.first()
        while True:
            resp = await self.request(api_keys.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
            if resp["error_code"] != ErrorCode.NONE:
                raise AuthenticationError(f"{ErrorCode(resp['error_code']).name}: "
                                          f"{resp.get('error_message') or ''}")
            token = client.evaluate(bytes(resp["auth_bytes"] or b""))
            if client.complete:
                return

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (f"KafkaConnection({self.host}:{self.port}, pending={len(self._pending)}"
                f"{', closed' if self._closed else ''})")

    # ------------------------------------------------------------------ requests
    async def request(self, api_key: int, version: int, body: dict,
                      timeout_ms: int | None = None) -> dict | None:
        if self._closed:
            raise self._error or ConnectionError(f"connection to {self.host}:{self.port} closed")
        self._next_correlation_id = (self._next_correlation_id + 1) & 0x7FFFFFFF
        cid = self._next_correlation_id
        frame = framing.frame_request(api_key, version, cid, self.client_id, body)
        no_response = api_key == api_keys.PRODUCE and body.get("acks") == 0
        fut = None
        if not no_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending[cid] = (api_key, version, fut)
        try:
            self._writer.write(frame)
            await self._writer.drain()
        except OSError as e:
            self._fail(ConnectionError(f"write to {self.host}:{self.port} failed: {e}"))
        if fut is None:
            if self._closed:
                raise self._error
            return None
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        try:
            if timeout:
                return await asyncio.wait_for(asyncio.shield(fut), timeout / 1000)
            return await fut
        except asyncio.TimeoutError:
            self._pending.pop(cid, None)
            self._fail(ConnectionError(
                f"request {api_keys.NAMES.get(api_key, api_key)} v{version} to "
                f"{self.host}:{self.port} timed out after {timeout} ms"))
            raise
        except asyncio.CancelledError:
            self._pending.pop(cid, None)
            raise

    async def api_versions(self, timeout_ms: int | None = None) -> dict[int, tuple[int, int]]:
        """ApiVersions v0: {api_key: (min_version, max_version)} the peer supports."""
        resp = await self.request(api_keys.API_VERSIONS, 0, {}, timeout_ms)
        if resp.get("error_code"):
            raise ConnectionError(f"ApiVersions failed with error {resp['error_code']}")
        return {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}

    def abort(self) -> None:
        """Close now, without waiting (usable outside a coroutine); waiting calls fail."""
        self._fail(ConnectionError(f"connection to {self.host}:{self.port} closed"))
        if not self._read_task.done():
            self._read_task.cancel()

    async def close(self) -> None:
        self._fail(ConnectionError(f"connection to {self.host}:{self.port} closed"))
        task = self._read_task
        if task is not asyncio.current_task() and not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        try:
            await self._writer.wait_closed()
        except Exception:
            pass

    # ------------------------------------------------------------------ internals
    def _fail(self, err: ConnectionError) -> None:
        """Close the connection; every waiting call gets `err`."""
        if not self._closed:
            self._closed = True
            self._error = err
            try:
                self._writer.close()
            except Exception:
                pass
        pending, self._pending = self._pending, {}
        for _, _, fut in pending.values():
            if not fut.done():
                fut.set_exception(self._error)
                fut.exception()           # mark retrieved: a caller may have timed out

    async def _read_loop(self) -> None:
        reader = self._reader
        try:
            while True:
                head = await reader.readexactly(4)
                size = _i.unpack(head)[0]
                if size < 4 or size > self.max_response_bytes:
                    raise ConnectionError(f"bad response size {size}")
                frame = await reader.readexactly(size)
                cid = _i.unpack_from(frame, 0)[0]
                entry = self._pending.pop(cid, None)
                if entry is None:
                    raise ConnectionError(f"response with unexpected correlation id {cid}")
                api_key, version, fut = entry
                try:
                    _, pos = framing.parse_response_header(frame, api_key, version)
                    body = codec.decode_response(api_key, version, memoryview(frame), pos)
                except Exception as e:
                    raise ConnectionError(
                        f"undecodable {api_keys.NAMES.get(api_key, api_key)} v{version} "
                        f"response: {e!r}") from e
                if not fut.done():
                    fut.set_result(body)
        except asyncio.CancelledError:
            self._fail(ConnectionError(f"connection to {self.host}:{self.port} closed"))
            raise
        except asyncio.IncompleteReadError:
            self._fail(ConnectionError(f"{self.host}:{self.port} closed the connection"))
        except ConnectionError as e:
            self._fail(e)
        except OSError as e:
            self._fail(ConnectionError(f"read from {self.host}:{self.port} failed: {e}"))
