"""How a worker applies cluster metadata to its local logs (workers/worker.py
`_reconcile`), with real logs in a temporary log dir: a stray log of an earlier topic of
the same name is deleted and replaced, stray partition directories are deleted once per
placement revision, a partition that fails to apply does not keep the others from
being applied while a failed log dir stops the worker, and StopReplica without delete (this broker offline in the view) closes
a follower but keeps its log.

The metadata comes from a holder object here: what the controllers push is covered by
tests/mpbroker/controller and tests/cluster (the auditor's scenario of a topic deleted while a
replica was down: tests/cluster/test_topics.py)."""
from __future__ import annotations

import asyncio
import os

import pytest

from mpbroker import config as configmod
from mpbroker.metadata import model
from storage.batch import BatchBuilder
from storage.log import Log, LogConfig
from workers.worker import Worker

ME = 1


class Holder:
    """The metadata a worker's controller handle would return."""

    def __init__(self, md):
        self.md = md
        self.broker_id = ME

    def metadata(self):
        return self.md

    def broker_config(self):
        return None


def metadata(*topics, epoch=1):
    """topics: (name, topic_id, {partition: (leader, replicas, offline)})."""
    md = model.new_cluster_metadata()
    for b in (1, 2):
        md = model.register_broker(md, model.Broker(b, "127.0.0.1", 1))
    out = {}
    for name, tid, parts in topics:
        out[name] = model.Topic(name, tid, {
            p: model.PartitionState(p, leader, 0, replicas, replicas, offline)
            for p, (leader, replicas, offline) in parts.items()})
    return model.ClusterMetadata(md.cluster_id, 1, md.brokers, out, epoch)


def make_broker(tmp_path, md):
    text = f"broker.id={ME}\nlog.dirs={tmp_path}\nlisteners=PLAINTEXT://127.0.0.1:0\n"
    cfg = configmod.BrokerConfig.from_text(text, ["zookeeper.connect=127.0.0.1:1"])
    return Worker(cfg, Holder(md))


def write_log(path, topic_id, n=3):
    lg = Log.open(str(path), LogConfig(), topic_id=topic_id)
    b = BatchBuilder()
    for i in range(n):
        b.append(None, b"old%d" % i)
    lg.append(bytearray(b.build()))
    lg.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_a_log_of_another_topic_id_is_deleted_and_the_partition_opened_fresh(tmp_path):
    old, new = model.generate_topic_id(), model.generate_topic_id()
    write_log(tmp_path / "x-0", old)

    async def main():
        b = make_broker(tmp_path, metadata(("x", new, {0: (ME, (ME, 2), ())})))
        try:
            b.apply_metadata(b.controller.md)
            p = b.partitions[("x", 0)]
            assert p.topic_id == new and p.log.log_end_offset == 0
        finally:
            b.shutdown()
    run(main())
    assert sorted(os.listdir(tmp_path)) == ["x-0"]          # no -delete dir left behind
    assert Log.open(str(tmp_path / "x-0"), LogConfig(), topic_id=new).log_end_offset == 0


def test_one_partition_failing_does_not_leave_the_others_unapplied(tmp_path):
    tids = {"bad": model.generate_topic_id(), "good": model.generate_topic_id()}
    md = metadata(("bad", tids["bad"], {0: (ME, (ME,), ())}),
                  ("good", tids["good"], {0: (ME, (ME,), ()), 1: (ME, (ME,), ())}))

    async def main():
        b = make_broker(tmp_path, md)
        real_open, broken = b._open_partition, {"bad"}

        def open_partition(topic, index, state):      # a fault that is not the disk's
            if topic.name in broken:
                raise RuntimeError("injected: cannot apply")
            return real_open(topic, index, state)
        b._open_partition = open_partition
        try:
            b.apply_metadata(md)                    # must not raise
            assert b.metadata is md
            assert set(b.partitions) == {("good", 0), ("good", 1)}
            # fixed: the next push opens it
            broken.clear()
            b.apply_metadata(model.ClusterMetadata(md.cluster_id, 1, md.brokers, md.topics, 2))
            assert set(b.partitions) == {("good", 0), ("good", 1), ("bad", 0)}
        finally:
            b.shutdown()
    run(main())


def test_a_failed_log_dir_stops_the_worker(tmp_path):
    # As Kafka halts when its (only) log dir fails: the worker stops and exits
    # LOG_DIR_FAILURE_EXIT, on which the supervisor stops the broker non-zero
    # (tests/faults/test_disk_failure.py).
    from workers.worker import LOG_DIR_FAILURE_EXIT
    (tmp_path / "bad-0").write_bytes(b"not a directory")
    md = metadata(("bad", model.generate_topic_id(), {0: (ME, (ME,), ())}))

    async def main():
        b = make_broker(tmp_path, md)
        stops = []
        b.request_stop = lambda: stops.append(1)
        try:
            b.apply_metadata(md)
            assert stops == [1] and "bad-0" in b.log_dir_failed
        finally:
            assert b.shutdown() == LOG_DIR_FAILURE_EXIT
    run(main())


def test_stray_partition_directories_are_deleted(tmp_path):
    tid = model.generate_topic_id()
    write_log(tmp_path / "gone-0", model.generate_topic_id())        # topic deleted meanwhile
    write_log(tmp_path / "moved-0", tid)                             # no longer a replica here
    write_log(tmp_path / "mine-0", tid)
    os.makedirs(tmp_path / f"mine-1.{'ab' * 16}-delete")             # a crash during a delete
    os.makedirs(tmp_path / "foreign-0")                              # no partition.metadata
    md = metadata(("moved", tid, {0: (2, (2,), ())}), ("mine", tid, {0: (ME, (ME,), ())}))

    async def main():
        b = make_broker(tmp_path, md)
        try:
            b.apply_metadata(md)
            assert set(b.partitions) == {("mine", 0)}
            assert b.partitions[("mine", 0)].log.log_end_offset == 3     # kept, not reset
        finally:
            b.shutdown()
    run(main())
    assert sorted(os.listdir(tmp_path)) == ["foreign-0", "mine-0"]


def test_stop_replica_without_delete_closes_the_follower_and_keeps_its_log(tmp_path):
    tid = model.generate_topic_id()
    follower = metadata(("x", tid, {0: (2, (2, ME), ())}), epoch=1)
    stopped = metadata(("x", tid, {0: (2, (2, ME), (ME,))}), epoch=2)
    leader = metadata(("x", tid, {0: (ME, (2, ME), ())}), epoch=3)

    async def main():
        b = make_broker(tmp_path, follower)
        try:
            b.apply_metadata(follower)
            assert ("x", 0) in b.followers and ("x", 0) in b.replication.following
            b.apply_metadata(stopped)
            assert ("x", 0) not in b.followers and ("x", 0) not in b.replication.following
            assert (tmp_path / "x-0" / "partition.metadata").exists()
            b.apply_metadata(leader)                # a leader again is served again
            assert ("x", 0) in b.partitions
        finally:
            b.shutdown()
    run(main())
