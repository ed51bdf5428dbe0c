"""MirrorMaker 2's dedicated-mode configuration (`connect-mirror-maker.properties`).

The file is Java properties (parsed with `mpbroker.config.parse_properties`):

    clusters = A, B
    A.bootstrap.servers = host1:9092         # per cluster: bootstrap and client settings
    A.security.protocol = SASL_SSL           #   common to its clients (security.*, sasl.*,
    A.consumer.fetch.min.bytes = 1           #   ssl.*, client.id, ...), or per role:
    B.producer.linger.ms = 5                 #   A.consumer.*, A.producer.*, A.admin.*
    A->B.enabled = true                      # flows are off unless enabled
    A->B.topics = orders.*, payments         # any flow key: `A->B.KEY` beats `KEY`
    replication.factor = 3

A flow key is looked up as `SOURCE->TARGET.KEY`, then `KEY`, then MM2's default
(`FLOW_KEYS`). Client settings are passed to confluent-kafka (librdkafka) as they are,
except Java-only ones (serializers, interceptors), which are dropped with a warning.
Keys that MM2 or Connect know but that have no effect here (`tasks.max`, the Connect
storage topics' settings) are accepted silently (`ACCEPTED`); any other key gets one
warning line. Every error is a `MirrorConfigError` with a one-line message (the CLI
exits 2 with it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mpbroker.config import parse_properties
from mpbroker.mirror.policy import POLICIES, ReplicationPolicy


class MirrorConfigError(ValueError):
    pass


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s not in ("true", "false"):
        raise ValueError("expected true or false")
    return s == "true"


def _int(v: str) -> int:
    return int(v.strip())


def _str(v: str) -> str:
    return v.strip()


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(v: str) -> str:
        s = v.strip().lower()
        if s not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return s
    return parse


def _regex_list(v: str) -> Tuple[re.Pattern, ...]:
    return tuple(re.compile(p.strip()) for p in v.split(",") if p.strip())


# MM2's keys with MM2's defaults (MirrorSourceConfig, MirrorCheckpointConfig,
# MirrorHeartbeatConfig, MirrorConnectorConfig, KIP-618), except `offset.flush.interval.ms`
# (Connect's worker key: how often the at-least-once pipeline commits source offsets;
# 10 s instead of Connect's 60 s, which bounds re-delivery after a crash).
FLOW_KEYS: Dict[str, Tuple[str, Callable]] = {
    "enabled": ("false", _bool),
    "topics": (".*", _regex_list),
    "topics.exclude": (r".*[\-\.]internal, .*\.replica, __.*", _regex_list),
    "groups": (".*", _regex_list),
    "groups.exclude": ("console-consumer-.*, connect-.*, __.*", _regex_list),
    "replication.factor": ("2", _int),
    "sync.topic.configs.enabled": ("true", _bool),
    "sync.topic.configs.interval.seconds": ("600", _int),
    "sync.topic.acls.enabled": ("true", _bool),
    "config.properties.exclude": (
        r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
        r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
        r"unclean\.leader\.election\.enable, min\.insync\.replicas", _regex_list),
    "emit.heartbeats.enabled": ("true", _bool),
    "emit.heartbeats.interval.seconds": ("1", _int),
    "emit.checkpoints.enabled": ("true", _bool),
    "emit.checkpoints.interval.seconds": ("60", _int),
    "emit.offset-syncs.enabled": ("true", _bool),
    "sync.group.offsets.enabled": ("false", _bool),
    "sync.group.offsets.interval.seconds": ("60", _int),
    "refresh.topics.enabled": ("true", _bool),
    "refresh.topics.interval.seconds": ("600", _int),
    "refresh.groups.enabled": ("true", _bool),
    "refresh.groups.interval.seconds": ("600", _int),
    "replication.policy.class": ("org.apache.kafka.connect.mirror.DefaultReplicationPolicy", _str),
    "replication.policy.separator": (".", lambda v: v),
    "offset-syncs.topic.location": ("source", _choice("source", "target")),
    "offset-syncs.topic.replication.factor": ("3", _int),
    "heartbeats.topic.replication.factor": ("3", _int),
    "checkpoints.topic.replication.factor": ("3", _int),
    "offset.lag.max": ("100", _int),
    "exactly.once.support": ("disabled", _choice("disabled", "requested", "enabled")),
    "offset.flush.interval.ms": ("10000", _int),
}
# Legacy names MM2 still reads.
ALIASES = {"topics.blacklist": "topics.exclude", "groups.blacklist": "groups.exclude"}
# Known to MM2/Connect, no effect here (parallelism is --workers; no Connect storage topics).
ACCEPTED = frozenset({
    "tasks.max", "dedicated.mode.enable.internal.rest", "config.storage.replication.factor",
    "offset.storage.replication.factor", "status.storage.replication.factor",
    "topic.filter.class", "group.filter.class", "config.property.filter.class",
    "key.converter", "value.converter",
    "header.converter", "replication.policy.internal.topic.separator.enabled",
    "admin.timeout.ms", "consumer.poll.timeout.ms",
})
# Java client settings that librdkafka has no equivalent for: dropped with a warning.
JAVA_ONLY = re.compile(r"(key|value)\.(de)?serializer|interceptor\.classes|"
                       r"partitioner\.class|.*\.callback\.handler\.class|sasl\.jaas\.config")
ROLES = ("producer", "consumer", "admin")


@dataclass(frozen=True)
class FlowConfig:
    """One enabled replication flow `source->target` and its resolved settings."""
    source: str
    target: str
    settings: Mapping[str, object]
    clients: Mapping[str, Mapping[str, Dict[str, str]]]   # cluster -> role -> librdkafka conf
    policy: ReplicationPolicy

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    def __getitem__(self, key: str):
        return self.settings[key]

    def client(self, cluster: str, role: str) -> Dict[str, str]:
        """The librdkafka settings of `role` (producer/consumer/admin) on `cluster`."""
        return dict(self.clients[cluster][role])

    @property
    def group_id(self) -> str:
        """The consumer group of this flow's pipeline on the source (shared by every
        process that runs the flow) and, with exactly-once, on the target."""
        return f"mm2-{self.name}"

    @property
    def offset_syncs_cluster(self) -> str:
        """Where the offset-syncs topic lives (offset-syncs.topic.location)."""
        return self.source if self.settings["offset-syncs.topic.location"] == "source" else self.target

    @property
    def offset_syncs_topic(self) -> str:
        """Named after the OTHER cluster, as MM2 does: mm2-offset-syncs.B.internal on A."""
        other = self.target if self.offset_syncs_cluster == self.source else self.source
        return self.policy.offset_syncs_topic(other)

    @property
    def exactly_once(self) -> bool:
        return self.settings["exactly.once.support"] == "enabled"

    def replicates_topic(self, topic: str) -> bool:
        """MirrorSourceConnector's rule: matches `topics` (or is a heartbeats topic), does
        not match `topics.exclude`, is not internal, is no remote topic of the target."""
        p = self.policy
        wanted = (_matches(self["topics"], topic) and not _matches(self["topics.exclude"], topic)) \
            or p.is_heartbeats_topic(topic)
        return wanted and not p.is_internal_topic(topic) and not p.is_cycle(topic, self.target)

    def replicates_group(self, group: str) -> bool:
        return _matches(self["groups"], group) and not _matches(self["groups.exclude"], group) \
            and not group.startswith("mm2-")

    def syncs_config(self, name: str) -> bool:
        return not _matches(self["config.properties.exclude"], name)


def _matches(patterns: Sequence[re.Pattern], name: str) -> bool:
    return any(p.fullmatch(name) for p in patterns)


@dataclass
class MirrorConfig:
    clusters: List[str]
    flows: List[FlowConfig]
    warnings: List[str]

    @classmethod
    def from_file(cls, path: str, only_targets: Optional[Sequence[str]] = None) -> "MirrorConfig":
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise MirrorConfigError(f"cannot read {path}: {e.strerror or e}")
        return cls.from_props(parse_properties(text), only_targets)

    @classmethod
    def from_props(cls, props: Mapping[str, str],
                   only_targets: Optional[Sequence[str]] = None) -> "MirrorConfig":
        props = {_canonical(k): v for k, v in props.items()}
        clusters = [c.strip() for c in props.get("clusters", "").split(",") if c.strip()]
        if not clusters:
            raise MirrorConfigError("clusters: no cluster aliases given (e.g. clusters = A, B)")
        for c in clusters:
            if not re.fullmatch(r"[A-Za-z0-9_]+(-[A-Za-z0-9_]+)*", c):
                raise MirrorConfigError(f"clusters: bad cluster alias {c!r}")
        for t in only_targets or ():
            if t not in clusters:
                raise MirrorConfigError(f"--clusters: {t!r} is not one of clusters = {', '.join(clusters)}")
        warnings = []
        clients = {c: _client_settings(props, c, warnings) for c in clusters}
        flows = []
        for src in clusters:
            for dst in clusters:
                if src == dst or (only_targets and dst not in only_targets):
                    continue
                settings = _flow_settings(props, src, dst)
                if not settings["enabled"]:
                    continue
                for c in (src, dst):
                    if not clients[c]["consumer"].get("bootstrap.servers"):
                        raise MirrorConfigError(f"{c}.bootstrap.servers is not set (flow {src}->{dst})")
                policy_cls = POLICIES.get(settings["replication.policy.class"])
                if policy_cls is None:
                    raise MirrorConfigError(
                        f"replication.policy.class: unknown class {settings['replication.policy.class']!r} "
                        f"(known: {', '.join(sorted(POLICIES))})")
                if not settings["replication.policy.separator"]:
                    raise MirrorConfigError("replication.policy.separator: must not be empty")
                flows.append(FlowConfig(src, dst, settings, clients,
                                        policy_cls(settings["replication.policy.separator"])))
        if not flows:
            raise MirrorConfigError("no replication flow enabled (set e.g. A->B.enabled = true)"
                                    + (f" with a target in --clusters {','.join(only_targets)}"
                                       if only_targets else ""))
        warnings += _unknown_keys(props, clusters)
        return cls(clusters, flows, warnings)


def _canonical(key: str) -> str:
    """`topics.blacklist` -> `topics.exclude`, also after a `A->B.` prefix."""
    head, sep, rest = key.partition(".")
    if sep and "->" in head and rest in ALIASES:
        return f"{head}.{ALIASES[rest]}"
    return ALIASES.get(key, key)


def _flow_settings(props: Mapping[str, str], src: str, dst: str) -> Dict[str, object]:
    out: Dict[str, object] = {}
    for key, (default, parse) in FLOW_KEYS.items():
        for name in (f"{src}->{dst}.{key}", key):
            if name in props:
                raw = props[name]
                break
        else:
            name, raw = key, default
        try:
            out[key] = parse(raw)
        except (ValueError, re.error) as e:
            raise MirrorConfigError(f"{name}: bad value {raw!r}: {e}")
    return out


def _client_settings(props: Mapping[str, str], cluster: str,
                     warnings: List[str]) -> Dict[str, Dict[str, str]]:
    """`cluster.*` keys -> {role: librdkafka conf}: common keys in every role, role keys
    (`cluster.producer.linger.ms`) in their role only, winning over common ones."""
    common: Dict[str, str] = {}
    per_role: Dict[str, Dict[str, str]] = {r: {} for r in ROLES}
    prefix = cluster + "."
    for key, value in props.items():
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        role, _, sub = rest.partition(".")
        target, name = (per_role[role], sub) if role in ROLES and sub else (common, rest)
        if JAVA_ONLY.fullmatch(name):
            warnings.append(f"{key}: a Java client setting with no librdkafka equivalent; ignored")
            continue
        target[name] = value.strip()
    return {r: {**common, **per_role[r]} for r in ROLES}


def _unknown_keys(props: Mapping[str, str], clusters: Sequence[str]) -> List[str]:
    out = []
    for key in props:
        if key == "clusters" or key in FLOW_KEYS or key in ACCEPTED:
            continue
        head, sep, rest = key.partition(".")
        if sep and head in clusters:
            continue                                    # client settings: librdkafka checks them
        if sep and "->" in head:
            src, _, dst = head.partition("->")
            if src in clusters and dst in clusters and (rest in FLOW_KEYS or rest in ACCEPTED):
                continue
        out.append(f"unknown configuration key {key!r} (not a MirrorMaker 2 setting mpbroker knows); ignored")
    return out
