"""Deterministic value generator for message dicts (tests only).

`fill(msg, version, rng)` builds a dict with every field present in that version,
with values that survive an encode/decode round trip (varied lengths, nulls where
nullable, non-default tagged fields, lengths above 127 to exercise multi-byte
varints).
"""
import random

from mpbroker.protocol.schema import Field, Message

_INT_RANGES = {
    "int8": (-128, 127), "int16": (-32768, 32767), "uint16": (0, 65535),
    "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1),
}
_STRINGS = ["", "a", "topic-1", "grüße-é", "x" * 200]


def scalar(t: str, rng: random.Random):
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return rng.choice([lo, hi, 0, -1 if lo < 0 else 1, rng.randint(lo, hi)])
    if t == "bool":
        return rng.random() < 0.5
    if t == "float64":
        return rng.choice([0.0, 1.5, -2.25e10, rng.random()])
    if t == "uuid":
        return rng.randbytes(16)
    if t == "string":
        return rng.choice(_STRINGS)
    if t in ("bytes", "records"):
        return rng.randbytes(rng.choice([0, 3, 150]))
    raise AssertionError(t)


def fill_field(f: Field, version: int, rng: random.Random):
    if f.nullable_versions.has(version) and rng.random() < 0.2:
        return None
    if f.is_array:
        if f.is_struct:
            return [fill_struct(f.fields, version, rng) for _ in range(rng.randint(0, 3))]
        return [scalar(f.elem_type, rng) for _ in range(rng.choice([0, 1, 3, 130]))]
    if f.is_struct:
        return fill_struct(f.fields, version, rng)
    return scalar(f.type, rng)


def fill_struct(fields, version: int, rng: random.Random) -> dict:
    return {f.snake: fill_field(f, version, rng) for f in fields if f.versions.has(version)}


def fill(msg: Message, version: int, rng: random.Random) -> dict:
    return fill_struct(msg.fields, version, rng)


def plain(value):
    """memoryviews and bytearrays to bytes, recursively, for comparisons."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    return value
