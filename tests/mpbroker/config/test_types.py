"""Tests for mpbroker/config/types.py: ConfigError (Kafka's ConfigException), the
DescribeConfigs ints of ConfigSource / ConfigType and Java's numeric bounds."""
import pytest

from mpbroker.config.types import (INT_MAX, INT_MIN, INVALID_CONFIG, LONG_MAX, LONG_MIN, SHORT_MAX,
                                   SHORT_MIN, ConfigError, ConfigSource, ConfigType)


def test_config_error_is_a_value_error_with_invalid_config_code():
    e = ConfigError("boom")
    assert isinstance(e, ValueError) and str(e) == "boom"
    assert e.error_code == INVALID_CONFIG == 40
    assert e.name is None and e.value is None


def test_invalid_formats_kafka_message_with_and_without_reason():
    e = ConfigError.invalid("num.partitions", -1, "Value must be at least 1")
    assert str(e) == "Invalid value -1 for configuration num.partitions: Value must be at least 1"
    assert (e.name, e.value) == ("num.partitions", -1)
    assert str(ConfigError.invalid("x", "v")) == "Invalid value v for configuration x"
    assert str(ConfigError.invalid("x", None, "")) == "Invalid value None for configuration x: "


def test_invalid_builds_the_subclass_it_is_called_on():
    class Sub(ConfigError):
        pass
    e = Sub.invalid("k", 1)
    assert type(e) is Sub
    with pytest.raises(ConfigError):
        raise e


def test_java_bounds():
    assert (INT_MIN, INT_MAX) == (-2147483648, 2147483647)
    assert (LONG_MIN, LONG_MAX) == (-9223372036854775808, 9223372036854775807)
    assert (SHORT_MIN, SHORT_MAX) == (-32768, 32767)


def test_config_source_ints_are_describe_configs_wire_values():
    assert [ConfigSource.UNKNOWN, ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG,
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG,
            ConfigSource.DEFAULT_CONFIG, ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG] == list(range(7))


def test_config_type_names_cover_every_known_type_int():
    ints = {v for k, v in vars(ConfigType).items() if k.isupper() and isinstance(v, int)}
    assert set(ConfigType.NAMES) == ints - {ConfigType.UNKNOWN}
    for i, name in ConfigType.NAMES.items():
        assert getattr(ConfigType, name) == i
