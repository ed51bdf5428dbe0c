"""Compression codecs: round trips, the exact framings Kafka clients expect, bombs,
garbage, and interoperability with kafka-python's codec functions."""
import gzip
import os
import random
import struct
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from kafka import codec as kcodec

from storage import codecs
from storage.errors import CorruptRecordError, StorageError, UnsupportedCompressionTypeError

PAYLOADS = [b"", b"x", os.urandom(3000), b"abc" * 50_000, os.urandom(70_000) + b"\0" * 70_000]
CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: "len%d" % len(p))
def test_round_trip(codec, payload):
    packed = codecs.compress(codec, payload)
    assert codecs.decompress(codec, packed, len(payload)) == payload
    assert codecs.decompress(codec, memoryview(packed), len(payload) + 1) == payload


@pytest.mark.parametrize("codec", CODECS[1:])
def test_levels(codec):
    payload = b"level test " * 1000
    for level in {codecs.GZIP: (1, 9), codecs.SNAPPY: (None,), codecs.LZ4: (1, 9),
                  codecs.ZSTD: (1, 19)}[codec]:
        assert codecs.decompress(codec, codecs.compress(codec, payload, level), 10**6) == payload


@pytest.mark.parametrize("codec_id", [5, 6, 7, -1, 99])
def test_unknown_codec(codec_id):
    with pytest.raises(UnsupportedCompressionTypeError):
        codecs.compress(codec_id, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        codecs.decompress(codec_id, b"x", 10)
    assert UnsupportedCompressionTypeError.code == 76


# -- framings ------------------------------------------------------------------------------

def test_snappy_writes_xerial_32k_blocks():
    payload = os.urandom(40_000)
    packed = codecs.compress(codecs.SNAPPY, payload)
    magic, version, compat = struct.unpack_from(">8sii", packed, 0)
    assert (magic, version, compat) == (b"\x82SNAPPY\x00", 1, 1)   # xerial header
    (first,) = struct.unpack_from(">i", packed, 16)                  # block 1 length
    assert bytes(cramjam.snappy.decompress_raw(packed[20:20 + first])) == payload[:32768]
    (second,) = struct.unpack_from(">i", packed, 20 + first)         # block 2 length
    assert 24 + first + second == len(packed)


def test_snappy_reads_raw_and_xerial_from_other_writers():
    payload = b"snappy " * 10_000
    raw = bytes(cramjam.snappy.compress_raw(payload))                 # librdkafka style
    assert codecs.decompress(codecs.SNAPPY, raw, len(payload)) == payload
    for xerial in (True, False):
        theirs = kcodec.snappy_encode(payload, xerial_compatible=xerial)
        assert codecs.decompress(codecs.SNAPPY, theirs, len(payload)) == payload
    ours = codecs.compress(codecs.SNAPPY, payload)
    assert kcodec.snappy_decode(ours) == payload
    assert ours == kcodec.snappy_encode(payload, xerial_compatible=True)   # byte for byte


def test_lz4_frame_descriptor_like_java():
    packed = codecs.compress(codecs.LZ4, b"hello lz4" * 100)
    assert packed[:4] == b"\x04\x22\x4d\x18"     # frame magic
    assert packed[4] == 0x60                     # FLG: version 01, independent blocks only
    assert packed[5] == 0x40                     # BD: 64 KiB max block size
    assert packed[6] == (codecs.xxh32(packed[4:6]) >> 8) & 0xFF     # HC over FLG, BD
    assert lz4.frame.decompress(packed) == b"hello lz4" * 100


def test_lz4_legacy_broken_header_checksum():
    payload = b"v0 message set " * 100
    legacy = codecs.compress(codecs.LZ4, payload, legacy_checksum=True)
    assert legacy[6] == (codecs.xxh32(legacy[0:6]) >> 8) & 0xFF     # HC covers the magic too
    assert codecs.decompress(codecs.LZ4, legacy, 10**6, legacy_checksum=True) == payload
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codecs.LZ4, legacy, 10**6)
    correct = codecs.compress(codecs.LZ4, payload)
    assert codecs.decompress(codecs.LZ4, correct, 10**6, legacy_checksum=True) == payload


def test_lz4_reads_frames_with_content_size_and_checksums():
    payload = os.urandom(1000) * 100
    packed = lz4.frame.compress(payload, store_size=True, content_checksum=True,
                                block_checksum=True, block_linked=True)
    assert codecs.decompress(codecs.LZ4, packed, len(payload)) == payload
    assert codecs.decompress(codecs.LZ4, packed, len(payload), legacy_checksum=True) == payload


@pytest.mark.parametrize("data,seed,expected", [
    (b"", 0, 0x02CC5D05),
    (b"a", 0, 0x550D7456),
    (b"abc", 0, 0x32D153FF),
    (b"Nobody inspects the spammish repetition", 0, 0xE2293B2F),
])
def test_xxh32_vectors(data, seed, expected):
    assert codecs.xxh32(data, seed) == expected


