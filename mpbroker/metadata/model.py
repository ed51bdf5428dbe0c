"""The cluster metadata model: brokers, topics, partitions. No I/O.

Values are immutable: every change is a pure function that takes a
``ClusterMetadata`` and returns a new one with ``epoch + 1`` (or raises
``MetadataError`` carrying Kafka's error code and message). The controller is
the only process that applies changes; workers receive copies and keep the one
with the highest epoch.

Kafka rules implemented here:

* topic names (``org.apache.kafka.common.internals.Topic``): 1..249 chars of
  ``[a-zA-Z0-9._-]``, not "." or "..", and no two topics that differ only by
  '.' vs '_' (they collide in metric names);
* replica assignment for new topics and new partitions
  (``AdminUtils.assignReplicasToBrokersRackUnaware``): partition p's first
  replica is broker ``(p + start) % n`` of the sorted broker list; the other
  replicas follow at a shift that grows by one every n partitions;
* CreateTopics / CreatePartitions validation, with Kafka's messages;
* KRaft's bound on one request (``MAX_PARTITIONS_PER_REQUEST``, 9,999 partitions:
  POLICY_VIOLATION "Excessively large number of partitions per request.") and
  KIP-578's caps (``PartitionLimits``: ``max.broker.partitions``, ``max.partitions``).

Creating or deleting many topics at once goes through ``TopicBatch`` /
``delete_topics``: linear in the number of topics, one new metadata per batch.
"""
from __future__ import annotations

import base64
import random
import re
import uuid
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from mpbroker.config import ConfigError, validate_topic_config
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.scram_credentials import (ScramCredential, credential_from_string,
                                                 credential_to_string)
from mpbroker.security.acl import AclBinding

__all__ = [
    "ErrorCode", "MetadataError", "Broker", "PartitionState", "Topic", "ClusterMetadata",
    "INTERNAL_TOPICS", "MAX_TOPIC_NAME_LENGTH", "validate_topic_name", "has_collision_chars",
    "unify_collision_chars", "assign_replicas", "validate_replica_assignment", "create_topic",
    "delete_topic", "delete_topics", "delete_topic_by_id", "add_partitions", "set_topic_configs",
    "update_partition", "set_client_quotas",
    "register_broker", "unregister_broker", "set_controller", "new_cluster_metadata",
    "generate_cluster_id", "generate_topic_id", "uuid_to_str", "uuid_from_str", "ZERO_UUID",
    "TopicBatch", "PartitionGrowth", "PartitionLimits", "partition_counts",
    "MAX_PARTITIONS_PER_REQUEST", "EXCESSIVE_PARTITIONS_MESSAGE",
    "set_scram_credentials",
    "set_acls", "acls_from_list",
]


class MetadataError(Exception):
    """A rejected change: ``code`` is Kafka's error code, ``message`` its text."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


MAX_TOPIC_NAME_LENGTH = 249
# Kafka's two internal topics: committed offsets and group metadata
# (GroupCoordinator), transaction state (TransactionCoordinator).
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
ZERO_UUID = bytes(16)
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+\Z")


# ------------------------------------------------------------------ uuids

def uuid_to_str(u: bytes) -> str:
    """Kafka's Uuid.toString: base64url of the 16 bytes, no padding (22 chars)."""
    return base64.urlsafe_b64encode(u).rstrip(b"=").decode("ascii")


def uuid_from_str(s: str) -> bytes:
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != 16:
        raise ValueError(f"Input string with prefix `{s[:22]}` is too long to be decoded as a base64 UUID")
    return raw


def _random_uuid(rng: Optional[random.Random]) -> bytes:
    # Kafka's Uuid.randomUuid: never the zero/metadata-reserved id, never a
    # string starting with '-' (it would read as a command-line flag).
    while True:
        raw = rng.getrandbits(128).to_bytes(16, "big") if rng is not None else uuid.uuid4().bytes
        if raw not in (ZERO_UUID, (1).to_bytes(16, "big")) and not uuid_to_str(raw).startswith("-"):
            return raw


