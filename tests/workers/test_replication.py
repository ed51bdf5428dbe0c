"""Replication in the workers (workers/partition.py, workers/replication.py,
workers/handlers/fetch/plan.py follower path, produce acks=all).

Part 1, Partition logic with real logs in a temporary directory and an injected clock:
high watermark = min LEO of the (maximal) ISR, ISR expansion and shrink, DelayedProduce
completion and min.insync.replicas, truncation decisions (KIP-101/279), divergence.

Part 2, two real workers (workers.worker.Worker + workers.server.WorkerServer on real
sockets, real logs, real replica fetchers speaking the Kafka protocol) in one event loop.
The controller is the one part that is not real here: `ClusterStub` holds the metadata
and serves `alter_partition` like the controllers do (compare-and-set on leader epoch and
partition epoch, then a push to every worker). The ZooKeeper controller and real
`mpbroker serve` processes are covered by tests/cluster/test_replication.py.
"""
from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

import pytest

from mpbroker import config as configmod
from mpbroker.metadata import model
from mpbroker.protocol import api_keys as K
from mpbroker.protocol.errors import ErrorCode as E
from storage import errors as serr
from storage.batch import BatchBuilder, iter_batches
from storage.log import Log, LogConfig
from workers.worker import Worker
from workers.delayed import DelayedProduce
from workers.kafka_client import KafkaConnection
from workers.partition import Partition
from workers.purgatory import Purgatory
from workers.replication import truncation_offset
from workers.server import WorkerServer
from workers.timing_wheel import Timer


class Clock:
    def __init__(self, now=1_700_000_000_000):
        self.now = now

    def __call__(self):
        return self.now


def batch(n=1, epoch=None, base=None, prefix=b"v"):
    b = BatchBuilder()
    for i in range(n):
        b.append(None, prefix + str(i).encode())
    raw = bytearray(b.build())
    if epoch is not None or base is not None:
        rb = next(iter_batches(memoryview(raw)))
        if base is not None:
            rb.set_base_offset(base)
        if epoch is not None:
            rb.set_partition_leader_epoch(epoch)
    return raw


def leader_partition(tmp_path, clock, replicas=(1, 2, 3), isr=(1, 2, 3), epoch=5, min_isr=2):
    lg = Log.open(str(tmp_path / "t-0"), LogConfig(), clock=clock)
    p = Partition("t", 0, b"\x01" * 16, lg, leader_epoch=epoch, leader_id=1, replicated=True)
    p.min_isr = min_isr
    p.make_leader(1, epoch, replicas, isr, 0, clock())
    proposals = []
    hw_moves = []
    p.on_isr_change = lambda part, new: proposals.append(new)
    p.on_hw_change = lambda part: hw_moves.append(part.high_watermark)
    return p, proposals, hw_moves


# ================================================================ part 1: Partition logic

def test_high_watermark_is_min_leo_of_isr(tmp_path):
    clock = Clock()
    p, proposals, hw_moves = leader_partition(tmp_path, clock)
    p.append(memoryview(batch(3)))
    p.append(memoryview(batch(2)))
    assert p.log_end_offset == 5 and p.high_watermark == 0   # followers unknown
    assert p.bytes_committed == 0 < p.bytes_appended
    p.follower_fetch(2, 3, clock())
    assert p.high_watermark == 0                              # 3 has not fetched yet
    p.follower_fetch(3, 5, clock())
    assert p.high_watermark == 3 and hw_moves == [3]
    assert p.bytes_committed == p.bytes_appended
    p.follower_fetch(2, 5, clock())
    assert p.high_watermark == 5 and hw_moves == [3, 5]
    # a consumer read stops at the HW, a follower read at the log end
    p.append(memoryview(batch(1)))
    assert p.read(5, 1 << 20).slices == []
    assert p.read_for_follower(5, 1 << 20).slices
    assert proposals == []


def test_single_replica_fast_path_unchanged(tmp_path):
    clock = Clock()
    lg = Log.open(str(tmp_path / "u-0"), LogConfig(), clock=clock)
    p = Partition("u", 0, b"\x02" * 16, lg, leader_epoch=0, leader_id=1)
    p.make_leader(1, 0, (1,), (1,), 0, clock())
    assert not p.replicated
    p.append(memoryview(batch(4)))
    assert p.high_watermark == 4 and p.bytes_committed == p.bytes_appended
    assert not p.not_enough_replicas()
    p.min_isr = 2                        # Kafka: RF=1 with min.insync=2 refuses acks=all
    assert p.not_enough_replicas()


