"""Record formats of the `__consumer_offsets` topic, byte-compatible with Kafka.

Every record's key and value start with an int16 schema version. Kafka tools
(kafka-console-consumer with the OffsetsMessageFormatter / GroupMetadataMessageFormatter,
kafka-dump-log --offsets-decoder) read these bytes, so the layouts below are Kafka's
(group-coordinator `OffsetCommitKey/Value.json`, `GroupMetadataKey/Value.json`):

Keys (never flexible)::

    OffsetCommitKey   v0, v1: version int16 | group string | topic string | partition int32
    GroupMetadataKey  v2:     version int16 | group string
    v3-v8 are the KIP-848 consumer-group records (ConsumerGroupKey, end of this module);
    decode_key returns UnknownKey for other versions.

OffsetCommitValue (v0-3 classic encoding, v4 flexible)::

    version int16
    offset int64
    leader_epoch int32              v3+
    metadata string
    commit_timestamp int64
    expire_timestamp int64          v1 only
    tagged fields                   v4+

GroupMetadataValue (v0-3 classic encoding, v4 flexible)::

    version int16
    protocol_type string
    generation int32
    protocol nullable string
    leader nullable string
    current_state_timestamp int64   v2+
    members [                       int32 count (v4+: compact, count + 1)
      member_id string
      group_instance_id nullable string   v3+
      client_id string
      client_host string
      rebalance_timeout int32       v1+
      session_timeout int32
      subscription bytes
      assignment bytes
      tagged fields                 v4+
    ]
    tagged fields                   v4+

Classic encoding: string = int16 length + UTF-8 (-1 for null), bytes = int32 length + data.
Flexible (v4): unsigned-varint length + 1 (0 for null), compact arrays likewise, and every
struct ends with a tagged-field section (varint count, then tag/size/data triples).

A tombstone (value None) deletes the key: an offset, or a whole group's metadata.

Versions written: keys v1 / v2 as Kafka does; OffsetCommitValue v1 when the commit carries
an expire timestamp (OffsetCommit v2-v4 retention time) else v3; GroupMetadataValue v3.
Those are what every Kafka release since 2.3 writes and reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpbroker.protocol.primitives import VersionedReader, VersionedWriter

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_MAX_VERSION = 4
GROUP_METADATA_VALUE_MAX_VERSION = 4
FLEXIBLE_FROM = 4


class RecordFormatError(ValueError):
    """A key or value that is not a valid `__consumer_offsets` record."""


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True)
class UnknownKey:
    """A key of a record type this coordinator does not handle (share/streams groups...)."""

    version: int


@dataclass
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1  # -1: none
    expire_timestamp: int = -1  # -1: none (only written in v1)


@dataclass
class MemberMetadataValue:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadataValue] = field(default_factory=list)


# ---------------------------------------------------------------------------- reading


def _done(r: VersionedReader) -> None:
    """A record read to its end, or RecordFormatError. Kafka ignores trailing bytes of
    newer versions read with an older schema, but every version here is known, so
    leftovers mean a corrupt record."""
    if r.bad:
        raise RecordFormatError(f"record truncated or malformed near byte {r.pos}")
    if r.remaining:
        raise RecordFormatError(f"{r.remaining} trailing bytes")


# ---------------------------------------------------------------------------- keys


def encode_offset_commit_key(group: str, topic: str, partition: int,
                             version: int = OFFSET_COMMIT_KEY_VERSION) -> bytes:
    if version not in (0, 1):
        raise ValueError(f"OffsetCommitKey version {version}")
    w = VersionedWriter(False)
    w.int16(version)
    w.field_string(group)
    w.field_string(topic)
    w.int32(partition)
    return w.getvalue()


def encode_group_metadata_key(group: str) -> bytes:
    w = VersionedWriter(False)
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.field_string(group)
    return w.getvalue()


def decode_key(buf) -> OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | UnknownKey:
    r = VersionedReader(buf)
    version = r.int16()
    if version in (0, 1):
        key = OffsetCommitKey(r.field_string(), r.field_string(), r.int32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(r.field_string())
    elif version in _CONSUMER_GROUP_KEYS:
        key = _decode_consumer_group_key(version, r)
    else:
        return UnknownKey(version)
    _done(r)
    return key


# ---------------------------------------------------------------------------- values


def offset_commit_value_version(value: OffsetCommitValue) -> int:
    """The version Kafka writes: v1 keeps an explicit expire timestamp, v3 otherwise."""
    return 1 if value.expire_timestamp >= 0 else 3


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    if version is None:
        version = offset_commit_value_version(value)
    if not 0 <= version <= OFFSET_COMMIT_VALUE_MAX_VERSION:
        raise ValueError(f"OffsetCommitValue version {version}")
    w = VersionedWriter(version >= FLEXIBLE_FROM)
    w.int16(version)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.field_string(value.metadata)
    w.int64(value.commit_timestamp)
    if version == 1:
        w.int64(value.expire_timestamp)
    w.end_struct()
    return w.getvalue()


def _value_of_version(buf, max_version: int, what: str) -> tuple[VersionedReader, int]:
    """A reader past the value's version (flexible from FLEXIBLE_FROM), and the version."""
    r = VersionedReader(buf)
    version = r.int16()
    if not 0 <= version <= max_version:
        raise RecordFormatError(f"unknown {what} version {version}")
    r.flexible = version >= FLEXIBLE_FROM
    return r, version