def generate_topic_id(rng: Optional[random.Random] = None) -> bytes:
    return _random_uuid(rng)


def generate_cluster_id(rng: Optional[random.Random] = None) -> str:
    return uuid_to_str(_random_uuid(rng))


# ------------------------------------------------------------------ values

@dataclass(frozen=True)
class Broker:
    id: int
    host: str                # the inter-broker listener's advertised address
    port: int
    rack: Optional[str] = None
    # every advertised listener (issue #17): ((listener name, host, port), ...);
    # empty (older metadata): host/port serve every listener
    endpoints: Tuple[Tuple[str, str, int], ...] = ()

    def address(self, listener_name: Optional[str]) -> Optional[Tuple[str, int]]:
        """(host, port) of `listener_name` (Kafka answers Metadata and FindCoordinator
        with the endpoints of the listener the client connected to), None when this
        broker has no such listener."""
        if not self.endpoints or listener_name is None:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener_name:
                return host, port
        return None


@dataclass(frozen=True)
class PartitionState:
    partition: int
    leader: int
    leader_epoch: int
    replicas: Tuple[int, ...]
    isr: Tuple[int, ...]
    offline_replicas: Tuple[int, ...] = ()
    partition_epoch: int = 0         # bumped on every leader or ISR change (Kafka's zkVersion)

    def __post_init__(self):
        object.__setattr__(self, "replicas", tuple(self.replicas))
        object.__setattr__(self, "isr", tuple(self.isr))
        object.__setattr__(self, "offline_replicas", tuple(self.offline_replicas))


@dataclass(frozen=True)
class Topic:
    name: str
    topic_id: bytes
    partitions: Mapping[int, PartitionState]
    configs: Mapping[str, str] = field(default_factory=dict)
    is_internal: bool = False
    # The topic's partition count by its assignment when some partitions are not shown
    # yet (cluster mode: the controller initializes a new topic's partitions one by one);
    # -1: all are shown. What maps a key to a partition (group and transaction
    # coordinators) must use `num_partitions`, never len(partitions) (Kafka fixes that
    # count too), or a key moves while the topic is being created.
    partition_count: int = -1

    @property
    def num_partitions(self) -> int:
        """The topic's partition count, shown or not (see `partition_count`)."""
        return self.partition_count if self.partition_count >= 0 else len(self.partitions)

    @property
    def replication_factor(self) -> int:
        p0 = self.partitions.get(0)
        return len(p0.replicas) if p0 is not None else 0

    def assignment(self) -> Dict[int, Tuple[int, ...]]:
        return {p: s.replicas for p, s in sorted(self.partitions.items())}


@dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str
    controller_id: int = -1
    brokers: Mapping[int, Broker] = field(default_factory=dict)
    topics: Mapping[str, Topic] = field(default_factory=dict)
    epoch: int = 0
    # ---- SCRAM users (issue 17): user -> {mechanism name: credential}; only users with one
    scram_users: Mapping[str, Mapping[str, ScramCredential]] = field(default_factory=dict)

    def scram_credential(self, user: str, mechanism: str) -> Optional[ScramCredential]:
        """The stored SCRAM credential of `user` for `mechanism` ("SCRAM-SHA-256"), or None."""
        return self.scram_users.get(user, {}).get(mechanism)
    # ---- end SCRAM users
    # --- ACLs (issue #17, mpbroker/security/acl.py): every stored AclBinding, and a
    # version bumped on each ACL change (workers' decision caches key on it)
    acls: Tuple = ()
    acl_version: int = 0
    # --- end ACLs
    # ---- client quotas (issue #17, mpbroker/security/quotas.py): EntityKey -> {key: value}
    client_quotas: Mapping[tuple, Mapping[str, float]] = field(default_factory=dict)
    # ---- end client quotas

    def topic(self, name: str) -> Topic:
        t = self.topics.get(name)
        if t is None:
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                "This server does not host this topic-partition.")
        return t

    def topic_by_id(self, topic_id: bytes) -> Topic:
        t = self.topics_by_id.get(topic_id)
        if t is None:
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC_ID,
                                "This server does not host this topic ID.")
        return t

    @cached_property
    def topics_by_id(self) -> Mapping[bytes, Topic]:
        """The topics by id, indexed on first use: a metadata object is replaced, never
        changed (every v13+ Fetch and its ACL check name topics by id)."""
        out: dict[bytes, Topic] = {}
        for t in self.topics.values():
            out.setdefault(t.topic_id, t)
        return out

    def __getstate__(self) -> dict:
        # the index is rebuilt where it is used, not carried to the workers
        state = dict(self.__dict__)
        state.pop("topics_by_id", None)
        return state

    def partition(self, name: str, partition: int) -> PartitionState:
        p = self.topic(name).partitions.get(partition)
        if p is None:
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                "This server does not host this topic-partition.")
        return p

    def _next(self, **changes) -> "ClusterMetadata":
        return replace(self, epoch=self.epoch + 1, **changes)


