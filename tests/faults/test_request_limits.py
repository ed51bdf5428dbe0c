"""No small request takes the broker down (issue #15, item 2), against the real broker
process with real clients and raw protocol requests:

* a CreateTopics of one topic with 1,000,000 partitions is refused (POLICY_VIOLATION,
  KRaft's 9,999 partitions per request), so is one that would pass
  `max.broker.partitions`; the broker keeps serving and restarts;
* a Metadata request naming 20,000 new topics is answered: at most 9,999 partitions are
  auto-created per request and no more than the broker cap, the rest answer
  UNKNOWN_TOPIC_OR_PARTITION / POLICY_VIOLATION; the controller keeps its heartbeats
  (the supervisor stops the broker when it misses them), the broker restarts;
* over `controller.mutation.rate`, kafka-python's CreateTopics v7 / DeleteTopics v6 get
  THROTTLING_QUOTA_EXCEEDED with a throttle time, an old CreateTopics v4 is accepted
  (permissive) and told its throttle time.
"""
from __future__ import annotations

import os
import struct

import pytest

from mpbroker.metadata.store import METADATA_DIR, METADATA_FILE
from mpbroker.protocol import codec
from mpbroker.protocol.errors import ErrorCode
from tests.integration import broker as harness
from tests.integration.conftest import fresh_broker, topic_name  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow
METADATA, CREATE_TOPICS = 3, 19


def raw_request(bootstrap: str, api_key: int, version: int, body: dict, timeout: float = 60.0,
                client_id: str = "limits-test") -> dict:
    """One request, its decoded response (request header v2 / response header v1 for
    flexible versions)."""
    flexible_from = codec.REQUESTS[api_key].flexible_from
    flexible = flexible_from is not None and version >= flexible_from
    header = struct.pack(">hhih", api_key, version, 11, len(client_id)) + client_id.encode()
    payload = header + (b"\x00" if flexible else b"") + codec.encode_request(api_key, version, body)
    with harness.connect(bootstrap, timeout) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        frame = harness.recv_frame(sock)
    assert int.from_bytes(frame[:4], "big") == 11
    return codec.decode_response(api_key, version, memoryview(frame), 5 if flexible else 4)


def metadata_file_size(b) -> int:
    return os.path.getsize(b.data_dir / METADATA_DIR / METADATA_FILE)


def produce_and_consume(bootstrap: str, topic: str) -> None:
    p = harness.producer(bootstrap)
    p.produce(topic, value=b"still-serving")
    harness.flush(p)
    c = harness.consumer(bootstrap)
    harness.assign_from_beginning(c, topic, 1)
    got = harness.consume(c, 1)
    c.close()
    assert got[0].value() == b"still-serving"


def test_million_partition_create_topics_is_refused_and_broker_restarts(fresh_broker, topic_name):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    from kafka import KafkaAdminClient
    from kafka.errors import PolicyViolationError

    b = fresh_broker()
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=30000)
    try:          # librdkafka refuses more than 100,000 itself; kafka-python sends it
        with pytest.raises(PolicyViolationError, match="Excessively large number of partitions"):
            kp.create_topics({f"{topic_name}-1000000": {"num_partitions": 1_000_000,
                                                         "replication_factor": 1}})
    finally:
        kp.close()
    a = harness.admin(b.bootstrap)
    for n, words in ((100_000, "Excessively large number of partitions per request."),
                     (5000, "max.broker.partitions")):
        name = f"{topic_name}-{n}"
        fut = a.create_topics([NewTopic(name, n, 1)], request_timeout=30)[name]
        with pytest.raises(KafkaException) as e:
            fut.result(30)
        err = e.value.args[0]
        assert err.code() == ErrorCode.POLICY_VIOLATION and words in err.str()
    assert not {f"{topic_name}-{n}" for n in (1_000_000, 100_000, 5000)} & set(a.list_topics(timeout=10).topics)
    ok = harness.create_topic(b.bootstrap, topic_name)
    produce_and_consume(b.bootstrap, ok)
    assert metadata_file_size(b) < 64 * 1024
    b.restart()
    produce_and_consume(b.bootstrap, ok)


