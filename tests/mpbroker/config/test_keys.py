"""Tests for mpbroker/config/keys.py: the key tables against Kafka's."""
import pytest

from mpbroker.config import BROKER_CONFIGS, TOPIC_BROKER_SYNONYMS, TOPIC_CONFIGS, ConfigError
from tests.mpbroker.config.conftest import cfg


def test_defaults_table_matches_kafka():
    c = cfg()
    assert c["log.segment.bytes"] == 1073741824
    assert c["message.max.bytes"] == 1048588
    assert c["socket.request.max.bytes"] == 104857600
    assert c["offsets.topic.num.partitions"] == 50
    assert c["group.min.session.timeout.ms"] == 6000
    assert c["group.max.session.timeout.ms"] == 1800000
    assert c["fetch.max.bytes"] == 57671680
    assert c["replica.lag.time.max.ms"] == 30000
    assert c["log.index.size.max.bytes"] == 10485760
    assert c["log.cleanup.policy"] == ["delete"]
    assert c["unclean.leader.election.enable"] is False
    assert BROKER_CONFIGS["log.retention.ms"].update_mode == "cluster-wide"
    assert BROKER_CONFIGS["log.retention.hours"].update_mode == "read-only"
    assert BROKER_CONFIGS["listeners"].update_mode == "per-broker"


def test_topic_config_synonyms_cover_topicconfig_names():
    assert set(TOPIC_CONFIGS) == set(TOPIC_BROKER_SYNONYMS)
    assert TOPIC_BROKER_SYNONYMS["segment.bytes"] == ["log.segment.bytes"]
    assert TOPIC_BROKER_SYNONYMS["retention.ms"] == ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    assert TOPIC_BROKER_SYNONYMS["max.message.bytes"] == ["message.max.bytes"]
    assert TOPIC_BROKER_SYNONYMS["file.delete.delay.ms"] == ["log.segment.delete.delay.ms"]
    for synonyms in TOPIC_BROKER_SYNONYMS.values():
        assert all(s in BROKER_CONFIGS for s in synonyms)


def test_log_level_is_a_documented_key():
    assert cfg(**{"log.level": "debug"})["log.level"] == "debug"
    assert cfg()["log.level"] == "INFO"
    with pytest.raises(ConfigError, match="Invalid value LOUD for configuration log.level"):
        cfg(**{"log.level": "LOUD"})


def test_keys_mpbroker_defines_are_never_ignored():
    c = cfg(**{"ssl.keystore.password": "x"})          # defined (PASSWORD) and also an ssl. key
    assert c.ignored == [] and c.unknown == []
