"""The worker's event loop: listen with SO_REUSEPORT, accept, serve connections.

Every worker binds the client port itself with SO_REUSEPORT (ARCHITECTURE §2), so the
kernel spreads new connections over the workers; with one worker this is simply the
listener. The loop is uvloop's when it is installed.

Shutdown (`request_stop`): stop accepting, let requests in flight finish for up to
`grace_s` seconds, close connections, then `Broker.shutdown()` flushes every log and
writes the clean-shutdown markers, so the next start skips recovery.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import socket

from workers.connection import Connection
from workers.dispatch import Dispatcher

log = logging.getLogger(__name__)


def parse_listener(listener: str) -> tuple[str, str, int]:
    """'PLAINTEXT://127.0.0.1:9092' -> ('PLAINTEXT', '127.0.0.1', 9092)."""
    name, _, rest = listener.partition("://")
    if not rest:
        raise ValueError(f"Invalid listener {listener!r}: expected NAME://host:port")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit():
        raise ValueError(f"Invalid listener {listener!r}: bad port")
    return name, host or "0.0.0.0", int(port)


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
    def __init__(self, broker, listen_sock: socket.socket, max_request_bytes: int):
        self.broker = broker
        self.sock = listen_sock
        self.max_request_bytes = max_request_bytes
        self.dispatcher = Dispatcher(broker)
        self.connections: set[Connection] = set()
        self.tasks: set[asyncio.Task] = set()
        self.stopping = asyncio.Event()

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        accept = asyncio.ensure_future(self._accept_loop(loop))
        await self.stopping.wait()
        accept.cancel()
        try:
            await accept
        except asyncio.CancelledError:
            pass
        self.sock.close()

    async def _accept_loop(self, loop) -> None:
        while True:
            try:
                conn_sock, _ = await loop.sock_accept(self.sock)
            except OSError as e:
                log.warning("accept failed: %s", e)
                await asyncio.sleep(0.05)
                continue
            conn_sock.setblocking(False)
            conn_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                conn = Connection(conn_sock, self.dispatcher, self.max_request_bytes,
                                  on_close=self.connections.discard)
            except OSError:
                conn_sock.close()
                continue
            self.connections.add(conn)
            task = loop.create_task(conn.serve())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def drain(self, grace_s: float) -> None:
        """Wait for in-flight requests, then close every connection."""
        deadline = asyncio.get_running_loop().time() + grace_s
        while any(c.pending for c in self.connections):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.01)
        for c in list(self.connections):
            c.closed = True
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
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
              on_ready=None, grace_s: float = 5.0) -> int:
    """Serve until SIGTERM/SIGINT. Signal handlers only set a flag (the loop does the work)."""
    loop = asyncio.get_running_loop()
    broker.start(loop)
    server = WorkerServer(broker, listen_sock, max_request_bytes)
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
