"""The data-path and admin handlers over the wire, error by error, as Kafka answers.

The real broker process (the shared `broker` fixture, one `fresh_broker` for a config
it cannot have) and the project's own client (workers/kafka_client.py: the project
codec over a real socket), so each request carries exactly the fields a test needs and
each answer is checked field by field: CreateTopics validate_only and explicit
assignments, INVALID_REPLICATION_FACTOR on one node, DeleteTopics by topic id,
CreatePartitions errors, Metadata auto-creation on and off (and v13), the idempotent
producer's duplicate and gap answers, a topic config taking effect at once, the
ListOffsets, DeleteRecords, IncrementalAlterConfigs and ApiVersions errors, and the
Kafka 4.x versions clients send (Metadata 13, ListOffsets 11, DescribeCluster 2).
"""
from __future__ import annotations

import asyncio
import uuid

import pytest

from mpbroker.protocol import api_keys as K
from mpbroker.protocol.errors import ErrorCode as E
from storage.batch import BatchBuilder
from tests.integration import broker as h
from workers.kafka_client import KafkaConnection

TOPIC_RESOURCE = 2
SET, DELETE, APPEND = 0, 1, 2


@pytest.fixture(autouse=True)
def own_broker(broker):
    if broker.external:
        pytest.skip("checks mpbroker's answers field by field")


def run(broker, fn):
    """Run `fn(conn)` against `broker` on one connection."""
    async def main():
        conn = await KafkaConnection.connect(broker.host, broker.port, client_id="wire-tests",
                                             timeout_ms=30000)
        try:
            return await asyncio.wait_for(fn(conn), 60)
        finally:
            await conn.close()
    return asyncio.run(main())


