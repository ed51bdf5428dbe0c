"""Tests for mpbroker/config/validators.py: the validators' messages."""
import pytest

from mpbroker.config import ConfigError
from tests.mpbroker.config.conftest import cfg


def test_validator_messages():
    with pytest.raises(ConfigError, match=r"^Invalid value 0 for configuration num.partitions: Value must be at least 1$"):
        cfg(num_partitions="0")
    with pytest.raises(ConfigError, match="String must be one of: CreateTime, LogAppendTime"):
        cfg(**{"log.message.timestamp.type": "Now"})
    with pytest.raises(ConfigError, match="Invalid value bogus for configuration log.cleanup.policy: String must be one of: compact, delete"):
        cfg(**{"log.cleanup.policy": "delete,bogus"})
    with pytest.raises(ConfigError, match="Value must be no more than 1"):
        cfg(**{"log.cleaner.min.cleanable.ratio": "1.5"})
    with pytest.raises(ConfigError) as e:
        cfg(**{"compression.type": "brotli"})
    assert e.value.error_code == 40
