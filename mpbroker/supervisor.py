"""The supervisor: the pre-fork arbiter of mpbroker (ARCHITECTURE §1; gunicorn's arbiter).

Processes: the controller (mpbroker/controller_main.py: the one writer of cluster
metadata) and one worker per core (workers/main.py: `num.workers`, each pinned to its
CPU when `worker.cpu.affinity` is set), all forked (no exec). Channels: AF_UNIX socket pairs made here
before the fork that hands each end to its process, framed by mpbroker/ipc.py. The
supervisor only writes to its children ("control": config reloads, a respawned worker's
new channel ends passed with SCM_RIGHTS); a child that reads EOF there has lost its
supervisor and stops. Each worker talks to the controller (mpbroker/controller_rpc.py)
and to every other worker (the mesh, workers/mesh.py); this module makes, hands over
and replaces those sockets.

Heartbeats (mpbroker/heartbeats.py): a child marks its slot READY once it serves, then
beats every `min(timeout, eviction)/4` (at most 1 s) from its event loop. The supervisor
kills (SIGKILL) a READY child whose beat is older than `worker.heartbeat.timeout.ms`: a
loop that is blocked or a process that is stopped stops beating.

Listeners (mpbroker/reuseport.py): the supervisor makes each worker's client socket
(SO_REUSEPORT, not listening) before the fork and keeps its own handle of it; the worker
listens once it can serve. A READY worker whose beat is older than
`worker.listener.eviction.ms` (3 s; below the heartbeat timeout) is taken out of the
group: the supervisor `shutdown()`s the shared socket, so the kernel hands new
connections to the other workers only (connections still queued on it are reset and the
client reconnects, or with the `net.ipv4.tcp_migrate_req` sysctl move to another
worker's queue), with a WARNING; when its beats come back, `listen()` again (INFO). Its
own established connections are untouched; after `worker.heartbeat.timeout.ms` it is
killed as before. A booting worker does not beat (log recovery runs before its loop); it
is killed when it has not served `worker.start.timeout.ms` after its fork (a first start
or a respawn alike), which counts as a boot failure.

Crash loops: a worker that fails before it is READY (workers/main.py exits
`WORKER_BOOT_ERROR`; a hang past `worker.start.timeout.ms`) is a boot failure: the
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

One piece at ~740 lines, as gunicorn's arbiter: what is left is the arbiter's one loop
(spawn, reap, the heartbeat and listener checks, signals, reload, stop) over one table of
children; the framing, the heartbeat table, the listeners and the process mains are in
their own modules.
"""
from __future__ import annotations

import errno
import logging
import os
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import psutil

from mpbroker import config as configmod
from mpbroker import reuseport, sdnotify
from mpbroker.config.listeners import Advertised
from mpbroker.config_reload import apply_log_level, merge_reload
from mpbroker.controller_main import CONTROLLER_BOOT_ERROR, ControllerChannels, run_controller
from mpbroker.heartbeats import CS_DONE, READY, HeartbeatTable
from mpbroker.ipc import Channel
from workers.worker import LOG_DIR_FAILURE_EXIT
from workers.connection_quotas import ConnectionTable
from workers.handlers.alter_replica_log_dirs import recover_moves
from workers.main import LISTEN_BACKLOG, WorkerChannels, run_worker

log = logging.getLogger("mpbroker.supervisor")

# One ControlledShutdown attempt of the controller process: its request timeout (30 s)
# and slack; `controlled.shutdown.max.retries` attempts, `retry.backoff.ms` apart.
CONTROLLED_SHUTDOWN_ATTEMPT_S = 35.0
CONTROLLER_STOP_S = 5.0           # SIGTERM to the controller process, then SIGKILL
HANDOVER_TIMEOUT_S = 2.0          # writing to a child's control channel


def stop_budget_s(cfg) -> float:
    """The longest a SIGTERM stop can take with `cfg`: the cluster controlled shutdown
    (retries x (backoff + one attempt)), the workers' `worker.shutdown.timeout.ms`, the
    controller's stop. conf/mpbroker.service's TimeoutStopSec covers it for the defaults."""
    total = cfg["worker.shutdown.timeout.ms"] / 1000 + CONTROLLER_STOP_S
    if cfg.uses_zookeeper and cfg["controlled.shutdown.enable"]:
        retries = max(1, cfg["controlled.shutdown.max.retries"])
        total += retries * (cfg["controlled.shutdown.retry.backoff.ms"] / 1000
                            + CONTROLLED_SHUTDOWN_ATTEMPT_S)
    return total


