"""COMMIT/ABORT markers to the partitions of a transaction, wherever they live.

`MarkerSender.write` (the transaction coordinator's, workers/txn/service.py) sends one
WriteTxnMarkers per destination: partitions of this worker through
`workers.handlers.write_txn_markers.apply_markers` in process, those of other workers of
this broker over the worker mesh (router.forward, with a `SelfRequestContext`), those led
by other brokers as requests on a broker connection (workers/txn/channel.py), all
concurrently. It answers a Kafka error code per partition; retrying is the caller's.
"""
from __future__ import annotations

import asyncio
import inspect
import logging

from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode
from workers.handlers.write_txn_markers import apply_markers
from workers.txn.channel import BrokerChannels

log = logging.getLogger(__name__)


class SelfRequestContext:
    """The request context of a request this worker sends itself (mesh forwards)."""

    def __init__(self, api_key: int, version: int):
        self.api_key = api_key
        self.api_version = version
        self.correlation_id = 0
        self.client_id = "mpbroker-txn-coordinator"
        self.client_host = ""
        self.connection = None


async def _value(x):
    return await x if inspect.isawaitable(x) else x


async def _value(x):
    return await x if inspect.isawaitable(x) else x


class MarkerSender:
    """Writes COMMIT/ABORT markers to partitions wherever they live (see module doc)."""

    def __init__(self, broker):
        self.broker = broker
        self.channels = None

    def close(self) -> None:
        if self.channels is not None:
            self.channels.close()

    async def write(self, producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int, partitions: list) -> dict:
        """{(topic, p): error code} for every partition given."""
        broker = self.broker
        md = broker.metadata
        router = broker.router
        local, by_worker, by_broker, out = [], {}, {}, {}
        for t, p in partitions:
            topic = md.topics.get(t)
            if topic is None or p not in topic.partitions:
                out[(t, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            leader = topic.partitions[p].leader
            if leader != broker.broker_id:
                by_broker.setdefault(leader, []).append((t, p))
                continue
            w = router.owner(t, p) if router is not None and router.active else broker.worker_id
            if w == broker.worker_id:
                local.append((t, p))
            else:
                by_worker.setdefault(w, []).append((t, p))

        def request(tps):
            topics: dict[str, list[int]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(p)
            return {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                                 "transaction_result": commit,
                                 "topics": [{"name": t, "partition_indexes": ps}
                                            for t, ps in topics.items()],
                                 "coordinator_epoch": coordinator_epoch}]}

        waits = []
        for w, tps in by_worker.items():
            fut = router.forward(w, SelfRequestContext(api_keys.WRITE_TXN_MARKERS, 1), request(tps))
            if fut is None:
                local.extend(tps)
            else:
                waits.append((fut, tps))
        for b, tps in by_broker.items():      # concurrently, one request per broker
            waits.append((asyncio.ensure_future(self._remote(b, request(tps))), tps))
        if local:
            try:
                res = await _value(apply_markers(broker, request(local)["markers"]))
                _collect(res, out, local)
            except Exception:
                log.exception("writing transaction markers locally")
                for tp in local:
                    out.setdefault(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
        for fut, tps in waits:
            try:
                _collect(await fut, out, tps)
            except Exception as e:
                log.info("writing transaction markers to %s failed: %s", tps, e)
                for tp in tps:
                    out.setdefault(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for tp in partitions:
            out.setdefault(tuple(tp), ErrorCode.UNKNOWN_SERVER_ERROR)
        return out

    async def _remote(self, broker_id: int, body: dict):
        return await self.remote_request(broker_id, api_keys.WRITE_TXN_MARKERS, 1, body)

    async def remote_request(self, broker_id: int, api_key: int, version: int, body: dict):
        """One request to another broker (workers/txn/channel.py) -> response body."""
        if self.channels is None:
            self.channels = BrokerChannels(self.broker)
        return await self.channels.request(broker_id, api_key, version, body)


def _collect(res, out: dict, tps) -> None:
    """Per-partition codes from a WriteTxnMarkers response body (or its markers list)."""
    markers = res.get("markers") if isinstance(res, dict) else res
    for m in markers or ():
        for t in m.get("topics") or ():
            for p in t.get("partitions") or ():
                out[(t["name"], p["partition_index"])] = p["error_code"]
    for tp in tps:
        out.setdefault(tuple(tp), ErrorCode.UNKNOWN_SERVER_ERROR)
