"""The config model: broker configs (``server.properties``), topic configs, and
what DescribeConfigs reports about them.

Everything here takes values and returns values; the only file access is
``BrokerConfig.from_file`` (one read of the properties file, for the CLI).

Sources, lowest precedence first (Kafka's ``ConfigSource``)::

    DEFAULT_CONFIG (5)                 the defaults in BROKER_CONFIGS
    STATIC_BROKER_CONFIG (4)           server.properties + --override key=value
    DYNAMIC_DEFAULT_BROKER_CONFIG (3)  cluster-wide dynamic (AlterConfigs, resource "")
    DYNAMIC_BROKER_CONFIG (2)          per-broker dynamic (AlterConfigs, resource "<id>")
    DYNAMIC_TOPIC_CONFIG (1)           a topic's override (topic configs only)

A topic config without an override takes its broker synonym's value
(``segment.bytes`` <- ``log.segment.bytes``, ``retention.ms`` <-
``log.retention.ms`` | ``log.retention.minutes`` | ``log.retention.hours``), derived
exactly as Kafka derives it (``KafkaConfig.logRetentionTimeMillis`` and friends).

Values are parsed as Kafka's ``ConfigDef`` parses them (``Integer.parseInt`` on
the trimmed string, ``true``/``false`` any case, lists split on commas) and bad
values raise ``ConfigError`` with Kafka's ``ConfigException`` message:
``Invalid value x for configuration y: reason``.

Modules: `types` (errors, sources, types), `values` (parsing and printing values),
`validators`, `keys` (the key tables: the one place a default is written),
`properties` (the server.properties parser), `listeners`, `broker` (`BrokerConfig`),
`dynamic` (dynamic update checks), `topic` (topic configs), `describe` (the
DescribeConfigs view). This package re-exports the names other modules use.
"""
from mpbroker.config.broker import BrokerConfig, unknown_config_warning
from mpbroker.config.describe import describe_broker_configs, describe_keys_text, describe_topic_configs
from mpbroker.config.dynamic import validate_dynamic_update
from mpbroker.config.keys import (BROKER_CONFIGS, PLACEMENT_PREFIX, TOPIC_BROKER_SYNONYMS, TOPIC_CONFIGS,
                                  ConfigKey)
from mpbroker.config.listeners import Endpoint, parse_listeners
from mpbroker.config.properties import parse_overrides, parse_properties
from mpbroker.config.topic import effective_topic_config, validate_topic_config
from mpbroker.config.types import ConfigError, ConfigSource, ConfigType
from mpbroker.config.validators import parse_http_listener
from mpbroker.config.values import parse_value, to_string

__all__ = [
    "ConfigError", "ConfigKey", "ConfigSource", "ConfigType", "Endpoint", "BrokerConfig",
    "BROKER_CONFIGS", "TOPIC_CONFIGS", "TOPIC_BROKER_SYNONYMS", "PLACEMENT_PREFIX",
    "parse_properties", "parse_overrides", "parse_value", "to_string",
    "validate_topic_config", "effective_topic_config", "validate_dynamic_update",
    "describe_broker_configs", "describe_topic_configs", "describe_keys_text", "parse_listeners",
    "parse_http_listener", "unknown_config_warning",
]