class BoundListener(NamedTuple):
    """One listener's reservation (mpbroker/reuseport.py) and addresses."""
    name: str
    protocol: str
    listen: tuple             # (host, bound port)
    reserve: socket.socket
    advertised: tuple | None  # (host, port); None: not in advertised.listeners


class SupervisorError(Exception):
    """A stop of the whole broker: `rc` is the exit code, the message says why."""

    def __init__(self, rc: int, message: str, graceful: bool = True):
        super().__init__(message)
        self.rc = rc
        self.graceful = graceful


@dataclass
class Child:
    pid: int
    kind: str                 # "controller" | "worker"
    worker_id: int            # -1 for the controller
    slot: int
    link: Channel             # the supervisor's end of the control channel (write only)
    started: float
    ready: bool = False
    killed: str | None = None
    listener: socket.socket | None = None   # the worker's client socket (shared handle)
    more: list | None = None                # its sockets of the other listeners
    evicted: float | None = None            # out of the listener group since (monotonic)


# Queued and dispatched to handle_<name>; SIGCHLD only wakes the loop (it reaps anyway).
SIGNAMES = {signal.SIGTERM: "term", signal.SIGINT: "int", signal.SIGHUP: "hup"}


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
        self.bound: list[BoundListener] = []    # every listener; the first is reserve/listen
        self.held: set[socket.socket] = set()      # channel ends this process holds
        self.heartbeats: HeartbeatTable | None = None
        self.connection_table = None    # max.connections* counts of every worker
        self.last_watchdog = 0.0
        self.pipe: tuple[int, int] | None = None

    # ------------------------------------------------------------------ settings
    def read_settings(self, cfg) -> None:
        self.num_workers = cfg.num_workers
        self.pin = bool(cfg["worker.cpu.affinity"])
        self.heartbeat_timeout_s = cfg["worker.heartbeat.timeout.ms"] / 1000
        self.eviction_s = cfg["worker.listener.eviction.ms"] / 1000
        self.shutdown_timeout_s = cfg["worker.shutdown.timeout.ms"] / 1000
        self.boot_max_failures = cfg["worker.boot.max.failures"]
        self.restart_max = cfg["worker.restart.max"]
        self.restart_window_s = cfg["worker.restart.window.ms"] / 1000
        self.start_timeout_s = cfg["worker.start.timeout.ms"] / 1000
        self.beat_interval_s = max(0.05, min(1.0, self.heartbeat_timeout_s / 4,
                                             self.eviction_s / 4 if self.eviction_s else 1.0))
        self.watchdog_s = sdnotify.watchdog_usec() / 2e6

    def bind(self, host: str, port: int, adv_host: str, adv_port: int,
             name: str = "PLAINTEXT", protocol: str = "PLAINTEXT", advertise: bool = True) -> int:
        """Reserve a listener's port (mpbroker/reuseport.py) for the supervisor's
        lifetime; the bound port and the advertised address follow from it. Called once
        per listener: the first is the inter-broker one (`reserve`, `listen`,
        `advertised`: what the controller registers), every one is served by every worker;
        one left out of advertised.listeners (`advertise=False`) is not registered."""
        sock = reuseport.reserve_port(host, port)
        bound = sock.getsockname()[1]
        if adv_port == 0 or adv_port == port:
            adv_port = bound
        if adv_host in ("0.0.0.0", "::", ""):
            adv_host = "127.0.0.1"
        self.bound.append(BoundListener(name, protocol, (host, bound), sock,
                                        (adv_host, adv_port) if advertise else None))
        first = self.bound[0]
        self.reserve, self.listen = first.reserve, first.listen
        self.advertised = Advertised(*(first.advertised or (adv_host, adv_port)), endpoints=[
            (b.name, *b.advertised, b.protocol) for b in self.bound if b.advertised])
        return bound

    def _close_reserves(self) -> None:
        for b in self.bound:
            b.reserve.close()

    # ------------------------------------------------------------------ main loop
    def run(self) -> int:
        self.heartbeats = HeartbeatTable(1 + self.num_workers)
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
            self._close_reserves()

    def step(self) -> None:
        self.sleep()
        while self.sig_queue:
            getattr(self, f"handle_{SIGNAMES[self.sig_queue.pop(0)]}")()
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
        self._old_handlers = {s: signal.signal(s, self._queue_signal)
                              for s in (*SIGNAMES, signal.SIGCHLD)}

    def _queue_signal(self, signum, frame) -> None:
        # Only queue; the main loop does the work (and the wakeup fd ends its select).
        if signum in SIGNAMES and len(self.sig_queue) < 5:
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
            ctl.link.flush(HANDOVER_TIMEOUT_S)
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
        self.controller = Child(pid, "controller", -1, 0, self._control_channel(sup_end),
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
        more = [self.worker_listener(i) for i in range(1, len(self.bound))]
        channels = WorkerChannels(child_end, controller_end, dict(peers or {}),
                                  listener=listener, connections=self.connection_table,
                                  more=more, specs=[(b.name, b.protocol) for b in self.bound])
        slot = 1 + wid
        self.heartbeats.reset(slot)
        if self.connection_table is not None:
            self.connection_table.reset(wid)      # a dead worker's connections are gone
        pid = self._fork(keep={child_end, controller_end, listener, *more, *channels.peers.values()},
                         target=lambda: self._worker_child(wid, channels))
        for s in (child_end, controller_end, *channels.peers.values()):
            self._release(s)
        child = Child(pid, "worker", wid, slot, self._control_channel(sup_end), time.monotonic(),
                      listener=listener, more=more)
        self.children[pid] = child
        self.by_worker[wid] = child
        log.info("worker %d started (pid %d)", wid, pid)

    def worker_listener(self, index: int = 0) -> socket.socket | None:
        """A worker's socket of listener `index` (mpbroker/reuseport.py), held here too
        so that a stalled worker can be taken out of the group."""
        if self.reserve is None:
            return None
        sock = reuseport.worker_socket(self.bound[index].listen if self.bound else self.listen)
        self.held.add(sock)
        return sock

    def _worker_child(self, wid: int, channels: WorkerChannels) -> int:
        if self.pin:
            pin_to_core(wid)
        grace_s = max(0.5, min(5.0, self.shutdown_timeout_s / 2))
        return self.worker_target(self.cfg, wid, channels, self.listen, self.heartbeats,
                                  self.beat_interval_s, grace_s)

    def _send_fd(self, link: Channel, msg: dict, sock: socket.socket) -> None:
        try:
            link.send(msg, fds=[sock.fileno()])
            link.flush(HANDOVER_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            log.warning("handing over a channel (%s) failed: %s", msg, e)
        finally:
            self._release(sock)

    def _release(self, sock: socket.socket) -> None:
        self.held.discard(sock)
        sock.close()

    @staticmethod
    def _control_channel(sock: socket.socket) -> Channel:
        """The supervisor's end of a child's control channel: it only writes."""
        return Channel(sock, lambda msg: None, name="control channel")

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
        self._close_reserves()
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
            for sock in (child.listener, *(child.more or ())):
                self._release(sock)
            child.listener, child.more = None, None
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
            # no log dir left (workers/worker.py fail_log_dir): Kafka halts the broker
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
                for sock in (child.listener, *(child.more or ())):
                    sock.shutdown(socket.SHUT_RD)
            except OSError as e:
                log.warning("worker %d: taking its listener out failed: %s", child.worker_id, e)
                return
            child.evicted = now
            log.warning("worker %d missed heartbeats for %d ms: taken out of the listener "
                        "group", child.worker_id, age * 1000)
        elif child.evicted is not None and age < self.eviction_s:
            try:
                for sock in (child.listener, *(child.more or ())):
                    sock.listen(LISTEN_BACKLOG)
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
        apply_log_level(applied)
        msg = {"op": "reload", "config": applied}
        for child in list(self.children.values()):
            try:
                child.link.send(msg)
                child.link.flush(HANDOVER_TIMEOUT_S)
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
                for sock in (c.listener, *(c.more or ())):
                    self._release(sock)
                c.listener, c.more = None, None
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


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def pin_to_core(worker_id: int) -> None:
    """Worker i runs on the i-th CPU this process may use (wrapping around)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
        core = cores[worker_id % len(cores)]
        psutil.Process().cpu_affinity([core])
        log.debug("worker %d pinned to CPU %d", worker_id, core)
    except Exception as e:       # an unsupported platform must not stop the broker
        log.warning("worker %d: cannot pin to a CPU: %s", worker_id, e)
