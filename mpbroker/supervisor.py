"""The supervisor: the pre-fork arbiter of mpbroker (ARCHITECTURE §1; gunicorn's arbiter).

Processes (all forked by the supervisor, none exec'd):

    supervisor  (main process: signals, systemd, reaping, respawning, heartbeats)
      ├── controller  the EmbeddedController, the one writer of cluster metadata (with
      │               zookeeper.connect: the ZkController, mpbroker/controller/zk/)
      └── worker i    one per core (`num.workers`), pinned (`worker.cpu.affinity`),
                      its own SO_REUSEPORT listener, uvloop, `workers.server.run`

Channels, all AF_UNIX SOCK_STREAM socket pairs made by the supervisor before the fork
that hands each end to its process:

* supervisor <-> controller, supervisor <-> each worker ("control"): the supervisor only
  writes (config reloads, and the new channel ends of a respawned worker, passed with
  SCM_RIGHTS). A child that reads EOF there has lost its supervisor and stops.
* worker i <-> controller: the controller RPC (`ControllerClient` in the worker,
  `ControllerService` in the controller) and the controller's metadata pushes.
* worker i <-> worker j: a full mesh for cross-worker routing (`workers/router.py` over
  `workers/mesh.py`; this module creates, hands over and replaces the sockets, and
  `run_worker` wires them into the worker's Router).

Frames on every channel: 4-byte little-endian length + a pickle (`encode`). Pickle is
safe here because both ends are forks of this same program; no channel is reachable
from outside the process tree.

Heartbeats: an anonymous shared mmap (`HeartbeatTable`) created before any fork, one
slot per child: (state, monotonic time of the last beat). A child marks itself READY
once it serves, then a task on its event loop beats every `min(timeout, eviction)/4`
(at most 1 s). The supervisor kills (SIGKILL) a READY child whose beat is older than
`worker.heartbeat.timeout.ms`: a loop that is blocked or a process that is stopped stops
beating.

Listeners: the supervisor makes each worker's client socket (bound with SO_REUSEPORT,
not listening) before the fork and keeps its own handle of it; the worker calls
`listen()` once it can serve, which puts it in the kernel's reuseport group. A READY
worker whose beat is older than `worker.listener.eviction.ms` (3 s; below the heartbeat
timeout) is taken out of the group: the supervisor `shutdown()`s the shared socket, so
the kernel hands new connections to the other workers only (connections still queued on
it are reset and the client reconnects, or with the `net.ipv4.tcp_migrate_req` sysctl
move to another worker's queue), with a WARNING. When its beats come back the supervisor
calls `listen()` on it again: it rejoins (INFO). Its own established connections are
untouched; after `worker.heartbeat.timeout.ms` it is killed as before. A booting worker does
not beat (log recovery runs before its loop); it is killed when it has not served
`worker.start.timeout.ms` after its fork (a first start or a respawn alike), which
counts as a boot failure.

Crash loops: a child that fails before it is READY exits with `WORKER_BOOT_ERROR`; the
supervisor respawns it with a growing delay and gives up (exit 1, with a message) after
`worker.boot.max.failures` boot failures in a row. Deaths of serving workers are
respawned at once, unless there were more than `worker.restart.max` within
`worker.restart.window.ms` (a crash loop): then the supervisor stops and exits 1.
The controller is not respawned: its death stops the broker (exit 1) and systemd's
`Restart=on-failure` starts it again.

Signals: the handlers only queue the signal and wake the main loop through a pipe; the
loop dispatches to `handle_<name>`.

* SIGTERM: controlled shutdown. STOPPING=1 to systemd first (with EXTEND_TIMEOUT_USEC,
  the worst case `stop_budget_s`, so that a config with longer limits than the unit's
  TimeoutStopSec is not killed half way). In cluster mode (`zookeeper.connect`) the
  controller process then asks the active controller to move this broker's leaderships
  (ControlledShutdown; it marks its heartbeat slot CS_DONE when done); then SIGTERM to
  the workers (each stops accepting, finishes requests in flight, flushes, writes the
  clean-shutdown markers, exits 0); SIGKILL for any worker still there after
  `worker.shutdown.timeout.ms`; then the controller. Exit 0 when every child stopped
  cleanly. Every wait of the supervisor (`sleep`) pings the watchdog, stopping included:
  systemd keeps the watchdog armed while a unit stops.
* SIGINT: fast stop (workers get SIGINT: 0.5 s to drain, then flush), bounded the same way.
* SIGHUP: reload the config file: dynamic keys (and `log.level`) are applied to the
  controller and the workers; changed static keys are logged as needing a restart.
  RELOADING=1 ... READY=1 to systemd.
* SIGCHLD: only wakes the loop, which reaps (`waitpid(-1, WNOHANG)`).

Before a fork the supervisor touches nothing process-wide (no event loop, no loop
policy, no threads); each child resets the signal dispositions, closes the channel
ends that are not its own, and drops `NOTIFY_SOCKET`.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import mmap
import os
import pickle
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from mpbroker import config as configmod
from mpbroker import proctitle
from mpbroker import sdnotify

log = logging.getLogger("mpbroker.supervisor")

# Exit codes of children (gunicorn's WORKER_BOOT_ERROR is 3).
WORKER_BOOT_ERROR = 3
LOG_DIR_FAILURE_EXIT = 4    # = workers/broker.py's: a worker's log dir failed
CONTROLLER_BOOT_ERROR = 4

# Cross-worker routing (workers/router.py) and placement (mpbroker/metadata/placement.py) are
# built: `num.workers` workers run, each owning its share of the partitions.
MULTI_WORKER_ROUTING = True

DEFAULTS_MS = {
    "worker.heartbeat.timeout.ms": 30000,
    "worker.listener.eviction.ms": 3000,
    "worker.shutdown.timeout.ms": 30000,
    "worker.restart.window.ms": 60000,
}
DEFAULT_BOOT_MAX_FAILURES = 3
DEFAULT_RESTART_MAX = 10
DEFAULT_START_TIMEOUT_MS = 300000
SYNC_CALL_TIMEOUT_S = 30.0
LISTEN_BACKLOG = 1024
# One ControlledShutdown attempt of the controller process: its request timeout (30 s)
# and slack; `controlled.shutdown.max.retries` attempts, `retry.backoff.ms` apart.
CONTROLLED_SHUTDOWN_ATTEMPT_S = 35.0
CONTROLLER_STOP_S = 5.0           # SIGTERM to the controller process, then SIGKILL


def stop_budget_s(cfg) -> float:
    """The longest a SIGTERM stop can take with `cfg`: the cluster controlled shutdown
    (retries x (backoff + one attempt)), the workers' `worker.shutdown.timeout.ms`, the
    controller's stop. conf/mpbroker.service's TimeoutStopSec covers it for the defaults."""
    total = int_key(cfg, "worker.shutdown.timeout.ms",
                    DEFAULTS_MS["worker.shutdown.timeout.ms"]) / 1000 + CONTROLLER_STOP_S
    if cfg.uses_zookeeper and cfg["controlled.shutdown.enable"]:
        retries = max(1, cfg["controlled.shutdown.max.retries"])
        total += retries * (cfg["controlled.shutdown.retry.backoff.ms"] / 1000
                            + CONTROLLED_SHUTDOWN_ATTEMPT_S)
    return total


class SupervisorError(Exception):
    """A stop of the whole broker: `rc` is the exit code, the message says why."""

    def __init__(self, rc: int, message: str, graceful: bool = True):
        super().__init__(message)
        self.rc = rc
        self.graceful = graceful


def int_key(cfg, name: str, default: int) -> int:
    """mpbroker's own process keys are not in BROKER_CONFIGS yet: parse them here."""
    raw = cfg.get(name)
    if raw is None:
        return default
    try:
        return int(str(raw).strip())
    except ValueError:
        raise configmod.ConfigError(f"Invalid value {raw} for configuration {name}: Not a number of type INT")


