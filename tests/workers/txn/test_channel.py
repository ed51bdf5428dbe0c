"""workers/txn/channel.py: one connection per destination broker, opened on first use,
reused while open, reopened once closed; an unregistered broker fails the request."""
from __future__ import annotations

import asyncio
import types

import pytest

from mpbroker import config as configmod
from workers.txn import channel as ch


class FakeConn:
    opened: list = []

    def __init__(self, host, port):
        self.host, self.port, self.closed = host, port, False
        self.requests = []

    @classmethod
    async def connect(cls, host, port, *, client_id, timeout_ms, security):
        assert client_id == "mpbroker-7-txn" and timeout_ms == ch.CONNECT_TIMEOUT_MS
        assert security is None or security.protocol == "PLAINTEXT"   # inter-broker: plaintext here
        c = cls(host, port)
        cls.opened.append(c)
        return c

    async def request(self, api_key, version, body, *, timeout_ms):
        self.requests.append((api_key, version, body, timeout_ms))
        return {"answered_by": (self.host, self.port)}

    async def close(self):
        self.closed = True


@pytest.fixture
def channels(monkeypatch):
    FakeConn.opened = []
    monkeypatch.setattr(ch, "KafkaConnection", FakeConn)
    brokers = {1: types.SimpleNamespace(host="h1", port=9001),
               2: types.SimpleNamespace(host="h2", port=9002)}
    broker = types.SimpleNamespace(broker_id=7, metadata=types.SimpleNamespace(brokers=brokers),
                                   config=configmod.BrokerConfig({"broker.id": "7"}))
    return ch.BrokerChannels(broker)


def test_one_connection_per_broker_reused_while_open(channels):
    async def main():
        a = await channels.request(1, 27, 1, {"x": 1})
        b = await channels.request(1, 27, 1, {"x": 2})
        c = await channels.request(2, 24, 4, {})
        return a, b, c
    a, b, c = asyncio.run(main())
    assert a == b == {"answered_by": ("h1", 9001)} and c == {"answered_by": ("h2", 9002)}
    assert [(x.host, len(x.requests)) for x in FakeConn.opened] == [("h1", 2), ("h2", 1)]
    assert FakeConn.opened[0].requests[0][3] == ch.REQUEST_TIMEOUT_MS


def test_a_closed_connection_is_reopened_on_the_next_request(channels):
    async def main():
        await channels.request(1, 27, 1, {})
        FakeConn.opened[0].closed = True
        await channels.request(1, 27, 1, {})
    asyncio.run(main())
    assert len(FakeConn.opened) == 2 and channels.conns[1] is FakeConn.opened[1]


def test_an_unregistered_broker_fails_the_request(channels):
    with pytest.raises(ConnectionError, match="broker 3 is not registered"):
        asyncio.run(channels.request(3, 27, 1, {}))
    assert FakeConn.opened == []


def test_close_closes_every_connection(channels):
    async def main():
        await channels.request(1, 27, 1, {})
        await channels.request(2, 27, 1, {})
        channels.close()
        # the closes were scheduled on the loop: wait for them
        await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}))
    asyncio.run(main())
    assert channels.conns == {} and all(c.closed for c in FakeConn.opened)