def test_isr_expand_needs_hw_and_epoch_start(tmp_path):
    clock = Clock()
    p, proposals, _ = leader_partition(tmp_path, clock, isr=(1, 2))
    p.append(memoryview(batch(4)))
    p.follower_fetch(2, 4, clock())
    assert p.high_watermark == 4
    p.follower_fetch(3, 2, clock())       # below the HW: not in sync yet
    assert proposals == []
    p.follower_fetch(3, 4, clock())
    assert proposals == [(1, 2, 3)] and p.pending_isr == (1, 2, 3)
    assert p.maximal_isr == (1, 2, 3)     # KIP-497: counted while in flight
    p.append(memoryview(batch(1)))
    p.follower_fetch(2, 5, clock())
    assert p.high_watermark == 4          # 3 (pending) holds the HW
    p.follower_fetch(3, 5, clock())       # no second proposal while one is in flight
    assert p.high_watermark == 5 and len(proposals) == 1
    p.update_isr_state((1, 2, 3), 1)
    assert p.isr == (1, 2, 3) and p.pending_isr is None and p.partition_epoch == 1
    # an older partition epoch is ignored
    p.update_isr_state((1,), 0)
    assert p.isr == (1, 2, 3)


def test_isr_expand_waits_for_leader_epoch_start(tmp_path):
    clock = Clock()
    lg = Log.open(str(tmp_path / "t-0"), LogConfig(), clock=clock)
    lg.append(memoryview(batch(5)), 3)
    p = Partition("t", 0, b"\x01" * 16, lg, leader_epoch=3, leader_id=1, replicated=True)
    proposals = []
    p.on_isr_change = lambda part, new: proposals.append(new)
    p.make_leader(1, 4, (1, 2), (1,), 0, clock())     # new epoch starts at 5
    assert p.leader_epoch_start_offset == 5 and lg.epoch_cache.latest_epoch == 4
    assert p.high_watermark == 5          # ISR {1}: all of it
    p.follower_fetch(2, 4, clock())
    assert proposals == []                # below the HW and the epoch start
    p.follower_fetch(2, 5, clock())
    assert proposals == [(1, 2)]


def test_isr_shrink_after_lag_time(tmp_path):
    clock = Clock()
    p, proposals, _ = leader_partition(tmp_path, clock)
    p.append(memoryview(batch(2)))
    p.follower_fetch(2, 2, clock())
    p.follower_fetch(3, 0, clock())       # 3 fetches but never catches up
    clock.now += 5000
    assert p.isr_to_shrink(clock(), 10_000) is None
    p.append(memoryview(batch(1)))                 # LEO 3
    clock.now += 4000                               # T0 + 9 s
    p.follower_fetch(2, 3, clock())                 # 2 fully caught up now
    p.follower_fetch(3, 1, clock())                 # 3 behind, and behind its last fetch's LEO
    assert p.followers[2].last_caught_up_ms == clock.now
    caught_up_3 = p.followers[3].last_caught_up_ms
    p.append(memoryview(batch(1)))                  # LEO 4
    clock.now += 500
    p.follower_fetch(3, 3, clock())                 # reached the LEO of its previous fetch:
    assert p.followers[3].last_caught_up_ms == clock.now - 500    # caught up back then
    assert caught_up_3 < clock.now - 500
    clock.now += 1500                               # T0 + 11 s
    p.follower_fetch(2, 4, clock())
    # 3 last caught up 2 s ago, 2 now: nothing lags 10 s ... until 3 stops for 10 s more
    assert p.isr_to_shrink(clock(), 10_000) is None
    clock.now += 9000
    p.follower_fetch(2, 4, clock())
    assert p.isr_to_shrink(clock(), 10_000) == (3,)
    assert proposals == [(1, 2)] and p.pending_isr == (1, 2)
    assert p.maximal_isr == (1, 2, 3)     # a pending shrink still counts 3 for the HW
    assert p.isr_to_shrink(clock(), 10_000) is None   # one change at a time
    p.isr_change_failed()
    assert p.pending_isr is None and p.isr == (1, 2, 3)


