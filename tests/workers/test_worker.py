"""How a worker opens the logs of new partitions (workers/worker.py `_reconcile`,
`_open_pending`): OPEN_CHUNK at a time, the loop turning between chunks; a partition
not opened yet answers NOT_LEADER_OR_FOLLOWER (retriable); a later push (the topic
deleted, or made again with another id) wins over the opens still to do; the logs a
worker finds at start open before it is ready, not in chunks; one fsync of the log dir
per chunk (not several per log)."""
from __future__ import annotations

import asyncio
import os
import time

import pytest

from mpbroker.metadata import model
from mpbroker.protocol.errors import ErrorCode
from workers import worker as workermod
from tests.conftest import record_fsyncs
from tests.workers.test_reconcile_cluster import ME, make_broker, metadata, run

CHUNK = 4


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(workermod, "OPEN_CHUNK", CHUNK)
    monkeypatch.setattr(workermod, "OPEN_SLICE_S", 3600)   # chunks by count here


def topic(name, n, tid=None):
    return (name, tid or model.generate_topic_id(), {i: (ME, (ME,), ()) for i in range(n)})


async def until(cond, timeout=10.0):
    """Let the loop turn (one turn at a time: the opener does one chunk a turn)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0)


def test_new_partitions_open_in_chunks_and_the_loop_turns_between_them(tmp_path):
    n = 3 * CHUNK + 1
    md = metadata(topic("t", n), epoch=2)

    async def main():
        b = make_broker(tmp_path, metadata(epoch=1))
        seen = []                    # partitions open each time another task ran

        async def ticker():
            while True:
                seen.append(len(b.partitions))
                await asyncio.sleep(0)
        t = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        try:
            b.apply_metadata(md)
            assert len(b.partitions) == CHUNK              # the first chunk at once
            assert b.partition_error("t", n - 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            await until(lambda: len(b.partitions) == n)
            steps = sorted(set(seen))
            assert steps[:4] == [CHUNK, 2 * CHUNK, 3 * CHUNK, n] or \
                set(range(CHUNK, n + 1, CHUNK)) <= set(steps)  # the ticker ran between
            assert b._opener is None and not b._to_open
            for i in range(n):
                p = b.partition("t", i)
                assert p is not None and p.leader_id == ME and p.log.log_end_offset == 0
        finally:
            t.cancel()
            assert b.shutdown() == 0
    run(main())


def test_a_delete_arriving_mid_apply_is_honoured(tmp_path):
    n = 4 * CHUNK
    md = metadata(topic("t", n), epoch=2)

    async def main():
        b = make_broker(tmp_path, metadata(epoch=1))
        try:
            b.apply_metadata(md)
            await until(lambda: len(b.partitions) >= 2 * CHUNK)
            assert len(b.partitions) < n
            b.apply_metadata(metadata(epoch=3))               # the topic deleted
            assert not b.partitions and not b._to_open
            await until(lambda: b._opener is None)
            assert not b.partitions
            assert not [d for d in os.listdir(tmp_path) if d.startswith("t-")]
        finally:
            assert b.shutdown() == 0
    run(main())


def test_a_topic_made_again_mid_apply_opens_with_the_newest_id(tmp_path):
    n = 4 * CHUNK
    old, new = model.generate_topic_id(), model.generate_topic_id()

    async def main():
        b = make_broker(tmp_path, metadata(epoch=1))
        try:
            b.apply_metadata(metadata(topic("t", n, old), epoch=2))
            await until(lambda: len(b.partitions) >= 2 * CHUNK)
            b.apply_metadata(metadata(topic("t", n, new), epoch=3))
            await until(lambda: len(b.partitions) == n and b._opener is None)
            assert {b.partition("t", i).topic_id for i in range(n)} == {new}
            assert {b.partition("t", i).log.topic_id for i in range(n)} == {new}
        finally:
            assert b.shutdown() == 0
    run(main())


def test_the_logs_there_at_start_open_before_the_worker_is_ready(tmp_path):
    n = 3 * CHUNK
    md = metadata(topic("t", n))

    async def main():
        b = make_broker(tmp_path, md)
        try:
            b.start(asyncio.get_running_loop())
            assert len(b.partitions) == n and not b._to_open
        finally:
            assert b.shutdown() == 0
    run(main())


def test_one_fsync_of_the_log_dir_per_chunk(tmp_path, monkeypatch):
    n = 2 * CHUNK
    made = record_fsyncs(monkeypatch)

    async def main():
        b = make_broker(tmp_path, metadata(epoch=1))
        try:
            b.apply_metadata(metadata(topic("t", n), epoch=2))
            assert made == [str(tmp_path)]
            await until(lambda: len(b.partitions) == n)
            assert made == [str(tmp_path)] * 2
        finally:
            assert b.shutdown() == 0
    run(main())


def test_a_chunk_ends_early_on_a_slow_disk(tmp_path, monkeypatch):
    """OPEN_SLICE_S bounds a chunk's time: at least one log a turn, fewer than
    OPEN_CHUNK when the time is up (here at once)."""
    monkeypatch.setattr(workermod, "OPEN_SLICE_S", 0)
    n = CHUNK

    async def main():
        b = make_broker(tmp_path, metadata(epoch=1))
        try:
            b.apply_metadata(metadata(topic("t", n), epoch=2))
            assert len(b.partitions) == 1
            await until(lambda: len(b.partitions) == n)
        finally:
            assert b.shutdown() == 0
    run(main())


def test_a_placement_revision_is_acknowledged_once_its_new_logs_are_open(tmp_path):
    """The controller's move waits for the new owner's acknowledgement that it opened
    the logs (mpbroker/controller/placement.py): not before the last chunk."""
    from mpbroker.metadata.placement import PlacementTable
    n = 3 * CHUNK
    md = metadata(topic("t", n), epoch=2)

    async def main():
        b = make_broker(tmp_path, metadata(epoch=1))
        acks = []
        b.on_placement_applied = acks.append
        try:
            b.placement = PlacementTable(revision=1, num_workers=2, assignments={
                ("t", i): 1 for i in range(n)})
            b.apply_metadata(md)
            assert not b.partitions and not b._to_open       # worker 1's, not ours (0)
            b.apply_placement(PlacementTable(revision=2, num_workers=2, assignments={
                ("t", i): 0 for i in range(n)}))
            assert len(b.partitions) == CHUNK and acks == []
            await until(lambda: len(b.partitions) == n)
            assert acks == [2]
        finally:
            assert b.shutdown() == 0
    run(main())


def test_topic_names_by_id_follow_each_new_metadata(tmp_path):
    a, b_id, c = (model.generate_topic_id() for _ in range(3))
    md = metadata(topic("a", 1, a), topic("b", 1, b_id), epoch=2)

    async def main():
        b = make_broker(tmp_path, metadata(epoch=1))
        try:
            assert b.topic_name_for_id(a) is None
            b.metadata = md
            assert (b.topic_name_for_id(a), b.topic_name_for_id(b_id)) == ("a", "b")
            assert b.topic_name_for_id(c) is None
            # "b" deleted and made again under a new id, "c" created
            b.metadata = metadata(topic("a", 1, a), topic("b", 1, c), epoch=3)
            assert b.topic_name_for_id(b_id) is None and b.topic_name_for_id(c) == "b"
            assert b.topic_name_for_id(a) == "a"
            b.metadata = None
            assert b.topic_name_for_id(a) is None
        finally:
            b.shutdown()
    run(main())
