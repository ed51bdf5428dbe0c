"""The vocabulary of the config model: Kafka's ConfigException, ConfigSource and
ConfigDef.Type (with the ints DescribeConfigs carries) and Java's numeric bounds."""
from __future__ import annotations

from typing import Any, Optional

INT_MAX = 2**31 - 1
INT_MIN = -2**31
LONG_MAX = 2**63 - 1
LONG_MIN = -2**63
SHORT_MAX = 2**15 - 1
SHORT_MIN = -2**15
DOUBLE_MAX = 1.7976931348623157e308
PLACEMENT_PREFIX = "placement."

INVALID_CONFIG = 40      # Kafka's error code for a bad config in a request


class ConfigError(ValueError):
    """Kafka's ConfigException. ``error_code`` is INVALID_CONFIG (40)."""

    error_code = INVALID_CONFIG

    def __init__(self, message: str, name: Optional[str] = None, value: Any = None):
        super().__init__(message)
        self.name = name
        self.value = value

    @classmethod
    def invalid(cls, name: str, value: Any, reason: Optional[str] = None) -> "ConfigError":
        msg = f"Invalid value {value} for configuration {name}"
        if reason is not None:
            msg += f": {reason}"
        return cls(msg, name, value)


class ConfigSource:
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType:
    """Kafka's ConfigDef.Type names, with the ints of DescribeConfigsResponse."""
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9

    NAMES = {1: "BOOLEAN", 2: "STRING", 3: "INT", 4: "SHORT", 5: "LONG", 6: "DOUBLE",
             7: "LIST", 8: "CLASS", 9: "PASSWORD"}
