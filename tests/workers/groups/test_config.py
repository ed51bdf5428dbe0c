"""GroupConfig (workers/groups/config.py): the config table's keys and defaults, typed."""

from mpbroker.config import BrokerConfig
from workers.groups.config import GroupConfig


def test_defaults_come_from_the_config_table():
    cfg = GroupConfig.from_config(BrokerConfig({}))
    table = BrokerConfig({})
    assert cfg.max_session_timeout_ms == table["group.max.session.timeout.ms"]
    assert cfg.offsets_retention_ms == table["offsets.retention.minutes"] * 60_000
    assert cfg.consumer_session_timeout_ms == table["group.consumer.session.timeout.ms"]
    assert cfg.consumer_assignors == ("uniform", "range")
    assert cfg.commit_required_acks == -1 and cfg.compression == 0


def test_a_mapping_is_read_over_the_defaults():
    cfg = GroupConfig.from_config({"group.max.size": 2, "group.consumer.assignors": "range",
                                   "offsets.topic.compression.codec": 1})
    assert cfg.max_group_size == 2 and cfg.consumer_assignors == ("range",)
    assert cfg.compression == 1
    assert cfg.min_session_timeout_ms == BrokerConfig({})["group.min.session.timeout.ms"]


def test_unknown_compression_codec_writes_uncompressed():
    assert GroupConfig.from_config({"offsets.topic.compression.codec": 9}).compression == 0
