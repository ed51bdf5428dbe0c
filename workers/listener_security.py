"""A listener's security as a worker serves it (issue #17): the TLS context, the SASL
mechanisms and settings, the KIP-371 principal mapping rules, built once per worker
from the broker config (`ListenerSecurity.from_config`); `mpbroker serve` builds them
too before forking, so that a bad TLS or SASL setting exits 2 with one line.

`listener.name.<listener>.<key>` overrides apply (mpbroker/security/listener_config.py).
A connection (workers/connection.py) takes its listener's `ListenerSecurity`: TLS
listeners get a `TlsConnection` (workers/tls_connection.py), SASL listeners a
`SaslSession` per connection (`new_session`).
"""
from __future__ import annotations

import ssl
from typing import Callable, List, Optional

import mpbroker.security  # noqa: F401  (registers the SASL mechanisms)
from mpbroker.security import principal, tls
from mpbroker.security.listener_config import ListenerConfig
from mpbroker.security.sasl import (MECHANISMS, SaslConfigError, SaslSession,
                                    enabled_mechanisms)

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class SecurityConfigError(ValueError):
    """A listener's TLS or SASL config cannot be served (one line, no secret)."""


class ListenerSecurity:
    def __init__(self, name: str, protocol: str, config: ListenerConfig,
                 ssl_context: Optional[ssl.SSLContext], mechanisms: List[str],
                 rules: list, failure_delay_ms: int = 100, max_receive_size: int = 524288,
                 reauth_ms: int = 0):
        self.name = name
        self.protocol = protocol
        self.config = config
        self.ssl_context = ssl_context
        self.mechanisms = mechanisms
        self.rules = rules
        self.failure_delay_s = max(0, failure_delay_ms) / 1000
        self.max_receive_size = max_receive_size
        self.reauth_ms = reauth_ms

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @classmethod
    def plaintext(cls, name: str = "PLAINTEXT") -> "ListenerSecurity":
        return cls(name, "PLAINTEXT", ListenerConfig({}, name), None, [],
                   principal.parse_rules("DEFAULT"))

    @classmethod
    def from_config(cls, cfg, name: str, protocol: str) -> "ListenerSecurity":
        config = ListenerConfig(cfg, name)
        try:
            ctx = tls.server_context(_SaslSslView(config) if protocol == "SASL_SSL" else config) \
                if protocol in TLS_PROTOCOLS else None
            rules = principal.parse_rules(config.get("ssl.principal.mapping.rules"))
        except (tls.TlsConfigError, principal.MappingError) as e:
            raise SecurityConfigError(f"listener {name}: {e}") from None
        mechanisms: List[str] = []
        if protocol in SASL_PROTOCOLS:
            wanted = enabled_mechanisms(config)
            mechanisms = [m for m in wanted if m in MECHANISMS]
            if not mechanisms:
                raise SecurityConfigError(
                    f"listener {name}: sasl.enabled.mechanisms={','.join(wanted)}: none of them "
                    f"is served by mpbroker (served: {', '.join(sorted(MECHANISMS))})")
            for m in mechanisms:          # the JAAS entries and such: checked now
                try:
                    MECHANISMS[m](listener_name=name, config=config, credentials=lambda u, k: None)
                except SaslConfigError as e:
                    raise SecurityConfigError(str(e)) from None
        return cls(name, protocol, config, ctx, mechanisms, rules,
                   int(config.get("connection.failed.authentication.delay.ms", 100)),
                   int(config.get("sasl.server.max.receive.size", 524288)),
                   int(config.get("connections.max.reauth.ms", 0) or 0))

    def new_session(self, credentials: Callable | None, clock: Callable[[], float]) -> Optional[SaslSession]:
        if not self.sasl:
            return None
        return SaslSession(self.name, self.config, self.mechanisms, credentials,
                           self.max_receive_size, self.reauth_ms, clock)


class _SaslSslView:
    """KIP-684: on a SASL_SSL listener SASL authenticates the client, so the broker-wide
    `ssl.client.auth` does not apply; only `listener.name.<l>.ssl.client.auth` does."""

    def __init__(self, config: ListenerConfig):
        self.config = config

    def get(self, key, default=None):
        if key == "ssl.client.auth":
            return _raw(self.config.cfg).get(self.config.prefix + key) or "none"
        return self.config.get(key, default)


def _raw(cfg):
    return getattr(cfg, "static", cfg)


def listener_securities(cfg, specs) -> List[ListenerSecurity]:
    """One ListenerSecurity per (name, protocol) of `specs`; raises SecurityConfigError."""
    return [ListenerSecurity.from_config(cfg, name, protocol) for name, protocol in specs]