def decode_offset_commit_value(buf) -> OffsetCommitValue:
    r, version = _value_of_version(buf, OFFSET_COMMIT_VALUE_MAX_VERSION, "OffsetCommitValue")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.field_string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.end_struct()
    _done(r)
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)


def encode_group_metadata_value(value: GroupMetadataValue, version: int = 3) -> bytes:
    if not 0 <= version <= GROUP_METADATA_VALUE_MAX_VERSION:
        raise ValueError(f"GroupMetadataValue version {version}")
    w = VersionedWriter(version >= FLEXIBLE_FROM)
    w.int16(version)
    w.field_string(value.protocol_type)
    w.int32(value.generation)
    w.field_string(value.protocol)
    w.field_string(value.leader)
    if version >= 2:
        w.int64(value.current_state_timestamp)
    w.field_array_len(len(value.members))
    for m in value.members:
        w.field_string(m.member_id)
        if version >= 3:
            w.field_string(m.group_instance_id)
        w.field_string(m.client_id)
        w.field_string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.field_bytes(m.subscription)
        w.field_bytes(m.assignment)
        w.end_struct()
    w.end_struct()
    return w.getvalue()


def decode_group_metadata_value(buf) -> GroupMetadataValue:
    r, version = _value_of_version(buf, GROUP_METADATA_VALUE_MAX_VERSION, "GroupMetadataValue")
    value = GroupMetadataValue(
        protocol_type=r.field_string(),
        generation=r.int32(),
        protocol=r.field_string(nullable=True),
        leader=r.field_string(nullable=True),
        current_state_timestamp=r.int64() if version >= 2 else -1,
    )
    for _ in range(r.field_array_len()):
        member_id = r.field_string()
        instance_id = r.field_string(nullable=True) if version >= 3 else None
        client_id = r.field_string()
        client_host = r.field_string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        if version == 0:
            rebalance_timeout = session_timeout  # v0 had one timeout for both
        value.members.append(MemberMetadataValue(
            member_id=member_id, client_id=client_id, client_host=client_host,
            rebalance_timeout=rebalance_timeout, session_timeout=session_timeout,
            subscription=r.field_bytes(), assignment=r.field_bytes(), group_instance_id=instance_id))
        r.end_struct()
    r.end_struct()
    _done(r)
    return value


# ---------------------------------------------------------------------------- KIP-848
# The consumer-group ("new protocol") records, Kafka's group-coordinator layouts. The key
# version is the record type; keys are never flexible, values are flexible v0 (compact
# strings and arrays, a tagged-field section after every struct; unknown tags skipped):
#
#   3 ConsumerGroupMetadataKey              group          -> Epoch int32
#   4 ConsumerGroupPartitionMetadataKey     group          -> (read and ignored; not written)
#   5 ConsumerGroupMemberMetadataKey        group, member  -> InstanceId ?str | RackId ?str
#        | ClientId str | ClientHost str | SubscribedTopicNames [str]
#        | SubscribedTopicRegex ?str | RebalanceTimeoutMs int32 | ServerAssignor ?str
#   6 ConsumerGroupTargetAssignmentMetadataKey group       -> AssignmentEpoch int32
#   7 ConsumerGroupTargetAssignmentMemberKey   group, member -> TopicPartitions
#        [TopicId uuid | Partitions [int32]]
#   8 ConsumerGroupCurrentMemberAssignmentKey  group, member -> MemberEpoch int32
#        | PreviousMemberEpoch int32 | State int8 | AssignedPartitions [TopicId uuid |
#        Partitions [int32]] | PartitionsPendingRevocation [same]
#
# A tombstone deletes the key. Assignments are {topic_id (16 bytes): sorted partitions}.

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
_CONSUMER_GROUP_KEYS = {CONSUMER_GROUP_METADATA, CONSUMER_GROUP_PARTITION_METADATA,
                        CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT}
_MEMBER_KEYS = {CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT}


@dataclass(frozen=True)
class ConsumerGroupKey:
    """A KIP-848 record key: `kind` is the key version (3..8); member_id for 5, 7, 8."""

    kind: int
    group: str
    member_id: str | None = None


@dataclass
class ConsumerMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass
class ConsumerCurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: dict[bytes, list[int]]
    pending_revocation: dict[bytes, list[int]]


