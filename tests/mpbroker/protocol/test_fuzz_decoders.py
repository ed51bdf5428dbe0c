"""Arbitrary bytes into every decoder and the header parser: only ProtocolError
(or UnsupportedVersion, a subclass) may come out, and nothing large is allocated."""
import random
import tracemalloc

from hypothesis import given, settings, strategies as st, HealthCheck

from mpbroker.protocol import codec, framing
from mpbroker.protocol.errors import ProtocolError

from .gen_values import fill

ALL = [(m, v) for m in codec.MESSAGES.values()
       for v in range(m.valid_versions[0], m.valid_versions[1] + 1)]


def try_decode(msg, version, data):
    try:
        codec.decode(msg, version, data)
    except ProtocolError:
        pass


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL), st.binary(max_size=300))
def test_random_bytes(case, data):
    try_decode(*case, data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_headers(data):
    try:
        framing.parse_request_header(data)
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.integers(-1, 90), st.integers(-2, 20), st.binary(max_size=40))
def test_headers_of_every_api(api_key, version, rest):
    data = api_key.to_bytes(2, "big", signed=True) + version.to_bytes(2, "big", signed=True) + rest
    try:
        framing.parse_request_header(data)
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.integers(-1, 90), st.integers(-2, 20), st.binary(max_size=200))
def test_api_and_version_lookup(api_key, version, data):
    for fn in (codec.decode_request, codec.decode_response):
        try:
            fn(api_key, version, data)
        except ProtocolError:
            pass


def mutations(data: bytes, rng: random.Random):
    yield data[: rng.randrange(len(data) + 1)]                       # truncated
    for _ in range(6):
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            if b:
                b[rng.randrange(len(b))] = rng.choice([0, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        yield bytes(b)
    pos = rng.randrange(len(data) + 1)
    yield data[:pos] + rng.randbytes(rng.randint(1, 8)) + data[pos:]  # inserted
    yield data + rng.randbytes(3)                                     # trailing bytes


def test_mutated_valid_encodings_of_every_version():
    rng = random.Random(1234)
    for msg, version in ALL:
        body = fill(msg, version, random.Random(f"{msg.name}{version}"))
        data = b"".join(codec.encode(msg, version, body))
        for bad in mutations(data, rng):
            try_decode(msg, version, bad)


def test_huge_counts_and_lengths_fail_before_allocating():
    tracemalloc.start()
    try:
        for msg, version in ALL:
            for prefix in (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x07", b"\x7f\xff"):
                try_decode(msg, version, prefix * 4)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 1024 * 1024