# ============================================================================ channels
HEADER = struct.Struct("<I")
MAX_FRAME = 1 << 30


def encode(msg: Any) -> bytes:
    data = pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


class Link:
    """One end of a channel: framed messages in through `on_message`, out through a queue.

    Reads happen when the socket is readable (`attach` registers with an asyncio loop;
    `poll` waits with select, for callers without a running loop or that must block).
    Writes go through one ordered buffer; `flush` blocks until it is empty. File
    descriptors that arrive with SCM_RIGHTS queue in `fds` in arrival order."""

    def __init__(self, sock: socket.socket, on_message: Callable[[Any], None],
                 on_close: Callable[[], None] | None = None):
        sock.setblocking(False)
        self.sock = sock
        self.on_message = on_message
        self.on_close = on_close
        self.inbuf = bytearray()
        self.out = bytearray()
        self.fds: list[int] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self._writer = False

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        loop.add_reader(self.sock.fileno(), self.readable)
        self._arm_writer()

    def readable(self) -> None:
        if self.closed:
            return
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, 1 << 18, 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.debug("channel read failed: %s", e)
            data, fds = b"", []
        self.fds.extend(fds)
        if not data:
            self.close()
            return
        self.inbuf += data
        for msg in self._frames():
            self.on_message(msg)
            if self.closed:
                return

    def _frames(self):
        while len(self.inbuf) >= 4:
            (size,) = HEADER.unpack_from(self.inbuf)
            if size > MAX_FRAME:
                raise ValueError(f"channel frame of {size} bytes")
            if len(self.inbuf) < 4 + size:
                return
            payload = bytes(self.inbuf[4:4 + size])
            del self.inbuf[:4 + size]
            yield pickle.loads(payload)

    def take_fd(self) -> int:
        return self.fds.pop(0)

    def send(self, msg: Any, fds: list[int] = ()) -> None:
        if self.closed:
            raise ConnectionError("channel closed")
        data = encode(msg)
        if fds:
            self.flush()  # the fds must ride on the first byte of this frame
            sent = socket.send_fds(self.sock, [data], list(fds))
            data = data[sent:]
        self.out += data
        self._write()
        self._arm_writer()

    def _write(self) -> None:
        while self.out and not self.closed:
            try:
                n = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.debug("channel write failed: %s", e)
                self.close()
                return
            del self.out[:n]

    def _arm_writer(self) -> None:
        if self.loop is None or self.closed:
            return
        if self.out and not self._writer:
            self.loop.add_writer(self.sock.fileno(), self._on_writable)
            self._writer = True

    def _on_writable(self) -> None:
        self._write()
        if (not self.out or self.closed) and self._writer and self.loop is not None:
            if not self.closed:
                self.loop.remove_writer(self.sock.fileno())
            self._writer = False

    def flush(self, timeout: float = SYNC_CALL_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while self.out and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("channel write timed out")
            select.select([], [self.sock], [], left)
            self._write()

    def poll(self, timeout: float) -> None:
        if self.closed:
            return
        r, _, _ = select.select([self.sock], [], [], max(timeout, 0))
        if r:
            self.readable()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.loop is not None:
            try:
                self.loop.remove_reader(self.sock.fileno())
                if self._writer:
                    self.loop.remove_writer(self.sock.fileno())
            except (ValueError, OSError, RuntimeError):
                pass
        self.sock.close()
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()
        if self.on_close:
            self.on_close()


def _exception_for_wire(e: BaseException) -> BaseException:
    """Exceptions cross the channel by pickle; those that do not survive it become RuntimeError."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        from mpbroker.metadata.model import MetadataError
        if isinstance(e, MetadataError):
            return ControllerCallError(e.code, e.message)
        return RuntimeError(f"{type(e).__name__}: {e}")


class ControllerCallError(Exception):
    """A MetadataError raised in the controller process (code and message kept)."""

    def __init__(self, code: int, message: str):
        super().__init__(code, message)
        self.code, self.message = code, message


# ============================================================================ heartbeats
BOOTING, READY = 0, 1
CS_DONE = 2      # the controller slot: serving, and this broker's controlled shutdown is done
SLOT = struct.Struct("<qqd")   # pid, state, monotonic seconds of the last beat


class HeartbeatTable:
    """Shared anonymous memory (MAP_SHARED, inherited by fork): one slot per child.

    Slot 0 is the controller, slot 1 + i worker i. Each slot has one writer at a time:
    the supervisor resets it before the fork, then only the child writes it."""

    def __init__(self, slots: int):
        self.map = mmap.mmap(-1, SLOT.size * slots)

    def reset(self, slot: int, pid: int = 0) -> None:
        SLOT.pack_into(self.map, slot * SLOT.size, pid, BOOTING, time.monotonic())

    def beat(self, slot: int, state: int = READY) -> None:
        SLOT.pack_into(self.map, slot * SLOT.size, os.getpid(), state, time.monotonic())

    def read(self, slot: int) -> tuple[int, int, float]:
        return SLOT.unpack_from(self.map, slot * SLOT.size)


async def heartbeat_loop(table: HeartbeatTable, slot: int, interval_s: float,
                         state: Callable[[], int] = lambda: READY) -> None:
    while True:
        table.beat(slot, state())
        await asyncio.sleep(interval_s)


# ============================================================================ controller side
RPC_METHODS = frozenset({
    "create_topics", "delete_topics", "create_partitions", "alter_configs",
    "allocate_producer_id", "ensure_internal_topic", "register_broker",
    "alter_partition", "elect_leaders", "controlled_shutdown",
    "alter_partition_reassignments", "list_partition_reassignments", "controller_request",
    "log_dir_failed",
})


class ControllerService:
    """Serves the controller RPC to the workers and pushes metadata and config to them.

    Requests are {"id", "method", "args"}; replies {"op": "reply", "id", "ok"|"error"}.
    Pushes {"op": "md", "md"} and {"op": "cfg", "cfg"} go to every worker. A change is
    pushed before the reply to the request that made it, on the same ordered channel,
    so the requesting worker holds the new metadata when its call returns (as the
    in-process controller's direct `apply_metadata` call guaranteed)."""

    def __init__(self, controller, loop: asyncio.AbstractEventLoop):
        self.ctl = controller
        self.loop = loop
        self.links: dict[int, Link] = {}
        self.placement = None      # mpbroker.controller.placement.PlacementManager
        self._pushed_cfg = controller.broker_config()
        controller.workers = [self]   # _commit calls apply_metadata on each "worker"

    def add_worker(self, worker_id: int, sock: socket.socket) -> None:
        old = self.links.pop(worker_id, None)
        if old is not None:
            old.close()
        def closed():
            if self.links.get(worker_id) is link:
                self.links.pop(worker_id)
                if self.placement is not None:
                    self.placement.worker_lost(worker_id)
        link = Link(sock, lambda m: self.on_request(link, m), closed)
        self.links[worker_id] = link
        link.attach(self.loop)

    def apply_metadata(self, md) -> None:
        self._broadcast({"op": "md", "md": md})

    def _broadcast(self, msg) -> None:
        data = encode(msg)
        for link in list(self.links.values()):
            if not link.closed:
                link.out += data
                link._write()
                link._arm_writer()

    def push_config_if_changed(self) -> None:
        cfg = self.ctl.broker_config()
        if cfg is not self._pushed_cfg:
            self._pushed_cfg = cfg
            self._broadcast({"op": "cfg", "cfg": cfg})

    def reload(self, cfg) -> None:
        """SIGHUP: the static layer of the controller's config changes (dynamic keys only)."""
        self.ctl.cfg = cfg
        self.ctl._broker_cfg = cfg.with_dynamic(broker=self.ctl._dynamic["broker"],
                                                default=self.ctl._dynamic["default"])
        self.push_config_if_changed()

    def on_request(self, link: Link, msg: dict) -> None:
        rid, method = msg.get("id"), msg.get("method")
        if method == "hello":
            self._reply(link, rid, ok=(self.ctl.broker_id, self.ctl.metadata(),
                                       self.ctl.broker_config()))
            return
        if method in ("placement", "placement_applied", "worker_reply"):
            wid = next((w for w, l in self.links.items() if l is link), None)
            try:
                result = (self.placement.on_worker_message(wid, method, msg.get("args", ()))
                          if self.placement is not None else None)
            except Exception as e:      # never out of the channel's read callback
                log.warning("controller: %s from worker %s failed", method, wid, exc_info=e)
                if rid is not None:
                    self._reply(link, rid, error=_exception_for_wire(e))
                return
            if rid is not None:
                self._reply(link, rid, ok=result)
            return
        if method not in RPC_METHODS:
            self._reply(link, rid, error=RuntimeError(f"unknown controller method {method!r}"))
            return
        self.loop.create_task(self._call(link, rid, method, msg.get("args", ())))

    async def _call(self, link: Link, rid, method: str, args) -> None:
        try:
            result = getattr(self.ctl, method)(*args)
            if asyncio.iscoroutine(result):
                result = await result
        except Exception as e:
            # one line here; the worker answers the API's error code for it
            # (workers/handler_errors.py) and logs the request at INFO only
            log.warning("controller call %s failed: %s: %s", method, type(e).__name__, e,
                        exc_info=None if isinstance(e, OSError) or hasattr(e, "code") else e)
            self.push_config_if_changed()
            self._reply(link, rid, error=_exception_for_wire(e))
            return
        self.push_config_if_changed()
        self._reply(link, rid, ok=result)

    @staticmethod
    def _reply(link: Link, rid, **kw) -> None:
        if not link.closed:
            link.send({"op": "reply", "id": rid, **kw})


def run_controller(cfg, channels: "ControllerChannels", advertised: tuple[str, int],
                   heartbeats: HeartbeatTable, heartbeat_interval_s: float) -> int:
    """The controller process: the embedded controller (or, with `zookeeper.connect`, the
    ZooKeeper controller, mpbroker/controller/zk/) behind `ControllerService`."""
    from mpbroker.controller.embedded import EmbeddedController
    from workers import server
    proctitle.set_title("controller")
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the supervisor decides when we stop
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        if cfg.uses_zookeeper:
            from mpbroker.controller.zk import ZkController
            ctl = ZkController(cfg, advertised)
        else:
            ctl = EmbeddedController(cfg)
            ctl.register_broker(cfg.broker_id, *advertised)
    except configmod.ConfigError as e:
        print(f"mpbroker: {e}", file=sys.stderr)
        return CONTROLLER_BOOT_ERROR
    server.install_uvloop()
    beat_state = [READY]

    async def main() -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        if cfg.uses_zookeeper:
            try:
                await ctl.start(loop)
            except configmod.ConfigError as e:
                print(f"mpbroker: {e}", file=sys.stderr)
                ctl.close()
                return CONTROLLER_BOOT_ERROR
        service = ControllerService(ctl, loop)
        from mpbroker.controller.placement import PlacementManager
        service.placement = PlacementManager(cfg, service)
        await service.placement.serve_admin(cfg.admin_socket)
        service.placement.start_auto()      # placement.balance.interval.ms
        for wid, sock in channels.workers.items():
            service.add_worker(wid, sock)
        metrics = None
        if cfg["metrics.listener"]:
            from mpbroker.metrics_server import MetricsServer
            host, port = configmod.parse_http_listener(cfg["metrics.listener"])
            metrics = MetricsServer(host, port, loop, service.placement.ask_all, ctl)
            try:
                metrics.start()
            except OSError as e:
                print(f"mpbroker: cannot serve metrics on {cfg['metrics.listener']}: {e}",
                      file=sys.stderr)
                service.placement.close()
                ctl.close()
                return CONTROLLER_BOOT_ERROR

        def on_control(msg):
            if msg["op"] == "worker":
                service.add_worker(msg["worker"], socket.socket(fileno=control.take_fd()))
            elif msg["op"] == "reload":
                _apply_log_level(msg["config"])
                service.reload(msg["config"])
            elif msg["op"] == "controlled_shutdown":
                loop.create_task(controlled_shutdown())

        async def controlled_shutdown():
            try:
                if hasattr(ctl, "request_controlled_shutdown"):
                    await ctl.request_controlled_shutdown()
            except Exception:
                log.exception("controlled shutdown")
            beat_state[0] = CS_DONE
            heartbeats.beat(0, CS_DONE)

        control = Link(channels.control, on_control, stop.set)
        control.attach(loop)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        beat = loop.create_task(heartbeat_loop(heartbeats, 0, heartbeat_interval_s,
                                               lambda: beat_state[0]))
        await stop.wait()
        beat.cancel()
        if metrics is not None:
            metrics.close()
        service.placement.close()
        ctl.close()
        return 0

    return asyncio.run(main())


# ============================================================================ worker side
class ControllerClient:
    """The worker's `broker.controller`: the EmbeddedController's worker-facing API over
    the channel. `metadata()` and `broker_config()` answer from the copies the controller
    pushes; the coroutine methods are RPCs; `ensure_internal_topic`, which handlers call
    without await, is an RPC that blocks the worker's loop until the answer (and the
    metadata push before it) arrived."""

    def __init__(self, sock: socket.socket):
        self.link = Link(sock, self._on_message, self._on_close)
        self.broker_id: int | None = None
        self.md = None
        self.cfg = None
        self.placement = None      # the newest placement table pushed
        self.workers: list = []
        self._next_id = 0
        self._futures: dict[int, asyncio.Future] = {}
        self._sync: dict[int, tuple] = {}

    # ----------------------------------------------------------------- plumbing
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.link.attach(loop)

    def attach_worker(self, worker) -> None:
        self.workers.append(worker)

    def hello(self, timeout: float = SYNC_CALL_TIMEOUT_S) -> None:
        self.broker_id, self.md, self.cfg = self._call_sync("hello", (), timeout)

    def _on_message(self, msg: dict) -> None:
        op = msg["op"]
        if op == "md":
            if self.md is None or msg["md"].epoch > self.md.epoch:
                self.md = msg["md"]
            for w in self.workers:
                w.apply_metadata(msg["md"])
        elif op == "cfg":
            self.cfg = msg["cfg"]
        elif op == "placement":
            table = msg["table"]
            if self.placement is None or table.revision > self.placement.revision:
                self.placement = table
            for w in self.workers:
                w.apply_placement(table)
        elif op == "ask":        # the controller asks the worker (placement show/balance)
            result = None
            for w in self.workers:
                if msg.get("what") == "stats":
                    result = w.stats()
                    router = getattr(w, "router", None)
                    if router is not None:    # per-partition request counts (balancing)
                        result["partition_requests"] = router.request_counts()
                elif msg.get("what") == "metrics":     # the controller's /metrics
                    from workers.metrics import snapshot
                    result = snapshot(w)
            self.notify("worker_reply", (msg["rid"], result))
        elif op == "reply":
            rid = msg["id"]
            fut = self._futures.pop(rid, None)
            if fut is None:
                self._sync[rid] = (msg.get("ok"), msg.get("error"))
            elif not fut.done():
                if "error" in msg:
                    err = msg["error"]
                    try:    # the controller logged it (workers/handler_errors.py)
                        err.mpbroker_logged_elsewhere = True
                    except AttributeError:
                        pass
                    fut.set_exception(err)
                else:
                    fut.set_result(msg.get("ok"))

    def _on_close(self) -> None:
        for fut in self._futures.values():
            if not fut.done():
                fut.set_exception(ConnectionError("lost the controller"))
        self._futures.clear()
        log.error("lost the channel to the controller")

    def _request(self, method: str, args) -> int:
        self._next_id += 1
        self.link.send({"id": self._next_id, "method": method, "args": tuple(args)})
        return self._next_id

    def notify(self, method: str, args) -> None:
        """A one-way message to the controller (no reply)."""
        if not self.link.closed:
            self.link.send({"id": None, "method": method, "args": tuple(args)})

    def _call_sync(self, method: str, args, timeout: float = SYNC_CALL_TIMEOUT_S):
        rid = self._request(method, args)
        self._sync[rid] = None
        deadline = time.monotonic() + timeout
        self.link.flush(timeout)
        while self._sync.get(rid) is None:
            if self.link.closed:
                self._sync.pop(rid, None)
                raise ConnectionError("lost the controller")
            left = deadline - time.monotonic()
            if left <= 0:
                self._sync.pop(rid, None)
                raise TimeoutError(f"controller call {method} timed out")
            self.link.poll(left)
        ok, error = self._sync.pop(rid)
        if error is not None:
            raise error
        return ok

    async def _call(self, method: str, args):
        fut = asyncio.get_running_loop().create_future()
        rid = self._request(method, args)
        self._futures[rid] = fut
        return await fut

    # ----------------------------------------------------------------- the controller API
    def metadata(self):
        return self.md

    def broker_config(self):
        return self.cfg

    async def ensure_internal_topic(self, name: str) -> None:
        await self._call("ensure_internal_topic", (name,))

    async def create_topics(self, specs, validate_only, timeout_ms, quota=None):
        return await self._call("create_topics", (specs, validate_only, timeout_ms, quota))

    async def delete_topics(self, targets, timeout_ms, quota=None):
        return await self._call("delete_topics", (targets, timeout_ms, quota))

    async def create_partitions(self, specs, validate_only, timeout_ms, quota=None):
        return await self._call("create_partitions", (specs, validate_only, timeout_ms, quota))

    async def alter_configs(self, resources, incremental, validate_only):
        return await self._call("alter_configs", (resources, incremental, validate_only))

    async def allocate_producer_id(self) -> int:
        return await self._call("allocate_producer_id", ())

    async def register_broker(self, broker_id, host, port, rack=None) -> None:
        return await self._call("register_broker", (broker_id, host, port, rack))

    async def alter_partition(self, topic, partition, leader_id, leader_epoch, partition_epoch, new_isr):
        return await self._call("alter_partition", (topic, partition, leader_id, leader_epoch,
                                                    partition_epoch, tuple(new_isr)))

    async def elect_leaders(self, election_type, partitions):
        return await self._call("elect_leaders", (election_type, partitions))

    async def controlled_shutdown(self, broker_id, broker_epoch=-1):
        return await self._call("controlled_shutdown", (broker_id, broker_epoch))

    async def alter_partition_reassignments(self, moves):
        return await self._call("alter_partition_reassignments", (moves,))

    async def list_partition_reassignments(self, partitions):
        return await self._call("list_partition_reassignments", (partitions,))

    async def controller_request(self, api_key, version, body):
        return await self._call("controller_request", (api_key, version, body))

    async def log_dir_failed(self, partitions):
        return await self._call("log_dir_failed", (list(partitions),))

    def close(self) -> None:
        self.link.close()


@dataclass
class WorkerChannels:
    control: socket.socket                      # from the supervisor
    controller: socket.socket                   # the controller RPC
    peers: dict[int, socket.socket] = field(default_factory=dict)   # worker id -> mesh socket
    on_peer_replaced: Callable[[int, socket.socket], None] | None = None
    listener: socket.socket | None = None       # bound, not listening (the supervisor's)
    connections: Any = None     # workers/connection_quotas.ConnectionTable (shared counts)


@dataclass
class ControllerChannels:
    control: socket.socket
    workers: dict[int, socket.socket] = field(default_factory=dict)


def _apply_log_level(cfg) -> None:
    level = getattr(logging, str(cfg.get("log.level", "INFO")).upper(), None)
    if isinstance(level, int):
        logging.getLogger().setLevel(level)


def apply_worker_config(broker, cfg) -> None:
    """SIGHUP in a worker: the new static config; open logs take the new topic defaults."""
    hook = getattr(broker, "reload_config", None)
    if hook is not None:
        hook(cfg)
        return
    broker.config = cfg
    md = broker.metadata
    for (topic, _), p in list(broker.partitions.items()):
        t = md.topics.get(topic) if md is not None else None
        if t is not None:
            p.log.config = broker.log_config(t.configs)


def run_worker(cfg, worker_id: int, channels: WorkerChannels, listen: tuple[str, int],
               heartbeats: HeartbeatTable, heartbeat_interval_s: float,
               grace_s: float = 5.0) -> int:
    """A worker process: today's single-worker runtime (`workers.server.run` on a Broker),
    with `broker.controller` the RPC client of the controller process."""
    from workers import server
    from workers.broker import Broker
    from workers.router import Router
    proctitle.set_title(f"worker {worker_id}")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)     # reloads come over the control channel

    def stop_while_booting(signum, frame):
        # A stop that arrives before the loop serves (the loop installs its own handlers):
        # nothing is served yet, so leave at once (exit 0: a stop, not a failure).
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, stop_while_booting)
    signal.signal(signal.SIGINT, stop_while_booting)
    client = ControllerClient(channels.controller)
    try:
        client.hello()
        table = client._call_sync("placement", ())   # before any log is opened
        if client.placement is not None and (table is None or
                                             client.placement.revision > table.revision):
            table = client.placement
        broker = Broker(cfg, client, worker_id=worker_id)
        if table is not None:
            broker.placement = table
        # the mesh: one PeerLink per other worker; a respawned peer's new socket replaces it
        router = broker.router = Router(broker)
        for wid, peer_sock in channels.peers.items():
            router.add_peer(wid, peer_sock)
        channels.on_peer_replaced = router.add_peer
        broker.on_placement_applied = lambda rev: client.notify(
            "placement_applied", (worker_id, rev))
        client.attach_worker(broker)
        if channels.listener is not None:
            sock = channels.listener      # the supervisor keeps a handle (eviction)
            sock.setblocking(False)
            sock.listen(LISTEN_BACKLOG)   # now in the reuseport group: we can serve
        else:
            sock = server.bind_listener(*listen)
    except Exception as e:
        log.error("worker %d failed to boot: %s", worker_id, e, exc_info=True)
        return WORKER_BOOT_ERROR
    server.install_uvloop()
    state = {"ready": False}

    async def main() -> int:
        loop = asyncio.get_running_loop()
        client.attach(loop)

        def on_control(msg):
            if msg["op"] == "reload":
                _apply_log_level(msg["config"])
                apply_worker_config(broker, msg["config"])
                cur = client.cfg
                if cur is not None:
                    # what the controller will push: the new static layer under the same
                    # dynamic ones (answers DescribeConfigs right away, not after the push)
                    client.cfg = msg["config"].with_dynamic(broker=cur.dynamic_broker,
                                                            default=cur.dynamic_default)
            elif msg["op"] == "peer":
                peer = socket.socket(fileno=control.take_fd())
                old = channels.peers.get(msg["worker"])
                channels.peers[msg["worker"]] = peer
                if channels.on_peer_replaced:
                    channels.on_peer_replaced(msg["worker"], peer)
                if old is not None:
                    old.close()

        def lost_supervisor():
            log.error("worker %d lost its supervisor: stopping", worker_id)
            os.kill(os.getpid(), signal.SIGTERM)

        control = Link(channels.control, on_control, lost_supervisor)
        control.attach(loop)

        def ready():
            state["ready"] = True
            client.notify("placement_applied", (worker_id, broker.placement.revision))
            heartbeats.beat(1 + worker_id)
            log_recovery(worker_id, broker)
            log.info("worker %d (pid %d) serving on %s:%d", worker_id, os.getpid(), *listen)
            loop.create_task(heartbeat_loop(heartbeats, 1 + worker_id, heartbeat_interval_s))

        return await server.run(broker, sock, cfg["socket.request.max.bytes"],
                                on_ready=ready, grace_s=grace_s,
                                connection_table=channels.connections, worker_id=worker_id)

    try:
        return asyncio.run(main())
    except Exception as e:
        if not state["ready"]:
            log.error("worker %d failed to boot: %s", worker_id, e, exc_info=True)
            return WORKER_BOOT_ERROR
        raise