def name(prefix="wire"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def create(conn, topic, partitions=1, rf=1, assignments=(), configs=None,
                 validate_only=False, version=7):
    resp = await conn.request(K.CREATE_TOPICS, version, {
        "topics": [{"name": topic, "num_partitions": partitions, "replication_factor": rf,
                    "assignments": [{"partition_index": p, "broker_ids": list(b)}
                                    for p, b in assignments],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout_ms": 10000, "validate_only": validate_only})
    (t,) = resp["topics"]
    return t


async def metadata(conn, topics, version=12, auto_create=False):
    resp = await conn.request(K.METADATA, version, {
        "topics": None if topics is None else [{"name": t, "topic_id": bytes(16)} for t in topics],
        "allow_auto_topic_creation": auto_create, "include_topic_authorized_operations": False})
    return resp, {t["name"]: t for t in resp["topics"]}


async def wait_visible(conn, topic, partitions=None):
    for _ in range(100):
        _, got = await metadata(conn, [topic])
        t = got[topic]
        if t["error_code"] == 0 and (partitions is None or len(t["partitions"]) == partitions):
            return t
        await asyncio.sleep(0.05)
    raise AssertionError(f"{topic} not visible: {t}")


async def produce(conn, topic, batch, acks=-1, partition=0, version=9):
    resp = await conn.request(K.PRODUCE, version, {
        "transactional_id": None, "acks": acks, "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition,
                                                           "records": batch}]}]})
    (t,) = resp["responses"]
    (p,) = t["partition_responses"]
    return p


def batch(n, value=b"v", **kw):
    b = BatchBuilder(**kw)
    for i in range(n):
        b.append(None, value + b"%d" % i)
    return b.build()


# ---------------------------------------------------------------- CreateTopics

def test_create_topics_validate_only_creates_nothing(broker):
    topic = name()

    async def go(conn):
        t = await create(conn, topic, partitions=3, configs={"retention.ms": "60000"},
                         validate_only=True)
        assert (t["error_code"], t["num_partitions"], t["replication_factor"]) == (0, 3, 1)
        assert {c["name"]: c["value"] for c in t["configs"]}["retention.ms"] == "60000"
        _, got = await metadata(conn, [topic])
        assert got[topic]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
        bad = await create(conn, topic, configs={"retention.ms": "soon"}, validate_only=True)
        assert bad["error_code"] == E.INVALID_CONFIG
    run(broker, go)


def test_create_topics_explicit_assignments_and_replication_factor(broker):
    topic, other = name(), name()

    async def go(conn):
        t = await create(conn, topic, partitions=-1, rf=-1, assignments=[(0, [1]), (1, [1])])
        assert (t["error_code"], t["num_partitions"], t["replication_factor"]) == (0, 2, 1)
        md = await wait_visible(conn, topic, 2)
        assert [p["replica_nodes"] for p in md["partitions"]] == [[1], [1]]
        both = await create(conn, other, partitions=2, rf=1, assignments=[(0, [1])])
        assert both["error_code"] == E.INVALID_REQUEST
        rf = await create(conn, other, partitions=1, rf=2)       # one broker only
        assert rf["error_code"] == E.INVALID_REPLICATION_FACTOR
        _, got = await metadata(conn, [other])
        assert got[other]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    run(broker, go)


# ---------------------------------------------------------------- DeleteTopics

def test_delete_topics_by_id(broker):
    topic = name()

    async def go(conn):
        created = await create(conn, topic)
        tid = created["topic_id"]
        assert tid != bytes(16) and (await wait_visible(conn, topic))["topic_id"] == tid
        resp = await conn.request(K.DELETE_TOPICS, 6, {
            "topics": [{"name": None, "topic_id": tid},
                       {"name": None, "topic_id": uuid.uuid4().bytes},
                       {"name": topic, "topic_id": tid}], "timeout_ms": 10000})
        r = resp["responses"]
        assert (r[0]["name"], r[0]["topic_id"], r[0]["error_code"]) == (topic, tid, 0)
        assert r[1]["error_code"] == E.UNKNOWN_TOPIC_ID
        assert r[2]["error_code"] == E.INVALID_REQUEST          # name and id together
        for _ in range(100):
            _, got = await metadata(conn, [topic])
            if got[topic]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("topic still there")
    run(broker, go)


# ---------------------------------------------------------------- CreatePartitions

def test_create_partitions_errors(broker):
    topic, missing = name(), name()

    async def go(conn):
        await create(conn, topic, partitions=2)
        await wait_visible(conn, topic, 2)

        async def grow(*specs):
            resp = await conn.request(K.CREATE_PARTITIONS, 3, {
                "topics": [{"name": n, "count": c, "assignments": None} for n, c in specs],
                "timeout_ms": 10000, "validate_only": False})
            return [(r["name"], r["error_code"]) for r in resp["results"]]

        assert await grow((topic, 2)) == [(topic, E.INVALID_PARTITIONS)]
        assert await grow((topic, 1)) == [(topic, E.INVALID_PARTITIONS)]
        assert await grow((missing, 3)) == [(missing, E.UNKNOWN_TOPIC_OR_PARTITION)]
        # a topic named twice: every occurrence refused, nothing applied
        assert await grow((topic, 3), (topic, 4)) == [(topic, E.INVALID_REQUEST)] * 2
        _, got = await metadata(conn, [topic])
        assert len(got[topic]["partitions"]) == 2
        assert await grow((topic, 4)) == [(topic, 0)]
        await wait_visible(conn, topic, 4)
    run(broker, go)


# ---------------------------------------------------------------- Metadata

def test_metadata_auto_create_on_and_off(broker):
    off, on, bad = name(), name(), "bad name!"

    async def go(conn):
        resp, got = await metadata(conn, [off, bad], version=13, auto_create=False)
        assert resp["error_code"] == 0
        assert got[off]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
        assert got[bad]["error_code"] == E.INVALID_TOPIC_EXCEPTION
        _, got = await metadata(conn, [off])
        assert got[off]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION   # nothing created

        _, got = await metadata(conn, [on, bad], auto_create=True)
        # created: answered in full once this worker has it, else LEADER_NOT_AVAILABLE
        assert got[on]["error_code"] in (0, E.LEADER_NOT_AVAILABLE)
        assert got[bad]["error_code"] == E.INVALID_TOPIC_EXCEPTION
        t = await wait_visible(conn, on)
        assert len(t["partitions"]) == 1                      # num.partitions=1
    run(broker, go)


def test_metadata_auto_create_reports_the_controllers_error(fresh_broker):
    b = fresh_broker({"default.replication.factor": 3})
    topic = name()

    async def go(conn):
        for version in (4, 13):
            _, got = await metadata(conn, [topic], version=version, auto_create=True)
            assert got[topic]["error_code"] == E.INVALID_REPLICATION_FACTOR
    run(b, go)


# ---------------------------------------------------------------- Produce

def test_idempotent_duplicates_and_sequence_gap(broker):
    topic = name()

    async def go(conn):
        await create(conn, topic)
        await wait_visible(conn, topic)
        ids = await conn.request(K.INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout_ms": 60000})
        assert ids["error_code"] == 0
        pid, epoch = ids["producer_id"], ids["producer_epoch"]

        def seq_batch(seq, n):
            return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)

        first, second = seq_batch(0, 3), seq_batch(3, 2)
        assert (await produce(conn, topic, first))["base_offset"] == 0
        assert (await produce(conn, topic, second))["base_offset"] == 3
        # a retry of either batch: success with the offsets it got the first time
        again = await produce(conn, topic, first)
        assert (again["error_code"], again["base_offset"]) == (0, 0)
        again = await produce(conn, topic, second)
        assert (again["error_code"], again["base_offset"]) == (0, 3)
        gap = await produce(conn, topic, seq_batch(9, 1))
        assert gap["error_code"] == E.OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = await produce(conn, topic, seq_batch(5, 1))
        assert (nxt["error_code"], nxt["base_offset"]) == (0, 5)   # nothing stored twice
    run(broker, go)


def test_max_message_bytes_takes_effect_without_restart(broker):
    topic = name()

    async def go(conn):
        await create(conn, topic)
        await wait_visible(conn, topic)
        big = batch(1, value=b"x" * 3000)
        assert (await produce(conn, topic, big))["error_code"] == 0

        async def alter(op, value):
            resp = await conn.request(K.INCREMENTAL_ALTER_CONFIGS, 1, {
                "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic,
                               "configs": [{"name": "max.message.bytes",
                                            "config_operation": op, "value": value}]}],
                "validate_only": False})
            return resp["responses"][0]["error_code"]

        assert await alter(SET, "1000") == 0
        assert (await produce(conn, topic, big))["error_code"] == E.MESSAGE_TOO_LARGE
        assert (await produce(conn, topic, batch(1)))["error_code"] == 0
        assert await alter(APPEND, "2000") == E.INVALID_REQUEST     # not a list key
        assert await alter(DELETE, None) == 0
        assert (await produce(conn, topic, big))["error_code"] == 0
    run(broker, go)


