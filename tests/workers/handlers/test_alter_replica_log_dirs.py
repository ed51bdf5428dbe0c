"""AlterReplicaLogDirs (workers/handlers/alter_replica_log_dirs.py): the answers per
partition, the move of a replica between two log dirs of a worker (writes paused,
reads served, the log reopened from the new dir), and what a start makes of a move a
crash interrupted."""
from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from mpbroker import config as configmod
from mpbroker.metadata import model
from mpbroker.protocol.errors import ErrorCode
from storage.batch import BatchBuilder
from workers.worker import Worker
from workers.handlers import alter_replica_log_dirs as A
from workers.handlers.describe_log_dirs import describe
from workers.partition import ReplicaMovingError
from tests.workers.test_reconcile_cluster import ME, Holder, metadata, run


def make_broker(dirs, md):
    text = (f"broker.id={ME}\nlog.dirs={','.join(map(str, dirs))}\n"
            "listeners=PLAINTEXT://127.0.0.1:0\nlog.segment.delete.delay.ms=0\n")
    b = Worker(configmod.BrokerConfig.from_text(text, []), Holder(md))
    b.apply_metadata(md)
    return b


def batch(*values):
    bb = BatchBuilder()
    for v in values:
        bb.append(None, v)
    return memoryview(bytearray(bb.build()))


def read_values(p):
    from storage.batch import iter_batches
    out = []
    for sl in p.read(0, 1 << 20).slices:
        with open(sl.path, "rb") as f:
            f.seek(sl.position)
            data = f.read(sl.length)
        for b in iter_batches(memoryview(data)):
            out += [r.value for r in b.records(1 << 20)]
    return out


def req(path, *parts):
    topics = {}
    for t, i in parts:
        topics.setdefault(t, []).append(i)
    return {"dirs": [{"path": str(path), "topics": [{"name": t, "partitions": ps}
                                                   for t, ps in topics.items()]}]}


def codes(resp):
    return {(t["topic_name"], p["partition_index"]): p["error_code"]
            for t in resp["results"] for p in t["partitions"]}


@pytest.fixture
def dirs(tmp_path):
    a, c = tmp_path / "a", tmp_path / "c"
    a.mkdir()
    c.mkdir()
    return str(a), str(c)


def test_move_a_replica_to_the_other_dir(dirs, monkeypatch):
    a, c = dirs
    monkeypatch.setattr(A, "CHUNK", 4096)         # many chunks: the loop runs in between
    md = metadata(("t", model.generate_topic_id(), {0: (ME, (ME,), ())}))

    async def main():
        b = make_broker([a, c], md)               # both empty: the replica goes to a
        try:
            p = b.partition("t", 0)
            for i in range(50):
                p.append(batch(b"v%d" % i * 100))
            src = p.log.dir
            assert os.path.dirname(src) == a
            resp = A.handle(b, None, req(c, ("t", 0)))
            assert codes(resp) == {("t", 0): ErrorCode.NONE}
            move = b.log_dir_moves[("t", 0)]
            with pytest.raises(ReplicaMovingError) as e:     # writes wait for the move
                p.append(batch(b"during"))
            assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            while move.future_dir is None and not move.done.done():
                await asyncio.sleep(0)
            assert len(read_values(p)) == 50              # reads go on
            future = {r["log_dir"]: r["topics"] for r in describe(b, None)}[c]
            assert future[0]["partitions"][0]["is_future_key"] is True
            # asking again for the same dir while it moves: NONE, one move
            assert codes(A.handle(b, None, req(c, ("t", 0)))) == {("t", 0): ErrorCode.NONE}
            await asyncio.wait_for(move.done, 10)
            assert os.path.dirname(p.log.dir) == c and not p.moving
            assert not os.path.exists(src)
            assert read_values(p) == [b"v%d" % i * 100 for i in range(50)]
            assert p.append(batch(b"after")).first_offset == 50
            assert read_values(p)[-1] == b"after"
            assert not [n for n in os.listdir(c) if n.endswith("-future")]
            for _ in range(100):                          # the old dir goes after the delay
                if not [n for n in os.listdir(a) if n.startswith("t-0")]:
                    break
                await asyncio.sleep(0.01)
            assert not [n for n in os.listdir(a) if n.startswith("t-0")]
            res = {r["log_dir"]: r["topics"] for r in describe(b, None)}
            assert res[a] == [] and res[c][0]["partitions"][0]["is_future_key"] is False
            # already there: NONE, nothing to do
            assert codes(A.handle(b, None, req(c, ("t", 0)))) == {("t", 0): ErrorCode.NONE}
            assert ("t", 0) not in b.log_dir_moves
        finally:
            assert b.shutdown() == 0
        b2 = make_broker([a, c], md)              # a restart finds it in c
        try:
            p = b2.partition("t", 0)
            assert os.path.dirname(p.log.dir) == c and p.log.log_end_offset == 51
        finally:
            b2.shutdown()
    run(main())