def new_cluster_metadata(cluster_id: Optional[str] = None, rng: Optional[random.Random] = None) -> ClusterMetadata:
    return ClusterMetadata(cluster_id=cluster_id or generate_cluster_id(rng))


# ------------------------------------------------------------------ names

def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate; raises INVALID_TOPIC_EXCEPTION (17)."""
    if not name:
        raise MetadataError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise MetadataError(ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise MetadataError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
                            f"characters, topic name: {name}")
    if not _LEGAL_TOPIC.match(name):
        raise MetadataError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                            f'Topic name "{name}" is illegal, it contains a character other than '
                            "ASCII alphanumerics, '.', '_' and '-'")


# ------------------------------------------------------------------ assignment

def assign_replicas(num_partitions: int, replication_factor: int, broker_ids: Iterable[int],
                    fixed_start_index: int = -1, start_partition_id: int = -1,
                    rng: Optional[random.Random] = None) -> Dict[int, List[int]]:
    """AdminUtils.assignReplicasToBrokersRackUnaware (brokers sorted by id).

    With ``fixed_start_index`` < 0 the start index and the first shift are
    drawn from ``rng`` (Kafka draws both at random)."""
    brokers = sorted(broker_ids)
    if num_partitions <= 0:
        raise MetadataError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise MetadataError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise MetadataError(ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    n = len(brokers)
    rng = rng or random.Random()
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    partition = max(0, start_partition_id)
    out: Dict[int, List[int]] = {}
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out[partition] = replicas
        partition += 1
    return out


def validate_replica_assignment(assignment: Mapping[int, Sequence[int]], brokers: Iterable[int],
                                first_partition: int = 0) -> None:
    """Partition ids consecutive from ``first_partition``, same replication
    factor everywhere, no duplicate or unknown brokers."""
    if not assignment:
        raise MetadataError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Replica assignment must not be empty.")
    ids = sorted(assignment)
    if ids != list(range(first_partition, first_partition + len(ids))):
        raise MetadataError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            "partitions should be a consecutive 0-based integer sequence")
    live = set(brokers)
    sizes = {len(r) for r in assignment.values()}
    for p in ids:
        replicas = list(assignment[p])
        if not replicas:
            raise MetadataError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                f"Replica assignment for partition {p} is empty.")
        if len(set(replicas)) != len(replicas):
            raise MetadataError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                f"Duplicate replica assignment found: {p} -> {replicas}")
        unknown = sorted(set(replicas) - live)
        if unknown:
            raise MetadataError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
    if len(sizes) != 1:
        raise MetadataError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            "All partitions should have the same number of replicas")


def _initial_state(partition: int, replicas: Sequence[int], live: Iterable[int]) -> PartitionState:
    live = set(live)
    isr = tuple(r for r in replicas if r in live)
    leader = isr[0] if isr else -1
    offline = tuple(r for r in replicas if r not in live)
    return PartitionState(partition, leader, 0, tuple(replicas), isr, offline)


# ------------------------------------------------------------------ changes

def create_topic(md: ClusterMetadata, name: str, num_partitions: int = -1, replication_factor: int = -1,
                 assignments: Optional[Mapping[int, Sequence[int]]] = None,
                 configs: Optional[Mapping[str, str]] = None, *, topic_id: Optional[bytes] = None,
                 default_partitions: int = 1, default_replication_factor: int = 1,
                 rng: Optional[random.Random] = None) -> ClusterMetadata:
    """CreateTopics for one topic. -1 partitions / replication factor take the
    broker defaults (num.partitions, default.replication.factor)."""
    batch = TopicBatch(md)
    batch.create(name, num_partitions, replication_factor, assignments, configs, topic_id=topic_id,
                 default_partitions=default_partitions,
                 default_replication_factor=default_replication_factor, rng=rng)
    return batch.result()


# ------------------------------------------------------------------ partition limits

# KRaft's QuorumController.MAX_RECORDS_PER_USER_OP (10000): one CreateTopics may not
# make more records than that, one per partition plus the topic's own record.
MAX_PARTITIONS_PER_REQUEST = 10000 - 1
EXCESSIVE_PARTITIONS_MESSAGE = "Excessively large number of partitions per request."
_THROTTLED = "The throttling quota has been exceeded."      # Kafka's THROTTLING_QUOTA_EXCEEDED text


@dataclass(frozen=True)
class PartitionLimits:
    """Caps on what one cluster may hold (KIP-578's names): ``max_broker_partitions``
    partition replicas on any one broker, ``max_partitions`` partitions in all. None
    is no cap. A change that would pass a cap is refused with POLICY_VIOLATION."""
    max_broker_partitions: Optional[int] = None
    max_partitions: Optional[int] = None
    broker_limit_source: str = "max.broker.partitions"    # named in the refusal


def partition_counts(md: ClusterMetadata) -> Tuple[int, Dict[int, int]]:
    """(partitions in all, replicas per broker id)."""
    total = 0
    per_broker: Dict[int, int] = {}
    for t in md.topics.values():
        total += len(t.partitions)
        for st in t.partitions.values():
            for b in st.replicas:
                per_broker[b] = per_broker.get(b, 0) + 1
    return total, per_broker


class _Counts:
    """Running partition counts checked against ``PartitionLimits``."""

    def __init__(self, md: ClusterMetadata, limits: Optional[PartitionLimits]):
        self.limits = limits or PartitionLimits()
        self.active = (self.limits.max_broker_partitions is not None
                       or self.limits.max_partitions is not None)
        self.total, self.per_broker = partition_counts(md) if self.active else (0, {})

    def add(self, what: str, assignment: Mapping[int, Sequence[int]], exempt: bool = False,
            admit: Optional[Callable[[int], bool]] = None) -> None:
        """Count ``assignment`` (partition -> replicas) in, or raise POLICY_VIOLATION
        (nothing counted) when it would pass a cap; ``exempt`` counts without checking
        (internal topics: their coordinators cannot work without them)."""
        if not self.active:
            if admit is not None and not admit(len(assignment)):
                raise MetadataError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, _THROTTLED)
            return
        added: Dict[int, int] = {}
        for replicas in assignment.values():
            for b in replicas:
                added[b] = added.get(b, 0) + 1
        lim = self.limits
        if not exempt:
            if lim.max_partitions is not None and self.total + len(assignment) > lim.max_partitions:
                raise MetadataError(
                    ErrorCode.POLICY_VIOLATION,
                    f"{what} would bring the cluster to {self.total + len(assignment)} partitions, "
                    f"above the limit of {lim.max_partitions} (max.partitions).")
            if lim.max_broker_partitions is not None:
                for b in sorted(added):
                    n = self.per_broker.get(b, 0) + added[b]
                    if n > lim.max_broker_partitions:
                        raise MetadataError(
                            ErrorCode.POLICY_VIOLATION,
                            f"{what} would bring broker {b} to {n} partition replicas, above the "
                            f"limit of {lim.max_broker_partitions} ({lim.broker_limit_source}).")
        if admit is not None and not admit(len(assignment)):
            raise MetadataError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, _THROTTLED)
        self.total += len(assignment)
        for b, n in added.items():
            self.per_broker[b] = self.per_broker.get(b, 0) + n


class TopicBatch:
    """Creates many topics on one metadata in time linear in the number of topics
    (existing and new): the topic map is copied once, name collisions and topic ids
    are looked up in indexes built once, and ``result()`` makes one new metadata
    (``epoch + 1``). ``create`` raises MetadataError for a topic Kafka would refuse
    and leaves the batch as it was."""

    def __init__(self, md: ClusterMetadata, limits: Optional[PartitionLimits] = None):
        self.md = md
        self.topics: Dict[str, Topic] = dict(md.topics)
        self._unified: Dict[str, List[str]] = {}
        for n in self.topics:
            if has_collision_chars(n):
                self._unified.setdefault(unify_collision_chars(n), []).append(n)
        self._ids = {t.topic_id for t in self.topics.values()}
        self._counts = _Counts(md, limits)
        self.created: List[str] = []

    def _colliding(self, name: str) -> List[str]:
        if not has_collision_chars(name):
            return []
        return sorted(t for t in self._unified.get(unify_collision_chars(name), ()) if t != name)

    def create(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
               assignments: Optional[Mapping[int, Sequence[int]]] = None,
               configs: Optional[Mapping[str, str]] = None, *, topic_id: Optional[bytes] = None,
               default_partitions: int = 1, default_replication_factor: int = 1,
               rng: Optional[random.Random] = None, exempt_from_limits: bool = False,
               admit: Optional[Callable[[int], bool]] = None) -> Topic:
        """``admit(partitions)``, asked after every other check, may refuse the topic
        (the KIP-599 quota): THROTTLING_QUOTA_EXCEEDED."""
        md = self.md
        validate_topic_name(name)
        if name in self.topics:
            raise MetadataError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        colliding = self._colliding(name)
        if colliding:
            raise MetadataError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                f"Topic '{name}' collides with existing topics: {', '.join(colliding)}")
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise MetadataError(ErrorCode.INVALID_REQUEST,
                                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                                    "Both cannot be used at the same time.")
            validate_replica_assignment(assignments, md.brokers)
            assignment = {p: list(r) for p, r in assignments.items()}
        else:
            n = default_partitions if num_partitions == -1 else num_partitions
            rf = default_replication_factor if replication_factor == -1 else replication_factor
            if n > MAX_PARTITIONS_PER_REQUEST:     # checked before the assignment is built
                raise MetadataError(ErrorCode.POLICY_VIOLATION, EXCESSIVE_PARTITIONS_MESSAGE)
            assignment = assign_replicas(n, rf, md.brokers, rng=rng)
        checked_configs = _validated_configs(configs or {})
        tid = topic_id if topic_id is not None else generate_topic_id(rng)
        if tid in self._ids:
            raise MetadataError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic id {uuid_to_str(tid)} already exists.")
        self._counts.add(f"Creating topic '{name}' with {len(assignment)} partitions", assignment,
                         exempt=exempt_from_limits, admit=admit)
        partitions = {p: _initial_state(p, r, md.brokers) for p, r in sorted(assignment.items())}
        topic = Topic(name, tid, partitions, checked_configs, name in INTERNAL_TOPICS)
        self.topics[name] = topic
        self._ids.add(tid)
        if has_collision_chars(name):
            self._unified.setdefault(unify_collision_chars(name), []).append(name)
        self.created.append(name)
        return topic

    def result(self) -> ClusterMetadata:
        """The metadata with every created topic (the input itself when none was)."""
        if not self.created:
            return self.md
        return self.md._next(topics=self.topics)


def _validated_configs(configs: Mapping[str, str]) -> Dict[str, str]:
    try:
        validate_topic_config(configs)
    except ConfigError as e:
        raise MetadataError(ErrorCode.INVALID_CONFIG, str(e)) from None
    return {k: str(v) for k, v in configs.items()}


def delete_topic(md: ClusterMetadata, name: str) -> ClusterMetadata:
    md.topic(name)
    topics = dict(md.topics)
    del topics[name]
    return md._next(topics=topics)


def delete_topics(md: ClusterMetadata, names: Iterable[str]) -> ClusterMetadata:
    """Delete every named topic (all must exist) with one copy of the topic map."""
    topics = dict(md.topics)
    for name in names:
        if topics.pop(name, None) is None:
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                "This server does not host this topic-partition.")
    return md._next(topics=topics)


def delete_topic_by_id(md: ClusterMetadata, topic_id: bytes) -> ClusterMetadata:
    return delete_topic(md, md.topic_by_id(topic_id).name)


def add_partitions(md: ClusterMetadata, name: str, total_count: int,
                   assignments: Optional[Sequence[Sequence[int]]] = None,
                   rng: Optional[random.Random] = None,
                   limits: Optional[PartitionLimits] = None,
                   admit: Optional[Callable[[int], bool]] = None) -> ClusterMetadata:
    """CreatePartitions for one topic (see ``PartitionGrowth.grow``)."""
    growth = PartitionGrowth(md, limits)
    growth.grow(name, total_count, assignments, rng=rng, admit=admit)
    return growth.result()


class PartitionGrowth:
    """CreatePartitions for many topics on one metadata, linear in their number: the
    topic map is copied and the partitions counted once; at most
    ``MAX_PARTITIONS_PER_REQUEST`` new partitions in all (POLICY_VIOLATION past it, as
    past ``limits``); ``result()`` makes one new metadata."""

    def __init__(self, md: ClusterMetadata, limits: Optional[PartitionLimits] = None):
        self.md = md
        self.topics: Dict[str, Topic] = dict(md.topics)
        self._counts = _Counts(md, limits)
        self.added = 0

    def grow(self, name: str, total_count: int, assignments: Optional[Sequence[Sequence[int]]] = None,
             rng: Optional[random.Random] = None,
             admit: Optional[Callable[[int], bool]] = None) -> Topic:
        """Grow ``name`` to ``total_count`` partitions; ``assignments`` lists the
        replicas of each new partition, in order; ``admit`` (the quota) is asked last."""
        md = self.md
        topic = self.topics.get(name)
        if topic is None:
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                "This server does not host this topic-partition.")
        current = len(topic.partitions)
        if total_count < current:
            raise MetadataError(ErrorCode.INVALID_PARTITIONS,
                                f"Topic currently has {current} partitions, which is higher than the requested {total_count}.")
        if total_count == current:
            raise MetadataError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
        to_add = total_count - current
        if self.added + to_add > MAX_PARTITIONS_PER_REQUEST:
            raise MetadataError(ErrorCode.POLICY_VIOLATION, EXCESSIVE_PARTITIONS_MESSAGE)
        rf = topic.replication_factor
        if assignments is not None:
            if len(assignments) != to_add:
                raise MetadataError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    f"Increasing the number of partitions by {to_add} but {len(assignments)} "
                                    "assignments provided.")
            bad = [(current + i, len(r)) for i, r in enumerate(assignments) if len(r) != rf]
            if bad:
                raise MetadataError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    f"Inconsistent replication factor between partitions, partition 0 has {rf} while "
                                    f"partitions [{', '.join(str(p) for p, _ in bad)}] have replication factors "
                                    f"[{', '.join(str(n) for _, n in bad)}], respectively.")
            for i, r in enumerate(assignments):
                if len(set(r)) != len(r):
                    raise MetadataError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                        f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, r))} "
                                        f"for partition id {current + i}.")
            unknown = sorted({b for r in assignments for b in r} - set(md.brokers))
            if unknown:
                raise MetadataError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
            new = {current + i: list(r) for i, r in enumerate(assignments)}
        else:
            # Kafka continues the existing pattern: start at the broker that leads partition 0.
            brokers = sorted(md.brokers)
            first = topic.partitions[0].replicas[0] if 0 in topic.partitions else brokers[0]
            start = next((i for i, b in enumerate(brokers) if b >= first), 0)
            new = assign_replicas(to_add, rf, brokers, fixed_start_index=start, start_partition_id=current, rng=rng)
        self._counts.add(f"Adding {to_add} partitions to topic '{name}'", new, admit=admit)
        partitions = dict(topic.partitions)
        for p, r in new.items():
            partitions[p] = _initial_state(p, r, md.brokers)
        grown = self.topics[name] = replace(topic, partitions=partitions)
        self.added += to_add
        return grown

    def result(self) -> ClusterMetadata:
        """The metadata with every grown topic (the input itself when none was)."""
        if not self.added:
            return self.md
        return self.md._next(topics=self.topics)


def set_topic_configs(md: ClusterMetadata, name: str, configs: Mapping[str, str]) -> ClusterMetadata:
    """Replace a topic's config overrides (AlterConfigs semantics)."""
    topic = md.topic(name)
    return md._next(topics={**md.topics, name: replace(topic, configs=_validated_configs(configs))})


def update_partition(md: ClusterMetadata, name: str, state: PartitionState) -> ClusterMetadata:
    """Install a new leader/ISR for an existing partition; the leader epoch may
    not go backwards and the partition epoch is bumped."""
    old = md.partition(name, state.partition)
    if state.leader_epoch < old.leader_epoch:
        raise MetadataError(ErrorCode.INVALID_REQUEST,
                            f"Leader epoch {state.leader_epoch} is older than {old.leader_epoch} for "
                            f"{name}-{state.partition}")
    topic = md.topics[name]
    new_state = replace(state, partition_epoch=old.partition_epoch + 1)
    partitions = {**topic.partitions, state.partition: new_state}
    return md._next(topics={**md.topics, name: replace(topic, partitions=partitions)})


def register_broker(md: ClusterMetadata, broker: Broker) -> ClusterMetadata:
    return md._next(brokers={**md.brokers, broker.id: broker})


def unregister_broker(md: ClusterMetadata, broker_id: int) -> ClusterMetadata:
    brokers = dict(md.brokers)
    brokers.pop(broker_id, None)
    return md._next(brokers=brokers)


# ---- client quotas (issue #17) -------------------------------------------------------
def set_client_quotas(md: ClusterMetadata, quotas: Mapping[tuple, Mapping[str, float]]) -> ClusterMetadata:
    """The metadata with the client quotas replaced (mpbroker/security/quotas.py's
    ``alter`` makes them)."""
    return md._next(client_quotas={k: dict(v) for k, v in quotas.items()})


def _client_quotas_to_list(quotas: Mapping[tuple, Mapping[str, float]]) -> list:
    return [{"entity": [list(pair) for pair in key], "quotas": dict(values)}
            for key, values in sorted(quotas.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]])]


