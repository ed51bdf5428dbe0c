"""Compression codecs of Kafka record batches: ids as in the batch attributes' low 3 bits.

    0 none, 1 gzip (RFC 1952), 2 snappy, 3 lz4 (LZ4 frame), 4 zstd.

Snappy: Java clients write the xerial-framed stream of snappy-java's
SnappyOutputStream::

    magic b"\\x82SNAPPY\\x00", version int32 (1), compatible version int32 (1),
    then blocks of [int32 compressed length][raw snappy block of <= 32 KiB input]

librdkafka writes plain raw snappy. Every client (Java's SnappyInputStream, librdkafka,
kafka-python, franz-go) reads both, so `decompress` accepts both (xerial when the magic
matches, raw otherwise) and `compress` writes xerial with 32 KiB blocks, byte for byte
what the Java producer and kafka-python write.

LZ4: the LZ4 frame format with independent 64 KiB blocks and no content size, no block
or content checksum (Java's KafkaLZ4BlockOutputStream). Quirk: before KIP-57 (Kafka
0.10), Kafka computed the frame descriptor's header checksum (HC) over the descriptor
*including* the 4 magic bytes. Kafka still writes and tolerates that broken checksum in
magic v0 messages only; `legacy_checksum=True` reproduces it on compress and ignores
the HC on decompress (the record-format converter passes it for v0).

`decompress(codec, data, max_size)` never returns, nor allocates much more than,
`max_size` bytes: beyond it raises CorruptRecordError (a decompression bomb). Any
undecodable payload raises CorruptRecordError; an unknown id raises
UnsupportedCompressionTypeError. No other exception type leaves this module.
"""
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from storage.errors import CorruptRecordError, UnsupportedCompressionTypeError

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
IDS = {name: codec_id for codec_id, name in NAMES.items()}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")
XERIAL_BLOCK_SIZE = 32 * 1024
_I32 = struct.Struct(">i")
LZ4_MAGIC = b"\x04\x22\x4d\x18"
_CHUNK = 1 << 20                    # output step of streaming decoders


def compress(codec_id: int, data, level=None, legacy_checksum: bool = False) -> bytes:
    """Compress `data` (bytes-like) for a batch or message of codec `codec_id`."""
    if codec_id == NONE:
        return bytes(data)
    if codec_id == GZIP:
        return _gzip_compress(data, level)
    if codec_id == SNAPPY:
        return _xerial_compress(data)
    if codec_id == LZ4:
        return _lz4_compress(data, level, legacy_checksum)
    if codec_id == ZSTD:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise UnsupportedCompressionTypeError("unknown compression type id %r" % (codec_id,))


def decompress(codec_id: int, data, max_size: int, legacy_checksum: bool = False) -> bytes:
    """Decompress `data`; CorruptRecordError when bad or larger than `max_size` bytes."""
    decoder = _DECODERS.get(codec_id)
    if decoder is None:
        raise UnsupportedCompressionTypeError("unknown compression type id %r" % (codec_id,))
    try:
        if codec_id == LZ4:
            return decoder(data, max_size, legacy_checksum)
        return decoder(data, max_size)
    except CorruptRecordError:
        raise
    except Exception as exc:        # third-party decoders raise assorted types
        raise CorruptRecordError("undecodable %s payload: %s: %s"
                                 % (NAMES[codec_id], type(exc).__name__, exc)) from None


def _check_size(size, max_size):
    if size > max_size:
        raise CorruptRecordError("decompressed size exceeds %d bytes (decompression bomb?)"
                                 % max_size)


def _none_decompress(data, max_size):
    _check_size(len(data), max_size)
    return bytes(data)


# -- gzip ------------------------------------------------------------------------------

def _gzip_compress(data, level):
    level = -1 if level is None else level          # -1: zlib's default, 6, as Java's
    compressor = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def _gzip_decompress(data, max_size):
    # Concatenated members are read like Java's GZIPInputStream; bytes after a member
    # that are not another gzip header are ignored, as Java does.
    parts = []
    total = 0
    rest = bytes(data)
    while True:
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while True:
            out = decompressor.decompress(rest, min(_CHUNK, max_size - total + 1))
            rest = decompressor.unconsumed_tail
            total += len(out)
            _check_size(total, max_size)
            parts.append(out)
            if decompressor.eof or not (rest or out):
                break
        if not decompressor.eof:
            raise CorruptRecordError("truncated gzip stream")
        rest = decompressor.unused_data
        if not rest.startswith(b"\x1f\x8b"):
            return b"".join(parts)