def test_answers_per_partition(dirs, tmp_path):
    a, c = dirs
    md = metadata(("t", model.generate_topic_id(), {0: (ME, (ME,), ()), 1: (2, (2,), ())}))

    async def main():
        b = make_broker([a, c], md)
        try:
            assert codes(A.handle(b, None, req(tmp_path / "nope", ("t", 0)))) == \
                {("t", 0): ErrorCode.LOG_DIR_NOT_FOUND}
            assert codes(A.handle(b, None, req("c", ("t", 0)))) == \
                {("t", 0): ErrorCode.LOG_DIR_NOT_FOUND}       # not absolute
            r = A.handle(b, None, req(c, ("t", 1), ("t", 7), ("u", 0)))
            assert codes(r) == {("t", 1): ErrorCode.REPLICA_NOT_AVAILABLE,   # not a replica here
                                ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                ("u", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            b.offline_dirs[c] = "failed"
            assert codes(A.handle(b, None, req(c, ("t", 0)))) == \
                {("t", 0): ErrorCode.KAFKA_STORAGE_ERROR}
        finally:
            b.shutdown()
    run(main())


def test_merge_keeps_the_owners_answers():
    r = {"dirs": [{"path": "/d", "topics": [{"name": "t", "partitions": [0, 1, 2]}]}]}
    w0 = {"throttle_time_ms": 0, "results": [{"topic_name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "owned": True},
        {"partition_index": 1, "error_code": 9, "owned": False},
        {"partition_index": 2, "error_code": 9, "owned": False}]}]}
    w1 = {"throttle_time_ms": 0, "results": [{"topic_name": "t", "partitions": [
        {"partition_index": 0, "error_code": 9, "owned": False},
        {"partition_index": 1, "error_code": 57, "owned": True},
        {"partition_index": 2, "error_code": 9, "owned": False}]}]}
    assert A.merge(r, [w0, w1]) == {"throttle_time_ms": 0, "results": [
        {"topic_name": "t", "partitions": [
            {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 57},
            {"partition_index": 2, "error_code": ErrorCode.REPLICA_NOT_AVAILABLE}]}]}
    # a worker whose handler failed answers error_response's shape (no owned flag):
    # it counts for the partitions no owner answered
    failed = {"throttle_time_ms": 0, "results": [{"topic_name": "t", "partitions": [
        {"partition_index": i, "error_code": 56} for i in range(3)]}]}
    assert codes(A.merge(r, [w0, failed, w1])) == {("t", 0): 0, ("t", 1): 57, ("t", 2): 56}


def _copy_as_future(src, target_dir, complete):
    name = os.path.basename(src)
    future = os.path.join(target_dir, f"{name}.{'ab' * 16}-future")
    shutil.copytree(src, future)
    if complete:
        A.write_marker(future)
    return future


def test_recovery_of_interrupted_moves(dirs):
    a, c = dirs
    tid = model.generate_topic_id()
    md = metadata(("t", tid, {i: (ME, (ME,), ()) for i in range(3)}))

    async def main():
        b = make_broker([a], md)
        for i in range(3):
            b.partition("t", i).append(batch(b"x%d" % i))
        b.shutdown()
        # t-0: crashed while copying (no marker): the copy goes, a keeps it
        _copy_as_future(os.path.join(a, "t-0"), c, complete=False)
        # t-1: copied, crashed before the commit: the copy goes
        _copy_as_future(os.path.join(a, "t-1"), c, complete=True)
        # t-2: crashed after the commit point (old dir renamed -delete): promoted
        _copy_as_future(os.path.join(a, "t-2"), c, complete=True)
        os.rename(os.path.join(a, "t-2"), os.path.join(a, f"t-2.{'cd' * 16}-delete"))
        A.recover_moves([a, c])
        assert sorted(os.listdir(c)) == ["t-2"] and sorted(os.listdir(a))[:2] == ["t-0", "t-1"]
        assert not [n for n in os.listdir(a) if n.endswith("-delete")]
        assert not os.path.exists(os.path.join(c, "t-2", A.COMPLETE_MARKER))
        b2 = make_broker([a, c], md)
        try:
            where = {i: os.path.dirname(b2.partition("t", i).log.dir) for i in range(3)}
            assert where == {0: a, 1: a, 2: c}
            assert read_values(b2.partition("t", 2)) == [b"x2"]
        finally:
            b2.shutdown()
    run(main())


def test_a_worker_respawned_mid_swap_completes_the_move(dirs):
    a, c = dirs
    md = metadata(("t", model.generate_topic_id(), {0: (ME, (ME,), ())}))

    async def main():
        b = make_broker([a], md)
        b.partition("t", 0).append(batch(b"kept"))
        b.shutdown()
        _copy_as_future(os.path.join(a, "t-0"), c, complete=True)
        os.rename(os.path.join(a, "t-0"), os.path.join(a, f"t-0.{'cd' * 16}-delete"))
        b2 = make_broker([a, c], md)        # no recover_moves: the worker's own open
        try:
            p = b2.partition("t", 0)
            assert os.path.dirname(p.log.dir) == c and read_values(p) == [b"kept"]
        finally:
            b2.shutdown()
    run(main())


def test_copy_file_keeps_the_bytes_and_the_length(tmp_path, monkeypatch):
    monkeypatch.setattr(A, "CHUNK", 4096)
    src, dst = tmp_path / "src", tmp_path / "dst"
    with open(src, "wb") as f:
        f.write(os.urandom(5000))
        f.seek(3 * 4096 * 10)               # a hole, then data, then a zero tail
        f.write(b"tail" * 100)
        f.truncate(3 * 4096 * 10 + 400 + 100000)
    asyncio.run(A.copy_file(str(src), str(dst)))
    assert dst.read_bytes() == src.read_bytes()
