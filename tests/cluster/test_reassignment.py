"""Partition reassignment (KIP-455) in cluster mode with kafka-python's admin client
(AlterPartitionReassignments / ListPartitionReassignments) and Kafka's
/admin/reassign_partitions znode."""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient

from tests.cluster.test_failover import create_topic, produce

pytestmark = pytest.mark.slow


def kadmin(c):
    return KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=20000)


def metadata_brokers(c) -> set[int]:
    """Broker ids in the Metadata of every live broker (a fresh connection to each,
    so any of its workers may answer)."""
    ids: set[int] = set()
    for b in c.brokers.values():
        if b.is_alive():
            ids |= set(AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).brokers)
    return ids


def assignment(c, topic):
    d = json.loads(c.zk_client().get(f"/brokers/topics/{topic}")[0])
    return d["partitions"], d["adding_replicas"], d["removing_replicas"]


def test_shrink_replica_set_moves_leader(cluster):
    c = cluster(3)
    create_topic(c, "rs", partitions=1, rf=3)
    st = c.state("rs", 0)
    others = [b for b in (1, 2, 3) if b != st["leader"]]
    a = kadmin(c)
    try:
        res = a.alter_partition_reassignments({KTP("rs", 0): others})
        assert res == {KTP("rs", 0): None}
        c.wait_for(lambda: assignment(c, "rs") == ({"0": others}, {}, {}), 15, "reassignment done")
        s = c.state("rs", 0)
        assert s["leader"] == others[0] and sorted(s["isr"]) == sorted(others)
        assert s["leader_epoch"] > st["leader_epoch"]
        assert a.list_partition_reassignments() == {}
        # unknown broker, unknown partition, cancel without a reassignment
        res = a.alter_partition_reassignments({KTP("rs", 0): [others[0], 42], KTP("nope", 0): [1],
                                               KTP("rs", 9): None})
        codes = {tp: e.errno for tp, e in res.items()}
        assert codes == {KTP("rs", 0): 39, KTP("nope", 0): 3, KTP("rs", 9): 3}   # INVALID_REPLICA_ASSIGNMENT
    finally:
        a.close()


def test_ongoing_reassignment_is_listed_and_can_be_cancelled(cluster):
    c = cluster(3)
    create_topic(c, "mv", partitions=1, rf=1)
    src = c.state("mv", 0)["leader"]
    cid = c.controller()[0]
    dst = next(b for b in (1, 2, 3) if b not in (src, cid)) if src != cid else \
        next(b for b in (1, 2, 3) if b != src)
    # the target broker is frozen, then dies: the move can never finish
    c.pause(dst)
    c.zk_client().create("/admin/reassign_partitions", json.dumps(
        {"version": 1, "partitions": [{"topic": "mv", "partition": 0, "replicas": [dst]}]}).encode())
    c.wait_for(lambda: assignment(c, "mv") == ({"0": [dst, src]}, {"0": [dst]}, {"0": [src]}),
               10, "reassignment started")
    c.kill(dst)
    c.wait_for(lambda: dst not in c.live_ids(), 15, "the target broker gone")
    # kafka-python's admin client asks the brokers it learns from Metadata; until the
    # live brokers drop the dead one it may pick that one and fail to connect
    c.wait_for(lambda: not any(dst in metadata_brokers(c) for _ in range(4)), 15,
               "the dead broker gone from the live brokers' metadata")
    a = kadmin(c)
    try:
        assert a.list_partition_reassignments() == {
            KTP("mv", 0): {"replicas": [dst, src], "adding_replicas": [dst], "removing_replicas": [src]}}
        assert a.alter_partition_reassignments({KTP("mv", 0): None}) == {KTP("mv", 0): None}
        c.wait_for(lambda: assignment(c, "mv") == ({"0": [src]}, {}, {}), 10, "cancelled")
        assert c.state("mv", 0)["leader"] == src
        assert a.list_partition_reassignments() == {}
    finally:
        a.close()


def test_move_to_another_broker_through_zookeeper(cluster):
    """Needs replication: the new replica catches up and joins the ISR, then the move ends."""
    c = cluster(3)
    create_topic(c, "zm", partitions=1, rf=1)
    src = c.state("zm", 0)["leader"]
    produce(c.bootstrap, "zm", [b"m%d" % i for i in range(20)])
    dst = next(b for b in (1, 2, 3) if b != src)
    t0 = time.monotonic()
    c.zk_client().create("/admin/reassign_partitions", json.dumps(
        {"version": 1, "partitions": [{"topic": "zm", "partition": 0, "replicas": [dst]}]}).encode())
    c.wait_for(lambda: assignment(c, "zm") == ({"0": [dst]}, {}, {}), 40, "move completed")
    print(f"\nreassignment {src}->{dst} done in {time.monotonic() - t0:.2f}s")
    s = c.state("zm", 0)
    assert s["leader"] == dst and s["isr"] == [dst]
    assert not c.zk_client().exists("/admin/reassign_partitions")
