"""GroupService (workers/groups/service.py) inside one real worker: a real Worker with the
embedded controller and real logs in a temporary directory (no network, no mocks of our
components). Covers what client tests cannot stage: the background load in chunks
(COORDINATOR_LOAD_IN_PROGRESS while it runs), a load that fails and starts over, a
partition lost during its load, and commits that wait for the followers of a
replicated offsets partition (acks=all, min.insync.replicas, offsets.commit.timeout.ms)."""
from __future__ import annotations

import asyncio

from mpbroker import config as configmod
from mpbroker.controller.embedded import EmbeddedController
from storage import errors as serr
from storage.batch import iter_batches
from workers import coordinator_log
from workers.worker import Worker, monotonic_ms
from workers.groups import errors
from workers.groups.coordinator import ACTIVE, LOADING

from tests.conftest import until

from .harness import commit, commit_errors, fetch

OFFSETS = "__consumer_offsets"
N = 120  # committed partitions: ~120 batches of ~120 bytes, dozens of 1 KiB chunks


def make_broker(tmp_path, timer_clock=monotonic_ms, **overrides):
    text = (f"broker.id=1\nlog.dirs={tmp_path}\nlisteners=PLAINTEXT://127.0.0.1:9092\n"
            "offsets.topic.num.partitions=1\noffsets.load.buffer.size=1024\n")
    cfg = configmod.BrokerConfig.from_text(text, [f"{k}={v}" for k, v in overrides.items()])
    ctl = EmbeddedController(cfg)
    ctl.register_broker(1, "127.0.0.1", 9092)
    b = Worker(cfg, ctl, timer_clock=timer_clock)
    ctl.attach_worker(b)
    b.start(asyncio.get_running_loop())
    return b, ctl


async def loaded(b):
    for _ in range(1000):
        if not b.groups.loading():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("the group coordinator load did not finish")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def offsets():
    return {("t", i): (i * 10, -1, f"m{i}", 0) for i in range(N)}


async def committed_broker(tmp_path, **overrides):
    """A broker whose offsets partition holds N commits of group g (one batch each),
    the first one overwritten; shut down again."""
    b, ctl = make_broker(tmp_path, **overrides)
    await ctl.ensure_internal_topic(OFFSETS)
    await loaded(b)
    coord = b.groups.coordinator_for("g")
    assert commit_errors(commit(coord, "g", {("t", 0): 999})) == {("t", 0): 0}
    for i in range(N):
        box = commit(coord, "g", {("t", i): i * 10}, metadata=f"m{i}")
        assert commit_errors(box) == {("t", i): 0}  # one replica: answered at once
    assert fetch(coord, "g")[1] == offsets()
    b.shutdown()


def test_load_in_chunks_answers_load_in_progress_meanwhile(tmp_path):
    async def main():
        await committed_broker(tmp_path)
        b, _ = make_broker(tmp_path)
        coord = b.groups.coordinator_for("g")
        steps = 0
        while coord.state == LOADING:
            # every loop iteration of the load: requests for its groups are told to wait
            assert fetch(coord, "g")[0] == errors.COORDINATOR_LOAD_IN_PROGRESS
            assert commit_errors(commit(coord, "g", {("t", 0): 5})) == {
                ("t", 0): errors.COORDINATOR_LOAD_IN_PROGRESS}
            await asyncio.sleep(0)
            steps += 1
        assert coord.state == ACTIVE and steps >= 10  # many chunks, the loop free between
        assert fetch(coord, "g")[1] == offsets()
        b.shutdown()
    run(main())


def test_a_large_chunk_is_decoded_in_slices(tmp_path, monkeypatch):
    """One chunk of Kafka's default 5 MiB takes long to decode: the load lets requests
    in every LOAD_SLICE_MS within it too (here 0: after every batch)."""
    monkeypatch.setattr(coordinator_log, "LOAD_SLICE_MS", 0)

    async def main():
        await committed_broker(tmp_path)
        b, _ = make_broker(tmp_path, **{"offsets.load.buffer.size": 5 << 20})
        coord = b.groups.coordinator_for("g")
        steps = 0
        while coord.state == LOADING:
            await asyncio.sleep(0)
            steps += 1
        assert steps > N and fetch(coord, "g")[1] == offsets()
        b.shutdown()
    run(main())


def test_failed_load_stays_loading_and_starts_over(tmp_path, monkeypatch):
    monkeypatch.setattr(coordinator_log, "LOAD_RETRY_MIN_MS", 20)

    async def main():
        await committed_broker(tmp_path)
        b, _ = make_broker(tmp_path)
        lg = b.partition(OFFSETS, 0).log
        real, calls = lg.read_records_bytes, []

        def flaky(offset, max_bytes):
            calls.append(offset)
            if len(calls) == 3:
                raise serr.KafkaStorageError("injected read failure")
            return real(offset, max_bytes)
        lg.read_records_bytes = flaky
        coord = b.groups.coordinator_for("g")
        while len(calls) < 3:
            await asyncio.sleep(0)
        # failed part-way: still loading (never ACTIVE serving the offsets read so far)
        assert coord.state == LOADING
        assert fetch(coord, "g")[0] == errors.COORDINATOR_LOAD_IN_PROGRESS
        await loaded(b)
        assert coord.state == ACTIVE and calls.count(calls[0]) == 2  # read again from the start
        assert fetch(coord, "g")[1] == offsets()
        b.shutdown()
    run(main())


