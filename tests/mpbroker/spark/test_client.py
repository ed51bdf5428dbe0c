"""The Kafka side of the data source (mpbroker/spark/client.py) without a broker:
which partitions a subscription reads, offsets resolved from a starting/ending spec,
the ApiVersions v0 answer, data loss. The reads themselves: test_source.py/test_sink.py."""
import logging
import struct
from types import SimpleNamespace

import pytest

from mpbroker.spark import client
from mpbroker.spark.options import OffsetSpec, OptionError, Subscription


class FakeClient:
    """What the functions read of a confluent-kafka client: list_topics and
    offsets_for_times."""

    def __init__(self, topics, times=None):
        self.topics, self.times, self.asked = topics, times or {}, []

    def list_topics(self, timeout):
        return SimpleNamespace(topics={
            name: SimpleNamespace(error=err, partitions=dict.fromkeys(parts))
            for name, (parts, err) in self.topics.items()})

    def offsets_for_times(self, asked, timeout):
        self.asked += asked
        return [SimpleNamespace(topic=k.topic, partition=k.partition, error=None,
                                offset=self.times.get((k.topic, k.partition), -1)) for k in asked]


TOPICS = {"a": ([1, 0], None), "b": ([0], None), "__consumer_offsets": ([0], None),
          "broken": ([0], "LEADER_NOT_AVAILABLE"), "empty": ([], None)}


def test_partitions_of_existing_topics_only():
    c = FakeClient(TOPICS)
    assert client.topic_partitions(c) == {"a": [0, 1], "b": [0], "__consumer_offsets": [0]}
    assert client.topic_partitions(c, ["a", "nope", "broken"]) == {"a": [0, 1]}


def test_subscriptions_resolve_against_the_cluster():
    c = FakeClient(TOPICS)
    assert client.resolve_subscription(c, Subscription("subscribe", topics=("b", "a", "nope"))) == \
        [("a", 0), ("a", 1), ("b", 0)]
    # a pattern never picks internal topics
    assert client.resolve_subscription(c, Subscription("pattern", pattern=".*")) == \
        [("a", 0), ("a", 1), ("b", 0)]
    assert client.resolve_subscription(c, Subscription("assign", topic_partitions=(("b", 0), ("a", 1)))) \
        == [("a", 1), ("b", 0)]
    with pytest.raises(OptionError, match="a-7"):
        client.resolve_subscription(c, Subscription("assign", topic_partitions=(("a", 7),)))


TPS = [("a", 0), ("a", 1)]
MARKS = {("a", 0): (5, 50), ("a", 1): (0, 10)}


def test_earliest_latest_and_json_offsets():
    c = FakeClient(TOPICS)
    assert client.resolve_offsets(c, OffsetSpec("earliest"), TPS, MARKS, which="starting") == \
        {("a", 0): 5, ("a", 1): 0}
    assert client.resolve_offsets(c, OffsetSpec("latest"), TPS, MARKS, which="ending") == \
        {("a", 0): 50, ("a", 1): 10}
    spec = OffsetSpec("offsets", {"a": {0: -2, 1: 7}})
    assert client.resolve_offsets(c, spec, TPS, MARKS, which="starting") == {("a", 0): 5, ("a", 1): 7}
    spec = OffsetSpec("offsets", {"a": {0: -1}})
    with pytest.raises(OptionError, match="startingOffsets.*a-1"):
        client.resolve_offsets(c, spec, TPS, MARKS, which="starting")
    assert c.asked == []                              # no ListOffsets for these


def test_timestamps_resolve_through_list_offsets():
    c = FakeClient(TOPICS, times={("a", 0): 17})
    # no record at or after the time in a-1: the end for an ending bound ...
    assert client.resolve_offsets(c, OffsetSpec("timestamp", timestamp=1000), TPS, MARKS,
                                  which="ending") == {("a", 0): 17, ("a", 1): 10}
    assert {(k.topic, k.partition, k.offset) for k in c.asked} == {("a", 0, 1000), ("a", 1, 1000)}
    # ... an error for a starting bound, unless the strategy says latest
    with pytest.raises(OptionError, match="a-1 has a timestamp >= 1000"):
        client.resolve_offsets(c, OffsetSpec("timestamp", timestamp=1000), TPS, MARKS, which="starting")
    assert client.resolve_offsets(c, OffsetSpec("timestamp", timestamp=1000), TPS, MARKS,
                                  which="starting", ts_strategy="latest")[("a", 1)] == 10
    per = OffsetSpec("timestamps", {"a": {0: 5, 1: 6}})
    assert client.resolve_offsets(c, per, TPS, MARKS, which="ending") == {("a", 0): 17, ("a", 1): 10}
    with pytest.raises(OptionError, match="startingOffsetsByTimestamp.*a-1"):
        client.resolve_offsets(c, OffsetSpec("timestamps", {"a": {0: 5}}), TPS, MARKS, which="starting")


def test_offsets_for_times_reports_a_partition_error():
    class Failing(FakeClient):
        def offsets_for_times(self, asked, timeout):
            return [SimpleNamespace(topic="a", partition=0, error="NOT_LEADER", offset=-1)]
    assert client.offsets_for_times(Failing(TOPICS), {}) == {}
    with pytest.raises(RuntimeError, match="a-0: NOT_LEADER"):
        client.offsets_for_times(Failing(TOPICS), {("a", 0): 1})


def api_versions_v0(err, keys):
    return struct.pack(">ihi", 1, err, len(keys)) + b"".join(struct.pack(">hhh", k, 0, 3) for k in keys)


def test_api_versions_answer_and_transactions():
    keys = client.parse_api_versions_v0(api_versions_v0(0, [0, 1, 22, 24, 26, 28]))
    assert keys == {0, 1, 22, 24, 26, 28} and client.has_transaction_apis(keys)
    assert not client.has_transaction_apis({0, 1, 22, 24, 26})
    with pytest.raises(RuntimeError, match="error 35"):
        client.parse_api_versions_v0(api_versions_v0(35, []))


def test_data_loss_fails_or_warns(caplog):
    with pytest.raises(client.DataLossError, match="offset 3 is gone. Some data may have been lost"):
        client.data_loss("offset 3 is gone", fail=True)
    with caplog.at_level(logging.WARNING):
        client.data_loss("offset 3 is gone", fail=False)
    assert "failOnDataLoss=false" in caplog.text