def test_delayed_produce_completion_and_min_isr(tmp_path):
    clock = Clock()
    timer = Timer(tick_ms=1, wheel_size=20, clock=clock)
    purgatory = Purgatory("Produce", timer)
    p, _, _ = leader_partition(tmp_path, clock, replicas=(1, 2, 3), isr=(1, 2, 3), min_isr=2)
    assert not p.not_enough_replicas()
    info = p.append(memoryview(batch(3)))
    loop = asyncio.new_event_loop()
    try:
        fut = loop.create_future()
        result = {"error_code": 0}
        op = DelayedProduce(1000, [(p, info.last_offset, result)], {"r": result}, fut)
        assert not purgatory.try_complete_else_watch(op, [p.key])
        p.follower_fetch(2, 3, clock())
        assert purgatory.check_and_complete(p.key) == 0     # 3 still behind
        p.follower_fetch(3, 3, clock())
        assert purgatory.check_and_complete(p.key) == 1 and fut.done()
        assert result["error_code"] == 0

        # the ISR shrank to the leader while the produce waited: the HW reaches the
        # batch, but fewer than min.insync replicas have it
        info = p.append(memoryview(batch(1)))
        fut2 = loop.create_future()
        r2 = {"error_code": 0}
        op2 = DelayedProduce(1000, [(p, info.last_offset, r2)], {}, fut2)
        assert not purgatory.try_complete_else_watch(op2, [p.key])
        p.update_isr_state((1,), 1)
        assert purgatory.check_and_complete(p.key) == 1
        assert r2["error_code"] == E.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert p.not_enough_replicas()                       # and the next one is refused

        # timeout: REQUEST_TIMED_OUT
        p.make_leader(1, 6, (1, 2, 3), (1, 2, 3), 2, clock())
        info = p.append(memoryview(batch(1)))
        fut3 = loop.create_future()
        r3 = {"error_code": 0}
        op3 = DelayedProduce(1000, [(p, info.last_offset, r3)], {}, fut3)
        assert not purgatory.try_complete_else_watch(op3, [p.key])
        clock.now += 1001
        timer.advance_clock(clock())
        assert r3["error_code"] == E.REQUEST_TIMED_OUT

        # leadership lost while waiting: NOT_LEADER_OR_FOLLOWER
        info = p.append(memoryview(batch(1)))
        fut4 = loop.create_future()
        r4 = {"error_code": 0}
        op4 = DelayedProduce(1000, [(p, info.last_offset, r4)], {}, fut4)
        assert not purgatory.try_complete_else_watch(op4, [p.key])
        p.make_follower(2, 7, (1, 2, 3), (2, 3), 3)
        assert purgatory.check_and_complete(p.key) == 1
        assert r4["error_code"] == E.NOT_LEADER_OR_FOLLOWER
    finally:
        loop.close()


def test_follower_fetch_rules(tmp_path):
    clock = Clock()
    p, _, _ = leader_partition(tmp_path, clock, replicas=(1, 2))
    assert p.check_follower(2) == 0
    assert p.check_follower(7) == E.NOT_LEADER_OR_FOLLOWER          # not a replica
    assert p.check_follower(1) == E.NOT_LEADER_OR_FOLLOWER          # ourselves
    p.follower_fetch(7, 0, clock())                                   # ignored, no crash
    p.make_follower(2, 6, (1, 2), (2,), 1)
    assert p.check_follower(2) == E.NOT_LEADER_OR_FOLLOWER


def _log_with_epochs(path, clock, spans):
    """A follower-style log: spans = [(epoch, count)], batches of one record."""
    lg = Log.open(str(path), LogConfig(), clock=clock)
    off = 0
    for epoch, count in spans:
        for _ in range(count):
            lg.append(memoryview(batch(1, epoch=epoch, base=off)), -1, assign_offsets=False)
            off += 1
    return lg


