"""The checks of a dynamic broker config update (AlterConfigs on a BROKER resource):
Kafka's DynamicBrokerConfig.validateConfigs."""
from __future__ import annotations

from typing import Any, Mapping

from mpbroker.config.keys import BROKER_CONFIGS
from mpbroker.config.types import ConfigError
from mpbroker.config.validators import validate


def validate_dynamic_update(props: Mapping[str, Any], per_broker: bool) -> None:
    """DynamicBrokerConfig.validateConfigs: names, modes and types."""
    names = set(props)
    non_dynamic = sorted(n for n in names if n in BROKER_CONFIGS and not BROKER_CONFIGS[n].dynamic)
    if non_dynamic:
        raise ConfigError(f"Cannot update these configs dynamically: Set({', '.join(non_dynamic)})")
    if not per_broker:
        pb = sorted(n for n in names if n in BROKER_CONFIGS and BROKER_CONFIGS[n].update_mode == "per-broker")
        if pb:
            raise ConfigError("Cannot update these configs at default cluster level, broker id must be "
                              f"specified: Set({', '.join(pb)})")
    for name, value in props.items():
        if name in BROKER_CONFIGS and value is not None:
            validate(BROKER_CONFIGS[name], value)
