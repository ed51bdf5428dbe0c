"""Connections from a transaction coordinator to other brokers (cluster mode).

Owner: the worker that runs the coordinator (or a partition leader verifying a
transactional produce). One `workers.kafka_client.KafkaConnection` per destination
broker (its advertised host/port from the worker's metadata copy), opened on first
use, requests pipelined. Used for WriteTxnMarkers (to partition leaders on other
brokers) and AddPartitionsToTxn v4 verifyOnly (to the coordinator's broker). A dead
connection fails its waiting requests (the caller retries) and is reopened on the next
request. No ApiVersions handshake: every broker of the cluster is an mpbroker of the
same build.
"""
from __future__ import annotations

import asyncio

from mpbroker.security.client import inter_broker_cached
from workers.kafka_client import KafkaConnection

CONNECT_TIMEOUT_MS = 5000
REQUEST_TIMEOUT_MS = 30000


class BrokerChannels:
    def __init__(self, broker):
        self.broker = broker
        self.conns: dict[int, KafkaConnection] = {}
        self._connecting: dict[int, asyncio.Future] = {}

    async def _conn(self, broker_id: int) -> KafkaConnection:
        c = self.conns.get(broker_id)
        if c is not None and not c.closed:
            return c
        node = self.broker.metadata.brokers.get(broker_id)
        if node is None:
            raise ConnectionError(f"broker {broker_id} is not registered")
        c = await KafkaConnection.connect(
            node.host, node.port, client_id=f"mpbroker-{self.broker.broker_id}-txn",
            timeout_ms=CONNECT_TIMEOUT_MS, security=inter_broker_cached(self.broker.config))
        old = self.conns.get(broker_id)
        if old is not None and not old.closed:     # another caller won the race
            asyncio.ensure_future(c.close())
            return old
        self.conns[broker_id] = c
        return c

    async def request(self, broker_id: int, api_key: int, version: int, body: dict) -> dict:
        conn = await self._conn(broker_id)
        return await conn.request(api_key, version, body, timeout_ms=REQUEST_TIMEOUT_MS)

    def close(self) -> None:
        for c in self.conns.values():
            try:
                asyncio.ensure_future(c.close())
            except RuntimeError:
                pass
        self.conns.clear()
