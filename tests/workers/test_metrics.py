"""workers/metrics.py: histograms, per-topic totals that survive partition moves, the
metered dispatcher, the request log line, and the snapshot of a real Broker."""
from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from mpbroker import config as configmod
from mpbroker.protocol import api_keys, codec
from storage.slices import FileSlice
from workers import metrics
from workers.answers import EncodedLater


def test_histogram_buckets_are_upper_bounds():
    h = metrics.Histogram((1, 10))
    for v in (0.5, 1, 1.5, 10, 11, 1000):
        h.observe(v)
    counts, total = h.export()
    assert counts == [2, 2, 2]          # <=1, (1,10], +Inf
    assert total == pytest.approx(0.5 + 1 + 1.5 + 10 + 11 + 1000)


def _part(bin_=0, msgs=0, bout=0):
    return SimpleNamespace(bytes_in=bin_, messages_in=msgs, bytes_out=bout)


def test_topic_totals_keep_what_a_moved_partition_counted():
    m = metrics.WorkerMetrics(0)
    p0, p1 = _part(100, 10, 50), _part(30, 3, 0)
    assert m.topic_totals([(("t", 0), p0), (("t", 1), p1)]) == {"t": [130, 13, 50]}
    p0.bytes_in, p0.messages_in = 200, 20
    # t-1 moved away: its last seen figures stay in the topic's totals
    assert m.topic_totals([(("t", 0), p0)]) == {"t": [230, 23, 50]}
    # t-1 comes back as a new Partition object counting from zero
    back = _part(5, 1, 0)
    assert m.topic_totals([(("t", 0), p0), (("t", 1), back)]) == {"t": [235, 24, 50]}
    # a deleted topic stays with its totals (counters never go down)
    assert m.topic_totals([]) == {"t": [235, 24, 50]}


def test_request_partitions_for_produce_and_fetch_shapes():
    produce = {"topic_data": [{"name": "a", "partition_data": [{"index": 0}, {"index": 2}]}]}
    fetch = {"topics": [{"topic": "b", "partitions": [{"partition": 1}]},
                        {"topic_id": b"\x01" * 16, "partitions": [{"partition": 0}]}]}
    offsets = {"topics": [{"name": "c", "partition_indexes": [3, 4]}]}
    assert metrics.request_partitions(produce) == [("a", 0), ("a", 2)]
    assert metrics.request_partitions(fetch) == [("b", 1), ("01" * 16, 0)]
    assert metrics.request_partitions(offsets) == [("c", 3), ("c", 4)]
    assert metrics.request_partitions({}) == []


def test_response_size_counts_file_slices():
    assert metrics.response_size([b"abc", FileSlice("/x", 0, 100), bytearray(2)]) == 105


class FakeDispatcher:
    def __init__(self, result):
        self.result = result
        self.calls = 0

    def dispatch(self, ctx, frame, pos):
        self.calls += 1
        return self.result


def _ctx(api_key=api_keys.METADATA, conn=None):
    return SimpleNamespace(api_key=api_key, api_version=12, correlation_id=7,
                           client_id="cid", client_host="127.0.0.1", connection=conn)


def test_metered_dispatcher_times_immediate_answers_and_counts_connections():
    m = metrics.WorkerMetrics(0)
    inner = FakeDispatcher([b"x"])
    d = metrics.MeteredDispatcher(inner, m, log_requests=False)
    conn = SimpleNamespace()
    assert d.dispatch(_ctx(conn=conn), memoryview(b""), 0) == [b"x"]
    conn.read_at = 0.0              # perf_counter's origin: a long queue time
    d.dispatch(_ctx(conn=conn), memoryview(b""), 0)
    assert m.connections_created == 1
    counts, _ = m.total_time[api_keys.METADATA].export()
    assert sum(counts) == 2
    qcounts, qsum = m.queue_time[api_keys.METADATA].export()
    assert sum(qcounts) == 1 and qsum > 0     # only the request that had a read time
    assert d.calls == 2 and inner.calls == 2


def test_metered_dispatcher_times_delayed_answers_when_they_complete():
    async def run():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        m = metrics.WorkerMetrics(0)
        d = metrics.MeteredDispatcher(FakeDispatcher(fut), m, log_requests=False)
        assert d.dispatch(_ctx(api_keys.FETCH), memoryview(b""), 0) is fut
        assert api_keys.FETCH not in m.total_time
        fut.set_result([b"done"])
        await asyncio.sleep(0)
        assert sum(m.total_time[api_keys.FETCH].export()[0]) == 1
        failed = loop.create_future()
        d.inner = FakeDispatcher(failed)
        d.dispatch(_ctx(api_keys.FETCH), memoryview(b""), 0)
        failed.set_exception(RuntimeError("handler failed"))
        await asyncio.sleep(0)
        assert sum(m.total_time[api_keys.FETCH].export()[0]) == 2
        failed.exception()
    asyncio.run(run())


def test_metered_dispatcher_times_an_encoded_later_answer_when_it_is_made():
    async def run():
        fut = asyncio.get_running_loop().create_future()
        m = metrics.WorkerMetrics(0)
        answer = EncodedLater(fut, lambda f: [b"done"])
        d = metrics.MeteredDispatcher(FakeDispatcher(answer), m, log_requests=False)
        assert d.dispatch(_ctx(api_keys.FETCH), memoryview(b""), 0) is answer
        fut.set_result({})
        assert api_keys.FETCH not in m.total_time
        assert answer.finish(fut) == [b"done"]
        assert sum(m.total_time[api_keys.FETCH].export()[0]) == 1
    asyncio.run(run())


