"""The controller process's main (ARCHITECTURE §1): forked by the supervisor
(mpbroker/supervisor.py), it runs the EmbeddedController (with `zookeeper.connect`: the
ZooKeeper controller, mpbroker/controller/zk/) behind `ControllerService`
(mpbroker/controller_rpc.py), the placement manager and its admin socket, and the
`metrics.listener` endpoint.

Channels (`ControllerChannels`): the supervisor's control channel, read only here —
{"op": "worker", "worker"} with a respawned worker's new channel end (SCM_RIGHTS),
{"op": "reload", "config"} (SIGHUP), {"op": "controlled_shutdown"} (SIGTERM in cluster
mode: ask the active controller to move this broker's leaderships, then mark heartbeat
slot 0 CS_DONE); EOF there (the supervisor is gone) stops it — and one RPC channel per
worker.

Exit codes: 0 after a stop (SIGTERM, or EOF on the control channel);
CONTROLLER_BOOT_ERROR when the config or the metrics listener keeps it from starting
(the supervisor then exits 2). SIGINT and SIGHUP are ignored: the supervisor decides.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from dataclasses import dataclass, field

from mpbroker import config as configmod
from mpbroker import proctitle
from mpbroker.config_reload import apply_log_level
from mpbroker.controller.embedded import EmbeddedController
from mpbroker.controller.placement import PlacementManager
from mpbroker.controller.zk import ZkController
from mpbroker.controller_rpc import ControllerService
from mpbroker.heartbeats import CS_DONE, READY, HeartbeatTable, heartbeat_loop
from mpbroker.ipc import Channel
from mpbroker.metrics_server import MetricsServer
from workers import server

log = logging.getLogger("mpbroker.controller_main")

CONTROLLER_BOOT_ERROR = 4


@dataclass
class ControllerChannels:
    control: socket.socket                                          # from the supervisor
    workers: dict[int, socket.socket] = field(default_factory=dict)  # worker id -> RPC socket


def run_controller(cfg, channels: ControllerChannels, advertised: tuple[str, int],
                   heartbeats: HeartbeatTable, heartbeat_interval_s: float) -> int:
    """The controller process, until it is stopped: its exit code."""
    proctitle.set_title("controller")
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the supervisor decides when we stop
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        if cfg.uses_zookeeper:
            ctl = ZkController(cfg, advertised)
        else:
            ctl = EmbeddedController(cfg)
            ctl.register_broker(cfg.broker_id, *advertised, endpoints=tuple(
                e[:3] for e in getattr(advertised, "endpoints", ())))
    except configmod.ConfigError as e:
        print(f"mpbroker: {e}", file=sys.stderr)
        return CONTROLLER_BOOT_ERROR
    server.install_uvloop()
    return asyncio.run(_serve(cfg, ctl, channels, heartbeats, heartbeat_interval_s))


async def _serve(cfg, ctl, channels: ControllerChannels, heartbeats: HeartbeatTable,
                 heartbeat_interval_s: float) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    beat_state = READY
    if cfg.uses_zookeeper:
        try:
            await ctl.start(loop)
        except configmod.ConfigError as e:
            print(f"mpbroker: {e}", file=sys.stderr)
            ctl.close()
            return CONTROLLER_BOOT_ERROR
    service = ControllerService(ctl, loop)
    service.placement = PlacementManager(cfg, service)
    await service.placement.serve_admin(cfg.admin_socket)
    service.placement.start_auto()      # placement.balance.interval.ms
    for wid, sock in channels.workers.items():
        service.add_worker(wid, sock)
    metrics = None
    if cfg["metrics.listener"]:
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
            apply_log_level(msg["config"])
            service.reload(msg["config"])
        elif msg["op"] == "controlled_shutdown":
            loop.create_task(controlled_shutdown())

    async def controlled_shutdown():
        nonlocal beat_state
        try:
            if hasattr(ctl, "request_controlled_shutdown"):
                await ctl.request_controlled_shutdown()
        except Exception:
            log.exception("controlled shutdown")
        beat_state = CS_DONE
        heartbeats.beat(0, CS_DONE)

    control = Channel(channels.control, on_control, lambda _: stop.set(), pass_fds=True,
                      name="control channel")
    control.attach(loop)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    beat = loop.create_task(heartbeat_loop(heartbeats, 0, heartbeat_interval_s,
                                           lambda: beat_state))
    await stop.wait()
    beat.cancel()
    if metrics is not None:
        metrics.close()
    service.placement.close()
    ctl.close()
    return 0
