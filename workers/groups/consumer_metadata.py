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

from mpbroker.protocol.primitives import Reader, Writer
from workers.groups.records import RecordFormatError

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


def _topic_partitions(r: Reader) -> list[tuple[str, list[int]]]:
    out = []
    for _ in range(r.array_len()):
        topic = r.string()
        out.append((topic, [r.int32() for _ in range(r.array_len())]))
    return out


def _read(r: Reader, what: str):
    if r.bad:
        raise RecordFormatError(f"{what} truncated or malformed near byte {r.pos}")


def parse_subscription(buf) -> Subscription:
    r = Reader(buf)
    version = r.int16()
    if version < 0:
        raise RecordFormatError(f"subscription version {version}")
    sub = Subscription(topics=[r.string() for _ in range(r.array_len())])
    sub.user_data = r.nullable_bytes()
    if version >= 1:
        sub.owned_partitions = _topic_partitions(r)
    if version >= 2:
        sub.generation_id = r.int32()
    if version >= 3:
        sub.rack_id = r.nullable_string()
    _read(r, "subscription")
    return sub


def parse_assignment(buf) -> Assignment:
    r = Reader(buf)
    if r.int16() < 0:
        raise RecordFormatError("negative assignment version")
    assignment = Assignment(partitions=_topic_partitions(r), user_data=r.nullable_bytes())
    _read(r, "assignment")
    return assignment


def _write_topic_partitions(w: Writer, tps: list[tuple[str, list[int]]]) -> None:
    w.array_len(len(tps))
    for topic, parts in tps:
        w.string(topic)
        w.array_len(len(parts))
        for p in parts:
            w.int32(p)


def encode_subscription(sub: Subscription, version: int = 3) -> bytes:
    w = Writer()
    w.int16(version)
    w.array_len(len(sub.topics))
    for t in sub.topics:
        w.string(t)
    w.nullable_bytes(sub.user_data)
    if version >= 1:
        _write_topic_partitions(w, sub.owned_partitions)
    if version >= 2:
        w.int32(sub.generation_id)
    if version >= 3:
        w.nullable_string(sub.rack_id)
    return w.getvalue()


def encode_assignment(assignment: Assignment, version: int = 3) -> bytes:
    w = Writer()
    w.int16(version)
    _write_topic_partitions(w, assignment.partitions)
    w.nullable_bytes(assignment.user_data)
    return w.getvalue()


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