def test_request_log_line(caplog):
    body = codec.encode_request(api_keys.METADATA, 12, {"topics": [{"name": "t"}]})
    ctx = _ctx()
    d = metrics.MeteredDispatcher(FakeDispatcher([b"12345"]), None, log_requests=True)
    with caplog.at_level(logging.DEBUG, logger=metrics.REQUEST_LOGGER):
        d.dispatch(ctx, memoryview(body), 0)
    [rec] = [r for r in caplog.records if r.name == "kafka.request.logger"]
    line = rec.getMessage()
    for part in ("api=Metadata", "version=12", "correlation_id=7", "client_id=cid",
                 "principal=User:ANONYMOUS", f"request_bytes={len(body)}",
                 "response_bytes=5", "total_time_ms="):
        assert part in line


def _broker(**cfg):
    return SimpleNamespace(config=configmod.BrokerConfig(cfg), worker_id=0)


def test_instrument_is_free_when_off():
    async def run():
        plain = FakeDispatcher(None)
        assert metrics.instrument(plain, _broker()) is plain
        b = _broker(**{"metrics.listener": "http://127.0.0.1:0"})
        d = metrics.instrument(plain, b)
        assert isinstance(d, metrics.MeteredDispatcher) and d.metrics is b.metrics
        assert not d.log_requests
        b.metrics._lag_task.cancel()
    asyncio.run(run())


def test_instrument_log_requests_turns_the_request_logger_on():
    logger = logging.getLogger(metrics.REQUEST_LOGGER)
    old = logger.level
    try:
        logger.setLevel(logging.NOTSET)
        d = asyncio.run(_instrument(_broker(**{"log.requests": "true"})))
        assert d.log_requests and d.metrics is None
        assert logger.isEnabledFor(logging.DEBUG)
    finally:
        logger.setLevel(old)


async def _instrument(broker):
    return metrics.instrument(FakeDispatcher(None), broker)


def test_loop_lag_probe_observes():
    async def run():
        m = metrics.WorkerMetrics(0)
        m.start_lag_probe(asyncio.get_running_loop(), period_s=0.001)
        for _ in range(200):
            await asyncio.sleep(0.005)
            if sum(m.loop_lag.export()[0]) >= 2:
                break
        m._lag_task.cancel()
        assert sum(m.loop_lag.export()[0]) >= 2
    asyncio.run(run())


def test_snapshot_of_real_partitions(tmp_path):
    """Real Partitions over real Logs; the broker around them is what snapshot reads."""
    from storage.batch import BatchBuilder
    from storage.log import Log, LogConfig
    from workers.groups.group import CommitRecord, OffsetAndMetadata
    from workers.partition import Partition
    from workers.purgatory import Purgatory
    from workers.timing_wheel import Timer

    def part(name, replicas, isr):
        lg = Log.open(str(tmp_path / f"{name}-0"), LogConfig(), clock=lambda: 1000)
        p = Partition(name, 0, b"\x01" * 16, lg, leader_epoch=1, leader_id=1,
                      replicated=len(replicas) > 1)
        p.make_leader(1, 1, replicas, isr, 0, 1000)
        return p

    single, urp = part("a", (1,), (1,)), part("b", (1, 2), (1, 2))
    shrinks = metrics.ISR_CHANGES[0]
    urp.update_isr_state((1,), 1)         # the committed ISR of a led partition shrinks
    b = BatchBuilder()
    for i in range(5):
        b.append(None, b"x" * 10)
    data = b.build()
    single.append(memoryview(bytearray(data)))       # counts its bytes and records in
    timer = Timer(tick_ms=1, wheel_size=20, clock=lambda: 1000)
    group = SimpleNamespace(offsets={("a", 0): CommitRecord(OffsetAndMetadata(3, -1, "", 0, -1))})
    broker = SimpleNamespace(
        worker_id=2, partitions={("a", 0): single, ("b", 0): urp}, followers={},
        clients=[SimpleNamespace(closed=False), SimpleNamespace(closed=True)],
        groups=SimpleNamespace(coordinators={0: SimpleNamespace(groups={"g": group})}),
        produce_purgatory=Purgatory("Produce", timer), fetch_purgatory=Purgatory("Fetch", timer),
        delete_records_purgatory=Purgatory("DeleteRecords", timer))
    try:
        snap = metrics.snapshot(broker)
    finally:
        single.close()
        urp.close()
    assert snap["worker"] == 2
    assert snap["leaders"] == 2 and snap["partitions"] == 2
    assert snap["under_replicated"] == 1
    assert snap["connections"] == 1
    assert snap["isr_shrinks"] == shrinks + 1
    assert snap["topics"]["a"] == [len(data), 5, 0]
    size, start, end, hw = snap["logs"][("a", 0)]
    assert (size, start, end, hw) == (len(data), 0, 5, 5)
    assert snap["committed"] == {("g", "a", 0): 3}
    assert snap["purgatory"] == {"Produce": 0, "Fetch": 0, "DeleteRecords": 0}
    assert snap["cpu_s"] > 0


def test_a_failing_snapshot_is_none_not_an_exception(caplog):
    broker = SimpleNamespace(worker_id=0, metrics=metrics.WorkerMetrics(0))   # no partitions
    with caplog.at_level(logging.ERROR):
        assert metrics.snapshot(broker) is None
    assert "metrics snapshot of worker 0" in caplog.text
