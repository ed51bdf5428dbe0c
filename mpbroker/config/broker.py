"""`BrokerConfig`: a broker's configuration, the static layer (server.properties +
--override) under the dynamic layers, validated as Kafka's KafkaConfig validates it,
with its derived values. The only file access of the config package is
``BrokerConfig.from_file`` (one read of the properties file, for the CLI)."""
from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from mpbroker.config.dynamic import validate_dynamic_update
from mpbroker.config.keys import BROKER_CONFIGS, PLACEMENT_PREFIX, TOPIC_BROKER_SYNONYMS, ConfigKey
from mpbroker.config.listeners import Endpoint, parse_listeners, parse_protocol_map
from mpbroker.config.properties import parse_overrides, parse_properties
from mpbroker.config.types import ConfigError, ConfigSource, ConfigType
from mpbroker.config.validators import validate
from mpbroker.config.values import parse_value, to_string
from mpbroker.ignored_configs import is_ignored
from mpbroker.security.authorizer import is_acl_authorizer


LISTENER_OVERRIDE_PREFIX = "listener.name."


def _usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class BrokerConfig:
    """A broker's configuration: static props + dynamic layers, validated.

    ``config[name]`` / ``config.get(name)`` is the effective typed value of a
    defined key (None for a null default). Derived values are properties named
    as Kafka's KafkaConfig members (``log_retention_ms``, ``log_dirs``, ...).
    """

    def __init__(self, props: Mapping[str, Any], *, dynamic_broker: Optional[Mapping[str, Any]] = None,
                 dynamic_default: Optional[Mapping[str, Any]] = None, cpu_count: Optional[int] = None,
                 cwd: Optional[str] = None):
        self.static: Dict[str, str] = {k: to_string(v) if not isinstance(v, str) else v for k, v in props.items()}
        self.dynamic_broker: Dict[str, str] = {k: str(v) for k, v in (dynamic_broker or {}).items()}
        self.dynamic_default: Dict[str, str] = {k: str(v) for k, v in (dynamic_default or {}).items()}
        self._cpu_count = cpu_count if cpu_count is not None else _usable_cpus()
        self._cwd = cwd
        others = [k for k in self.static if k not in BROKER_CONFIGS and not k.startswith(PLACEMENT_PREFIX)
                  and not is_listener_override(k)]
        # Kafka keys mpbroker accepts and ignores, and the rest: typos (mpbroker/ignored_configs.py)
        self.ignored = sorted(k for k in others if is_ignored(k))
        self.unknown = sorted(k for k in others if not is_ignored(k))
        self._populate_id_synonyms()
        self.values: Dict[str, Any] = {}
        for name, key in BROKER_CONFIGS.items():
            raw, _ = self._raw(name)
            self.values[name] = validate(key, raw) if raw is not None else self._default(key)
        self._check()

    # -- construction helpers -------------------------------------------

    @classmethod
    def from_text(cls, text: str, overrides: Sequence[str] = (), **kw) -> "BrokerConfig":
        props = parse_properties(text)
        props.update(parse_overrides(overrides))
        return cls(props, **kw)

    @classmethod
    def from_file(cls, path: str, overrides: Sequence[str] = (), **kw) -> "BrokerConfig":
        with open(path, "r", encoding="latin-1") as f:      # Properties.load reads ISO-8859-1
            return cls.from_text(f.read(), overrides, **kw)

    def with_dynamic(self, *, broker: Optional[Mapping[str, Any]] = None,
                     default: Optional[Mapping[str, Any]] = None) -> "BrokerConfig":
        """A new config with these dynamic layers (replacing the current ones
        where given). Values of None delete the key from that layer."""
        if broker is not None:
            validate_dynamic_update(broker, per_broker=True)
        if default is not None:
            validate_dynamic_update(default, per_broker=False)
        new_b = dict(self.dynamic_broker) if broker is None else {k: v for k, v in broker.items() if v is not None}
        new_d = dict(self.dynamic_default) if default is None else {k: v for k, v in default.items() if v is not None}
        return BrokerConfig(self.static, dynamic_broker=new_b, dynamic_default=new_d,
                            cpu_count=self._cpu_count, cwd=self._cwd)

    def _populate_id_synonyms(self) -> None:
        # KafkaConfig.populateSynonyms: broker.id and node.id mirror each other.
        b, n = self.static.get("broker.id"), self.static.get("node.id")
        if b is not None and n is not None:
            bv = parse_value("broker.id", ConfigType.INT, b)
            nv = parse_value("node.id", ConfigType.INT, n)
            if bv != nv:
                raise ConfigError("You must set `node.id` to the same value as `broker.id`.")
        elif b is not None:
            self.static["node.id"] = b
        elif n is not None:
            self.static["broker.id"] = n

    def _raw(self, name: str):
        for layer, source in ((self.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                              (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                              (self.static, ConfigSource.STATIC_BROKER_CONFIG)):
            if name in layer:
                return layer[name], source
        return None, ConfigSource.DEFAULT_CONFIG

    def _default(self, key: ConfigKey) -> Any:
        if key.name == "num.workers":
            return self._cpu_count
        return list(key.default) if isinstance(key.default, list) else key.default

    def default_of(self, name: str) -> Any:
        return self._default(BROKER_CONFIGS[name])

    def source_of(self, name: str) -> int:
        return self._raw(name)[1]

    # -- access -------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.values:
            return self.values[name]
        raw, _ = self._raw(name)
        return default if raw is None else raw

    def __contains__(self, name: str) -> bool:
        return name in self.values

    # -- derived values (KafkaConfig) ------------------------------------------

    @property
    def broker_id(self) -> int:
        return self.values["broker.id"]

    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    @property
    def log_dirs(self) -> List[str]:
        """log.dirs, else log.dir; comma-separated; relative paths made absolute."""
        raw = self.values["log.dirs"]
        if raw is None:
            raw = self.values["log.dir"]
        dirs = [d for d in re.split(r"\s*,\s*", (raw or "").strip()) if d]
        base = self._cwd if self._cwd is not None else os.getcwd()
        return [os.path.normpath(os.path.join(base, d)) for d in dirs]

    @staticmethod
    def _ms(ms_value, other_value, factor):
        return ms_value if ms_value is not None else factor * other_value

    @property
    def log_roll_time_ms(self) -> int:
        return self._ms(self.values["log.roll.ms"], self.values["log.roll.hours"], 3600000)

    @property
    def log_roll_time_jitter_ms(self) -> int:
        return self._ms(self.values["log.roll.jitter.ms"], self.values["log.roll.jitter.hours"], 3600000)

    @property
    def log_retention_time_ms(self) -> int:
        """log.retention.ms, else minutes, else hours; any negative means -1."""
        ms = self.values["log.retention.ms"]
        if ms is None:
            minutes = self.values["log.retention.minutes"]
            ms = 60000 * minutes if minutes is not None else 3600000 * self.values["log.retention.hours"]
        return -1 if ms < 0 else ms

    @property
    def log_flush_interval_ms(self) -> int:
        v = self.values["log.flush.interval.ms"]
        return v if v is not None else self.values["log.flush.scheduler.interval.ms"]

    @property
    def offsets_retention_ms(self) -> int:
        return self.values["offsets.retention.minutes"] * 60000

    @property
    def zookeeper_connection_timeout_ms(self) -> int:
        v = self.values["zookeeper.connection.timeout.ms"]
        return v if v is not None else self.values["zookeeper.session.timeout.ms"]

    @property
    def listener_security_protocol_map(self) -> Dict[str, str]:
        return parse_protocol_map(self.values["listener.security.protocol.map"])

    @property
    def listeners(self) -> List[Endpoint]:
        return parse_listeners(self.values["listeners"], self.listener_security_protocol_map)

    @property
    def advertised_listeners(self) -> List[Endpoint]:
        raw = self.values["advertised.listeners"]
        if raw is None:
            return self.listeners
        return parse_listeners(raw, self.listener_security_protocol_map, "advertised.listeners")

    @property
    def num_workers(self) -> int:
        return self.values["num.workers"]

    @property
    def admin_socket(self) -> str:
        v = self.values["admin.socket"]
        if v:
            base = self._cwd if self._cwd is not None else os.getcwd()
            return os.path.normpath(os.path.join(base, v))
        return os.path.join(self.log_dirs[0], ".mpbroker-admin.sock")

    @property
    def placement(self) -> Dict[str, str]:
        """``placement.*`` keys without the prefix (static, then dynamic layers)."""
        out = {}
        for layer in (self.static, self.dynamic_default, self.dynamic_broker):
            for k, v in layer.items():
                if k.startswith(PLACEMENT_PREFIX):
                    out[k[len(PLACEMENT_PREFIX):]] = v
        return out

    @property
    def uses_zookeeper(self) -> bool:
        return bool(self.values["zookeeper.connect"])

    def log_config_defaults(self) -> Dict[str, Any]:
        """Broker-level default of every topic config (KafkaConfig.extractLogConfigMap)."""
        out = {}
        for topic_name, synonyms in TOPIC_BROKER_SYNONYMS.items():
            primary = synonyms[0]
            if topic_name == "retention.ms":
                out[topic_name] = self.log_retention_time_ms
            elif topic_name == "segment.ms":
                out[topic_name] = self.log_roll_time_ms
            elif topic_name == "segment.jitter.ms":
                out[topic_name] = self.log_roll_time_jitter_ms
            elif topic_name == "flush.ms":
                out[topic_name] = self.log_flush_interval_ms
            else:
                v = self.values[primary]
                out[topic_name] = list(v) if isinstance(v, list) else v
        return out

    # -- validation (KafkaConfig.validateValues) ---------------------------

    def _check(self) -> None:
        v = self.values
        if v["broker.id.generation.enable"]:
            if not -1 <= v["broker.id"] <= v["reserved.broker.max.id"]:
                raise ConfigError("broker.id must be greater than or equal to -1 and not greater than reserved.broker.max.id")
        elif v["broker.id"] < 0:
            raise ConfigError("broker.id must be greater than or equal to 0")
        if self.log_roll_time_ms < 1:
            raise ConfigError("log.roll.ms must be greater than or equal to 1")
        if self.log_roll_time_jitter_ms < 0:
            raise ConfigError("log.roll.jitter.ms must be greater than or equal to 0")
        if not (self.log_retention_time_ms >= 1 or self.log_retention_time_ms == -1):
            raise ConfigError("log.retention.ms must be unlimited (-1) or, greater than or equal to 1")
        if not self.log_dirs:
            raise ConfigError("At least one log directory must be defined via log.dirs or log.dir.")
        if v["log.cleaner.threads"] > 0 and v["log.cleaner.dedupe.buffer.size"] // v["log.cleaner.threads"] <= 1024 * 1024:
            raise ConfigError("log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.")
        if v["replica.fetch.wait.max.ms"] > v["replica.socket.timeout.ms"]:
            raise ConfigError("replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms "
                              "to prevent unnecessary socket timeouts")
        if v["replica.fetch.wait.max.ms"] > v["replica.lag.time.max.ms"]:
            raise ConfigError("replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms "
                              "to prevent frequent changes in ISR")
        if not -1 <= v["offsets.commit.required.acks"] <= v["offsets.topic.replication.factor"]:
            raise ConfigError("offsets.commit.required.acks must be greater or equal -1 and less or equal to "
                              "offsets.topic.replication.factor")
        if 0 < v["queued.max.request.bytes"] < v["socket.request.max.bytes"]:
            raise ConfigError("queued.max.request.bytes must be larger or equal to socket.request.max.bytes")
        if v["group.max.session.timeout.ms"] < v["group.min.session.timeout.ms"]:
            raise ConfigError("group.max.session.timeout.ms must be greater than or equal to group.min.session.timeout.ms")
        listeners = self.listeners
        ports = [e.port for e in listeners if e.port != 0]
        if len(set(ports)) != len(ports):
            raise ConfigError(f"Each listener must have a different port, listeners: {v['listeners']}")
        if any(e.host == "0.0.0.0" for e in self.advertised_listeners):
            raise ConfigError("advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                              "Use a routable IP address.")
        adv = {e.listener_name for e in self.advertised_listeners}
        if not adv <= {e.listener_name for e in listeners}:
            raise ConfigError("advertised.listeners listener names must be equal to or a subset of the ones "
                              f"defined in listeners. Found {sorted(adv)}.")
        ib = v["inter.broker.listener.name"]
        if ib is not None and ib.upper() not in adv:
            raise ConfigError(f"inter.broker.listener.name must be a listener name defined in advertised.listeners. "
                              f"The valid options based on currently configured listeners are {','.join(sorted(adv))}")
        self._check_security()

    def _check_security(self) -> None:
        """TLS/SASL listeners are served (mpbroker/security/); an authorizer other than the
        ACL authorizer would be served without the protection it asks for, so it is refused."""
        name = self.values["authorizer.class.name"]
        if name and not is_acl_authorizer(name):
            raise ConfigError(f"authorizer.class.name={name}: mpbroker implements only the ACL authorizer "
                              "(kafka.security.authorizer.AclAuthorizer, "
                              "org.apache.kafka.metadata.authorizer.StandardAuthorizer)",
                              "authorizer.class.name")

    @property
    def inter_broker_listener(self) -> Endpoint:
        """The advertised endpoint the broker's own connections use (Kafka's rule:
        inter.broker.listener.name, else the listener named like
        security.inter.broker.protocol)."""
        adv = self.advertised_listeners
        name = self.values["inter.broker.listener.name"]
        if name:
            return next(e for e in adv if e.listener_name == name.upper())
        proto = self.values["security.inter.broker.protocol"]
        for e in adv:
            if e.listener_name == proto:
                return e
        raise ConfigError(f"security.inter.broker.protocol={proto}: no listener named {proto} "
                          "(set inter.broker.listener.name)")


def is_listener_override(name: str) -> bool:
    """`listener.name.<listener>.<key>` or `listener.name.<listener>.<mechanism>.sasl.jaas.config`
    (Kafka's per-listener overrides of the ssl.*, sasl.* and connection keys)."""
    if not name.startswith(LISTENER_OVERRIDE_PREFIX):
        return False
    rest = name[len(LISTENER_OVERRIDE_PREFIX):].split(".", 1)
    if len(rest) != 2:
        return False
    key = rest[1]
    return key in BROKER_CONFIGS or key.endswith("sasl.jaas.config") or key.endswith(
        ".sasl.login.callback.handler.class") or key.endswith(".sasl.server.callback.handler.class")


def unknown_config_warning(name: str) -> str:
    """Kafka's AbstractConfig.logUnused line for a key that no config defines."""
    return f"The configuration '{name}' was supplied but isn't a known config."
