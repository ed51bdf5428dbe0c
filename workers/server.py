"""The worker's event loop: listen with SO_REUSEPORT, accept, serve connections.

Every worker binds the client port itself with SO_REUSEPORT (ARCHITECTURE §2), so the
kernel spreads new connections over the workers; with one worker this is simply the
listener. The loop is uvloop's when it is installed.

Memory and connection limits (issue #15), all from the broker's config:

* `queued.max.request.bytes` (KIP-72): one `MemoryPool` per worker for the bytes its
  connections read and hold; connections are muted while it is exhausted.
  Kafka's default -1 (unbounded) is kept; the limit is per worker, so a broker holds
  at most `num.workers` x this much in requests.
* `socket.request.max.bytes`: a larger size prefix closes the connection (FrameReader).
* `max.connections`, `max.connections.per.ip`, `max.connections.per.ip.overrides`: per
  broker, counted across workers (`workers/connection_quotas.py`). At `max.connections`
  the worker stops accepting until a slot frees (checked every SLOT_POLL_S, since a
  slot may free on another worker); the new connections wait in the listen backlog, as
  with Kafka's acceptor. An address over its limit is closed at once.
* `connections.max.idle.ms`: a connection with no byte in or out for that long and no
  request in flight is closed (negative: never); checked every IDLE_CHECK_DIVISOR-th
  of the timeout, so one is closed within 1.25 times it.
* One receive buffer per worker (`ReadBuffer`), shared by its connections.

Listeners (issue #17): the worker serves every listener of the broker, one accept loop
per socket, each with its `ListenerSecurity` (workers/listener_security.py): TLS
listeners make `TlsConnection`s, SASL listeners give each connection a SASL session
whose SCRAM credentials come from the worker's metadata copy.

Shutdown (`request_stop`): stop accepting, let requests in flight finish for up to
`grace_s` seconds, close connections, then `Worker.shutdown()` flushes every log and
writes the clean-shutdown markers, so the next start skips recovery.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import time

from workers.connection import Connection, ReadBuffer
from workers.tls_connection import TlsConnection
from workers.connection_quotas import ConnectionQuotas, ConnectionTable, TooManyConnections
from workers.dispatch import Dispatcher
from workers.handoff import Handoff
from workers import metrics
from workers.memory_pool import MemoryPool

log = logging.getLogger(__name__)

SLOT_POLL_S = 0.05          # at max.connections: how often to look for a freed slot
IDLE_CHECK_DIVISOR = 4


def bind_listener(host: str, port: int, reuse_port: bool = True) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port and hasattr(socket, "SO_REUSEPORT"):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class WorkerServer:
    def __init__(self, broker, listen_sock: socket.socket, max_request_bytes: int,
                 connection_table: ConnectionTable | None = None, worker_id: int = 0,
                 clock=time.monotonic, listeners: list | None = None):
        self.broker = broker
        self.sock = listen_sock
        # (socket, ListenerSecurity or None for plain PLAINTEXT), the first is listen_sock
        self.listeners = listeners or [(listen_sock, None)]
        self.max_request_bytes = max_request_bytes
        dispatcher = Dispatcher(broker)
        router = getattr(broker, "router", None)
        if router is not None:      # the parts other workers forward run through the registry
            router.run_part = dispatcher.run_part
        self.dispatcher = metrics.instrument(dispatcher, broker)
        self.connections: set[Connection] = set()
        self.tasks: set[asyncio.Task] = set()
        self.stopping = asyncio.Event()
        self.clock = clock
        cfg = self._config()
        self.pool = MemoryPool(int(cfg.get("queued.max.request.bytes") or -1))
        self.read_buffer = ReadBuffer()
        self.quotas = ConnectionQuotas(self._config, connection_table, worker_id)
        idle_ms = cfg.get("connections.max.idle.ms")
        self.idle_s = int(idle_ms) / 1000 if idle_ms is not None else 600.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self.refused = 0          # connections closed for max.connections.per.ip
        self.idle_closed = 0
        # connection hand-off between workers (workers/handoff.py)
        self.handoff = None
        if router is not None and cfg.get("worker.connection.handoff", True):
            self.handoff = router.handoff = Handoff(
                router, self.adopt, self.quotas.release,
                getattr(broker, "peer_alive", None) or (lambda wid: True))

    def _config(self):
        """The broker's config with its dynamic layers (AlterConfigs: `max.connections*`
        are cluster-wide dynamic keys), as the controller pushed it; else the static one."""
        current = getattr(getattr(self.broker, "controller", None), "broker_config", None)
        cfg = current() if current is not None else None
        if cfg is None:
            cfg = getattr(self.broker, "config", None)
        return cfg if cfg is not None else {}

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        accept = asyncio.gather(*(self._accept_loop(loop, sock, security)
                                  for sock, security in self.listeners))
        if self.idle_s > 0:
            self._idle_timer = loop.call_later(self.idle_s / IDLE_CHECK_DIVISOR,
                                               self._close_idle)
        await self.stopping.wait()
        accept.cancel()
        try:
            await accept
        except asyncio.CancelledError:
            pass
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        for sock, _ in self.listeners:
            sock.close()

    def _close_idle(self) -> None:
        """Kafka's idle expiry: close connections silent for connections.max.idle.ms."""
        now = self.clock()
        for c in list(self.connections):
            if not c.closed and not c.pending and now - c.last_active > self.idle_s:
                log.debug("closing %s: idle for more than %d ms", c.client_host,
                          int(self.idle_s * 1000))
                self.idle_closed += 1
                c.abort()
        self._idle_timer = asyncio.get_running_loop().call_later(
            self.idle_s / IDLE_CHECK_DIVISOR, self._close_idle)

    async def _admit(self, conn_sock: socket.socket, host: str) -> bool:
        """Count the connection against the broker's limits; False: closed (per-ip)."""
        waiting = False
        while True:
            try:
                if self.quotas.admit(host):
                    return True
            except TooManyConnections as e:
                self.refused += 1
                log.info("Rejected connection from %s, address already has the configured "
                         "maximum of %d connections.", host, e.limit)
                conn_sock.close()
                return False
            if not waiting:
                waiting = True
                log.info("max.connections reached (%d connections on this broker): "
                         "accepting again when one closes", self.quotas.broker_total())
            await asyncio.sleep(SLOT_POLL_S)

    def _credentials(self, user: str, mechanism: str):
        """A SCRAM credential from the worker's metadata copy (None: unknown user)."""
        lookup = getattr(self.broker.metadata, "scram_credential", None)
        return lookup(user, mechanism) if lookup is not None else None

    async def _accept_loop(self, loop, listen_sock: socket.socket, security=None) -> None:
        out = False
        kind = TlsConnection if security is not None and security.ssl_context is not None \
            else Connection
        while True:
            try:
                conn_sock, addr = await loop.sock_accept(listen_sock)
            except OSError as e:
                if e.errno == errno.EINVAL:
                    # the supervisor took our listener out of the group (we missed
                    # heartbeats); it calls listen() on it again once we beat
                    if not out:
                        log.info("listener out of the group; waiting to be put back")
                        out = True
                    await asyncio.sleep(0.05)
                    continue
                log.warning("accept failed: %s", e)
                await asyncio.sleep(0.05)
                continue
            out = False
            host = addr[0] if isinstance(addr, tuple) else str(addr)
            try:
                if not await self._admit(conn_sock, host):
                    continue
            except BaseException:
                conn_sock.close()
                raise
            conn_sock.setblocking(False)
            try:
                conn_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn = kind(conn_sock, self.dispatcher, self.max_request_bytes,
                            on_close=self._closed, pool=self.pool,
                            read_buffer=self.read_buffer, clock=self.clock,
                            security=security, credentials=self._credentials)
            except OSError:
                self.quotas.release(host)
                conn_sock.close()
                continue
            conn.quota_host = host
            self._serve(conn, loop)

    def _serve(self, conn: Connection, loop) -> None:
        if self.handoff is not None and type(conn) is Connection and conn.sasl is None:
            conn.on_move = self._move
        self.connections.add(conn)
        task = loop.create_task(conn.serve())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _move(self, conn: Connection, wid: int) -> bool:
        """Connection.on_move: hand `conn` to worker `wid` (workers/handoff.py); it is no
        longer this worker's from then on (not idle-closed nor drained here)."""
        if self.stopping.is_set() or not self.handoff.move(conn, wid):
            return False
        self.connections.discard(conn)
        return True

    def adopt(self, sock: socket.socket, msg: dict) -> bool:
        """A connection another worker handed over (Handoff.received): served here as if
        accepted here, counted without the limits (it was admitted by the front). False
        when it cannot be (no such listener here, the client gone, stopping)."""
        if self.stopping.is_set():
            return False
        name = msg.get("listener")
        for _, security in self.listeners:
            if (security.name if security is not None else None) == name:
                break
        else:
            log.warning("a connection handed over on listener %s, which this worker "
                        "does not serve: closed", name)
            return False
        if security is not None and (security.ssl_context is not None or security.sasl):
            return False        # never handed over (Connection.on_move is not set)
        try:
            sock.setblocking(False)
            conn = Connection(sock, self.dispatcher, self.max_request_bytes,
                              on_close=self._closed, pool=self.pool,
                              read_buffer=self.read_buffer, clock=self.clock,
                              security=security, credentials=self._credentials)
        except OSError:             # the client left meanwhile (getpeername)
            return False
        conn.principal = msg.get("principal", conn.principal)
        conn.bytes_in = msg.get("bytes_in", 0)
        conn.bytes_out = msg.get("bytes_out", 0)
        conn.client_id = msg.get("client_id")      # as the dispatcher notes it
        conn.moved_before(msg.get("moves", 1))
        self.broker.clients.add(conn)
        if msg.get("metered"):
            conn.metered = True     # counted as created by the front
        session = msg.get("session")
        if session is not None and not self.broker.fetch_sessions.adopt(session):
            log.debug("fetch session %d of %s not kept (id taken or no room): the client "
                      "starts a new one", session.session_id, conn.client_host)
        host = msg.get("host")
        if host is not None:        # counted last: nothing below fails
            self.quotas.adopt(host)
            conn.quota_host = host
        self._serve(conn, asyncio.get_running_loop())
        return True

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        host = getattr(conn, "quota_host", None)
        if host is not None:
            conn.quota_host = None
            self.quotas.release(host)

    async def drain(self, grace_s: float) -> None:
        """Wait for in-flight requests, then close every connection."""
        deadline = asyncio.get_running_loop().time() + grace_s
        while any(c.pending for c in self.connections):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.01)
        for c in list(self.connections):
            c.abort()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=max(0.1, grace_s))

    def request_stop(self) -> None:
        self.stopping.set()