def test_truncation_offset_kip_279(tmp_path):
    clock = Clock()
    # follower: epochs 1 [0,4), 3 [4,10)
    f = _log_with_epochs(tmp_path / "f-0", clock, [(1, 4), (3, 6)])
    assert f.epoch_cache.latest_epoch == 3 and f.log_end_offset == 10
    # leader knows the same epoch 3, ending at 8: truncate to 8, done
    assert truncation_offset(f, 3, 8) == (8, True)
    # leader ends our epoch 3 later than our log end: nothing to cut
    assert truncation_offset(f, 3, 12) == (10, True)
    # leader never had epoch 3; its largest epoch <= 3 is 2, which ends at 6. We have
    # no epoch 2: cut to the end of our epoch 1 (4) and ask again
    assert truncation_offset(f, 2, 6) == (4, False)
    f.truncate_to(4)
    assert f.epoch_cache.latest_epoch == 1
    # second round: leader's epoch 1 ends at 3
    assert truncation_offset(f, 1, 3) == (3, True)
    # the leader has no epoch information: truncate to our HW
    f.update_high_watermark(2)
    assert truncation_offset(f, -1, -1) == (2, True)
    assert truncation_offset(f, -1, 3) == (3, True)


def test_diverging_epoch_on_leader(tmp_path):
    clock = Clock()
    lg = _log_with_epochs(tmp_path / "t-0", clock, [(1, 4), (2, 3)])
    p = Partition("t", 0, b"\x01" * 16, lg, leader_epoch=2, leader_id=1, replicated=True)
    p.make_leader(1, 4, (1, 2), (1, 2), 0, clock())     # epoch 4 starts at 7
    assert p.diverging_epoch(2, 7) is None               # follower is in step
    assert p.diverging_epoch(1, 4) is None
    assert p.diverging_epoch(1, 6) == (1, 4)             # epoch 1 ended at 4 here
    assert p.diverging_epoch(3, 9) == (2, 7)             # we never had epoch 3
    assert p.diverging_epoch(0, 1) == (0, 0)             # below our first epoch
    with pytest.raises(serr.OffsetOutOfRangeError):
        p.diverging_epoch(5, 9)                          # an epoch we cannot place


# ================================================================ part 2: two real workers

class ClusterStub:
    """The controller side for in-process brokers: metadata + alter_partition (CAS on
    leader epoch and partition epoch, as both real controllers do), pushes to every
    attached worker. A test double of another component (see module docstring)."""

    def __init__(self, md):
        self.md = md
        self.workers = []
        self.alter_calls = []

    def client(self, broker_id):
        stub = self

        class Client:
            def __init__(self):
                self.broker_id = broker_id

            def metadata(self):
                return stub.md

            def broker_config(self):
                return None

            async def alter_partition(self, topic, partition, leader_id, leader_epoch,
                                      partition_epoch, new_isr):
                return stub.alter_partition(topic, partition, leader_id, leader_epoch,
                                            partition_epoch, new_isr)

            async def ensure_internal_topic(self, name):
                raise RuntimeError("no internal topics in this test")
        return Client()

    def alter_partition(self, topic, partition, leader_id, leader_epoch, partition_epoch,
                        new_isr):
        self.alter_calls.append((topic, partition, tuple(new_isr)))
        st = self.md.partition(topic, partition)
        if st.leader != leader_id or st.leader_epoch != leader_epoch:
            return E.FENCED_LEADER_EPOCH, None
        if st.partition_epoch != partition_epoch:
            return E.INVALID_UPDATE_VERSION, None
        self.set_state(topic, replace(st, isr=tuple(new_isr)))
        return E.NONE, self.md.partition(topic, partition)

    def set_state(self, topic, state):
        self.md = model.update_partition(self.md, topic, state)
        for w in self.workers:
            w.apply_metadata(self.md)


def free_socket():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    s.setblocking(False)
    return s


async def start_cluster(tmp_path, n=2, topic="r", partitions=1, min_isr=1,
                        overrides=None):
    socks = {i: free_socket() for i in range(1, n + 1)}
    md = model.new_cluster_metadata()
    for i, s in socks.items():
        md = model.register_broker(md, model.Broker(i, "127.0.0.1", s.getsockname()[1]))
    md = model.create_topic(md, topic, partitions, n,
                            configs={"min.insync.replicas": str(min_isr)})
    stub = ClusterStub(md)
    brokers, servers, tasks = {}, [], []
    loop = asyncio.get_running_loop()
    for i, s in socks.items():
        opts = {"replica.fetch.wait.max.ms": 200, "replica.fetch.backoff.ms": 100,
                "replica.lag.time.max.ms": 1500, "log.flush.scheduler.interval.ms": 100,
                "zookeeper.connect": "127.0.0.1:1", **(overrides or {})}
        text = (f"broker.id={i}\nlog.dirs={tmp_path / f'b{i}'}\n"
                f"listeners=PLAINTEXT://127.0.0.1:{s.getsockname()[1]}\n")
        cfg = configmod.BrokerConfig.from_text(text, [f"{k}={v}" for k, v in opts.items()])
        b = Worker(cfg, stub.client(i))
        stub.workers.append(b)
        b.start(loop)
        srv = WorkerServer(b, s, 100 << 20)
        tasks.append(loop.create_task(srv.serve()))
        brokers[i] = b
        servers.append(srv)
    return stub, brokers, servers, tasks


