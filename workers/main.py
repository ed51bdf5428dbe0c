"""A worker process's main (ARCHITECTURE §1): forked by the supervisor
(mpbroker/supervisor.py), it serves its share of the partitions: `workers.server.run` on
its Worker, with `broker.controller` the RPC client of the controller process
(mpbroker/controller_rpc.py) and `broker.router` wired to the mesh of the other workers.

Boot, before the event loop runs (a stop then exits 0 at once): "hello" to the
controller (broker id, metadata, config), the placement table (before any log is
opened), the Worker (opens its logs), the mesh, and `listen()` on the client socket the
supervisor bound (which puts this worker in the SO_REUSEPORT group). A failure there
exits WORKER_BOOT_ERROR, which the supervisor counts as a boot failure. Once it serves
it marks its heartbeat slot READY and beats from a task on its loop.

Channels (`WorkerChannels`): the supervisor's control channel, read only here —
{"op": "reload", "config"} (SIGHUP), {"op": "peer", "worker"} with a respawned peer's
new mesh socket (SCM_RIGHTS); EOF there (the supervisor is gone) stops the worker —
the controller RPC channel, and one mesh socket per other worker.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from dataclasses import dataclass, field
from typing import Any

from mpbroker import proctitle
from mpbroker.config_reload import apply_log_level
from mpbroker.controller_rpc import ControllerClient
from mpbroker.heartbeats import HeartbeatTable, heartbeat_loop
from mpbroker.ipc import Channel
from workers import server
from workers.listener_security import listener_securities
from workers.worker import Worker
from workers.metrics import snapshot
from workers.router import Router

log = logging.getLogger("workers.main")

WORKER_BOOT_ERROR = 3       # gunicorn's: the worker failed before it served
LISTEN_BACKLOG = 1024


@dataclass
class WorkerChannels:
    control: socket.socket                      # from the supervisor
    controller: socket.socket                   # the controller RPC
    peers: dict[int, socket.socket] = field(default_factory=dict)   # worker id -> mesh socket
    listener: socket.socket | None = None       # bound, not listening (the supervisor's)
    connections: Any = None     # workers/connection_quotas.ConnectionTable (shared counts)
    more: list = field(default_factory=list)    # the other listeners' sockets, likewise
    specs: list = field(default_factory=list)   # (listener name, security protocol) of
                                                # [listener, *more]; empty: one PLAINTEXT


def answer_controller(broker, what: str):
    """The controller's question `what` about this worker: "stats" (placement show and
    balance: counters and per-partition request counts) or "metrics" (its /metrics)."""
    if what == "stats":
        result = broker.stats()
        if broker.router is not None:
            result["partition_requests"] = broker.router.request_counts()
        return result
    if what == "metrics":
        return snapshot(broker)
    return None


def run_worker(cfg, worker_id: int, channels: WorkerChannels, listen: tuple[str, int],
               heartbeats: HeartbeatTable, heartbeat_interval_s: float,
               grace_s: float = 5.0) -> int:
    """Worker `worker_id`'s process, until it is stopped: its exit code."""
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
        table = client.call_sync("placement", ())   # before any log is opened
        if client.placement is not None and (table is None or
                                             client.placement.revision > table.revision):
            table = client.placement
        broker = Worker(cfg, client, worker_id=worker_id)
        # a worker whose loop stopped beating gets no connection handed to it
        # (workers/handoff.py): two beats missed, and a little slack
        broker.peer_alive = lambda wid: heartbeats.fresh(1 + wid, 2 * heartbeat_interval_s + 0.25)
        if table is not None:
            broker.placement = table
        # the mesh: one PeerLink per other worker; a respawned peer's new socket replaces it
        router = broker.router = Router(broker)
        for wid, peer_sock in channels.peers.items():
            router.add_peer(wid, peer_sock)
        broker.on_placement_applied = lambda rev: client.notify(
            "placement_applied", (worker_id, rev))
        client.attach_worker(broker)
        client.on_ask = lambda what: answer_controller(broker, what)
        specs = channels.specs or [("PLAINTEXT", "PLAINTEXT")]
        securities = listener_securities(cfg, specs)
        if channels.listener is not None:
            socks = [channels.listener, *channels.more]   # the supervisor keeps handles
            for s in socks:
                s.setblocking(False)
                s.listen(LISTEN_BACKLOG)  # now in the reuseport group: we can serve
            sock = socks[0]
        else:
            sock = server.bind_listener(*listen)
            socks = [sock]
        listeners = list(zip(socks, securities))
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
                apply_log_level(msg["config"])
                broker.reload_config(msg["config"])
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
                router.add_peer(msg["worker"], peer)
                if old is not None:
                    old.close()

        def lost_supervisor(_):
            log.error("worker %d lost its supervisor: stopping", worker_id)
            os.kill(os.getpid(), signal.SIGTERM)

        control = Channel(channels.control, on_control, lost_supervisor, pass_fds=True,
                          name="control channel")
        control.attach(loop)

        def ready():
            state["ready"] = True
            broker.gc_freezer.refreeze()    # booted: the heap so far is long-lived
            client.notify("placement_applied", (worker_id, broker.placement.revision))
            heartbeats.beat(1 + worker_id)
            log_recovery(worker_id, broker)
            # the loop's module says whether uvloop really runs it (issue #18)
            log.info("worker %d (pid %d) serving on %s:%d (event loop: %s)", worker_id,
                     os.getpid(), *listen, type(loop).__module__.split(".")[0])
            loop.create_task(heartbeat_loop(heartbeats, 1 + worker_id, heartbeat_interval_s))

        return await server.run(broker, sock, cfg["socket.request.max.bytes"],
                                on_ready=ready, grace_s=grace_s,
                                connection_table=channels.connections, worker_id=worker_id,
                                listeners=listeners)

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
