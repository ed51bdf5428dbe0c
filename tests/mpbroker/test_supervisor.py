"""The supervisor's parts: channel framing with fd passing, the heartbeat table across a
fork, the controller RPC against a real EmbeddedController, the reload merge, and the
arbiter itself with stand-in children (a mesh of two workers, pinning, crash-loop stop).
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
import re
import time

import pytest

from mpbroker import config as configmod
from mpbroker import supervisor as sup


def cfg_for(tmp_path, **extra):
    props = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
             "log.dirs": str(tmp_path / "data")}
    props.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return configmod.BrokerConfig(props)


# ------------------------------------------------------------------ channels
def test_link_frames_survive_any_split_and_carry_fds():
    a, b = socket.socketpair()
    got = []
    rx = sup.Link(b, got.append)
    tx = sup.Link(a, lambda m: None)
    data = sup.encode({"n": 1}) + sup.encode(list(range(1000)))
    for i in range(len(data)):                     # byte by byte
        a.send(data[i:i + 1])
        rx.poll(1)
    assert got == [{"n": 1}, list(range(1000))]
    r, w = os.pipe()
    tx.send({"op": "peer"}, fds=[w])
    tx.flush(1)
    while len(got) < 3:
        rx.poll(1)
    fd = rx.take_fd()
    os.close(w)
    os.write(fd, b"through the passed fd")
    assert os.read(r, 100) == b"through the passed fd"
    os.close(fd), os.close(r)


def test_link_reports_eof():
    a, b = socket.socketpair()
    closed = []
    rx = sup.Link(b, lambda m: None, lambda: closed.append(True))
    a.close()
    rx.poll(1)
    assert closed == [True] and rx.closed


def test_heartbeat_table_is_shared_with_a_forked_child():
    table = sup.HeartbeatTable(2)
    table.reset(1)
    assert table.read(1)[1] == sup.BOOTING
    pid = os.fork()
    if pid == 0:
        table.beat(1)
        os._exit(0)
    os.waitpid(pid, 0)
    got_pid, state, last = table.read(1)
    assert (got_pid, state) == (pid, sup.READY)
    assert time.monotonic() - last < 5


# ------------------------------------------------------------------ controller RPC
class FakeWorker:
    def __init__(self):
        self.epochs = []

    def apply_metadata(self, md):
        self.epochs.append(md.epoch)


@pytest.fixture
def rpc(tmp_path):
    """A real EmbeddedController behind ControllerService on a thread's loop; two clients."""
    from mpbroker.controller.embedded import EmbeddedController
    ctl = EmbeddedController(cfg_for(tmp_path))
    ctl.register_broker(0, "127.0.0.1", 9092)
    loop = asyncio.new_event_loop()
    pairs = [socket.socketpair() for _ in range(2)]
    ready = threading.Event()

    def serve():
        asyncio.set_event_loop(loop)
        service = sup.ControllerService(ctl, loop)
        for i, (ctl_end, _) in enumerate(pairs):
            service.add_worker(i, ctl_end)
        loop.call_soon(ready.set)
        loop.run_forever()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    ready.wait(5)
    clients = []
    for _, worker_end in pairs:
        c = sup.ControllerClient(worker_end)
        c.hello(5)
        clients.append(c)
    yield ctl, clients
    loop.call_soon_threadsafe(loop.stop)
    t.join(5)


def test_hello_gives_the_broker_id_metadata_and_config(rpc):
    ctl, (c, _) = rpc
    assert c.broker_id == 0
    assert c.metadata().epoch == ctl.md.epoch and 0 in c.metadata().brokers
    assert c.broker_config()["log.retention.hours"] == 168


def test_a_change_reaches_the_caller_before_its_reply_and_the_others_soon(rpc):
    ctl, (c0, c1) = rpc
    w0, w1 = FakeWorker(), FakeWorker()
    c0.attach_worker(w0), c1.attach_worker(w1)
    c0._call_sync("ensure_internal_topic", ("__consumer_offsets",))   # a blocking call
    assert "__consumer_offsets" in c0.metadata().topics
    assert w0.epochs == [ctl.md.epoch]
    deadline = time.monotonic() + 5
    while not w1.epochs and time.monotonic() < deadline:
        c1.link.poll(0.1)
    assert w1.epochs == [ctl.md.epoch]

    async def create():
        c0.attach(asyncio.get_running_loop())
        return await c0.create_topics(
            [{"name": "t", "num_partitions": 3, "replication_factor": 1,
              "assignments": [], "configs": {}}], False, 1000)

    (res,) = asyncio.run(create())
    assert res["error_code"] == 0 and res["num_partitions"] == 3
    assert len(c0.metadata().topics["t"].partitions) == 3


