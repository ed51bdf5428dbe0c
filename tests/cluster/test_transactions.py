"""Transactions in cluster mode (real ZooKeeper, three real brokers): the transaction
coordinator (leader of the transactional id's `__transaction_state` partition) writes
the markers of partitions led by other brokers with WriteTxnMarkers over a broker
connection, and partition leaders verify transactional produce (KIP-890) with the
coordinator's broker; read_committed consumers see exactly the committed records."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 30
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def read_committed(bootstrap, topic, partitions, n, extra_s=1.0):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, deadline, quiet = [], time.monotonic() + TIMEOUT, None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
            if len(out) >= n:
                quiet = quiet or time.monotonic() + extra_s
                if time.monotonic() >= quiet:
                    break
        return out
    finally:
        c.close()


def test_transactions_across_brokers(cluster):
    c = cluster(3)
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic(topic, 6, 1)], operation_timeout=30)[topic].result(30)
    leaders = set()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        t = a.list_topics(topic, timeout=10).topics[topic]
        leaders = {p.leader for p in t.partitions.values()}
        if len(t.partitions) == 6 and -1 not in leaders:
            break
        time.sleep(0.2)
    assert len(leaders) >= 2          # the transaction spans several brokers
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": f"x-{uuid.uuid4().hex}",
                  "linger.ms": 5})
    p.init_transactions(TIMEOUT)
    for r, commit in ((0, True), (1, False), (2, True)):
        p.begin_transaction()
        for i in range(12):
            p.produce(topic, value=f"{r}-{i}".encode(), partition=i % 6)
        p.flush(TIMEOUT)
        p.commit_transaction(TIMEOUT) if commit else p.abort_transaction(TIMEOUT)
    want = sorted(f"{r}-{i}".encode() for r in (0, 2) for i in range(12))
    assert sorted(read_committed(c.bootstrap, topic, 6, 24)) == want


def test_coordinator_failover_aborts_the_open_transaction(cluster):
    from workers.groups.partitioner import coordinator_partition
    c = cluster(3)
    topic = f"txnf-{uuid.uuid4().hex[:6]}"
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic(topic, 3, 3)], operation_timeout=30)[topic].result(30)
    tid = f"f-{uuid.uuid4().hex}"
    conf = {"bootstrap.servers": c.bootstrap, "transactional.id": tid, "linger.ms": 5}
    p = Producer(conf)
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=f"one-{i}".encode(), partition=i % 3)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=f"open-{i}".encode(), partition=i % 3)
    p.flush(TIMEOUT)
    md = a.list_topics("__transaction_state", timeout=10).topics["__transaction_state"]
    coordinator = md.partitions[coordinator_partition(tid, len(md.partitions))].leader
    c.kill(coordinator)
    rest = ",".join(b.bootstrap for i, b in c.brokers.items() if i != coordinator)
    p2 = Producer({**conf, "bootstrap.servers": rest})
    p2.init_transactions(60)          # the new coordinator loads the log and aborts "open-*"
    p2.begin_transaction()
    for i in range(6):
        p2.produce(topic, value=f"two-{i}".encode(), partition=i % 3)
    p2.commit_transaction(TIMEOUT)
    want = sorted(f"{w}-{i}".encode() for w in ("one", "two") for i in range(6))
    assert sorted(read_committed(rest, topic, 3, 12)) == want
