"""Group coordinator failover in cluster mode (real ZooKeeper, three real brokers): an
offset commit is answered only once the followers of the group's `__consumer_offsets`
partition have it (acks=all, offsets.commit.required.acks=-1), so killing the
coordinator's broker with SIGKILL right after the commit loses nothing: the new leader
of that partition loads the group and serves the same offsets and metadata."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from workers.groups.partitioner import coordinator_partition

TIMEOUT = 30
OFFSETS = "__consumer_offsets"
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_committed_offsets_survive_coordinator_kill(cluster):
    c = cluster(3)            # offsets.topic.num.partitions=3, replication factor 3
    topic, group = f"gf-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic(topic, 3, 1)], operation_timeout=30)[topic].result(30)
    p = Producer({"bootstrap.servers": c.bootstrap})
    for i in range(30):
        p.produce(topic, value=b"%d" % i, partition=i % 3)
    assert p.flush(TIMEOUT) == 0

    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000})
    cons.subscribe([topic])
    seen, deadline = 0, time.monotonic() + TIMEOUT
    while seen < 30 and time.monotonic() < deadline:
        m = cons.poll(0.2)
        seen += m is not None and m.error() is None
    assert seen == 30
    idx = coordinator_partition(group, 3)
    state = c.state(OFFSETS, idx)
    assert len(state["isr"]) == 3      # the commit must reach two followers
    want = [TopicPartition(topic, q, 3 + q, metadata=f"meta-{q}") for q in range(3)]
    cons.commit(offsets=want, asynchronous=False)
    c.kill(state["leader"])            # at once: no time for a lazy follower to catch up
    cons.close()

    new = c.wait_for(lambda: (lambda s: s if s["leader"] not in (state["leader"], -1) else None)(
        c.state(OFFSETS, idx)), TIMEOUT, "a new leader of the group's offsets partition")
    assert new["leader"] in state["isr"]
    check = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group,
                      "enable.auto.commit": False})
    try:
        got = check.committed([TopicPartition(topic, q) for q in range(3)], timeout=TIMEOUT)
    finally:
        check.close()
    # confluent-kafka sends its metadata NUL-terminated and reads it back as a C string,
    # so its own metadata round-trips exactly
    assert [(tp.partition, tp.offset, tp.metadata) for tp in got] == \
        [(q, 3 + q, f"meta-{q}") for q in range(3)]
