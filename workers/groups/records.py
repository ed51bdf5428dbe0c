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

import struct
from dataclasses import dataclass, field

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

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


# ---------------------------------------------------------------------------- writer


class _Writer:
    def __init__(self, flexible: bool):
        self.flexible = flexible
        self.parts: list[bytes] = []

    def i16(self, v: int):
        self.parts.append(_I16.pack(v))

    def i32(self, v: int):
        self.parts.append(_I32.pack(v))

    def i64(self, v: int):
        self.parts.append(_I64.pack(v))

    def uvarint(self, v: int):
        out = bytearray()
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        self.parts.append(bytes(out))

    def string(self, s: str | None):
        if s is None:
            if self.flexible:
                self.uvarint(0)
            else:
                self.i16(-1)
            return
        data = s.encode("utf-8")
        if len(data) > 0x7FFF:
            raise RecordFormatError("string longer than 32767 bytes")
        if self.flexible:
            self.uvarint(len(data) + 1)
        else:
            self.i16(len(data))
        self.parts.append(data)

    def bytes_(self, b: bytes):
        if self.flexible:
            self.uvarint(len(b) + 1)
        else:
            self.i32(len(b))
        self.parts.append(bytes(b))

    def array_len(self, n: int):
        if self.flexible:
            self.uvarint(n + 1)
        else:
            self.i32(n)

    def no_tags(self):
        if self.flexible:
            self.uvarint(0)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


# ---------------------------------------------------------------------------- reader