async def stop_cluster(brokers, servers, tasks):
    for srv in servers:
        srv.request_stop()
    await asyncio.gather(*tasks, return_exceptions=True)
    for srv in servers:
        await srv.drain(0.2)
    for b in brokers.values():
        b.shutdown()


async def wait_for(cond, timeout=10.0, what="condition"):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def produce(conn, topic, part, records, acks=-1, timeout_ms=5000):
    resp = await conn.request(K.PRODUCE, 9, {"acks": acks, "timeout_ms": timeout_ms,
                                             "topic_data": [{"name": topic, "partition_data": [
                                                 {"index": part, "records": records}]}]})
    return resp["responses"][0]["partition_responses"][0]


def log_bytes(p):
    lg = p.log
    return bytes(lg.read_records_bytes(lg.log_start_offset, 1 << 30))


def arun(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.mark.integration
def test_replicates_acks_all_and_hw(tmp_path):
    async def main():
        stub, brokers, servers, tasks = await start_cluster(tmp_path, min_isr=2)
        try:
            st = stub.md.partition("r", 0)
            leader_id = st.leader
            follower_id = next(i for i in brokers if i != leader_id)
            L, F = brokers[leader_id], brokers[follower_id]
            assert ("r", 0) in L.partitions and ("r", 0) in F.followers
            assert F.partition("r", 0) is None                   # followers serve no clients
            port = stub.md.brokers[leader_id].port
            conn = await KafkaConnection.connect("127.0.0.1", port, timeout_ms=10000)
            try:
                for i in range(20):
                    r = await produce(conn, "r", 0, batch(5, prefix=b"m%d-" % i))
                    assert r["error_code"] == 0, r
                    assert r["base_offset"] == 5 * i
                lp, fp = L.partitions[("r", 0)], F.followers[("r", 0)]
                assert lp.high_watermark == 100
                await wait_for(lambda: fp.high_watermark == 100, what="follower HW")
                assert log_bytes(lp) == log_bytes(fp)            # byte-identical copy
                # the produce to the follower is refused, a bogus replica id gets an error
                fport = stub.md.brokers[follower_id].port
                fconn = await KafkaConnection.connect("127.0.0.1", fport, timeout_ms=10000)
                r = await produce(fconn, "r", 0, batch(1))
                assert r["error_code"] == E.NOT_LEADER_OR_FOLLOWER
                await fconn.close()
                resp = await conn.request(K.FETCH, 12, {
                    "replica_id": 77, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": "r", "partitions": [{
                        "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                        "last_fetched_epoch": -1, "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20}]}],
                    "forgotten_topics_data": [], "rack_id": ""})
                assert resp["responses"][0]["partitions"][0]["error_code"] == \
                    E.NOT_LEADER_OR_FOLLOWER
                # ListOffsets latest for a client is the HW
                lo = await conn.request(K.LIST_OFFSETS, 5, {
                    "replica_id": -1, "isolation_level": 0, "topics": [{"name": "r", "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
                assert lo["topics"][0]["partitions"][0]["offset"] == 100
            finally:
                await conn.close()
        finally:
            await stop_cluster(brokers, servers, tasks)
    arun(main())


@pytest.mark.integration
def test_isr_shrink_min_insync_and_expand(tmp_path):
    async def main():
        stub, brokers, servers, tasks = await start_cluster(tmp_path, min_isr=2)
        try:
            st = stub.md.partition("r", 0)
            leader_id = st.leader
            follower_id = next(i for i in brokers if i != leader_id)
            L, F = brokers[leader_id], brokers[follower_id]
            conn = await KafkaConnection.connect(
                "127.0.0.1", stub.md.brokers[leader_id].port, timeout_ms=10000)
            try:
                assert (await produce(conn, "r", 0, batch(3)))["error_code"] == 0
                # the follower stops fetching (as if it hung: its fetcher is gone and
                # metadata pushes do not restart it): the leader shrinks the ISR after
                # replica.lag.time.max.ms, then acks=all is refused
                F.replication.follow = lambda p: None
                F.replication.unfollow(("r", 0))
                pending = asyncio.ensure_future(produce(conn, "r", 0, batch(2), timeout_ms=8000))
                await wait_for(lambda: stub.md.partition("r", 0).isr == (leader_id,),
                               timeout=8, what="ISR shrink")
                r = await pending
                assert r["error_code"] == E.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                r = await produce(conn, "r", 0, batch(1))
                assert r["error_code"] == E.NOT_ENOUGH_REPLICAS
                r = await produce(conn, "r", 0, batch(1), acks=1)
                assert r["error_code"] == 0                   # acks=1 still works
                # the follower comes back: it catches up and rejoins the ISR
                del F.replication.follow
                F.replication.follow(F.followers[("r", 0)])
                await wait_for(lambda: set(stub.md.partition("r", 0).isr) == {1, 2},
                               timeout=8, what="ISR expand")
                r = await produce(conn, "r", 0, batch(1))
                assert r["error_code"] == 0
                # acknowledged by the whole ISR: the follower holds everything, byte for byte
                # (it fetched the acks=1 records it missed, then this batch)
                lp, fp = L.partitions[("r", 0)], F.followers[("r", 0)]
                assert fp.log_end_offset == lp.log_end_offset == 7   # 3 + 2 + 1 (acks=1) + 1
                assert log_bytes(fp) == log_bytes(lp)
            finally:
                await conn.close()
        finally:
            await stop_cluster(brokers, servers, tasks)
    arun(main())


@pytest.mark.integration
def test_failover_truncates_divergent_follower(tmp_path):
    """The old leader has records the new leader never got (acks=1, follower paused):
    after the leader change it truncates them (OffsetForLeaderEpoch) and then holds
    exactly the new leader's log."""
    async def main():
        stub, brokers, servers, tasks = await start_cluster(tmp_path, min_isr=1)
        try:
            st = stub.md.partition("r", 0)
            a = st.leader
            b = next(i for i in brokers if i != a)
            A, B = brokers[a], brokers[b]
            conn = await KafkaConnection.connect("127.0.0.1", stub.md.brokers[a].port,
                                                 timeout_ms=10000)
            for i in range(5):
                assert (await produce(conn, "r", 0, batch(2)))["error_code"] == 0
            await wait_for(lambda: B.followers[("r", 0)].log_end_offset == 10, what="copy")
            B.replication.follow = lambda p: None      # B stops replicating
            B.replication.unfollow(("r", 0))
            for i in range(3):      # only on A
                assert (await produce(conn, "r", 0, batch(4, prefix=b"lost"), acks=1))[
                    "error_code"] == 0
            await conn.close()
            assert A.partitions[("r", 0)].log_end_offset == 22
            # failover to B (epoch + 1), A becomes a follower
            del B.replication.follow
            assert B.followers[("r", 0)].log_end_offset == 10
            st = stub.md.partition("r", 0)
            stub.set_state("r", replace(st, leader=b, leader_epoch=st.leader_epoch + 1,
                                        isr=(b,)))
            assert ("r", 0) in B.partitions and ("r", 0) in A.followers
            conn = await KafkaConnection.connect("127.0.0.1", stub.md.brokers[b].port,
                                                 timeout_ms=10000)
            for i in range(3):
                r = await produce(conn, "r", 0, batch(3, prefix=b"new"))
                assert r["error_code"] == 0 and r["base_offset"] == 10 + 3 * i
            await conn.close()
            ap, bp = A.followers[("r", 0)], B.partitions[("r", 0)]
            await wait_for(lambda: ap.log_end_offset == bp.log_end_offset == 19
                           and log_bytes(ap) == log_bytes(bp), what="A converges")
            assert not any(b"lost" in bytes(rec.value) for bt in iter_batches(
                memoryview(log_bytes(ap))) for rec in bt.records())
            assert ap.log.epoch_cache.entries == bp.log.epoch_cache.entries
            # A rejoins the ISR through alter_partition
            await wait_for(lambda: set(stub.md.partition("r", 0).isr) == {a, b},
                           what="ISR expand")
        finally:
            await stop_cluster(brokers, servers, tasks)
    arun(main())