def _client_quotas_from_list(entries) -> Dict[tuple, Dict[str, float]]:
    return {tuple((t, n) for t, n in e["entity"]): {k: float(v) for k, v in e["quotas"].items()}
            for e in entries}
# ---- end client quotas -----------------------------------------------------------------


def set_controller(md: ClusterMetadata, controller_id: int) -> ClusterMetadata:
    return md._next(controller_id=controller_id)


# ---- SCRAM users (issue 17)
def set_scram_credentials(md: ClusterMetadata,
                          changes: Mapping[str, Mapping[str, Optional[ScramCredential]]]
                          ) -> ClusterMetadata:
    """`changes`: user -> {mechanism: credential, or None to delete it}; a user left with
    no credential is gone."""
    users = dict(md.scram_users)
    for user, mechs in changes.items():
        creds = dict(users.get(user, {}))
        for mech, cred in mechs.items():
            if cred is None:
                creds.pop(mech, None)
            else:
                creds[mech] = cred
        if creds:
            users[user] = creds
        else:
            users.pop(user, None)
    return md._next(scram_users=users)
# ---- end SCRAM users


# ------------------------------------------------------------------ (de)serialisation

def to_dict(md: ClusterMetadata) -> dict:
    """A JSON-ready dict (topic ids as Kafka's base64url strings)."""
    out = {
        "version": 1,
        "cluster_id": md.cluster_id,
        "controller_id": md.controller_id,
        "epoch": md.epoch,
        "brokers": [{"id": b.id, "host": b.host, "port": b.port, "rack": b.rack,
                     **({"endpoints": [list(e) for e in b.endpoints]} if b.endpoints else {})}
                    for b in sorted(md.brokers.values(), key=lambda b: b.id)],
        "topics": [{
            "name": t.name,
            "topic_id": uuid_to_str(t.topic_id),
            "is_internal": t.is_internal,
            **({"partition_count": t.partition_count} if t.partition_count >= 0 else {}),
            "configs": dict(t.configs),
            "partitions": [{
                "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas), "isr": list(p.isr),
                "offline_replicas": list(p.offline_replicas), "partition_epoch": p.partition_epoch,
            } for p in sorted(t.partitions.values(), key=lambda p: p.partition)],
        } for t in sorted(md.topics.values(), key=lambda t: t.name)],
        # SCRAM users (issue 17): Kafka's credential strings; absent when there is none
        **({"scram_users": {u: {m: credential_to_string(c) for m, c in sorted(creds.items())}
                            for u, creds in sorted(md.scram_users.items())}}
           if md.scram_users else {}),
        "client_quotas": _client_quotas_to_list(md.client_quotas),      # issue #17
    }
    if md.acls or md.acl_version:       # ACLs: [resource_type, name, pattern_type, principal,
        out["acls"] = sorted(list(b) for b in md.acls)   # host, operation, permission]
        out["acl_version"] = md.acl_version
    return out


