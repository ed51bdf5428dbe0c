"""A failing log dir (one dir): EIO (ext4's shutdown ioctl) or a read-only file
system (ext4 errors=remount-ro, triggered through /sys/fs/ext4/<dev>/trigger_fs_error).

The broker logs the failed log dir and stops by itself with a non-zero exit code
(Kafka halts when no log dir is left); nothing acknowledged before is lost: after
the file system is repaired (mounted again) the broker starts and serves it all.
"""
from __future__ import annotations

import errno
import os

import pytest

from tests.faults.conftest import (broker_log, produce_values, read_all, shutdown_fs,
                                   wait_until)
from tests.integration import broker as harness

pytestmark = pytest.mark.slow

@pytest.mark.parametrize("fault", ["eio", "read-only"])
def test_failed_log_dir_stops_the_broker_non_zero(fresh_broker, mounts, ledger, tmp_path,
                                                  fault):
    data = tmp_path / "broker0" / "data"
    mounts.ext4(data, 32)
    b = fresh_broker()
    topic = harness.create_topic(b.bootstrap, "failing", 2)
    p = harness.producer(b.bootstrap, acks="all", **{"enable.idempotence": True,
                                                       "message.timeout.ms": 20000})
    produce_values((p,), ledger, topic, 200)
    harness.flush(p, 60)
    acked = dict(ledger.acked)
    assert len(acked) == 200
    # the acknowledged records are on disk (what a disk failure cannot take back:
    # records still only in the page cache die with the file system, in Kafka too)
    os.sync()
    if fault == "eio":
        shutdown_fs(data)
    else:
        _make_read_only(mounts, data)

    def stopped():
        produce_values((p,), ledger, topic, 10)
        p.poll(0.2)
        return not b.is_alive()
    wait_until(stopped, 60, "stopped by itself")
    assert b.proc.returncode != 0
    text = broker_log(b)
    assert "failed" in text and "no log dir left: stopping the broker" in text, text[-3000:]
    b.kill()
    p.purge()                   # what was never acknowledged is not sent to the next start
    p.flush(5)

    # repaired: mounted again, the broker starts and has every acknowledged record
    mounts.remount_fresh(data)
    b.start()
    counts = ledger.check(read_all(b.bootstrap, topic))
    assert counts["acked"] >= 200
    assert b.stop() == 0


def _make_read_only(mounts, data) -> None:
    """An ext4 error with errors=remount-ro: every write fails with EROFS from now on."""
    dev = mounts.loop_device(data)
    with open(f"/sys/fs/ext4/{dev}/trigger_fs_error", "w") as f:
        f.write("test: fail the log dir\n")

    def read_only():
        try:
            os.close(os.open(data / "probe", os.O_WRONLY | os.O_CREAT, 0o644))
            return False
        except OSError as e:
            return e.errno == errno.EROFS
    wait_until(read_only, 10, "read-only")


def test_unclean_close_makes_sigterm_exit_non_zero(fresh_broker, mounts, tmp_path):
    """SIGTERM's exit code says whether the clean shutdown succeeded: the partitions
    cannot be closed cleanly on a read-only file system."""
    data = tmp_path / "broker0" / "data"
    mounts.ext4(data, 32)
    b = fresh_broker()
    harness.create_topic(b.bootstrap, "closing", 2)
    _make_read_only(mounts, data)
    assert b.stop() != 0
    assert "did not close cleanly" in broker_log(b)


def test_two_log_dirs_one_fails_the_other_keeps_serving(fresh_broker, mounts, ledger,
                                                         tmp_path):
    """log.dirs with two directories: partitions spread over both; EIO on one takes
    its partitions offline (KAFKA_STORAGE_ERROR) while the other keeps serving, also
    across a restart before the repair; after it nothing acknowledged is missing."""
    a, b_dir = tmp_path / "dir-a", tmp_path / "dir-b"
    mounts.ext4(a, 32)
    mounts.ext4(b_dir, 32)
    b = fresh_broker({"log.dirs": f"{a},{b_dir}"})
    topic = harness.create_topic(b.bootstrap, "spread", 4)

    def where(d):
        return {int(n.rsplit("-", 1)[1]) for n in os.listdir(d) if n.startswith("spread-")}
    wait_until(lambda: len(where(a) | where(b_dir)) == 4, 30, "all partitions opened")
    in_a, in_b = where(a), where(b_dir)
    assert in_a and in_b and in_a | in_b == {0, 1, 2, 3}, (in_a, in_b)
    p = harness.producer(b.bootstrap, acks="all", **{"enable.idempotence": True,
                                                       "message.timeout.ms": 8000})
    produce_values((p,), ledger, topic, 200, partitions=4)
    harness.flush(p, 60)
    os.sync()
    shutdown_fs(b_dir)

    def offline():
        produce_values((p,), ledger, topic, 4, partitions=4)
        p.poll(0.2)
        return "keep serving" in broker_log(b)
    wait_until(offline, 30, "the failed dir offline")
    before = len(ledger.acked)
    produce_values((p,), ledger, topic, 100, partitions=4)
    p.flush(20)
    new = [where for v, where in ledger.acked.items() if where[1] >= 0][before:]
    assert b.is_alive()
    assert any(part in in_a for part, _ in new), "the healthy dir stopped serving"
    assert all(part in in_a for part, _ in new)
    assert any(err for err in ledger.failed.values()), "nothing refused on the failed dir"
    # ListOffsets answers KAFKA_STORAGE_ERROR for the failed dir's partitions, and the
    # same client goes on being served for the others
    from confluent_kafka import KafkaError, KafkaException, TopicPartition
    cons = harness.consumer(b.bootstrap)
    try:
        for q in sorted(in_b):
            with pytest.raises(KafkaException) as ei:
                cons.get_watermark_offsets(TopicPartition(topic, q), timeout=10)
            assert ei.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, ei.value
        for q in sorted(in_a):
            assert cons.get_watermark_offsets(TopicPartition(topic, q), timeout=10)[1] > 0
    finally:
        cons.close()
    assert b.stop() != 0                     # its partitions did not close cleanly

    b.start()                                # the dir still failed: the rest serves
    p2 = harness.producer(b.bootstrap, acks="all", **{"message.timeout.ms": 8000})
    for part in sorted(in_a):
        p2.produce(topic, ledger.next_value(), partition=part, on_delivery=ledger.on_delivery)
    assert p2.flush(20) == 0
    assert b.stop() != 0
    p.purge()
    p.flush(1)

    mounts.remount_fresh(b_dir)              # repaired
    b.start()
    counts = ledger.check(read_all(b.bootstrap, topic, partitions=4))
    assert counts["acked"] >= 200 + len(in_a)
    assert b.stop() == 0