def encode_consumer_group_key(kind: int, group: str, member_id: str | None = None) -> bytes:
    if kind not in _CONSUMER_GROUP_KEYS:
        raise ValueError(f"not a consumer group record type: {kind}")
    w = VersionedWriter(False)
    w.int16(kind)
    w.field_string(group)
    if kind in _MEMBER_KEYS:
        w.field_string(member_id)
    return w.getvalue()


def _decode_consumer_group_key(kind: int, r: VersionedReader) -> ConsumerGroupKey:
    group = r.field_string()
    member = r.field_string() if kind in _MEMBER_KEYS else None
    return ConsumerGroupKey(kind, group, member)


def _value_writer() -> VersionedWriter:
    w = VersionedWriter(True)
    w.int16(0)
    return w


def _value_reader(buf, what: str) -> VersionedReader:
    r = VersionedReader(buf, True)
    version = r.int16()
    if version != 0:
        raise RecordFormatError(f"unknown {what} version {version}")
    return r


def _write_uuid(w: VersionedWriter, topic_id: bytes):
    if len(topic_id) != 16:
        raise RecordFormatError("topic id must be 16 bytes")
    w.raw(bytes(topic_id))


def _write_topic_partitions(w: VersionedWriter, tps: dict[bytes, list[int]]):
    w.field_array_len(len(tps))
    for topic_id in sorted(tps):
        _write_uuid(w, topic_id)
        parts = sorted(tps[topic_id])
        w.field_array_len(len(parts))
        for p in parts:
            w.int32(p)
        w.end_struct()


def _read_topic_partitions(r: VersionedReader) -> dict[bytes, list[int]]:
    out = {}
    for _ in range(r.field_array_len()):
        topic_id = bytes(r.span(16))
        out[topic_id] = [r.int32() for _ in range(r.field_array_len())]
        r.end_struct()
    return out


def encode_consumer_group_epoch_value(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue (3) and ConsumerGroupTargetAssignmentMetadataValue (6)."""
    w = _value_writer()
    w.int32(epoch)
    w.end_struct()
    return w.getvalue()


def decode_consumer_group_epoch_value(buf) -> int:
    r = _value_reader(buf, "consumer group epoch value")
    epoch = r.int32()
    r.end_struct()
    _done(r)
    return epoch


def encode_consumer_member_metadata_value(v: ConsumerMemberMetadataValue) -> bytes:
    w = _value_writer()
    w.field_string(v.instance_id)
    w.field_string(v.rack_id)
    w.field_string(v.client_id)
    w.field_string(v.client_host)
    w.field_array_len(len(v.subscribed_topic_names))
    for name in v.subscribed_topic_names:
        w.field_string(name)
    w.field_string(v.subscribed_topic_regex)
    w.int32(v.rebalance_timeout_ms)
    w.field_string(v.server_assignor)
    w.end_struct()
    return w.getvalue()


def decode_consumer_member_metadata_value(buf) -> ConsumerMemberMetadataValue:
    r = _value_reader(buf, "ConsumerGroupMemberMetadataValue")
    v = ConsumerMemberMetadataValue(
        instance_id=r.field_string(nullable=True), rack_id=r.field_string(nullable=True),
        client_id=r.field_string(), client_host=r.field_string(),
        subscribed_topic_names=[r.field_string() for _ in range(r.field_array_len())],
        subscribed_topic_regex=r.field_string(nullable=True), rebalance_timeout_ms=r.int32(),
        server_assignor=r.field_string(nullable=True))
    r.end_struct()  # tag 0: ClassicMemberMetadata (members that use the classic protocol)
    _done(r)
    return v


def encode_consumer_target_assignment_value(tps: dict[bytes, list[int]]) -> bytes:
    w = _value_writer()
    _write_topic_partitions(w, tps)
    w.end_struct()
    return w.getvalue()


def decode_consumer_target_assignment_value(buf) -> dict[bytes, list[int]]:
    r = _value_reader(buf, "ConsumerGroupTargetAssignmentMemberValue")
    tps = _read_topic_partitions(r)
    r.end_struct()
    _done(r)
    return tps


def encode_consumer_current_assignment_value(v: ConsumerCurrentAssignmentValue) -> bytes:
    w = _value_writer()
    w.int32(v.member_epoch)
    w.int32(v.previous_member_epoch)
    w.int8(v.state)
    _write_topic_partitions(w, v.assigned)
    _write_topic_partitions(w, v.pending_revocation)
    w.end_struct()
    return w.getvalue()


def decode_consumer_current_assignment_value(buf) -> ConsumerCurrentAssignmentValue:
    r = _value_reader(buf, "ConsumerGroupCurrentMemberAssignmentValue")
    epoch, previous = r.int32(), r.int32()
    state = r.int8()
    v = ConsumerCurrentAssignmentValue(epoch, previous, state, _read_topic_partitions(r),
                                       _read_topic_partitions(r))
    r.end_struct()
    _done(r)
    return v