def from_dict(d: Mapping) -> ClusterMetadata:
    if d.get("version") != 1:
        raise ValueError(f"unsupported metadata version {d.get('version')!r}")
    brokers = {b["id"]: Broker(b["id"], b["host"], b["port"], b.get("rack"),
                               tuple(tuple(e) for e in b.get("endpoints", ()))) for b in d["brokers"]}
    topics = {}
    for t in d["topics"]:
        parts = {p["partition"]: PartitionState(p["partition"], p["leader"], p["leader_epoch"], p["replicas"],
                                                p["isr"], p.get("offline_replicas", ()), p.get("partition_epoch", 0))
                 for p in t["partitions"]}
        topics[t["name"]] = Topic(t["name"], uuid_from_str(t["topic_id"]), parts, dict(t["configs"]),
                                  t["is_internal"], t.get("partition_count", -1))
    scram_users = {u: {m: credential_from_string(c) for m, c in creds.items()}
                   for u, creds in d.get("scram_users", {}).items()}
    return ClusterMetadata(d["cluster_id"], d["controller_id"], brokers, topics, d["epoch"],
                           scram_users=scram_users, acls=acls_from_list(d.get("acls", ())),
                           acl_version=d.get("acl_version", 0),
                           client_quotas=_client_quotas_from_list(d.get("client_quotas", ())))


# ------------------------------------------------------------------ ACLs (issue #17)

def acls_from_list(rows) -> Tuple:
    return tuple(AclBinding(*r) for r in rows)


def set_acls(md: ClusterMetadata, acls: Iterable[AclBinding]) -> ClusterMetadata:
    """A new metadata holding exactly `acls` (deduplicated, sorted), ACL version + 1."""
    return md._next(acls=tuple(sorted(set(acls))), acl_version=md.acl_version + 1)