# -- snappy ----------------------------------------------------------------------------

def _xerial_compress(data):
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    out = [XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(bytes(view[start:start + XERIAL_BLOCK_SIZE])))
        out.append(_I32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data, max_size):
    data = bytes(data)
    if data[:8] == XERIAL_MAGIC and len(data) >= XERIAL_HEADER.size:
        return _xerial_decompress(data, max_size)
    _check_size(_raw_snappy_length(data), max_size)
    return bytes(cramjam.snappy.decompress_raw(data))


def _raw_snappy_length(data, pos=0):
    # The raw format starts with the uncompressed length as an unsigned varint.
    result = 0
    for shift in range(0, 35, 7):
        if pos >= len(data):
            break
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result
    raise CorruptRecordError("bad snappy length preamble")


def _xerial_decompress(data, max_size):
    pos = XERIAL_HEADER.size
    parts = []
    total = 0
    while pos < len(data):
        if len(data) - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block header")
        (length,) = _I32.unpack_from(data, pos)
        pos += 4
        if length < 0 or length > len(data) - pos:
            raise CorruptRecordError("bad xerial snappy block length %d" % length)
        block = data[pos:pos + length]
        pos += length
        total += _raw_snappy_length(block)
        _check_size(total, max_size)
        parts.append(bytes(cramjam.snappy.decompress_raw(block)))
    return b"".join(parts)


# -- lz4 -------------------------------------------------------------------------------

def _lz4_compress(data, level, legacy_checksum):
    out = lz4.frame.compress(
        data, compression_level=0 if level is None else level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
        content_checksum=False, block_checksum=False, store_size=False)
    if legacy_checksum:
        out = bytearray(out)
        end = _lz4_descriptor_end(out)
        out[end] = (xxh32(bytes(out[0:end])) >> 8) & 0xFF    # HC over magic + descriptor
        out = bytes(out)
    return out


def _lz4_decompress(data, max_size, legacy_checksum):
    data = bytes(data)
    if legacy_checksum:
        # Ignore whatever HC the writer computed: replace it with the correct one.
        patched = bytearray(data)
        end = _lz4_descriptor_end(patched)
        patched[end] = (xxh32(data[4:end]) >> 8) & 0xFF
        data = bytes(patched)
    decompressor = lz4.frame.LZ4FrameDecompressor()
    parts = []
    total = 0
    source = data
    while True:
        out = decompressor.decompress(source, max_length=min(_CHUNK, max_size - total + 1))
        source = b""
        total += len(out)
        _check_size(total, max_size)
        parts.append(out)
        if decompressor.eof:
            return b"".join(parts)
        if decompressor.needs_input:
            raise CorruptRecordError("truncated lz4 frame")


def _lz4_descriptor_end(frame) -> int:
    """Position of the HC byte: after magic, FLG, BD, [content size], [dictionary id]."""
    if len(frame) < 7 or bytes(frame[:4]) != LZ4_MAGIC:
        raise CorruptRecordError("not an lz4 frame")
    flg = frame[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(frame) <= end:
        raise CorruptRecordError("truncated lz4 frame descriptor")
    return end


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, for the few bytes of an LZ4 frame descriptor (no dependency needed)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos <= n - 16:
            for i in range(4):
                lane = int.from_bytes(data[pos:pos + 4], "little")
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                pos += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        h = (h + int.from_bytes(data[pos:pos + 4], "little") * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (h + data[pos] * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


# -- zstd ------------------------------------------------------------------------------

def _zstd_decompress(data, max_size):
    # One frame, as Java's ZstdOutputStream and librdkafka write; a frame's declared
    # content size is checked before anything is allocated. (Java's ZstdInputStream
    # would also read further concatenated frames; nobody writes them and they are
    # ignored here.)
    data = bytes(data)
    declared = zstandard.frame_content_size(data)
    if declared >= 0:
        _check_size(declared, max_size)
        return zstandard.ZstdDecompressor().decompress(data)
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=max_size)


_DECODERS = {
    NONE: _none_decompress,
    GZIP: _gzip_decompress,
    SNAPPY: _snappy_decompress,
    LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
}
