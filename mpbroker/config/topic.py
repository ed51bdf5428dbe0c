"""Topic configs: a topic's overrides validated (LogConfig.validate) and its effective
values over the broker's defaults."""
from __future__ import annotations

from typing import Any, Dict, Mapping

from mpbroker.config.broker import BrokerConfig
from mpbroker.config.keys import TOPIC_CONFIGS
from mpbroker.config.types import ConfigError
from mpbroker.config.validators import validate


def validate_topic_config(overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """Parse and validate a topic's overrides (LogConfig.validate); typed dict."""
    parsed = {}
    for name, raw in overrides.items():
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise ConfigError(f"Unknown topic config name: {name}", name, raw)
        if raw is None:
            raise ConfigError.invalid(name, None, "Value must be non-null")
        parsed[name] = validate(key, raw)
    lo = parsed.get("min.compaction.lag.ms")
    hi = parsed.get("max.compaction.lag.ms")
    if lo is not None and hi is not None and lo > hi:
        raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({lo}) > "
                          f"max.compaction.lag.ms ({hi})")
    return parsed


def effective_topic_config(broker_config: BrokerConfig, overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """Every topic config's value: the override, else the broker default."""
    values = broker_config.log_config_defaults()
    values.update(validate_topic_config(overrides))
    lo, hi = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if lo > hi:
        raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({lo}) > max.compaction.lag.ms ({hi})")
    return values