def test_metadata_naming_20000_new_topics_keeps_the_controller_alive(fresh_broker):
    b = fresh_broker({"max.broker.partitions": 400, "worker.heartbeat.timeout.ms": 10000})
    names = [f"auto-{i:05d}" for i in range(20000)]
    resp = raw_request(b.bootstrap, METADATA, 4,
                       {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": True})
    codes = {t["name"]: t["error_code"] for t in resp["topics"]}
    assert len(codes) == 20000
    created = [n for n in names if codes[n] in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)]
    refused = [n for n in names[:9999] if codes[n] == ErrorCode.POLICY_VIOLATION]
    assert 300 <= len(created) <= 400 and set(created) <= set(names[:9999])
    assert len(created) + len(refused) == 9999            # one request's bound
    assert all(codes[n] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for n in names[9999:])
    assert b.is_alive() and "no heartbeat" not in b.log_text()
    assert metadata_file_size(b) < 400 * 200 + 64 * 1024     # bounded by the cap
    harness.wait_for_topic(b.bootstrap, created[0], 1)
    produce_and_consume(b.bootstrap, created[0])
    b.restart()
    md = harness.admin(b.bootstrap).list_topics(timeout=30)
    assert set(created) <= set(md.topics)
    assert "no heartbeat" not in b.log_text()


def test_mutation_quota_answers_throttling_quota_exceeded(fresh_broker, topic_name):
    from kafka import KafkaAdminClient
    from kafka.errors import ThrottlingQuotaExceededError

    def admin():
        # a new client (and connection) each time: kafka-python holds back requests on
        # a connection told to throttle (KIP-219); the bucket is the client id's
        return KafkaAdminClient(bootstrap_servers=b.bootstrap, client_id="quota-test",
                                request_timeout_ms=30000)

    # 0.01 partitions/s: a burst of 0.11, so one partition puts the client ~89 s in debt
    b = fresh_broker({"controller.mutation.rate": 0.01})
    a = admin()
    try:
        first = a.create_topics({f"{topic_name}-a": {"num_partitions": 1, "replication_factor": 1}})
        assert [t["error_code"] for t in first["topics"]] == [0]
        with pytest.raises(ThrottlingQuotaExceededError):       # CreateTopics v7
            a.create_topics({f"{topic_name}-b": {"num_partitions": 1, "replication_factor": 1}})
    finally:
        a.close()
    a = admin()
    try:
        with pytest.raises(ThrottlingQuotaExceededError):       # DeleteTopics v6
            a.delete_topics([f"{topic_name}-a"])
    finally:
        a.close()
    topics = harness.admin(b.bootstrap).list_topics(timeout=10).topics
    assert f"{topic_name}-a" in topics and f"{topic_name}-b" not in topics
    # the strict answer carries the throttle time (kafka-python's admin drops it)
    body = {"topics": [{"name": f"{topic_name}-c", "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}], "timeout_ms": 10000}
    resp = raw_request(b.bootstrap, CREATE_TOPICS, 7, body, client_id="quota-test")
    assert [t["error_code"] for t in resp["topics"]] == [ErrorCode.THROTTLING_QUOTA_EXCEEDED]
    assert resp["throttle_time_ms"] > 0
    # CreateTopics v4 (librdkafka's version) knows no THROTTLING_QUOTA_EXCEEDED: accepted,
    # counted, and told how long to back off
    resp = raw_request(b.bootstrap, CREATE_TOPICS, 4, body, client_id="quota-test")
    assert [t["error_code"] for t in resp["topics"]] == [0]
    assert resp["throttle_time_ms"] > 0
    # another client id has its own bucket
    a = KafkaAdminClient(bootstrap_servers=b.bootstrap, client_id="someone-else")
    try:
        a.create_topics({f"{topic_name}-d": {"num_partitions": 1, "replication_factor": 1}})
    finally:
        a.close()