class _Reader:
    def __init__(self, buf, flexible: bool = False):
        self.buf = memoryview(buf)
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError(f"record truncated at byte {self.pos} (needs {n} more)")
        view = self.buf[self.pos:self.pos + n]
        self.pos += n
        return view

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("varint too long")

    def string(self, nullable: bool = False) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            if not nullable:
                raise RecordFormatError("null in a non-nullable string")
            return None
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"invalid UTF-8: {exc}") from None

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            raise RecordFormatError("null in a non-nullable bytes field")
        return bytes(self._take(n))

    def array_len(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            raise RecordFormatError("null array")
        return n

    def skip_tags(self):
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def done(self):
        # Kafka ignores trailing bytes of newer versions read with an older schema,
        # but every version here is known, so leftovers mean a corrupt record.
        if self.pos != len(self.buf):
            raise RecordFormatError(f"{len(self.buf) - self.pos} trailing bytes")


# ---------------------------------------------------------------------------- keys


def encode_offset_commit_key(group: str, topic: str, partition: int,
                             version: int = OFFSET_COMMIT_KEY_VERSION) -> bytes:
    if version not in (0, 1):
        raise ValueError(f"OffsetCommitKey version {version}")
    w = _Writer(flexible=False)
    w.i16(version)
    w.string(group)
    w.string(topic)
    w.i32(partition)
    return w.getvalue()


def encode_group_metadata_key(group: str) -> bytes:
    w = _Writer(flexible=False)
    w.i16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return w.getvalue()


def decode_key(buf) -> OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | UnknownKey:
    r = _Reader(buf)
    version = r.i16()
    if version in (0, 1):
        key = OffsetCommitKey(r.string(), r.string(), r.i32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(r.string())
    elif version in _CONSUMER_GROUP_KEYS:
        key = _decode_consumer_group_key(version, r)
    else:
        return UnknownKey(version)
    r.done()
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
    w = _Writer(flexible=version >= FLEXIBLE_FROM)
    w.i16(version)
    w.i64(value.offset)
    if version >= 3:
        w.i32(value.leader_epoch)
    w.string(value.metadata)
    w.i64(value.commit_timestamp)
    if version == 1:
        w.i64(value.expire_timestamp)
    w.no_tags()
    return w.getvalue()


def decode_offset_commit_value(buf) -> OffsetCommitValue:
    r = _Reader(buf)
    version = r.i16()
    if not 0 <= version <= OFFSET_COMMIT_VALUE_MAX_VERSION:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    r.flexible = version >= FLEXIBLE_FROM
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.i64()
    expire_timestamp = r.i64() if version == 1 else -1
    r.skip_tags()
    r.done()
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)


def encode_group_metadata_value(value: GroupMetadataValue, version: int = 3) -> bytes:
    if not 0 <= version <= GROUP_METADATA_VALUE_MAX_VERSION:
        raise ValueError(f"GroupMetadataValue version {version}")
    w = _Writer(flexible=version >= FLEXIBLE_FROM)
    w.i16(version)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.i64(value.current_state_timestamp)
    w.array_len(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.no_tags()
    w.no_tags()
    return w.getvalue()


def decode_group_metadata_value(buf) -> GroupMetadataValue:
    r = _Reader(buf)
    version = r.i16()
    if not 0 <= version <= GROUP_METADATA_VALUE_MAX_VERSION:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    r.flexible = version >= FLEXIBLE_FROM
    value = GroupMetadataValue(
        protocol_type=r.string(),
        generation=r.i32(),
        protocol=r.string(nullable=True),
        leader=r.string(nullable=True),
        current_state_timestamp=r.i64() if version >= 2 else -1,
    )
    for _ in range(r.array_len()):
        member_id = r.string()
        instance_id = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if version == 0:
            rebalance_timeout = session_timeout  # v0 had one timeout for both
        value.members.append(MemberMetadataValue(
            member_id=member_id, client_id=client_id, client_host=client_host,
            rebalance_timeout=rebalance_timeout, session_timeout=session_timeout,
            subscription=r.bytes_(), assignment=r.bytes_(), group_instance_id=instance_id))
        r.skip_tags()
    r.skip_tags()
    r.done()
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
    w = _Writer(flexible=False)
    w.i16(kind)
    w.string(group)
    if kind in _MEMBER_KEYS:
        w.string(member_id)
    return w.getvalue()


def _decode_consumer_group_key(kind: int, r: _Reader) -> ConsumerGroupKey:
    group = r.string()
    member = r.string() if kind in _MEMBER_KEYS else None
    return ConsumerGroupKey(kind, group, member)


def _value_writer() -> _Writer:
    w = _Writer(flexible=True)
    w.i16(0)
    return w


def _value_reader(buf, what: str) -> _Reader:
    r = _Reader(buf, flexible=True)
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unknown {what} version {version}")
    return r


def _write_uuid(w: _Writer, topic_id: bytes):
    if len(topic_id) != 16:
        raise RecordFormatError("topic id must be 16 bytes")
    w.parts.append(bytes(topic_id))


def _write_topic_partitions(w: _Writer, tps: dict[bytes, list[int]]):
    w.array_len(len(tps))
    for topic_id in sorted(tps):
        _write_uuid(w, topic_id)
        parts = sorted(tps[topic_id])
        w.array_len(len(parts))
        for p in parts:
            w.i32(p)
        w.no_tags()


def _read_topic_partitions(r: _Reader) -> dict[bytes, list[int]]:
    out = {}
    for _ in range(r.array_len()):
        topic_id = bytes(r._take(16))
        out[topic_id] = [r.i32() for _ in range(r.array_len())]
        r.skip_tags()
    return out


def encode_consumer_group_epoch_value(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue (3) and ConsumerGroupTargetAssignmentMetadataValue (6)."""
    w = _value_writer()
    w.i32(epoch)
    w.no_tags()
    return w.getvalue()


def decode_consumer_group_epoch_value(buf) -> int:
    r = _value_reader(buf, "consumer group epoch value")
    epoch = r.i32()
    r.skip_tags()
    r.done()
    return epoch


def encode_consumer_member_metadata_value(v: ConsumerMemberMetadataValue) -> bytes:
    w = _value_writer()
    w.string(v.instance_id)
    w.string(v.rack_id)
    w.string(v.client_id)
    w.string(v.client_host)
    w.array_len(len(v.subscribed_topic_names))
    for name in v.subscribed_topic_names:
        w.string(name)
    w.string(v.subscribed_topic_regex)
    w.i32(v.rebalance_timeout_ms)
    w.string(v.server_assignor)
    w.no_tags()
    return w.getvalue()


def decode_consumer_member_metadata_value(buf) -> ConsumerMemberMetadataValue:
    r = _value_reader(buf, "ConsumerGroupMemberMetadataValue")
    v = ConsumerMemberMetadataValue(
        instance_id=r.string(nullable=True), rack_id=r.string(nullable=True),
        client_id=r.string(), client_host=r.string(),
        subscribed_topic_names=[r.string() for _ in range(r.array_len())],
        subscribed_topic_regex=r.string(nullable=True), rebalance_timeout_ms=r.i32(),
        server_assignor=r.string(nullable=True))
    r.skip_tags()  # tag 0: ClassicMemberMetadata (members that use the classic protocol)
    r.done()
    return v


def encode_consumer_target_assignment_value(tps: dict[bytes, list[int]]) -> bytes:
    w = _value_writer()
    _write_topic_partitions(w, tps)
    w.no_tags()
    return w.getvalue()


def decode_consumer_target_assignment_value(buf) -> dict[bytes, list[int]]:
    r = _value_reader(buf, "ConsumerGroupTargetAssignmentMemberValue")
    tps = _read_topic_partitions(r)
    r.skip_tags()
    r.done()
    return tps


def encode_consumer_current_assignment_value(v: ConsumerCurrentAssignmentValue) -> bytes:
    w = _value_writer()
    w.i32(v.member_epoch)
    w.i32(v.previous_member_epoch)
    w.parts.append(struct.pack(">b", v.state))
    _write_topic_partitions(w, v.assigned)
    _write_topic_partitions(w, v.pending_revocation)
    w.no_tags()
    return w.getvalue()


def decode_consumer_current_assignment_value(buf) -> ConsumerCurrentAssignmentValue:
    r = _value_reader(buf, "ConsumerGroupCurrentMemberAssignmentValue")
    epoch, previous = r.i32(), r.i32()
    (state,) = struct.unpack(">b", r._take(1))
    v = ConsumerCurrentAssignmentValue(epoch, previous, state, _read_topic_partitions(r),
                                       _read_topic_partitions(r))
    r.skip_tags()
    r.done()
    return v