def test_gzip_is_rfc1952_and_reads_concatenated_members():
    payload = b"gzip " * 1000
    packed = codecs.compress(codecs.GZIP, payload)
    assert packed[:2] == b"\x1f\x8b" and gzip.decompress(packed) == payload
    two = gzip.compress(b"first ") + gzip.compress(b"second")
    assert codecs.decompress(codecs.GZIP, two, 100) == b"first second"
    assert codecs.decompress(codecs.GZIP, two + b"junk", 100) == b"first second"


def test_zstd_reads_frames_without_content_size():
    payload = b"zstd " * 10_000
    packed = zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    assert codecs.decompress(codecs.ZSTD, packed, len(payload)) == payload
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codecs.ZSTD, packed, len(payload) - 1)


@pytest.mark.parametrize("codec,decode", [
    (codecs.GZIP, kcodec.gzip_decode), (codecs.SNAPPY, kcodec.snappy_decode),
    (codecs.LZ4, kcodec.lz4_decode), (codecs.ZSTD, kcodec.zstd_decode)])
def test_kafka_python_decodes_ours(codec, decode):
    payload = os.urandom(5000) + b"z" * 100_000
    assert decode(codecs.compress(codec, payload)) == payload


@pytest.mark.parametrize("codec,encode", [
    (codecs.GZIP, kcodec.gzip_encode), (codecs.SNAPPY, kcodec.snappy_encode),
    (codecs.LZ4, kcodec.lz4_encode), (codecs.ZSTD, kcodec.zstd_encode)])
def test_we_decode_kafka_python(codec, encode):
    payload = os.urandom(5000) + b"z" * 100_000
    assert codecs.decompress(codec, encode(payload), len(payload)) == payload


# -- bombs and garbage -----------------------------------------------------------------

BOMB = 16 * 1024 * 1024
CAP = 1024 * 1024


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_bomb_is_refused_without_allocating_it(codec):
    packed = codecs.compress(codec, bytes(BOMB)) if codec else bytes(2 * CAP)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="bomb"):
            codecs.decompress(codec, packed, CAP)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * CAP + 2 * len(packed)


def test_declared_sizes_are_checked_before_allocating():
    # raw snappy declaring 2 GiB; a zstd frame header declaring 1 TiB
    fake_snappy = b"\x80\x80\x80\x80\x08" + b"\x00" * 10
    with pytest.raises(CorruptRecordError, match="bomb"):
        codecs.decompress(codecs.SNAPPY, fake_snappy, CAP)
    # frame magic, descriptor 0xC0 (8-byte content size, single segment), size, a block
    fake_zstd = b"\x28\xb5\x2f\xfd" + bytes([0xC0]) + struct.pack("<Q", 1 << 40) + b"\x01\x00\x00"
    with pytest.raises(CorruptRecordError, match="bomb"):
        codecs.decompress(codecs.ZSTD, fake_zstd, CAP)


GARBAGE = [b"", b"\x00", b"\xff" * 50, b"\x1f\x8b\x08\x00garbage", b"\x82SNAPPY\x00\x00\x00",
           b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2 + b"\x7f\xff\xff\xff",
           b"\x04\x22\x4d\x18\x60\x40", b"\x04\x22\x4d\x18\x60\x40\x82\xff\xff\xff\x7f",
           b"\x28\xb5\x2f\xfd\x00", random.Random(200).randbytes(200)]
# raw snappy: one varint, uncompressed length 0, and nothing else is a valid empty block
VALID_EMPTY = {(codecs.SNAPPY, b"\x00")}


@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize("data", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_raises_corrupt_record(codec, data):
    for legacy in (False, True):
        if (codec, data) in VALID_EMPTY:
            assert codecs.decompress(codec, data, CAP, legacy_checksum=legacy) == b""
            continue
        with pytest.raises(CorruptRecordError):
            codecs.decompress(codec, data, CAP, legacy_checksum=legacy)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_truncated_payloads(codec):
    payload = os.urandom(2000) + b"t" * 100_000
    packed = codecs.compress(codec, payload)
    for cut in (1, 2, len(packed) // 2, len(packed) - 1):
        try:
            result = codecs.decompress(codec, packed[:-cut], CAP)
        except CorruptRecordError:
            continue
        # Only acceptable if the codec cannot tell (never the case for these framings).
        pytest.fail("truncated %s payload decoded to %d bytes" % (codecs.NAMES[codec], len(result)))


def test_errors_hierarchy():
    assert issubclass(CorruptRecordError, StorageError) and CorruptRecordError.code == 2
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codecs.GZIP, zlib.compress(b"zlib, not gzip"), 100)
