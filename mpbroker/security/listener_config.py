"""A listener's view of the broker config, as Kafka's per-listener overrides work:
`listener.name.<listener lower-case>.<key>` wins over `<key>` for the ssl.* and sasl.*
keys (e.g. `listener.name.internal.ssl.client.auth=required`), and a SASL mechanism's
JAAS entry is `listener.name.<listener>.<mechanism lower-case>.sasl.jaas.config`, else
`sasl.jaas.config`. Override values are the raw strings of server.properties (list
keys come comma-separated); the base values are the typed ones of `BrokerConfig`.
"""
from __future__ import annotations

from typing import Any, Mapping

LISTENER_PREFIX = "listener.name."


def _raw(cfg) -> Mapping[str, Any]:
    return getattr(cfg, "static", cfg)


class ListenerConfig:
    def __init__(self, cfg, listener_name: str):
        self.cfg = cfg
        self.listener_name = listener_name
        self.prefix = f"{LISTENER_PREFIX}{listener_name.lower()}."

    def get(self, key: str, default: Any = None) -> Any:
        raw = _raw(self.cfg)
        value = raw.get(self.prefix + key)
        if value is not None:
            return value
        value = self.cfg.get(key)
        return default if value is None else value

    def jaas(self, mechanism: str) -> str | None:
        raw = _raw(self.cfg)
        value = raw.get(f"{self.prefix}{mechanism.lower()}.sasl.jaas.config")
        if value is None:
            value = self.cfg.get("sasl.jaas.config")
        return value
