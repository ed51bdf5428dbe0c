"""The everyday record set that every client's integration test produces and consumes
(issue: 10k keyed records per client with headers, null keys, empty values and a value
up to the default message.max.bytes, timestamps preserved, per-partition order kept).

Record i: a null key every 10th (those go to partition i % partitions), else one of 97
keys; an empty value every 13th, else `value-<i>-` plus i % 50 zero bytes; headers
`idx=<i>`, `h2=` on odd i; CreateTime base_ts + i, so the timestamp names the record
whatever its value. Plus one record with key `big` and a value of `BIG_VALUE_SIZE`
bytes to partition 0.
"""
from __future__ import annotations

from typing import NamedTuple

BIG_VALUE_SIZE = 1048588 - 512  # message.max.bytes default minus batch and record overhead
BIG_KEY = b"big"


class Record(NamedTuple):
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]] | None
    timestamp: int
    partition: int | None      # explicit partition (null keys), else the client's partitioner


class Received(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int


def mixed(n: int, base_ts: int, partitions: int) -> list[Record]:
    out = []
    for i in range(n):
        key = None if i % 10 == 0 else b"key-%d" % (i % 97)
        value = b"" if i % 13 == 0 else b"value-%06d-" % i + bytes(i % 50)
        headers = [("idx", str(i).encode()), ("h2", b"")] if i % 2 else None
        out.append(Record(key, value, headers, base_ts + i, i % partitions if key is None else None))
    return out


def big_value() -> bytes:
    return bytes(range(256)) * (BIG_VALUE_SIZE // 256)


def produce_with_confluent(bootstrap: str, topic: str, expected: list[Record]) -> None:
    """The set and the big record, produced with confluent-kafka; every delivery acked."""
    from tests.integration.broker import DeliveryTracker, flush, producer

    p = producer(bootstrap, **{"message.max.bytes": 2_000_000, "batch.size": 1_000_000,
                               "compression.type": "none"})
    dt = DeliveryTracker()
    for i, r in enumerate(expected):
        p.produce(topic, key=r.key, value=r.value, headers=r.headers, timestamp=r.timestamp,
                  partition=-1 if r.partition is None else r.partition, on_delivery=dt)
        if i % 1000 == 0:
            p.poll(0)
    p.produce(topic, key=BIG_KEY, value=big_value(), partition=0, on_delivery=dt)
    flush(p, 60)
    assert not dt.errors, dt.errors[:3]
    assert len(dt.delivered) == len(expected) + 1


def check(received: list[Received], expected: list[Record], base_ts: int) -> None:
    """Every record once (plus the big one), fields intact, offsets dense and in order per
    partition, producer order kept per partition."""
    assert len(received) == len(expected) + 1, (len(received), len(expected) + 1)
    want = dict(enumerate(expected))
    seen_big = False
    last_offset: dict[int, int] = {}
    last_idx: dict[int, int] = {}
    for m in sorted(received, key=lambda r: (r.partition, r.offset)):
        assert m.offset == last_offset.get(m.partition, -1) + 1, "offsets dense and in order per partition"
        last_offset[m.partition] = m.offset
        if m.key == BIG_KEY:
            assert m.partition == 0 and m.value == big_value()
            seen_big = True
            continue
        i = m.timestamp - base_ts
        rec = want.pop(i)
        assert (m.key, m.value or b"") == (rec.key, rec.value), (i, m)
        assert list(m.headers or []) == (rec.headers or []), (i, m.headers)
        if rec.partition is not None:
            assert m.partition == rec.partition, (i, m.partition)
        assert i > last_idx.get(m.partition, -1), "producer order is kept per partition"
        last_idx[m.partition] = i
    assert seen_big and not want
