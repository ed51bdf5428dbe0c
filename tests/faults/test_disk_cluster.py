"""Cluster mode: a failed log dir moves leadership away.  Broker 1 has two log dirs;
when one fails (EIO), the partitions it led there get broker 2 as leader (the broker
publishes its offline replicas, the active controller elects without them), the ones
in its healthy dir stay with it, and nothing acknowledged (acks=all) is lost."""
from __future__ import annotations

import os

import pytest

from tests.cluster.conftest import cluster, zookeeper  # noqa: F401  (fixtures)
from tests.faults.conftest import produce_values, read_all, shutdown_fs
from tests.integration import broker as harness

pytestmark = pytest.mark.slow


def test_leadership_moves_off_a_failed_log_dir(cluster, mounts, ledger, tmp_path):  # noqa: F811
    from confluent_kafka.admin import NewTopic
    c = cluster(2, start=False)
    a, b_dir = tmp_path / "b1-a", tmp_path / "b1-b"
    mounts.ext4(a, 32)
    mounts.ext4(b_dir, 32)
    c.add(1, {"log.dirs": f"{a},{b_dir}"})
    c.start_all()
    topic = "moving"
    adm = harness.admin(c.bootstrap)
    adm.create_topics([NewTopic(topic, 4, replica_assignment=[[1, 2]] * 4)],
                      operation_timeout=30)[topic].result(30)
    harness.wait_for_topic(c.bootstrap, topic, 4)

    def where(d):
        return {int(n.rsplit("-", 1)[1]) for n in os.listdir(d) if n.startswith(topic + "-")}
    c.wait_for(lambda: len(where(a) | where(b_dir)) == 4, 30, "broker 1 opened all replicas")
    in_a, in_b = where(a), where(b_dir)
    assert in_a and in_b
    c.wait_for(lambda: all(c.state(topic, p)["leader"] == 1 and
                           sorted(c.state(topic, p)["isr"]) == [1, 2] for p in range(4)),
               30, "broker 1 leads with both in the ISR")
    p = harness.producer(c.bootstrap, acks="all", **{"enable.idempotence": True,
                                                       "message.timeout.ms": 60000})
    produce_values((p,), ledger, topic, 200, partitions=4)
    harness.flush(p, 60)
    shutdown_fs(b_dir)

    def moved():
        produce_values((p,), ledger, topic, 4, partitions=4)
        p.poll(0.2)
        return all(c.state(topic, q)["leader"] == 2 for q in in_b)
    c.wait_for(moved, 40, "leadership of the failed dir's partitions moved to broker 2",
               interval=0.3)
    assert all(c.state(topic, q)["leader"] == 1 for q in in_a)
    produce_values((p,), ledger, topic, 100, partitions=4)
    harness.flush(p, 60)                        # every partition takes writes again
    assert c.brokers[1].is_alive() and c.brokers[2].is_alive()
    counts = ledger.check(read_all(c.bootstrap, topic, partitions=4))
    assert counts["failed"] == 0 and counts["acked"] >= 300
