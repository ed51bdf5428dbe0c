"""Topic sync against a fake AdminClient: what is created, grown, reported, and that a
refresh with nothing to compare makes no request."""
from __future__ import annotations

import logging
from concurrent.futures import Future
from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException

from mpbroker.mirror.config import MirrorConfig
from mpbroker.mirror.topics import TopicSync


def done(value=None, error=None) -> Future:
    f = Future()
    if error is None:
        f.set_result(value)
    else:
        f.set_exception(KafkaException(KafkaError(error, "refused")))
    return f


class FakeAdmin:
    def __init__(self, topics, refuse=()):
        self.topics = dict(topics)
        self.refuse = set(refuse)
        self.calls = []

    def list_topics(self, timeout=None):
        return SimpleNamespace(topics={t: SimpleNamespace(error=None, partitions=dict.fromkeys(range(n)))
                                       for t, n in self.topics.items()})

    def create_topics(self, new, **kw):
        self.calls.append(("create", [(t.topic, t.num_partitions) for t in new]))
        out = {}
        for t in new:
            if t.topic in self.refuse:
                out[t.topic] = done(error=KafkaError.INVALID_REPLICATION_FACTOR)
            else:
                self.topics[t.topic] = t.num_partitions
                out[t.topic] = done()
        return out

    def create_partitions(self, new, **kw):
        self.calls.append(("grow", [(p.topic, p.new_total_count) for p in new]))
        for p in new:
            self.topics[p.topic] = p.new_total_count
        return {p.topic: done() for p in new}

    def describe_configs(self, resources, **kw):
        if not resources:
            raise ValueError("Expected non-empty list of ConfigResource objects")
        self.calls.append(("describe", [r.name for r in resources]))
        return {r: done({}) for r in resources}


def sync(source, target, **props):
    cfg = MirrorConfig.from_props({"clusters": "A, B", "A.bootstrap.servers": "a:1",
                                   "B.bootstrap.servers": "b:1", "A->B.enabled": "true", **props})
    return TopicSync(cfg.flows[0], source, target, logging.getLogger("t"))


def test_creates_missing_grows_smaller_and_skips_internal_and_remote_topics():
    src = FakeAdmin({"orders": 3, "pay": 4, "__consumer_offsets": 50, "B.back": 1})
    dst = FakeAdmin({"A.pay": 2})
    topics = sync(src, dst).refresh()
    assert topics == {"orders": 3, "pay": 4}
    assert dst.topics["A.orders"] == 3 and dst.topics["A.pay"] == 4
    assert ("grow", [("A.pay", 4)]) in dst.calls


def test_a_topic_that_cannot_be_created_is_reported_and_not_ready(caplog):
    src = FakeAdmin({"orders": 1, "ok": 1})
    dst = FakeAdmin({}, refuse={"A.orders"})
    ts = sync(src, dst, **{"sync.topic.configs.enabled": "false"})
    with caplog.at_level(logging.WARNING):
        assert ts.ensure({"orders": 1, "ok": 1}) == ["ok"]
    assert "cannot create topic A.orders on B" in caplog.text


def test_config_sync_with_no_remote_topic_asks_nothing():
    src = FakeAdmin({"orders": 1})
    dst = FakeAdmin({}, refuse={"A.orders"})
    sync(src, dst).refresh(sync_configs=True)          # used to pass [] to describe_configs
    assert not [c for c in dst.calls if c[0] == "describe"]
