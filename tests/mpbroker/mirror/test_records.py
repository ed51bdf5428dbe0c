"""MM2's wire formats: byte layouts as Kafka's structs write them."""
from __future__ import annotations

import struct

from mpbroker.mirror.records import Checkpoint, Heartbeat, OffsetSync


def test_offset_sync_layout_and_roundtrip():
    s = OffsetSync("orders", 3, 100, 42)
    assert s.key() == b"\x00\x06orders" + struct.pack(">i", 3)
    assert s.value() == struct.pack(">qq", 100, 42)
    assert OffsetSync.decode(s.key(), s.value()) == s


def test_checkpoint_layout_and_roundtrip():
    c = Checkpoint("g1", "A.orders", 0, 7, 5, "meta")
    assert c.key() == b"\x00\x02g1\x00\x08A.orders\x00\x00\x00\x00"
    assert c.value() == struct.pack(">hqq", 0, 7, 5) + b"\x00\x04meta"
    assert Checkpoint.decode(c.key(), c.value()) == c


def test_heartbeat_roundtrip():
    h = Heartbeat("A", "B", 1234)
    assert h.value() == struct.pack(">hq", 0, 1234)
    assert Heartbeat.decode(h.key(), h.value()) == h
