"""mpbroker.spark.options: option parsing without Spark or a broker."""
from __future__ import annotations

import pytest

from mpbroker.spark import options as opt


def test_client_config_takes_kafka_prefixed_and_plain_names():
    conf = opt.client_config({"kafka.bootstrap.servers": "h:1", "kafka.fetch.max.bytes": "1024",
                              "isolation.level": "read_committed", "subscribe": "t"})
    assert conf == {"bootstrap.servers": "h:1", "fetch.max.bytes": "1024", "isolation.level": "read_committed"}
    assert opt.client_config({"bootstrap.servers": "h:2"}) == {"bootstrap.servers": "h:2",
                                                               "isolation.level": "read_uncommitted"}
    with pytest.raises(opt.OptionError, match="bootstrap.servers"):
        opt.client_config({"subscribe": "t"})
    # Spark takes kafka.group.id (its consumers only name themselves with it) but manages
    # offsets itself.
    assert opt.client_config({"bootstrap.servers": "h:1", "kafka.group.id": "g"})["group.id"] == "g"
    for banned in ("auto.offset.reset", "enable.auto.commit"):
        with pytest.raises(opt.OptionError, match=banned):
            opt.client_config({"bootstrap.servers": "h:1", f"kafka.{banned}": "x"})
    with pytest.raises(opt.OptionError, match="isolation.level"):
        opt.client_config({"bootstrap.servers": "h:1", "kafka.isolation.level": "dirty"})


def test_exactly_one_subscription_kind():
    assert opt.subscription({"subscribe": "a, b"}).topics == ("a", "b")
    assert opt.subscription({"subscribePattern": "pv-.*"}).matches("pv-1")
    assert not opt.subscription({"subscribePattern": "pv-.*"}).matches("xpv-1")
    assert opt.subscription({"assign": '{"t":[1,0]}'}).topic_partitions == (("t", 0), ("t", 1))
    for bad in ({}, {"subscribe": "a", "assign": '{"t":[0]}'}, {"assign": '{"t":"0"}'}, {"assign": "[1]"},
                {"subscribePattern": "("}):
        with pytest.raises(opt.OptionError):
            opt.subscription(bad)


def test_pattern_skips_internal_topics_and_select_sorts():
    from mpbroker.spark.sink import DEFAULT_MARKER_TOPIC

    cluster = {"pv": [1, 0], "__consumer_offsets": [0], "other": [0], DEFAULT_MARKER_TOPIC: [0]}
    assert opt.subscription({"subscribePattern": ".*"}).select(cluster) == [("other", 0), ("pv", 0), ("pv", 1)]
    assert opt.subscription({"subscribe": "pv,missing"}).select(cluster) == [("pv", 0), ("pv", 1)]


def test_offset_specs_follow_spark_precedence():
    assert opt.offset_spec({}, "starting", "earliest").kind == "earliest"
    assert opt.offset_spec({"startingOffsets": "LATEST"}, "starting", "earliest").kind == "latest"
    s = opt.offset_spec({"startingOffsets": '{"t":{"0":5,"1":-2}}'}, "starting", "latest")
    assert (s.kind, s.offsets) == ("offsets", {"t": {0: 5, 1: -2}})
    s = opt.offset_spec({"startingOffsets": "earliest", "startingTimestamp": "1000"}, "starting", "latest")
    assert (s.kind, s.timestamp) == ("timestamp", 1000)
    s = opt.offset_spec({"startingTimestamp": "1000", "startingOffsetsByTimestamp": '{"t":{"0":7}}'},
                        "starting", "latest")
    assert (s.kind, s.offsets) == ("timestamps", {"t": {0: 7}})
    with pytest.raises(opt.OptionError, match="earliest"):
        opt.offset_spec({"endingOffsets": '{"t":{"0":-2}}'}, "ending", "latest")
    with pytest.raises(opt.OptionError):
        opt.offset_spec({"startingOffsets": '{"t":{"0":-3}}'}, "starting", "latest")
    with pytest.raises(opt.OptionError):
        opt.offset_spec({"startingOffsets": "{nope"}, "starting", "latest")


def test_checkpoint_json_round_trip():
    offsets = {"b": {1: 5, 0: 3}, "a": {0: 9}}
    js = opt.to_json_offsets(offsets)
    assert js == {"a": {"0": 9}, "b": {"0": 3, "1": 5}}
    assert opt.from_json_offsets(js) == {"a": {0: 9}, "b": {0: 3, 1: 5}}
    assert opt.nest(opt.flatten(offsets)) == {"a": {0: 9}, "b": {0: 3, 1: 5}}


def test_split_range_covers_the_range_exactly():
    assert opt.split_range(10, 20, 3) == [(10, 14), (14, 17), (17, 20)]
    assert opt.split_range(0, 2, 5) == [(0, 1), (1, 2)]
    assert opt.split_range(5, 6, 1) == [(5, 6)]


def test_rate_limit_shares_in_proportion_to_backlog():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 7}
    end = opt.rate_limit(start, latest, 100)
    assert sum(end[tp] - start[tp] for tp in start) == 100
    assert end[("t", 0)] == 75 and end[("t", 1)] == 125 and end[("t", 2)] == 7
    assert opt.rate_limit(start, latest, 10_000) == latest
    # One partition alone is bounded by the limit too.
    end = opt.rate_limit({("t", 0): 0}, {("t", 0): 50}, 20)
    assert end == {("t", 0): 20}


def test_bool_and_int_options():
    assert opt.get_bool({"failOnDataLoss": "FALSE"}, "failondataloss", True) is False
    assert opt.get_bool({}, "failOnDataLoss", True) is True
    with pytest.raises(opt.OptionError):
        opt.get_bool({"includeHeaders": "maybe"}, "includeHeaders", False)
    assert opt.get_int({"maxOffsetsPerTrigger": "50"}, "maxOffsetsPerTrigger", None, 1) == 50
    with pytest.raises(opt.OptionError):
        opt.get_int({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger", None, 1)