def test_partition_lost_during_load_cancels_it(tmp_path):
    async def main():
        await committed_broker(tmp_path)
        b, _ = make_broker(tmp_path)
        coord = b.groups.coordinator_for("g")
        task = b.groups.loading()[0]
        for _ in range(3):
            await asyncio.sleep(0)
        b.groups.resigned_coordinator(b.partition(OFFSETS, 0))
        await asyncio.sleep(0)
        assert task.cancelled() and b.groups.coordinator_for("g") is None
        assert commit_errors(commit(coord, "g", {("t", 0): 1})) == {("t", 0): errors.NOT_COORDINATOR}
        b.shutdown()
    run(main())


def test_commit_waits_for_the_followers(tmp_path):
    """acks=all on a replicated offsets partition: the commit is answered when the high
    watermark covers it; refused below min.insync.replicas; timed out without followers."""
    timer_now = [0]             # the timing wheel's clock (the commit timeout), ms

    async def main():
        b, ctl = make_broker(tmp_path, lambda: timer_now[0], **{"offsets.commit.timeout.ms": 300})
        await ctl.ensure_internal_topic(OFFSETS)
        await loaded(b)
        coord = b.groups.coordinator_for("g")
        p = b.partition(OFFSETS, 0)
        # as if the controller had made this broker the leader of replicas 1 and 2
        p.make_leader(1, p.leader_epoch + 1, [1, 2], [1, 2], p.partition_epoch + 1, b.clock())
        p.min_isr = 2
        box = commit(coord, "g", {("t", 0): 7})
        assert not box.done                                  # the follower has not fetched it
        p.follower_fetch(2, p.log_end_offset, b.clock())     # now it has: HW moves
        await asyncio.sleep(0)
        assert commit_errors(box) == {("t", 0): 0}

        late = commit(coord, "g", {("t", 0): 8})             # the follower never comes
        assert not late.done
        timer_now[0] += 301                                  # past offsets.commit.timeout.ms
        b.timer.advance_clock(timer_now[0])
        await until(lambda: late.done, what="the commit's timeout")
        assert commit_errors(late) == {("t", 0): errors.COORDINATOR_NOT_AVAILABLE}
        assert fetch(coord, "g")[1][("t", 0)][0] == 7       # not applied

        p.update_isr_state([1], p.partition_epoch + 1)       # ISR below min.insync.replicas
        refused = commit(coord, "g", {("t", 0): 9})
        assert commit_errors(refused) == {("t", 0): errors.COORDINATOR_NOT_AVAILABLE}
        assert fetch(coord, "g")[1][("t", 0)][0] == 7
        b.shutdown()
    run(main())


def test_group_records_use_the_offsets_topic_codec(tmp_path):
    """offsets.topic.compression.codec (Kafka's compression type id) compresses the
    coordinator's batches; a reload reads them back."""
    async def main():
        b, ctl = make_broker(tmp_path, **{"offsets.topic.compression.codec": 1})  # gzip
        await ctl.ensure_internal_topic(OFFSETS)
        await loaded(b)
        coord = b.groups.coordinator_for("g")
        assert commit_errors(commit(coord, "g", {("t", 0): 42}, metadata="x" * 200)) == {
            ("t", 0): 0}
        lg = b.partition(OFFSETS, 0).log
        batches = list(iter_batches(memoryview(lg.read_records_bytes(0, 1 << 20))))
        assert [bt.compression for bt in batches] == [1]
        assert batches[0].size < 200                      # the metadata compressed well
        b.shutdown()
        b, _ = make_broker(tmp_path)
        await loaded(b)
        assert fetch(b.groups.coordinator_for("g"), "g")[1] == {("t", 0): (42, -1, "x" * 200, 0)}
        b.shutdown()
    run(main())


def test_the_coordinator_partition_count_is_the_topics_whole_count():
    # cluster mode shows __consumer_offsets while its partitions are initialized one by
    # one: a group must map to the same partition before and after (it once moved from
    # partition 0 to its own, which then did not know the group: GROUP_ID_NOT_FOUND)
    import types

    from mpbroker.metadata import model
    from workers.groups.service import GroupService

    st = model.PartitionState(0, 1, 0, (1,), (1,))
    part = model.Topic(OFFSETS, b"\x01" * 16, {0: st}, {}, True, 3)
    svc = types.SimpleNamespace(broker=types.SimpleNamespace(
        metadata=types.SimpleNamespace(topics={OFFSETS: part}),
        config={"offsets.topic.num.partitions": 50}))
    assert GroupService.num_partitions.fget(svc) == 3
    whole = model.Topic(OFFSETS, b"\x01" * 16, {i: st for i in range(3)}, {}, True)
    svc.broker.metadata.topics[OFFSETS] = whole
    assert GroupService.num_partitions.fget(svc) == 3
