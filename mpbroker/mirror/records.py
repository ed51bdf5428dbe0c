"""MM2's record formats for its internal topics (Kafka's `protocol.types` structs: an
INT16-length UTF-8 STRING, big-endian INT16/INT32/INT64), so Kafka's `RemoteClusterUtils`
and MM2 itself can read what mpbroker writes, and the other way round.

    offset sync  (mm2-offset-syncs.<other cluster>.internal, one partition, compacted)
        key   topic STRING, partition INT32             (the SOURCE topic-partition)
        value upstreamOffset INT64, offset INT64
    checkpoint   (<source>.checkpoints.internal on the target, one partition, compacted)
        key   group STRING, topic STRING, partition INT32   (topic: the remote topic)
        value version INT16 (0), upstreamOffset INT64, offset INT64, metadata STRING
    heartbeat    (heartbeats on the target)
        key   sourceClusterAlias STRING, targetClusterAlias STRING
        value version INT16 (0), timestamp INT64
"""
from __future__ import annotations

import struct
from typing import NamedTuple, Tuple


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _read_string(buf: bytes, pos: int) -> Tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    pos += 2
    return buf[pos:pos + n].decode(), pos + n


class OffsetSync(NamedTuple):
    topic: str
    partition: int
    upstream: int
    downstream: int

    def key(self) -> bytes:
        return _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">qq", self.upstream, self.downstream)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> "OffsetSync":
        topic, pos = _read_string(key, 0)
        (partition,) = struct.unpack_from(">i", key, pos)
        up, down = struct.unpack_from(">qq", value, 0)
        return cls(topic, partition, up, down)


class Checkpoint(NamedTuple):
    group: str
    topic: str
    partition: int
    upstream: int
    downstream: int
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">hqq", 0, self.upstream, self.downstream) + _string(self.metadata)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> "Checkpoint":
        group, pos = _read_string(key, 0)
        topic, pos = _read_string(key, pos)
        (partition,) = struct.unpack_from(">i", key, pos)
        version, up, down = struct.unpack_from(">hqq", value, 0)
        if version != 0:
            raise ValueError(f"checkpoint value version {version}")
        metadata, _ = _read_string(value, 18)
        return cls(group, topic, partition, up, down, metadata)


class Heartbeat(NamedTuple):
    source: str
    target: str
    timestamp_ms: int

    def key(self) -> bytes:
        return _string(self.source) + _string(self.target)

    def value(self) -> bytes:
        return struct.pack(">hq", 0, self.timestamp_ms)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> "Heartbeat":
        source, pos = _read_string(key, 0)
        target, _ = _read_string(key, pos)
        _, ts = struct.unpack_from(">hq", value, 0)
        return cls(source, target, ts)
