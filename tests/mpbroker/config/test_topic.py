"""Tests for mpbroker/config/topic.py: topic configs: validation and effective values over the broker defaults."""
import pytest

from mpbroker.config import (
    TOPIC_CONFIGS, ConfigError, effective_topic_config, validate_topic_config,
)
from tests.mpbroker.config.conftest import cfg


def test_effective_topic_config_uses_broker_synonyms():
    c = cfg(**{"log.retention.hours": "2", "log.segment.bytes": "1048576", "log.roll.hours": "1",
               "log.cleanup.policy": "compact"})
    eff = effective_topic_config(c, {"retention.bytes": "100"})
    assert eff["retention.ms"] == 7200000
    assert eff["segment.bytes"] == 1048576
    assert eff["segment.ms"] == 3600000
    assert eff["cleanup.policy"] == ["compact"]
    assert eff["retention.bytes"] == 100
    assert eff["max.message.bytes"] == 1048588
    assert set(eff) == set(TOPIC_CONFIGS)


def test_topic_config_validation():
    assert validate_topic_config({"cleanup.policy": "compact,delete"}) == {"cleanup.policy": ["compact", "delete"]}
    with pytest.raises(ConfigError, match="Unknown topic config name: nope"):
        validate_topic_config({"nope": "1"})
    with pytest.raises(ConfigError, match="Invalid value -2 for configuration retention.ms: Value must be at least -1"):
        validate_topic_config({"retention.ms": "-2"})
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        validate_topic_config({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    with pytest.raises(ConfigError, match="Value must be between 1 and 9"):
        validate_topic_config({"compression.gzip.level": "12"})
    assert validate_topic_config({"compression.zstd.level": "-5"}) == {"compression.zstd.level": -5}
