"""The controller RPC (mpbroker/controller_rpc.py): one definition (ControllerAPI) of
the client's stubs and the server's table, and calls against a real EmbeddedController."""
from __future__ import annotations

import asyncio
import inspect
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mpbroker.controller.embedded import EmbeddedController
from mpbroker.controller.zk import ZkController
from mpbroker.controller_rpc import (RPC_METHODS, ControllerAPI, ControllerCallError,
                                     ControllerClient, ControllerService, exception_for_wire)
from mpbroker.metadata.model import MetadataError
from tests.conftest import broker_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_and_the_server_table_are_the_protocols_methods(rpc):
    ctl, (c, _) = rpc
    coroutines = {name for name, fn in vars(ControllerAPI).items()
                  if inspect.iscoroutinefunction(fn)}
    assert RPC_METHODS == coroutines and "create_topics" in coroutines
    stubs = {name for name in dir(ControllerClient)
             if inspect.iscoroutinefunction(getattr(ControllerClient, name))
             and not name.startswith("_") and name != "call"}
    assert stubs == coroutines
    assert set(ControllerService(ctl, asyncio.new_event_loop()).methods) == coroutines
    for name in coroutines:       # the stubs take the Protocol's parameters
        assert inspect.signature(getattr(ControllerClient, name)) == \
            inspect.signature(getattr(ControllerAPI, name))


def test_the_rpc_imports_nothing_of_the_workers_nor_the_controllers():
    """Layering: workers/main.py uses this module, so it stays below workers/."""
    code = ("import sys, mpbroker.controller_rpc; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'workers' "
            "or m.startswith(('mpbroker.controller.', 'mpbroker.supervisor'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_every_controller_implements_the_protocol():
    for cls in (EmbeddedController, ZkController):
        for name in RPC_METHODS | {"metadata", "broker_config"}:
            assert callable(getattr(cls, name, None)), (cls.__name__, name)
        for name in RPC_METHODS:     # coroutines with the Protocol's parameters
            method = getattr(cls, name)
            assert inspect.iscoroutinefunction(method), (cls.__name__, name)
            assert list(inspect.signature(method).parameters) == \
                list(inspect.signature(getattr(ControllerAPI, name)).parameters), (cls.__name__, name)


def test_an_exception_that_does_not_pickle_crosses_as_its_code_or_its_text():
    class Local(MetadataError):
        pass

    class Unpicklable(Exception):
        def __reduce__(self):
            raise TypeError("no")
    err = exception_for_wire(Local(37, "bad"))
    assert isinstance(err, ControllerCallError) and (err.code, err.message) == (37, "bad")
    plain = ValueError("fine")
    assert exception_for_wire(plain) is plain
    assert isinstance(exception_for_wire(Unpicklable("x")), RuntimeError)


class FakeWorker:
    def __init__(self):
        self.epochs = []

    def apply_metadata(self, md):
        self.epochs.append(md.epoch)


@pytest.fixture
def rpc(tmp_path):
    """A real EmbeddedController behind ControllerService on a thread's loop; two clients."""
    ctl = EmbeddedController(broker_config(tmp_path))
    ctl.register_broker(0, "127.0.0.1", 9092)
    loop = asyncio.new_event_loop()
    pairs = [socket.socketpair() for _ in range(2)]
    ready = threading.Event()

    def serve():
        asyncio.set_event_loop(loop)
        service = ControllerService(ctl, loop)
        for i, (ctl_end, _) in enumerate(pairs):
            service.add_worker(i, ctl_end)
        loop.call_soon(ready.set)
        loop.run_forever()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    ready.wait(5)
    clients = []
    for _, worker_end in pairs:
        c = ControllerClient(worker_end)
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
    c0.call_sync("ensure_internal_topic", ("__consumer_offsets",))   # a blocking call
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
        c0.call_sync("close", ())