def install_uvloop() -> None:
    try:
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:  # pragma: no cover - uvloop is a dependency
        log.warning("uvloop not installed; using asyncio's default loop")


async def run(broker, listen_sock: socket.socket, max_request_bytes: int,
              on_ready=None, grace_s: float = 5.0,
              connection_table: ConnectionTable | None = None, worker_id: int = 0,
              listeners: list | None = None) -> int:
    """Serve until SIGTERM/SIGINT. Signal handlers only set a flag (the loop does the work)."""
    loop = asyncio.get_running_loop()
    broker.start(loop)
    server = WorkerServer(broker, listen_sock, max_request_bytes,
                          connection_table=connection_table, worker_id=worker_id,
                          listeners=listeners)
    broker.request_stop = server.request_stop      # a failed log dir stops the worker
    if broker.log_dir_failed:                      # while start() opened the logs
        server.request_stop()
    fast = {"stop": False}

    def on_term():
        server.request_stop()

    def on_int():
        fast["stop"] = True
        server.request_stop()

    loop.add_signal_handler(signal.SIGTERM, on_term)
    loop.add_signal_handler(signal.SIGINT, on_int)
    if on_ready:
        on_ready()
    await server.serve()
    await server.drain(0.5 if fast["stop"] else grace_s)
    return broker.shutdown() or 0       # non-zero: partitions did not close cleanly
