"""A full disk loses nothing acknowledged, and the broker serves again by itself.

Real broker process on a small loop-mounted ext4 file system or tmpfs, real
confluent-kafka producers (acks=all idempotent, and acks=1), a ledger of unique
values: records acknowledged before, while and after the disk is full are all read
back once, at the offset they were acknowledged with.  Room is made again by deleting
a topic through the Kafka API (ext4) or by removing a filler file (tmpfs).
"""
from __future__ import annotations

import pytest

from tests.faults.conftest import broker_log, fill, produce_values, read_all, wait_until
from tests.integration import broker as harness

pytestmark = pytest.mark.slow

@pytest.mark.parametrize("fs", ["ext4", "tmpfs"])
def test_disk_full_loses_nothing_and_recovers(fresh_broker, mounts, ledger, tmp_path, fs):
    data = tmp_path / "broker0" / "data"
    (mounts.ext4 if fs == "ext4" else mounts.tmpfs)(data, 48)
    b = fresh_broker({"log.segment.bytes": 4 * 1024 * 1024})
    topic = harness.create_topic(b.bootstrap, "full", 2)
    spare = harness.create_topic(b.bootstrap, "spare", 1)
    sp = harness.producer(b.bootstrap, acks="1", **{"linger.ms": 50})
    for _ in range(8000):               # 8 MB that deleting the topic frees later
        sp.produce(spare, b"." * 1000)
        sp.poll(0)
    harness.flush(sp, 60)
    p_all = harness.producer(b.bootstrap, acks="all", **{"enable.idempotence": True,
                                                           "message.timeout.ms": 90000})
    p_one = harness.producer(b.bootstrap, acks="1", **{"message.timeout.ms": 90000})
    producers = (p_all, p_one)
    produce_values(producers, ledger, topic, 200)
    for p in producers:
        harness.flush(p, 60)
    assert len(ledger.acked) == 400 and not ledger.failed

    filler = fill(data)
    # enough to go past the space the segments reserved ahead: appends must fail now
    produce_values(producers, ledger, topic, 1500)

    def refused():
        for p in producers:
            p.poll(0.1)
        return "no room on the disk, appends answer KAFKA_STORAGE_ERROR" in broker_log(b)
    wait_until(refused, 60, "refused for want of space")
    assert b.is_alive()

    if fs == "ext4":                         # room again: the retries go through
        a = harness.admin(b.bootstrap)       # (DeleteTopics works on a full disk)
        a.delete_topics([spare], operation_timeout=30)[spare].result(30)
    else:
        filler.unlink()
    for p in producers:
        harness.flush(p, 90)
    b.wait_for_log("appends succeed again", timeout=30)
    produce_values(producers, ledger, topic, 100)
    for p in producers:
        harness.flush(p, 60)
    counts = ledger.check(read_all(b.bootstrap, topic))
    assert counts["acked"] == 400 + 3000 + 200 and counts["failed"] == 0, counts
    assert broker_log(b).count("(logged once)") <= 2 * 2     # per partition (and a retry race)
    assert b.stop() == 0


def test_restart_on_a_full_disk(fresh_broker, mounts, ledger, tmp_path):
    """A stop on a full disk cannot close the partitions cleanly (exit code non-zero);
    the broker starts again all the same (metadata writes use the space reserve, the
    logs recover), and serves everything acknowledged once there is room."""
    data = tmp_path / "broker0" / "data"
    mounts.tmpfs(data, 32)
    b = fresh_broker()
    topic = harness.create_topic(b.bootstrap, "restart", 2)
    p = harness.producer(b.bootstrap, acks="all", **{"enable.idempotence": True})
    produce_values((p,), ledger, topic, 200)
    harness.flush(p, 60)
    filler = fill(data)
    assert b.stop() != 0
    assert "did not close cleanly" in broker_log(b)
    b.start()
    filler.unlink()
    p = harness.producer(b.bootstrap, acks="all", **{"enable.idempotence": True})
    produce_values((p,), ledger, topic, 20)
    harness.flush(p, 60)
    counts = ledger.check(read_all(b.bootstrap, topic))
    assert counts["acked"] == 220 and counts["failed"] == 0
    assert b.stop() == 0