def log_recovery(worker_id: int, broker) -> None:
    """What opening this worker's logs took: Kafka's LogManager says whether it skipped
    recovery (clean-shutdown marker found) or recovered; here per worker, counted."""
    hosted = list(broker.partitions.values()) + list(broker.followers.values())
    recovered = sorted(f"{p.topic}-{p.index}" for p in hosted if p.log.recovered)
    log.info("worker %d: skipped recovery of %d logs (clean shutdown), recovered %d logs%s",
             worker_id, len(hosted) - len(recovered), len(recovered),
             f" ({', '.join(recovered[:10])}{', ...' if len(recovered) > 10 else ''})"
             if recovered else "")


# ============================================================================ supervisor
@dataclass
class Child:
    pid: int
    kind: str                 # "controller" | "worker"
    worker_id: int            # -1 for the controller
    slot: int
    link: Link                # the supervisor's end of the control channel (write only)
    started: float
    ready: bool = False
    killed: str | None = None
    listener: socket.socket | None = None   # the worker's client socket (shared handle)
    evicted: float | None = None            # out of the listener group since (monotonic)


SIGNAMES = {signal.SIGTERM: "term", signal.SIGINT: "int", signal.SIGHUP: "hup",
            signal.SIGCHLD: "chld"}


class Supervisor:
    def __init__(self, cfg, *, load_config: Callable[[], Any] | None = None,
                 worker_target: Callable[..., int] = run_worker,
                 controller_target: Callable[..., int] = run_controller,
                 notifier: sdnotify.Notifier | None = None):
        self.cfg = cfg
        self.load_config = load_config
        self.worker_target = worker_target
        self.controller_target = controller_target
        self.notifier = notifier if notifier is not None else sdnotify.Notifier.from_env()
        self.read_settings(cfg)
        self.children: dict[int, Child] = {}
        self.by_worker: dict[int, Child] = {}
        self.controller: Child | None = None
        self.respawn_at: dict[int, float] = {}
        self.boot_failures: dict[int, int] = {}
        self.deaths: list[float] = []
        self.announced = False
        self.stopping = False
        self.stop_notified = False
        self.sig_queue: list[int] = []
        self.reserve: socket.socket | None = None
        self.listen = ("0.0.0.0", 0)
        self.advertised = ("127.0.0.1", 0)
        self.held: set[socket.socket] = set()      # channel ends this process holds
        self.heartbeats: HeartbeatTable | None = None
        self.connection_table = None    # max.connections* counts of every worker
        self.last_watchdog = 0.0
        self.pipe: tuple[int, int] | None = None

    # ------------------------------------------------------------------ settings
    def read_settings(self, cfg) -> None:
        n = cfg.num_workers
        if n > 1 and not MULTI_WORKER_ROUTING:
            log.info("num.workers=%d: running 1 worker until cross-worker routing is built", n)
            n = 1
        self.num_workers = n
        self.pin = bool(cfg["worker.cpu.affinity"])
        self.heartbeat_timeout_s = int_key(cfg, "worker.heartbeat.timeout.ms",
                                           DEFAULTS_MS["worker.heartbeat.timeout.ms"]) / 1000
        self.eviction_s = int_key(cfg, "worker.listener.eviction.ms",
                                  DEFAULTS_MS["worker.listener.eviction.ms"]) / 1000
        self.shutdown_timeout_s = int_key(cfg, "worker.shutdown.timeout.ms",
                                          DEFAULTS_MS["worker.shutdown.timeout.ms"]) / 1000
        self.boot_max_failures = int_key(cfg, "worker.boot.max.failures", DEFAULT_BOOT_MAX_FAILURES)
        self.restart_max = int_key(cfg, "worker.restart.max", DEFAULT_RESTART_MAX)
        self.restart_window_s = int_key(cfg, "worker.restart.window.ms",
                                        DEFAULTS_MS["worker.restart.window.ms"]) / 1000
        self.start_timeout_s = int_key(cfg, "worker.start.timeout.ms",
                                       DEFAULT_START_TIMEOUT_MS) / 1000
        self.beat_interval_s = max(0.05, min(1.0, self.heartbeat_timeout_s / 4,
                                             self.eviction_s / 4 if self.eviction_s else 1.0))
        self.watchdog_s = sdnotify.watchdog_usec() / 2e6

    def bind(self, host: str, port: int, adv_host: str, adv_port: int) -> int:
        """Reserve the client port (bound, not listening: the kernel hands connections only
        to the workers' listening SO_REUSEPORT sockets) for the supervisor's lifetime, so
        that a respawned worker finds it free and port 0 resolves once for all workers."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        if port != 0:
            # SO_REUSEPORT would let us share a port that another broker (of the same
            # user) already listens on, and the kernel would then spread connections over
            # both brokers. A plain bind first fails with EADDRINUSE in that case, as
            # Kafka's own bind would.
            probe = socket.socket(family, socket.SOCK_STREAM)
            try:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((host, port))
            finally:
                probe.close()
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        self.reserve = sock
        bound = sock.getsockname()[1]
        self.listen = (host, bound)
        if adv_port == 0 or adv_port == port:
            adv_port = bound
        if adv_host in ("0.0.0.0", "::", ""):
            adv_host = "127.0.0.1"
        self.advertised = (adv_host, adv_port)
        return bound

    # ------------------------------------------------------------------ main loop
    def run(self) -> int:
        self.heartbeats = HeartbeatTable(1 + self.num_workers)
        from workers.connection_quotas import ConnectionTable
        self.connection_table = ConnectionTable(self.num_workers)
        self.install_signals()
        self.notifier.status("starting")
        try:
            try:
                self.start()
                while True:
                    self.step()
            except SupervisorError as e:
                if e.rc == 1:
                    log.error("%s", e)
                    print(f"mpbroker: {e}", file=sys.stderr)
                rc = self.stop(graceful=e.graceful, reason=str(e))
                return e.rc if e.rc else rc
        finally:
            self.restore_signals()
            if self.reserve is not None:
                self.reserve.close()

    def step(self) -> None:
        self.sleep()
        while self.sig_queue:
            name = SIGNAMES.get(self.sig_queue.pop(0))
            if name:
                getattr(self, f"handle_{name}")()
        self.reap_children()
        self.murder_hung()
        self.manage_workers()
        self.maybe_announce()
        self.ping_watchdog()

    def sleep(self, timeout: float | None = None) -> None:
        if timeout is None:
            timeout = min(0.5, self.beat_interval_s)
            if self.watchdog_s:
                timeout = min(timeout, self.watchdog_s)
        try:
            r, _, _ = select.select([self.pipe[0]], [], [], timeout)
            if r:
                while os.read(self.pipe[0], 4096):
                    pass
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EINTR):
                raise
        self.ping_watchdog()      # every wait, also those of a stop (they are bounded)

    # ------------------------------------------------------------------ signals
    def install_signals(self) -> None:
        self.pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_wakeup = signal.set_wakeup_fd(self.pipe[1])
        self._old_handlers = {s: signal.signal(s, self._queue_signal) for s in SIGNAMES}

    def _queue_signal(self, signum, frame) -> None:
        # Only queue; the main loop does the work (and the wakeup fd ends its select).
        if signum != signal.SIGCHLD and len(self.sig_queue) < 5:
            self.sig_queue.append(signum)

    def restore_signals(self) -> None:
        for s, h in getattr(self, "_old_handlers", {}).items():
            signal.signal(s, h)
        signal.set_wakeup_fd(getattr(self, "_old_wakeup", -1))
        if self.pipe:
            for fd in self.pipe:
                os.close(fd)
            self.pipe = None

    def handle_term(self) -> None:
        self.notify_stopping("SIGTERM: controlled shutdown")
        if self.cfg.uses_zookeeper and self.cfg["controlled.shutdown.enable"]:
            self.cluster_controlled_shutdown()
        raise SupervisorError(0, "SIGTERM: controlled shutdown")

    def cluster_controlled_shutdown(self) -> None:
        """Cluster mode: the controller process asks the active controller to move this
        broker's leaderships (ControlledShutdown, with its retries) and marks its heartbeat
        slot CS_DONE; the workers keep serving meanwhile. Bounded by the retry settings."""
        ctl = self.controller
        if ctl is None or not ctl.ready:
            return
        retries = max(1, self.cfg["controlled.shutdown.max.retries"])
        backoff_s = self.cfg["controlled.shutdown.retry.backoff.ms"] / 1000
        deadline = time.monotonic() + retries * (backoff_s + CONTROLLED_SHUTDOWN_ATTEMPT_S)
        self.notifier.status("controlled shutdown")
        try:
            ctl.link.send({"op": "controlled_shutdown"})
            ctl.link.flush(2.0)
        except (OSError, TimeoutError) as e:
            log.warning("controlled shutdown: %s", e)
            return
        while time.monotonic() < deadline:
            self.sleep(0.05)
            if signal.SIGINT in self.sig_queue:
                return
            if self.heartbeats.read(0)[1] == CS_DONE or self.controller is None:
                return
            self.reap_children()
        log.warning("controlled shutdown did not finish in time")

    def handle_int(self) -> None:
        raise SupervisorError(0, "SIGINT: fast stop", graceful=False)

    def notify_stopping(self, status: str) -> None:
        """STOPPING=1 once, with the worst case of the stop as EXTEND_TIMEOUT_USEC."""
        if self.stop_notified:
            return
        self.stop_notified = True
        self.notifier.stopping(status=status,
                               extend_timeout_usec=int(stop_budget_s(self.cfg) * 1e6))

    def handle_chld(self) -> None:
        pass

    def handle_hup(self) -> None:
        self.notifier.reloading()
        try:
            self.reload()
        finally:
            if self.announced:
                self.notifier.ready(status=self.status_text())

    # ------------------------------------------------------------------ spawning
    def start(self) -> None:
        """Make every channel, fork the controller, wait until it serves, fork the workers."""
        from workers.handlers.alter_replica_log_dirs import recover_moves
        try:
            recover_moves(self.cfg.log_dirs)    # log dir moves a crash interrupted
        except Exception:
            log.exception("finishing interrupted log dir moves")
        ctl_pairs = {wid: socket.socketpair() for wid in range(self.num_workers)}
        mesh = {(i, j): socket.socketpair() for i in range(self.num_workers)
                for j in range(i + 1, self.num_workers)}
        for pair in list(ctl_pairs.values()) + list(mesh.values()):
            self.held.update(pair)
        self.spawn_controller({wid: pair[0] for wid, pair in ctl_pairs.items()})
        self.wait_controller_ready()
        for wid in range(self.num_workers):
            peers = {}
            for (i, j), (a, b) in mesh.items():
                if i == wid:
                    peers[j] = a
                elif j == wid:
                    peers[i] = b
            self.spawn_worker(wid, ctl_pairs[wid][1], peers)

    def wait_controller_ready(self) -> None:
        while True:
            self.sleep(0.02)
            for signum in self.sig_queue:
                if signum in (signal.SIGTERM, signal.SIGINT):
                    raise SupervisorError(0, "stopped while starting")
            self.reap_children()
            if self.controller is None:
                continue        # reap_children raised if it died
            if self.heartbeats.read(0)[1] == READY:
                self.controller.ready = True
                return

    def spawn_controller(self, worker_ends: dict[int, socket.socket]) -> None:
        sup_end, child_end = socket.socketpair()
        self.held.update((sup_end, child_end))
        channels = ControllerChannels(child_end, dict(worker_ends))
        self.heartbeats.reset(0)
        pid = self._fork(keep={child_end, *worker_ends.values()},
                         target=lambda: self.controller_target(
                             self.cfg, channels, self.advertised, self.heartbeats,
                             self.beat_interval_s))
        for s in (child_end, *worker_ends.values()):
            self._release(s)
        self.controller = Child(pid, "controller", -1, 0, Link(sup_end, _ignore),
                                time.monotonic())
        self.children[pid] = self.controller
        log.info("controller started (pid %d)", pid)

    def spawn_worker(self, wid: int, controller_end: socket.socket | None = None,
                     peers: dict[int, socket.socket] | None = None) -> None:
        """Fork worker `wid`. On a respawn (no ends given) the channels are made fresh and
        the other ends go to the controller and the live workers with SCM_RIGHTS."""
        if controller_end is None:
            controller_end, ctl_side = socket.socketpair()
            self.held.update((controller_end, ctl_side))
            self._send_fd(self.controller.link, {"op": "worker", "worker": wid}, ctl_side)
            peers = {}
            for other in self.by_worker.values():
                mine, theirs = socket.socketpair()
                self.held.update((mine, theirs))
                peers[other.worker_id] = mine
                self._send_fd(other.link, {"op": "peer", "worker": wid}, theirs)
        sup_end, child_end = socket.socketpair()
        self.held.update((sup_end, child_end))
        listener = self.worker_listener()
        channels = WorkerChannels(child_end, controller_end, dict(peers or {}),
                                  listener=listener, connections=self.connection_table)
        slot = 1 + wid
        self.heartbeats.reset(slot)
        if self.connection_table is not None:
            self.connection_table.reset(wid)      # a dead worker's connections are gone
        pid = self._fork(keep={child_end, controller_end, listener, *channels.peers.values()},
                         target=lambda: self._worker_child(wid, channels))
        for s in (child_end, controller_end, *channels.peers.values()):
            self._release(s)
        child = Child(pid, "worker", wid, slot, Link(sup_end, _ignore), time.monotonic(),
                      listener=listener)
        self.children[pid] = child
        self.by_worker[wid] = child
        log.info("worker %d started (pid %d)", wid, pid)

    def worker_listener(self) -> socket.socket | None:
        """A worker's client socket: bound to the client port with SO_REUSEPORT, not yet
        listening (the worker listens once it can serve, so a booting worker is not handed
        connections). Held here too, so that a stalled worker can be taken out."""
        if self.reserve is None:
            return None
        family = socket.AF_INET6 if ":" in self.listen[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(self.listen)
        except OSError:
            sock.close()
            raise
        self.held.add(sock)
        return sock

    def _worker_child(self, wid: int, channels: WorkerChannels) -> int:
        if self.pin:
            pin_to_core(wid)
        grace_s = max(0.5, min(5.0, self.shutdown_timeout_s / 2))
        return self.worker_target(self.cfg, wid, channels, self.listen, self.heartbeats,
                                  self.beat_interval_s, grace_s)

    def _send_fd(self, link: Link, msg: dict, sock: socket.socket) -> None:
        try:
            link.send(msg, fds=[sock.fileno()])
            link.flush(2.0)
        except (OSError, TimeoutError) as e:
            log.warning("handing over a channel (%s) failed: %s", msg, e)
        finally:
            self._release(sock)

    def _release(self, sock: socket.socket) -> None:
        self.held.discard(sock)
        sock.close()

    def _fork(self, keep: set, target: Callable[[], int]) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            self._in_child(keep)
            code = target()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            log.exception("child process failed")
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
                logging.shutdown()
            finally:
                os._exit(code if isinstance(code, int) else 1)

    def _in_child(self, keep: set) -> None:
        for s, h in self._old_handlers.items():
            signal.signal(s, signal.SIG_DFL if s != signal.SIGCHLD else h)
        signal.set_wakeup_fd(-1)
        os.close(self.pipe[0])
        os.close(self.pipe[1])
        for s in self.held - keep:
            s.close()
        for c in self.children.values():
            c.link.sock.close()
        if self.reserve is not None:
            self.reserve.close()
        self.notifier.close()
        os.environ.pop(sdnotify.ENV_SOCKET, None)
        os.environ.pop(sdnotify.ENV_WATCHDOG_USEC, None)
        os.environ.pop(sdnotify.ENV_WATCHDOG_PID, None)

    # ------------------------------------------------------------------ reaping and murdering
    def reap_children(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is not None:
                self.child_exited(child, os.waitstatus_to_exitcode(status))

    def child_exited(self, child: Child, code: int) -> None:
        self.check_ready(child)    # it may have served since the loop last looked
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if child.killed:
            how += f" ({child.killed})"
        self.held.discard(child.link.sock)
        child.link.close()
        if child.listener is not None:
            # our handle would keep a dead worker's socket in the group: a black hole
            self._release(child.listener)
            child.listener = None
        if child.kind == "controller":
            self.controller = None
            if self.stopping:
                return
            if code == CONTROLLER_BOOT_ERROR:
                raise SupervisorError(2, "the controller failed to start (see above)")
            raise SupervisorError(1, f"the controller (pid {child.pid}) {how}; stopping")
        if self.by_worker.get(child.worker_id) is child:
            del self.by_worker[child.worker_id]
        if self.stopping:
            return
        if code == LOG_DIR_FAILURE_EXIT:
            # no log dir left (workers/broker.py fail_log_dir): Kafka halts the broker
            raise SupervisorError(1, f"worker {child.worker_id} (pid {child.pid}): its log "
                                     f"dir failed (see above); stopping")
        now = time.monotonic()
        wid = child.worker_id
        if not child.ready:
            n = self.boot_failures[wid] = self.boot_failures.get(wid, 0) + 1
            log.error("worker %d (pid %d) %s before it served (boot failure %d of %d)",
                      wid, child.pid, how, n, self.boot_max_failures)
            if n >= self.boot_max_failures:
                raise SupervisorError(1, f"worker {wid} failed to boot {n} times in a row "
                                         f"(last: {how}); giving up")
            self.respawn_at[wid] = now + min(5.0, 0.25 * 2 ** (n - 1))
            return
        self.deaths = [t for t in self.deaths if now - t < self.restart_window_s] + [now]
        log.error("worker %d (pid %d) %s; respawning", wid, child.pid, how)
        if len(self.deaths) > self.restart_max:
            raise SupervisorError(1, f"crash loop: {len(self.deaths)} worker deaths within "
                                     f"{self.restart_window_s:g}s; giving up")
        self.respawn_at[wid] = now
        self.notifier.status(self.status_text())

    def check_ready(self, child: Child) -> float | None:
        """The time of the child's last beat once it serves, else None."""
        pid, state, last = self.heartbeats.read(child.slot)
        if state not in (READY, CS_DONE) or pid != child.pid:
            return None
        if not child.ready:
            child.ready = True
            if child.kind == "worker":
                self.boot_failures.pop(child.worker_id, None)
                self.notifier.status(self.status_text())
        return last

    def murder_hung(self) -> None:
        now = time.monotonic()
        for child in list(self.children.values()):
            if child.killed is not None:
                continue
            last = self.check_ready(child)
            if last is None:
                if child.kind == "worker" and now - child.started > self.start_timeout_s:
                    self.murder(child, f"did not serve within {self.start_timeout_s:g}s "
                                       f"of its start")
            elif now - last > self.heartbeat_timeout_s:
                self.murder(child, f"no heartbeat for {now - last:.1f}s")
            elif child.kind == "worker":
                self.check_listener(child, now, now - last)

    def check_listener(self, child: Child, now: float, age: float) -> None:
        """A worker beating late leaves the listener group; back when it beats again."""
        if child.listener is None or not self.eviction_s or self.stopping \
                or self.eviction_s >= self.heartbeat_timeout_s:
            return
        if child.evicted is None and age > self.eviction_s:
            try:
                child.listener.shutdown(socket.SHUT_RD)
            except OSError as e:
                log.warning("worker %d: taking its listener out failed: %s", child.worker_id, e)
                return
            child.evicted = now
            log.warning("worker %d missed heartbeats for %d ms: taken out of the listener "
                        "group", child.worker_id, age * 1000)
        elif child.evicted is not None and age < self.eviction_s:
            try:
                child.listener.listen(LISTEN_BACKLOG)
            except OSError as e:
                log.warning("worker %d: putting its listener back failed: %s",
                            child.worker_id, e)
                return
            log.info("worker %d beats again after %d ms out of the listener group: back in",
                     child.worker_id, (now - child.evicted) * 1000)
            child.evicted = None

    def murder(self, child: Child, why: str) -> None:
        child.killed = why
        log.error("%s %s (pid %d) hung: %s; killing it", child.kind,
                  "" if child.worker_id < 0 else child.worker_id, child.pid, why)
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def manage_workers(self) -> None:
        now = time.monotonic()
        for wid in range(self.num_workers):
            if wid in self.by_worker:
                continue
            if self.respawn_at.get(wid, 0) <= now:
                self.respawn_at.pop(wid, None)
                self.spawn_worker(wid)

    def maybe_announce(self) -> None:
        if self.announced:
            return
        if len(self.by_worker) == self.num_workers and all(c.ready for c in self.by_worker.values()):
            self.announced = True
            log.info("mpbroker started: broker.id=%s listening on %s:%d, data in %s",
                     self.cfg.broker_id, self.listen[0], self.listen[1], self.cfg.log_dirs[0])
            self.notifier.ready(status=self.status_text())

    def status_text(self) -> str:
        ready = sum(1 for c in self.by_worker.values() if c.ready)
        return (f"serving on {self.listen[0]}:{self.listen[1]}: "
                f"{ready}/{self.num_workers} workers ready")

    def ping_watchdog(self) -> None:
        if not self.watchdog_s:
            return
        now = time.monotonic()
        if now - self.last_watchdog >= self.watchdog_s:
            self.last_watchdog = now
            self.notifier.watchdog()

    # ------------------------------------------------------------------ reload
    def reload(self) -> None:
        if self.load_config is None:
            log.warning("SIGHUP: no config file to reload")
            return
        try:
            new = self.load_config()
        except (configmod.ConfigError, OSError) as e:
            log.error("SIGHUP: the config was not reloaded: %s", e)
            return
        for name in new.unknown:
            log.warning("SIGHUP: %s", configmod.unknown_config_warning(name))
        applied, needs_restart = merge_reload(self.cfg, new)
        if needs_restart:
            log.warning("SIGHUP: %s changed; these take effect after a restart",
                        ", ".join(needs_restart))
        changed = sorted(k for k in set(applied.static) | set(self.cfg.static)
                         if applied.static.get(k) != self.cfg.static.get(k))
        self.cfg = applied
        _apply_log_level(applied)
        msg = {"op": "reload", "config": applied}
        for child in list(self.children.values()):
            try:
                child.link.send(msg)
                child.link.flush(2.0)
            except (OSError, TimeoutError) as e:
                log.warning("SIGHUP: could not reach %s %d: %s", child.kind, child.pid, e)
        log.info("SIGHUP: config reloaded (%s)", ", ".join(changed) or "no changes")

    # ------------------------------------------------------------------ stopping
    def stop(self, graceful: bool, reason: str = "") -> int:
        """Workers first (they may still need the controller), then the controller."""
        if self.stopping:
            return 1
        self.stopping = True
        self.notify_stopping(reason or "stopping")
        log.info("stopping (%s)", reason or ("graceful" if graceful else "fast"))
        clean = True
        workers = [c for c in self.children.values() if c.kind == "worker"]
        for c in workers:
            if c.listener is not None:    # a stopping worker's close leaves the group
                self._release(c.listener)
                c.listener = None
        timeout = self.shutdown_timeout_s if graceful else min(5.0, self.shutdown_timeout_s)
        clean &= self._stop_children(workers, signal.SIGTERM if graceful else signal.SIGINT,
                                     timeout, escalate_on_int=graceful)
        if self.controller is not None:
            clean &= self._stop_children([self.controller], signal.SIGTERM, 5.0)
        log.info("stopped%s", "" if clean else " (some children did not stop cleanly)")
        return 0 if clean else 1

    def _stop_children(self, children: list[Child], sig: int, timeout: float,
                       escalate_on_int: bool = False) -> bool:
        codes: dict[int, int] = {}
        pids = {c.pid for c in children}
        for pid in pids:
            _signal(pid, sig)
        deadline = time.monotonic() + timeout
        while pids - codes.keys() and time.monotonic() < deadline:
            self.sleep(0.05)
            if escalate_on_int and signal.SIGINT in self.sig_queue:
                self.sig_queue.clear()
                log.info("SIGINT during shutdown: fast stop")
                for pid in pids - codes.keys():
                    _signal(pid, signal.SIGINT)
                deadline = min(deadline, time.monotonic() + 5.0)
            self.sig_queue.clear()
            codes.update(self._reap_some(pids - codes.keys()))
        for pid in pids - codes.keys():
            log.error("pid %d did not stop within %.1fs: killing it", pid, timeout)
            _signal(pid, signal.SIGKILL)
            try:
                _, status = os.waitpid(pid, 0)
                codes[pid] = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                codes[pid] = -signal.SIGKILL
        for pid in pids:
            child = self.children.pop(pid, None)
            if codes[pid] != 0:
                log.warning("%s (pid %d) stopped with exit code %d",
                            child.kind if child else "child", pid, codes[pid])
            if child is not None:
                self.child_exited(child, codes[pid])
        return all(code == 0 for code in codes.values())

    def _reap_some(self, pids: set[int]) -> dict[int, int]:
        out = {}
        for pid in pids:
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:    # reaped elsewhere: its status is lost
                out[pid] = -1
                continue
            if got:
                out[pid] = os.waitstatus_to_exitcode(status)
        return out


