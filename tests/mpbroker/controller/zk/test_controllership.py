"""Controllership.plan_partitions (mpbroker/controller/zk/controllership.py): a new
topic's partitions are initialized together, in one fenced ZooKeeper transaction, and
the brokers are told about all of them at once (a fake ZooKeeper session: what is
checked is the transactions written and the order of the notifications)."""
from __future__ import annotations

import asyncio
import types

from mpbroker.controller import zkdata
from mpbroker.controller.zk.controllership import Controllership
from tests.mpbroker.controller.zk.conftest import fill


class FakeTxn:
    def __init__(self, log):
        self.ops, self.log = [], log

    def check(self, path, version):
        self.ops.append(("check", path))

    def create(self, path, data, **kw):
        self.ops.append(("create", path))

    async def commit_async(self):
        self.log.append(self.ops)
        return [None] * len(self.ops)


class FakeSession:
    def __init__(self):
        self.txns = []
        self.zk = types.SimpleNamespace(exists_async=self._exists)

    async def _exists(self, path):
        return None

    async def call(self, fn, *args):
        return await fn(*args)

    def transaction(self):
        return FakeTxn(self.txns)


def test_a_new_topics_partitions_come_online_together(cache):
    fill(cache, brokers=(1, 2), topics={"t": {0: (1,), 1: (2,), 2: (1, 2)}})
    session, events = FakeSession(), []

    async def load_state(topic, p):
        events.append(("load", p))
        cache.states[(topic, p)] = zkdata.LeaderAndIsr(1, 0, (1,), 1)

    cache.load_state = load_state
    ctl = Controllership(session, cache, 1, lambda: {})
    ctl.active, ctl.epoch = True, 1
    ctl.on_state_changed = lambda key: events.append(("told", key[1]))
    asyncio.run(ctl.plan_partitions())
    assert len(session.txns) == 1                       # one transaction for the topic
    states = [path for op, path in session.txns[0] if op == "create" and path.endswith("/state")]
    assert states == [zkdata.state_path("t", p) for p in (0, 1, 2)]
    # every state is loaded before the brokers hear of any (their UpdateMetadata is one)
    assert events == [("load", 0), ("load", 1), ("load", 2), ("told", 0), ("told", 1), ("told", 2)]
    asyncio.run(ctl.plan_partitions())                  # nothing new: nothing written
    assert len(session.txns) == 1
