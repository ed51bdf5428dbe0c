"""The at-least-once sink with a fake producer and consumer: what each record becomes,
which records ask for a delivery report (offset syncs only), and that source offsets
are committed only after a flush delivered everything, never after a fatal error."""
from __future__ import annotations

import logging

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME

from mpbroker.mirror.records import OffsetSync
from mpbroker.mirror.sinks import AtLeastOnceSink, OffsetSyncWriter


class Msg:
    def __init__(self, topic, partition, offset):
        self._t, self._p, self._o = topic, partition, offset

    def topic(self): return self._t
    def partition(self): return self._p
    def offset(self): return self._o
    def key(self): return b"k%d" % self._o
    def value(self): return b"v%d" % self._o
    def headers(self): return [("h", b"1")]
    def timestamp(self): return (TIMESTAMP_CREATE_TIME, 1000 + self._o)


class Err:
    def __init__(self, fatal): self._fatal = fatal
    def fatal(self): return self._fatal
    def str(self): return "boom"


class FakeProducer:
    def __init__(self):
        self.produced = []                              # (topic, kw)
        self.reports = []                               # (callback, topic, partition, target offset)
        self.next_offset = {}
        self.undelivered = 0

    def produce(self, topic, on_delivery=None, **kw):
        key = (topic, kw.get("partition"))
        off = self.next_offset.get(key, 0)
        self.next_offset[key] = off + 1
        self.produced.append((topic, kw))
        if on_delivery is not None:
            self.reports.append((on_delivery, topic, kw["partition"], off))

    def poll(self, timeout=0):
        for cb, topic, part, off in self.reports:
            cb(None, type("M", (), {"topic": lambda s: topic, "partition": lambda s: part,
                                    "offset": lambda s: off})())
        self.reports = []
        return 0

    def flush(self, timeout=0):
        self.poll()
        return self.undelivered


class FakeConsumer:
    def __init__(self):
        self.commits = []

    def commit(self, offsets=None, asynchronous=True):
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})


def sink(max_lag=100):
    syncs = FakeProducer()
    s = AtLeastOnceSink(lambda on_error: FakeProducer(), lambda t: f"A.{t}",
                        OffsetSyncWriter(syncs, "syncs", max_lag), logging.getLogger("t"))
    return s, syncs


def test_records_keep_partition_key_value_headers_timestamp():
    s, _ = sink()
    s.write([Msg("t", 2, 7)])
    topic, kw = s.producer.produced[0]
    assert topic == "A.t" and kw["partition"] == 2 and kw["key"] == b"k7" and kw["value"] == b"v7"
    assert kw["headers"] == [("h", b"1")] and kw["timestamp"] == 1007


def test_reports_only_for_offset_syncs():
    s, syncs = sink(max_lag=3)
    s.producer.poll = lambda timeout=0: 0               # keep the reports for inspection
    s.write([Msg("t", 0, o) for o in range(10)] + [Msg("t", 1, o) for o in (0, 1, 5)])
    assert [(p, off) for _, _, p, off in s.producer.reports] == \
        [(0, 0), (0, 3), (0, 6), (0, 9), (1, 0), (1, 2)]   # first, every 3, and the gap 1 -> 5
    FakeProducer.poll(s.producer)
    got = [OffsetSync.decode(kw["key"], kw["value"]) for _, kw in syncs.produced]
    assert [(x.partition, x.upstream, x.downstream) for x in got] == \
        [(0, 0, 0), (0, 3, 3), (0, 6, 6), (0, 9, 9), (1, 0, 0), (1, 5, 2)]
    assert s.counters.take() == {"t": 13}


def test_commit_after_a_complete_flush_only():
    s, _ = sink()
    c = FakeConsumer()
    s.write([Msg("t", 0, o) for o in range(5)] + [Msg("t", 1, 0)])
    s.producer.undelivered = 2
    s.commit(c)
    assert c.commits == []
    s.producer.undelivered = 0
    s.commit(c)
    assert c.commits == [{("t", 0): 5, ("t", 1): 1}]
    s.commit(c)
    assert len(c.commits) == 1                          # nothing new


def test_a_fatal_producer_error_stops_before_committing():
    s, _ = sink()
    c = FakeConsumer()
    s.write([Msg("t", 0, 0)])
    s.on_error(Err(fatal=False))
    s.on_error(Err(fatal=True))
    with pytest.raises(RuntimeError, match="fatal"):
        s.commit(c)
    assert c.commits == []


def test_revoke_commits_and_forgets():
    s, _ = sink()
    s.write([Msg("t", 0, 0), Msg("t", 0, 1)])
    c = FakeConsumer()
    s.revoke(c, [("t", 0)])
    assert c.commits == [{("t", 0): 2}]
    s.commit(c)
    assert len(c.commits) == 1