def test_errors_and_dynamic_config_cross_the_channel(rpc):
    ctl, (c0, c1) = rpc

    async def calls():
        c0.attach(asyncio.get_running_loop())
        pid0 = await c0.allocate_producer_id()
        pid1 = await c0.allocate_producer_id()
        out = await c0.alter_configs([(4, "", [("log.retention.ms", 0, "1234")])], True, False)
        return pid0, pid1, out

    pid0, pid1, out = asyncio.run(calls())
    assert pid1 == pid0 + 1
    assert out == [(4, "", 0, None)]
    assert c0.broker_config()["log.retention.ms"] == 1234
    with pytest.raises(RuntimeError, match="unknown controller method"):
        c0._call_sync("close", ())


# ------------------------------------------------------------------ reload
def test_reload_applies_dynamic_keys_and_keeps_static_ones(tmp_path):
    old = cfg_for(tmp_path, **{"log_retention_ms": 1000, "num_partitions": 1})
    new = cfg_for(tmp_path, **{"log_retention_ms": 2000, "num_partitions": 5,
                               "log_level": "DEBUG"})
    merged, needs_restart = sup.merge_reload(old, new)
    assert merged["log.retention.ms"] == 2000
    assert merged.get("log.level") == "DEBUG"
    expected_static = [k for k in ("num.partitions",)
                       if not configmod.BROKER_CONFIGS[k].dynamic]
    for k in expected_static:
        assert merged[k] == old[k] and k in needs_restart


# ------------------------------------------------------------------ the arbiter
def dummy_controller(cfg, channels, advertised, heartbeats, interval):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    while True:
        heartbeats.beat(0)
        time.sleep(interval)


def mesh_worker(out_dir):
    def target(cfg, wid, channels, listen, heartbeats, interval, grace_s):
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        for peer in channels.peers.values():
            peer.setblocking(True)
            peer.sendall(b"%d" % wid)
        heard = sorted(int(p.recv(16)) for p in channels.peers.values())
        (out_dir / f"w{wid}.json").write_text(json.dumps(
            {"peers": sorted(channels.peers), "heard": heard,
             "cpus": sorted(os.sched_getaffinity(0))}))
        heartbeats.beat(1 + wid)
        if wid == 0:
            while not (out_dir / "w1.json").exists():
                time.sleep(0.01)
            os.kill(os.getppid(), signal.SIGTERM)
        while not stop:
            heartbeats.beat(1 + wid)
            time.sleep(interval)
        return 0
    return target


def run_supervisor(s: sup.Supervisor, timeout: float = 20) -> int:
    alarm = threading.Timer(timeout, lambda: os.kill(os.getpid(), signal.SIGINT))
    alarm.start()
    try:
        return s.run()
    finally:
        alarm.cancel()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_two_workers_get_a_mesh_and_their_own_cores(tmp_path, monkeypatch):
    monkeypatch.setattr(sup, "MULTI_WORKER_ROUTING", True)
    cfg = cfg_for(tmp_path, num_workers=2, **{"worker.heartbeat.timeout.ms": 2000})
    s = sup.Supervisor(cfg, worker_target=mesh_worker(tmp_path),
                       controller_target=dummy_controller, notifier=sup.sdnotify.Notifier(None))
    s.bind("127.0.0.1", 0, "127.0.0.1", 0)
    assert run_supervisor(s) == 0
    w0 = json.loads((tmp_path / "w0.json").read_text())
    w1 = json.loads((tmp_path / "w1.json").read_text())
    assert (w0["peers"], w0["heard"]) == ([1], [1])
    assert (w1["peers"], w1["heard"]) == ([0], [0])
    cores = sorted(os.sched_getaffinity(0))
    assert w0["cpus"] == [cores[0]] and w1["cpus"] == [cores[1]]


def test_a_worker_that_never_boots_stops_the_supervisor(tmp_path, capsys):
    boots = []

    def broken(cfg, wid, *rest):
        return sup.WORKER_BOOT_ERROR

    cfg = cfg_for(tmp_path, **{"worker.boot.max.failures": 3})
    s = sup.Supervisor(cfg, worker_target=broken, controller_target=dummy_controller,
                       notifier=sup.sdnotify.Notifier(None))
    s.bind("127.0.0.1", 0, "127.0.0.1", 0)
    t0 = time.monotonic()
    assert run_supervisor(s) == 1
    assert time.monotonic() - t0 < 10
    # every worker fails; whichever reaches the limit first stops the supervisor
    assert re.search(r"worker \d+ failed to boot 3 times in a row", capsys.readouterr().err)
