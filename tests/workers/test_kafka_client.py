"""workers/kafka_client.py against the real broker process (tests/integration harness):
header versions (flexible and not, ApiVersions v0 header), pipelining, acks=0, Fetch
records as memoryviews, timeouts and a dead peer."""
from __future__ import annotations

import asyncio
import socket

import pytest

from mpbroker.protocol import api_keys as K
from storage.batch import BatchBuilder, iter_batches
from tests.conftest import until
from tests.integration.broker import Broker, external_bootstrap
from workers.kafka_client import KafkaConnection

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def real_broker(tmp_path_factory):
    if external_bootstrap():
        pytest.skip("needs our own broker")
    b = Broker(tmp_path_factory.mktemp("kafka-client"), {"num.workers": 2,
                                                         "auto.create.topics.enable": "true"},
               name="kafka-client-broker")
    b.start()
    yield b
    b.stop()


def run(coro):
    return asyncio.run(coro)


def _batch(n: int, prefix: bytes = b"v") -> bytes:
    b = BatchBuilder()
    for i in range(n):
        b.append(None, prefix + str(i).encode())
    return b.build()


async def _create(conn, topic, partitions=2):
    resp = await conn.request(K.CREATE_TOPICS, 7, {
        "topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                    "assignments": [], "configs": []}], "timeout_ms": 10000})
    assert resp["topics"][0]["error_code"] == 0, resp


def test_api_versions_and_flexible_and_classic_headers(real_broker):
    async def main():
        conn = await KafkaConnection.connect(real_broker.host, real_broker.port,
                                             client_id="t", timeout_ms=5000)
        try:
            versions = await conn.api_versions()
            assert versions[K.FETCH][1] >= 12 and versions[K.PRODUCE][1] >= 9
            # ApiVersions v3 is flexible but its response header is still v0
            v3 = await conn.request(K.API_VERSIONS, 3, {"client_software_name": "t",
                                                         "client_software_version": "1"})
            assert v3["error_code"] == 0 and v3["api_keys"]
            md_classic = await conn.request(K.METADATA, 1, {"topics": None})
            md_flex = await conn.request(K.METADATA, 12, {"topics": None,
                                                          "allow_auto_topic_creation": False})
            assert md_classic["brokers"][0]["port"] == real_broker.port
            assert md_flex["brokers"][0]["port"] == real_broker.port
        finally:
            await conn.close()
        assert conn.closed
    run(main())


def test_pipelined_produce_fetch(real_broker):
    topic = "kc-pipelined"

    async def main():
        conn = await KafkaConnection.connect(real_broker.host, real_broker.port, timeout_ms=10000)
        try:
            await _create(conn, topic)

            def produce(part, n):
                return conn.request(K.PRODUCE, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
                    {"name": topic, "partition_data": [{"index": part, "records": _batch(n)}]}]})
            # 20 requests in flight on one connection: each gets its own answer
            resps = await asyncio.gather(*(produce(i % 2, 3) for i in range(20)))
            offsets = {0: [], 1: []}
            for r in resps:
                pr = r["responses"][0]["partition_responses"][0]
                assert pr["error_code"] == 0
                offsets[pr["index"]].append(pr["base_offset"])
            for part in (0, 1):
                assert sorted(offsets[part]) == list(range(0, 30, 3))
            # acks=0: no response, returns None after the write
            assert await conn.request(K.PRODUCE, 9, {"acks": 0, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": _batch(1)}]}]}) is None
            # Fetch v12 (flexible, tagged fields): records are a memoryview of whole batches
            for _ in range(50):
                f = await conn.request(K.FETCH, 12, {
                    "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                         "last_fetched_epoch": -1, "log_start_offset": -1,
                         "partition_max_bytes": 1 << 20}]}],
                    "forgotten_topics_data": [], "rack_id": ""})
                p = f["responses"][0]["partitions"][0]
                assert p["error_code"] == 0
                if p["high_watermark"] == 31:
                    break
                await asyncio.sleep(0.05)
            assert p["high_watermark"] == 31
            batches = list(iter_batches(memoryview(bytes(p["records"]))))
            assert [b.base_offset for b in batches][:2] == [0, 3]
            values = [r.value for b in batches for r in b.records()]
            assert len(values) == 31
        finally:
            await conn.close()
    run(main())


def test_timeout_closes_and_fails_pending():
    """A peer that accepts and never answers: the request times out, the connection is
    closed, later requests raise ConnectionError."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    async def main():
        conn = await KafkaConnection.connect("127.0.0.1", port, timeout_ms=200)
        other = asyncio.ensure_future(conn.request(K.METADATA, 1, {"topics": None},
                                                   timeout_ms=5000))
        with pytest.raises(asyncio.TimeoutError):
            await conn.request(K.API_VERSIONS, 0, {})
        assert conn.closed
        with pytest.raises(ConnectionError):
            await other
        with pytest.raises(ConnectionError):
            await conn.request(K.API_VERSIONS, 0, {})
        await conn.close()
    try:
        run(main())
    finally:
        srv.close()


def test_connection_refused_and_peer_close():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()

    async def refused():
        with pytest.raises(ConnectionError):
            await KafkaConnection.connect("127.0.0.1", port, timeout_ms=2000)
    run(refused())

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port2 = srv.getsockname()[1]

    async def closed_by_peer():
        conn = await KafkaConnection.connect("127.0.0.1", port2, timeout_ms=5000)
        loop = asyncio.get_running_loop()
        peer, _ = await loop.run_in_executor(None, srv.accept)
        req = asyncio.ensure_future(conn.request(K.API_VERSIONS, 0, {}))
        await until(lambda: conn._pending, what="the request in flight")
        peer.close()                      # the peer dies with the request in flight
        with pytest.raises(ConnectionError):
            await req
        assert conn.closed
        await conn.close()
    try:
        run(closed_by_peer())
    finally:
        srv.close()


def test_garbage_response_closes(tmp_path):
    """A response whose correlation id matches nothing: ConnectionError, closed."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    async def main():
        conn = await KafkaConnection.connect("127.0.0.1", port, timeout_ms=5000)
        loop = asyncio.get_running_loop()
        peer, _ = await loop.run_in_executor(None, srv.accept)
        req = asyncio.ensure_future(conn.request(K.API_VERSIONS, 0, {}))
        await until(lambda: conn._pending, what="the request in flight")
        peer.sendall(b"\x00\x00\x00\x06\x00\x00\x03\xe7\x00\x00")   # correlation id 999
        with pytest.raises(ConnectionError):
            await req
        peer.close()
        await conn.close()
    try:
        run(main())
    finally:
        srv.close()


def test_abort_fails_pending_at_once():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    async def main():
        conn = await KafkaConnection.connect("127.0.0.1", port, timeout_ms=5000)
        req = asyncio.ensure_future(conn.request(K.API_VERSIONS, 0, {}))
        await until(lambda: conn._pending, what="the request in flight")
        conn.abort()                      # from sync code: no await needed
        assert conn.closed
        with pytest.raises(ConnectionError):
            await req
        await conn.close()                # still fine afterwards
    try:
        run(main())
    finally:
        srv.close()
