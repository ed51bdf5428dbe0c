"""The security of the project's own client connections (workers/kafka_client.py):
the CLI's own-protocol calls with a `--command-config` file, and the broker's own
connections to other brokers (replica fetchers, the controller's requests, the
transaction markers), which authenticate like any client.

`ClientSecurity.from_properties(props)`: Kafka's / librdkafka's client keys:
`security.protocol`, the TLS keys of `mpbroker/security/tls.py` `client_context`,
`sasl.mechanism` with `sasl.username` / `sasl.password` (librdkafka) or a
`sasl.jaas.config` line with `username="..." password="..."` (Java clients).

`inter_broker(cfg)`: the broker config's inter-broker listener
(`inter.broker.listener.name` / `security.inter.broker.protocol`), its TLS keys (with
the listener's overrides: the trust store verifies the other broker, the key store is
this broker's certificate for listeners that ask for one), the mechanism of
`sasl.mechanism.inter.broker.protocol` and the `username` / `password` options of that
mechanism's JAAS entry for the listener, as Kafka's brokers read them. None for a
PLAINTEXT inter-broker listener.
"""
from __future__ import annotations

import ssl
from typing import NamedTuple, Optional

from mpbroker.security import jaas, tls
from mpbroker.security.listener_config import ListenerConfig


class ClientSecurityError(ValueError):
    pass


class ClientSecurity(NamedTuple):
    protocol: str = "PLAINTEXT"
    ssl_context: Optional[ssl.SSLContext] = None
    mechanism: Optional[str] = None
    username: str = ""
    password: str = ""

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_properties(cls, props) -> Optional["ClientSecurity"]:
        protocol = str(props.get("security.protocol") or "PLAINTEXT").upper()
        if protocol == "PLAINTEXT":
            return None
        if protocol not in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ClientSecurityError(f"security.protocol={protocol}: unknown")
        try:
            ctx = tls.client_context(props) if protocol.endswith("SSL") else None
        except tls.TlsConfigError as e:
            raise ClientSecurityError(str(e)) from None
        if not protocol.startswith("SASL_"):
            return cls(protocol, ctx)
        mechanism = str(props.get("sasl.mechanism") or "GSSAPI").upper()
        user, password = props.get("sasl.username"), props.get("sasl.password")
        if user is None and props.get("sasl.jaas.config"):
            user, password = _jaas_credentials(props.get("sasl.jaas.config"))
        if user is None:
            raise ClientSecurityError("SASL needs sasl.username and sasl.password "
                                      "(or sasl.jaas.config with username and password)")
        return cls(protocol, ctx, mechanism, str(user), str(password or ""))


def _jaas_credentials(text: str) -> tuple:
    try:
        entries = jaas.parse(text)
    except jaas.JaasError as e:
        raise ClientSecurityError(str(e)) from None
    if len(entries) != 1:
        raise ClientSecurityError("sasl.jaas.config: expected one login module")
    opts = entries[0].options
    return opts.get("username"), opts.get("password")


def inter_broker(cfg) -> Optional[ClientSecurity]:
    """The broker's own client security (see the module docstring); raises
    ClientSecurityError (or the config's error) when it cannot be built."""
    listener = cfg.inter_broker_listener
    protocol = listener.security_protocol
    if protocol == "PLAINTEXT":
        return None
    config = ListenerConfig(cfg, listener.listener_name)
    ctx = None
    if protocol.endswith("SSL"):
        try:
            ctx = tls.client_context(_TrustStoreView(config))
        except tls.TlsConfigError as e:
            raise ClientSecurityError(f"inter-broker listener {listener.listener_name}: {e}") from None
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, ctx)
    mechanism = str(cfg.get("sasl.mechanism.inter.broker.protocol") or "GSSAPI").upper()
    text = config.jaas(mechanism)
    user, password = _jaas_credentials(text) if text else (None, None)
    if user is None:
        raise ClientSecurityError(
            f"inter-broker listener {listener.listener_name}: the {mechanism} JAAS entry "
            f"(listener.name.{listener.listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config "
            "or sasl.jaas.config) needs username and password for the broker's own connections")
    return ClientSecurity(protocol, ctx, mechanism, user, password or "")


class _TrustStoreView:
    """A broker ListenerConfig read as client properties: its trust store is the CA,
    no librdkafka-only keys."""

    def __init__(self, config: ListenerConfig):
        self.config = config

    def get(self, key, default=None):
        if key in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
            return default
        return self.config.get(key, default)


_cached: list = [None, None]


def inter_broker_cached(cfg) -> Optional[ClientSecurity]:
    """`inter_broker(cfg)`, built once per config object (a reload brings a new one)."""
    if _cached[0] is not cfg:
        # a config without listeners (a test's plain dict) has no inter-broker security
        _cached[:] = [cfg, inter_broker(cfg) if hasattr(cfg, "inter_broker_listener") else None]
    return _cached[1]


def librdkafka_properties(props: dict) -> dict:
    """Java-client security properties (Kafka's `--command-config` convention, Spark's
    `kafka.*` options) as librdkafka reads them: `sasl.jaas.config` with username and
    password -> `sasl.username` / `sasl.password`; a PEM `ssl.truststore.location` ->
    `ssl.ca.location`; a PEM `ssl.keystore.location` (key and chain in one file) ->
    `ssl.certificate.location` + `ssl.key.location`; `ssl.key.password` stays. Keys
    librdkafka knows are left alone; the others of these families are dropped."""
    out = dict(props)
    jaas_text = out.pop("sasl.jaas.config", None)
    if jaas_text and "sasl.username" not in out:
        user, password = _jaas_credentials(jaas_text)
        if user is not None:
            out["sasl.username"], out["sasl.password"] = user, password or ""
    if str(out.pop("ssl.truststore.type", "PEM")).upper() == "PEM" and \
            "ssl.truststore.location" in out and "ssl.ca.location" not in out:
        out["ssl.ca.location"] = out.pop("ssl.truststore.location")
    if str(out.get("ssl.keystore.type", "PKCS12")).upper() == "PEM":
        out.pop("ssl.keystore.type")
        location = out.pop("ssl.keystore.location", None)
        if location and "ssl.certificate.location" not in out:
            out["ssl.certificate.location"] = out["ssl.key.location"] = location
    else:
        out.pop("ssl.keystore.type", None)      # librdkafka's keystore is PKCS12
    return out
