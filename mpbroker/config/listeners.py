"""Listeners: `listeners` / `advertised.listeners` URIs (NAME://host:port) and
`listener.security.protocol.map`, parsed as Kafka's EndPoint does."""
from __future__ import annotations

import re
from typing import Dict, List, Mapping, NamedTuple

from mpbroker.config.types import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class Endpoint(NamedTuple):
    listener_name: str
    host: str            # "" binds the default interface
    port: int
    security_protocol: str


class Advertised(tuple):
    """(host, port) of the broker's inter-broker listener as advertised (what the
    controller registers as the broker's address), carrying `endpoints`: every
    advertised listener as (name, host, port, security protocol), ports resolved."""

    endpoints: tuple

    def __new__(cls, host: str, port: int, endpoints=()):
        self = super().__new__(cls, (host, port))
        self.endpoints = tuple(endpoints)
        return self


_LISTENER_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


def parse_listeners(value: str, protocol_map: Mapping[str, str], name: str = "listeners") -> List[Endpoint]:
    endpoints = []
    for item in [s for s in re.split(r"\s*,\s*", (value or "").strip()) if s]:
        m = _LISTENER_RE.match(item)
        if not m:
            raise ConfigError(f"Unable to parse {item} to a broker endpoint")
        listener = m.group(1).upper()
        if listener not in protocol_map:
            raise ConfigError(f"No security protocol defined for listener {listener}")
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError.invalid(name, value, f"port {port} out of range")
        endpoints.append(Endpoint(listener, m.group(2), port, protocol_map[listener]))
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name, {name}: {value}")
    return endpoints


def parse_protocol_map(value: str) -> Dict[str, str]:
    out = {}
    for item in [s for s in re.split(r"\s*,\s*", value.strip()) if s]:
        if ":" not in item:
            raise ConfigError.invalid("listener.security.protocol.map", value, "Map entry should be of form <key>:<value>")
        k, v = item.split(":", 1)
        v = v.strip().upper()
        if v not in SECURITY_PROTOCOLS:
            raise ConfigError.invalid("listener.security.protocol.map", value, f"unknown security protocol {v}")
        out[k.strip().upper()] = v
    return out
