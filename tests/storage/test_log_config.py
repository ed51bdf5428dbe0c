"""LogConfig (storage/log_config.py): topic and broker config names to typed fields."""
import pytest

from storage.log_config import LONG_MAX, LogConfig


def test_config_from_properties():
    c = LogConfig.from_properties({"segment.bytes": "1000", "cleanup.policy": "compact,delete",
                                   "log.retention.ms": "5", "message.timestamp.type":
                                   "LogAppendTime", "min.cleanable.dirty.ratio": "0.1",
                                   "log.flush.interval.messages": "3", "unknown.key": "x"})
    assert (c.segment_bytes, c.retention_ms, c.flush_messages) == (1000, 5, 3)
    assert c.compact and c.delete and c.log_append_time and c.min_cleanable_dirty_ratio == 0.1


def test_defaults_are_kafkas():
    c = LogConfig()
    assert (c.segment_bytes, c.retention_ms, c.retention_bytes) == (1 << 30, 7 * 24 * 3600 * 1000, -1)
    assert c.flush_messages == c.flush_ms == LONG_MAX
    assert c.delete and not c.compact and not c.log_append_time


@pytest.mark.parametrize("key, field, raw, value", [
    ("log.roll.ms", "segment_ms", "60000", 60000),
    ("log.roll.jitter.ms", "segment_jitter_ms", "5", 5),
    ("log.index.size.max.bytes", "segment_index_bytes", "4096", 4096),
    ("message.max.bytes", "max_message_bytes", "1000", 1000),
    ("log.message.timestamp.type", "message_timestamp_type", "LogAppendTime", "LogAppendTime"),
    ("log.cleaner.delete.retention.ms", "delete_retention_ms", "7", 7),
    ("log.cleaner.min.compaction.lag.ms", "min_compaction_lag_ms", "8", 8),
    ("log.cleaner.max.compaction.lag.ms", "max_compaction_lag_ms", "9", 9),
    ("log.cleaner.min.cleanable.ratio", "min_cleanable_dirty_ratio", "0.25", 0.25),
    ("log.segment.delete.delay.ms", "file_delete_delay_ms", "10", 10),
    ("log.flush.interval.ms", "flush_ms", "11", 11),
    ("log.segment.bytes", "segment_bytes", "4096", 4096),     # log. prefix dropped
    ("segment.bytes", "segment_bytes", 4096, 4096),            # values need not be strings
])
def test_broker_names_and_aliases_land_on_their_field(key, field, raw, value):
    assert getattr(LogConfig.from_properties({key: raw}), field) == value


def test_values_are_typed_by_field():
    c = LogConfig.from_properties({"preallocate": "TRUE", "min.cleanable.dirty.ratio": "1",
                                   "compression.type": "zstd", "retention.bytes": "-1"})
    assert c.preallocate is True and c.min_cleanable_dirty_ratio == 1.0
    assert c.compression_type == "zstd" and c.retention_bytes == -1
    assert LogConfig.from_properties({"preallocate": "no"}).preallocate is False
    assert LogConfig.from_properties({"preallocate": True}).preallocate is True
    with pytest.raises(ValueError):
        LogConfig.from_properties({"segment.bytes": "lots"})


def test_topic_configs_override_a_base_which_stays_as_it_was():
    base = LogConfig.from_properties({"log.retention.ms": "1000", "log.segment.bytes": "4096"})
    topic = LogConfig.from_properties({"retention.ms": "5"}, base)
    assert (topic.retention_ms, topic.segment_bytes) == (5, 4096)
    assert (base.retention_ms, base.segment_bytes) == (1000, 4096)


def test_cleanup_policy_words():
    assert LogConfig(cleanup_policy="compact").compact and not LogConfig(cleanup_policy="compact").delete
    both = LogConfig(cleanup_policy="delete,compact")
    assert both.compact and both.delete
