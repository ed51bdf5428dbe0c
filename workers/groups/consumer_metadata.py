"""The "consumer" embedded protocol: JoinGroup metadata and SyncGroup assignment bytes.

The coordinator passes these bytes through untouched; it parses the subscription only to
know which topics a consumer group is subscribed to (OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC
and offset expiry of Stable groups), as Kafka does. Layouts (ConsumerProtocolSubscription /
ConsumerProtocolAssignment, never flexible; a newer version is parsed with the newest known
layout and trailing fields ignored, which is what Kafka promises)::

    Subscription  version int16 | topics [string] | user_data nullable bytes
                  | owned_partitions [topic string, partitions [int32]]   v1+
                  | generation_id int32                                   v2+
                  | rack_id nullable string                               v3+
    Assignment    version int16 | assigned_partitions [topic string, partitions [int32]]
                  | user_data nullable bytes
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from workers.groups.records import RecordFormatError, _Reader

PROTOCOL_TYPE = "consumer"


@dataclass
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[tuple[str, list[int]]] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None


@dataclass
class Assignment:
    partitions: list[tuple[str, list[int]]]
    user_data: bytes | None = None


def _nullable_bytes(r: _Reader) -> bytes | None:
    n = r.i32()
    return None if n < 0 else bytes(r._take(n))


def _topic_partitions(r: _Reader) -> list[tuple[str, list[int]]]:
    out = []
    for _ in range(r.array_len()):
        topic = r.string()
        out.append((topic, [r.i32() for _ in range(r.array_len())]))
    return out


def parse_subscription(buf) -> Subscription:
    r = _Reader(buf)
    version = r.i16()
    if version < 0:
        raise RecordFormatError(f"subscription version {version}")
    sub = Subscription(topics=[r.string() for _ in range(r.array_len())])
    sub.user_data = _nullable_bytes(r)
    if version >= 1:
        sub.owned_partitions = _topic_partitions(r)
    if version >= 2:
        sub.generation_id = r.i32()
    if version >= 3:
        sub.rack_id = r.string(nullable=True)
    return sub


def parse_assignment(buf) -> Assignment:
    r = _Reader(buf)
    if r.i16() < 0:
        raise RecordFormatError("negative assignment version")
    return Assignment(partitions=_topic_partitions(r), user_data=_nullable_bytes(r))


def _str(s: str) -> bytes:
    data = s.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def _nbytes(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def _tps(tps: list[tuple[str, list[int]]]) -> bytes:
    out = [struct.pack(">i", len(tps))]
    for topic, parts in tps:
        out.append(_str(topic))
        out.append(struct.pack(">i", len(parts)))
        out.extend(struct.pack(">i", p) for p in parts)
    return b"".join(out)


def encode_subscription(sub: Subscription, version: int = 3) -> bytes:
    out = [struct.pack(">hi", version, len(sub.topics))]
    out.extend(_str(t) for t in sub.topics)
    out.append(_nbytes(sub.user_data))
    if version >= 1:
        out.append(_tps(sub.owned_partitions))
    if version >= 2:
        out.append(struct.pack(">i", sub.generation_id))
    if version >= 3:
        out.append(struct.pack(">h", -1) if sub.rack_id is None else _str(sub.rack_id))
    return b"".join(out)


def encode_assignment(assignment: Assignment, version: int = 3) -> bytes:
    return struct.pack(">h", version) + _tps(assignment.partitions) + _nbytes(assignment.user_data)


def subscribed_topics(metadata_list) -> set[str] | None:
    """Union of the topics in members' subscriptions; None if any cannot be parsed
    (Kafka then treats the group as subscribed to every topic)."""
    topics: set[str] = set()
    try:
        for metadata in metadata_list:
            topics.update(parse_subscription(metadata).topics)
    except (RecordFormatError, struct.error):
        return None
    return topics