def _ignore(msg) -> None:
    pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def pin_to_core(worker_id: int) -> None:
    """Worker i runs on the i-th CPU this process may use (wrapping around)."""
    try:
        import psutil
        cores = sorted(os.sched_getaffinity(0))
        core = cores[worker_id % len(cores)]
        psutil.Process().cpu_affinity([core])
        log.debug("worker %d pinned to CPU %d", worker_id, core)
    except Exception as e:       # an unsupported platform must not stop the broker
        log.warning("worker %d: cannot pin to a CPU: %s", worker_id, e)


def merge_reload(current, new):
    """SIGHUP: the config to run with, and the changed keys that need a restart.

    Dynamic keys (those AlterConfigs may change) and `log.level` take their new value;
    other changed keys keep the running value until a restart."""
    applied = dict(current.static)
    needs_restart = []
    for key in sorted(set(current.static) | set(new.static)):
        old_v, new_v = current.static.get(key), new.static.get(key)
        if old_v == new_v:
            continue
        spec = configmod.BROKER_CONFIGS.get(key)
        if spec is None and not key.startswith(configmod.PLACEMENT_PREFIX):
            continue        # unknown (warned about by the caller) or ignored: nothing to restart
        if key == "log.level" or (spec is not None and spec.dynamic):
            if new_v is None:
                applied.pop(key, None)
            else:
                applied[key] = new_v
        else:
            needs_restart.append(key)
    merged = configmod.BrokerConfig(applied, dynamic_broker=current.dynamic_broker,
                                    dynamic_default=current.dynamic_default,
                                    cpu_count=current._cpu_count, cwd=current._cwd)
    return merged, needs_restart
