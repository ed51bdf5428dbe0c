"""Tests for mpbroker/config/values.py: parsing and printing config values as Kafka does."""
import pytest

from mpbroker.config import ConfigError, ConfigType, parse_value, to_string


@pytest.mark.parametrize("type_,raw,expected", [
    (ConfigType.BOOLEAN, " TRUE ", True), (ConfigType.BOOLEAN, "false", False),
    (ConfigType.INT, " 42 ", 42), (ConfigType.INT, "-7", -7), (ConfigType.INT, "+3", 3),
    (ConfigType.LONG, "9223372036854775807", 2**63 - 1), (ConfigType.SHORT, "-1", -1),
    (ConfigType.DOUBLE, "0.5", 0.5), (ConfigType.DOUBLE, "1e3", 1000.0),
    (ConfigType.LIST, " compact , delete ", ["compact", "delete"]), (ConfigType.LIST, "", []),
    (ConfigType.STRING, "  x  ", "x"),
])
def test_parse_value(type_, raw, expected):
    assert parse_value("k", type_, raw) == expected


@pytest.mark.parametrize("type_,raw,reason", [
    (ConfigType.BOOLEAN, "yes", "Expected value to be either true or false"),
    (ConfigType.INT, "1.0", "Not a number of type INT"),
    (ConfigType.INT, "2147483648", "Not a number of type INT"),
    (ConfigType.INT, "1_000", "Not a number of type INT"),
    (ConfigType.SHORT, "40000", "Not a number of type SHORT"),
    (ConfigType.LONG, "abc", "Not a number of type LONG"),
    (ConfigType.DOUBLE, "x", "Not a number of type DOUBLE"),
])
def test_parse_errors_match_kafka(type_, raw, reason):
    with pytest.raises(ConfigError) as e:
        parse_value("some.key", type_, raw)
    assert str(e.value) == f"Invalid value {raw} for configuration some.key: {reason}"


def test_to_string_java_forms():
    assert to_string(True) == "true"
    assert to_string(["a", "b"]) == "a,b"
    assert to_string(0.9) == "0.9"
    assert to_string(10.0) == "10.0"
    assert to_string(1e10) == "1.0E10"
    assert to_string(0.0001) == "1.0E-4"
    assert to_string(None) is None