# ---------------------------------------------------------------- ListOffsets, DeleteRecords

def test_list_offsets_duplicates_and_v11(broker):
    topic = name()

    async def go(conn):
        await create(conn, topic, partitions=2)
        await wait_visible(conn, topic, 2)
        await produce(conn, topic, batch(4))

        async def list_offsets(parts, version=11):
            resp = await conn.request(K.LIST_OFFSETS, version, {
                "replica_id": -1, "isolation_level": 0, "timeout_ms": 1000,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts}
                    for p, ts in parts]}]})
            return [(r["partition_index"], r["error_code"], r["offset"])
                    for r in resp["topics"][0]["partitions"]]

        assert await list_offsets([(0, -1), (1, -2), (0, -2)]) == [
            (0, E.INVALID_REQUEST, -1), (1, 0, 0), (0, E.INVALID_REQUEST, -1)]
        # -6 (earliest pending upload, KIP-1023): no tiered storage, so none
        assert await list_offsets([(0, -6), (1, -1)]) == [(0, 0, -1), (1, 0, 0)]
        assert await list_offsets([(0, -6)], version=10) == [(0, E.UNSUPPORTED_VERSION, -1)]
        assert await list_offsets([(0, -7)]) == [(0, E.UNSUPPORTED_VERSION, -1)]
    run(broker, go)


def test_delete_records_policy_violation_on_compacted_topic(broker):
    topic = name()

    async def go(conn):
        await create(conn, topic, configs={"cleanup.policy": "compact"})
        await wait_visible(conn, topic)
        b = BatchBuilder()
        b.append(b"k", b"v")
        assert (await produce(conn, topic, b.build()))["error_code"] == 0
        resp = await conn.request(K.DELETE_RECORDS, 2, {"timeout_ms": 5000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "offset": 1}]}]})
        r = resp["topics"][0]["partitions"][0]
        assert (r["error_code"], r["low_watermark"]) == (E.POLICY_VIOLATION, -1)
    run(broker, go)


# ---------------------------------------------------------------- ApiVersions, DescribeCluster

def test_api_versions_validates_client_software_and_advertises_new_versions(broker):
    async def go(conn):
        ok = await conn.request(K.API_VERSIONS, 3, {
            "client_software_name": "confluent-kafka-python",
            "client_software_version": "2.16.1-rdkafka-2.16.0"})
        assert ok["error_code"] == 0
        ranges = {k["api_key"]: k["max_version"] for k in ok["api_keys"]}
        assert (ranges[K.METADATA], ranges[K.LIST_OFFSETS], ranges[K.DESCRIBE_CLUSTER]) == \
            (13, 11, 2)
        for software, version in (("bad name", "1.0"), ("ok", "-1"), ("", "1"), ("ok", "1.")):
            bad = await conn.request(K.API_VERSIONS, 4, {"client_software_name": software,
                                                         "client_software_version": version})
            assert (bad["error_code"], bad["api_keys"]) == (E.INVALID_REQUEST, []), software
        dc = await conn.request(K.DESCRIBE_CLUSTER, 2, {
            "include_cluster_authorized_operations": False, "endpoint_type": 1,
            "include_fenced_brokers": True})
        assert dc["error_code"] == 0
        assert [(b["broker_id"], b["port"], b["is_fenced"]) for b in dc["brokers"]] == \
            [(1, broker.port, False)]
    run(broker, go)


def test_unsupported_api_versions_version_lists_only_api_versions(broker):
    """KIP-511 (Kafka's ApiVersionsRequest.getErrorResponse): the v0-format answer to an
    unknown ApiVersions version carries UNSUPPORTED_VERSION and only ApiVersions' range."""
    with h.connect(broker.bootstrap) as s:
        s.sendall(h.frame_request(h.API_VERSIONS, 77, 5, b"\x00garbage"))
        corr, err, ranges = h.parse_api_versions_v0(h.recv_frame(s))
    assert (corr, err, ranges) == (5, E.UNSUPPORTED_VERSION, {h.API_VERSIONS: (0, 4)})
