"""Tests for mpbroker/config/dynamic.py: dynamic broker config layers and their update modes."""
import pytest

from mpbroker.config import ConfigError, ConfigSource
from tests.mpbroker.config.conftest import cfg


def test_dynamic_layers_precedence_and_modes():
    c = cfg(**{"log.retention.ms": "1000"})
    c2 = c.with_dynamic(default={"log.retention.ms": "2000"})
    assert c2.log_retention_time_ms == 2000
    assert c2.source_of("log.retention.ms") == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    c3 = c2.with_dynamic(broker={"log.retention.ms": "3000"})
    assert c3.log_retention_time_ms == 3000
    assert c3.source_of("log.retention.ms") == ConfigSource.DYNAMIC_BROKER_CONFIG
    with pytest.raises(ConfigError, match=r"Cannot update these configs dynamically: Set\(num.partitions\)"):
        c.with_dynamic(broker={"num.partitions": "3"})
    with pytest.raises(ConfigError, match="broker id must be specified"):
        c.with_dynamic(default={"listeners": "PLAINTEXT://:9093"})
    with pytest.raises(ConfigError, match="Not a number of type LONG"):
        c.with_dynamic(default={"log.retention.ms": "soon"})
