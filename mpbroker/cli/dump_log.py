"""`mpbroker dump-log`: print the files of a partition directory, like Kafka's
`kafka-dump-log.sh` (DumpLogSegments), with its flags and output lines.

    mpbroker dump-log [--files F1,F2] [F ...] [--deep-iteration] [--print-data-log|--records]
                      [--offsets-decoder|--transaction-log-decoder] [--max-message-size N]
                      [--max-bytes N] [--skip-record-metadata]

What each file is, by its name:

* `<offset>.log` (a segment): one line per batch (`baseOffset: 0 lastOffset: 4 count: 5
  ... position: 0 CreateTime: ... size: ... magic: 2 compresscodec: none crc: ...
  isvalid: true`); with `--deep-iteration` one `| offset: ...` line per record, and with
  `--print-data-log` its `key:` and `payload:` (UTF-8, or Python's escaped bytes when
  they are not text). `--offsets-decoder` / `--transaction-log-decoder` print the keys
  and values of `__consumer_offsets` / `__transaction_state` records as JSON (Kafka's
  GroupMetadataManager / TransactionLog formatters' shape), using the record codecs of
  `workers/groups/records.py` and `workers/txn/records.py`.
* `.index` (`offset: N position: P`), `.timeindex` (`timestamp: T offset: N`),
  `.txnindex` (`version: ... producerId: ... firstOffset: ... lastOffset: ...
  lastStableOffset: ...`), `.snapshot` (producer state: one line per producer),
  and the checkpoint files (`leader-epoch-checkpoint`, `recovery-point-offset-checkpoint`,
  `log-start-offset-checkpoint`, `replication-offset-checkpoint`): their entries.

Memory stays bounded whatever the file's size: files are read with `pread`, a batch
header then its body (at most `--max-message-size`), index entries in 64 KiB chunks;
nothing maps or reads a whole file. The active segment and indexes of a running
broker are preallocated: the valid data ends at the first all-zero batch header or
index entry, where the dump stops without reading the zero tail (exit 0). Bytes that
are neither a batch nor zeros are reported as Kafka does ("Found N invalid bytes at the
end of F"; exit 1). A missing or unreadable file is one line on stderr (exit 1);
other files of the same call are still dumped.
"""
from __future__ import annotations

import json
import os
import struct
import sys
from typing import Callable, Iterator, Optional

from storage import codecs
from storage.batch import (HEADER_SIZE, LEGACY_MIN_MESSAGE_SIZE, LOG_OVERHEAD, MAGIC,
                           RecordBatch)
from storage.checkpoint import (HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE,
                                RECOVERY_POINT_FILE)
from storage.epoch_cache import LEADER_EPOCH_FILE
from storage.errors import StorageError
from storage.producer_state import ProducerStateManager, SNAPSHOT_SUFFIX
from storage.txn_index import ENTRY as TXN_ENTRY
from workers.groups import records as group_records
from workers.txn import records as txn_records

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024          # Kafka's --max-message-size default
CHUNK = 64 * 1024
_LOG_HEADER = struct.Struct(">qi")
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_OFFSET_CHECKPOINTS = (RECOVERY_POINT_FILE, LOG_START_OFFSET_FILE, HIGH_WATERMARK_FILE)
TXN_STATES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
              4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}


class DumpError(Exception):
    """A file that cannot be dumped (one line)."""


class Options:
    def __init__(self, deep: bool = False, print_data: bool = False, decoder: str = "string",
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, max_bytes: int = 2**31 - 1,
                 skip_record_metadata: bool = False, out: Callable[[str], None] = print):
        self.print_data = print_data or decoder != "string"
        self.deep = deep or self.print_data
        self.decoder = decoder
        self.max_message_size = max_message_size
        self.max_bytes = max_bytes
        self.skip_record_metadata = skip_record_metadata
        self.out = out


# ------------------------------------------------------------------ reading

class _File:
    """pread on one descriptor; no whole-file reads."""

    def __init__(self, path: str):
        try:
            self.fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise DumpError(f"cannot open {path}: {e.strerror or e}") from None
        self.path = path
        try:
            st = os.fstat(self.fd)
        except OSError as e:
            os.close(self.fd)
            raise DumpError(f"cannot read {path}: {e.strerror or e}") from None
        if not os.path.isfile(path):
            os.close(self.fd)
            raise DumpError(f"{path} is not a regular file")
        self.size = st.st_size

    def pread(self, n: int, pos: int) -> bytes:
        try:
            return os.pread(self.fd, n, pos)
        except OSError as e:
            raise DumpError(f"cannot read {self.path} at position {pos}: {e.strerror or e}") from None

    def entries(self, struct_: struct.Struct) -> Iterator[tuple]:
        """Fixed-size entries in 64 KiB chunks, up to the first all-zero one (the
        preallocated tail), as storage/index.py reads them. Only the very first entry
        may be all zeros (offset 0 at position 0 with index.interval.bytes=0): it counts
        when a non-zero entry follows it."""
        size = struct_.size
        step = CHUNK - CHUNK % size
        pos = 0
        while pos < self.size:
            data = self.pread(min(step, self.size - pos), pos)
            if not data:
                return
            for i in range(0, len(data) - len(data) % size, size):
                if not any(data[i:i + size]):
                    if pos + i != 0 or not any(data[size:2 * size]):
                        return
                yield struct_.unpack_from(data, i)
            if len(data) % size:
                return
            pos += len(data)

    def close(self) -> None:
        os.close(self.fd)


def _base_offset(path: str) -> Optional[int]:
    stem = os.path.basename(path).split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


# ------------------------------------------------------------------ segments

def _text(b: Optional[bytes]) -> str:
    if b is None:
        return "null"
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return repr(b)[2:-1]


def _json(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _offsets_key_value(key: Optional[bytes], value: Optional[bytes]) -> tuple[str, str]:
    """A `__consumer_offsets` record as Kafka's GroupMetadataManager.formatRecordKeyAndValue."""
    return _coordinator_record(key, value, group_records.decode_key,
                               lambda k, kv: _offsets_record(group_records, k, kv, value))


def _coordinator_record(key: Optional[bytes], value: Optional[bytes], decode_key, describe):
    """A coordinator record (offsets, transactions): NULL for no key, the error of a key
    that does not decode, else `describe(decoded key, key version)`."""
    if key is None:
        return "NULL", "<DELETE>" if value is None else _text(value)
    try:
        k, kv = _versioned(decode_key, key)
    except (ValueError, struct.error) as e:
        return f"Error: {e}", _text(value)
    return describe(k, kv)


def _offsets_record(g, k, kv: int, value: Optional[bytes]) -> tuple[str, str]:
    if isinstance(k, g.OffsetCommitKey):
        ktxt = _json({"type": str(kv), "data": {"group": k.group, "topic": k.topic, "partition": k.partition}})
        decode = g.decode_offset_commit_value
        fields = lambda v: {"offset": v.offset, "leaderEpoch": v.leader_epoch, "metadata": v.metadata,
                            "commitTimestamp": v.commit_timestamp,
                            **({"expireTimestamp": v.expire_timestamp} if v.expire_timestamp != -1 else {})}
    elif isinstance(k, g.GroupMetadataKey):
        ktxt = _json({"type": str(kv), "data": {"group": k.group}})
        decode = g.decode_group_metadata_value
        fields = lambda v: {
            "protocolType": v.protocol_type, "generation": v.generation, "protocol": v.protocol,
            "leader": v.leader, "currentStateTimestamp": v.current_state_timestamp,
            "members": [{"memberId": m.member_id, "groupInstanceId": m.group_instance_id,
                         "clientId": m.client_id, "clientHost": m.client_host,
                         "rebalanceTimeout": m.rebalance_timeout, "sessionTimeout": m.session_timeout,
                         "subscription": m.subscription.hex(), "assignment": m.assignment.hex()}
                        for m in v.members]}
    else:
        data = {k2: v2 for k2, v2 in vars(k).items()} if hasattr(k, "__dict__") else {}
        return _json({"type": str(kv), "data": data}), "<DELETE>" if value is None else \
            _json({"version": str(struct.unpack_from(">h", value)[0]) if len(value) >= 2 else "?",
                   "data": {"hex": value.hex()}})
    return ktxt, _value_text(value, decode, fields)


def _versioned(decode, data: bytes):
    """(decode(data), the record's int16 version prefix); ValueError/struct.error when
    it does not decode."""
    return decode(data), struct.unpack_from(">h", data)[0]


def _value_text(value: Optional[bytes], decode, fields) -> str:
    """A coordinator record's value as Kafka's formatter prints it: <DELETE> for a
    tombstone, the decoding error, or {"version", "data": fields(decoded)}."""
    if value is None:
        return "<DELETE>"
    try:
        v, vv = _versioned(decode, value)
    except (ValueError, struct.error) as e:
        return f"Error: {e}"
    return _json({"version": str(vv), "data": fields(v)})


def _txn_key_value(key: Optional[bytes], value: Optional[bytes]) -> tuple[str, str]:
    """A `__transaction_state` record as Kafka's TransactionLog.formatRecordKeyAndValue."""
    return _coordinator_record(key, value, txn_records.decode_key, lambda tid, kv: (
        _json({"type": str(kv), "data": {"transactionalId": tid}}),
        _value_text(value, txn_records.decode_value, _txn_fields)))


def _txn_fields(v) -> dict:
    return {
        "producerId": v.producer_id, "producerEpoch": v.producer_epoch,
        "transactionTimeoutMs": v.txn_timeout_ms,
        "transactionStatus": TXN_STATES.get(v.state, str(v.state)),
        "transactionPartitions": [{"topic": topic, "partitionIds": list(parts)}
                                  for topic, parts in sorted(v.partitions.items())],
        "transactionLastUpdateTimestampMs": v.last_update_ms,
        "transactionStartTimestampMs": v.start_ms}


def _batch_line(b: RecordBatch, pos: int, valid: bool) -> str:
    horizon = b.delete_horizon_ms
    return (f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.record_count} "
            f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} "
            f"producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
            f"partitionLeaderEpoch: {b.partition_leader_epoch} "
            f"isTransactional: {str(b.is_transactional).lower()} isControl: {str(b.is_control).lower()} "
            f"deleteHorizonMs: {'OptionalLong.empty' if horizon is None else f'OptionalLong[{horizon}]'} "
            f"position: {pos} {'LogAppendTime' if b.timestamp_type else 'CreateTime'}: {b.max_timestamp} "
            f"size: {b.size} magic: {b.magic} compresscodec: {codecs.NAMES.get(b.compression, b.compression)} "
            f"crc: {b.crc} isvalid: {str(valid).lower()}")


def _record_lines(b: RecordBatch, opts: Options) -> Iterator[str]:
    ts_type = "LogAppendTime" if b.timestamp_type else "CreateTime"
    base_seq = b.base_sequence
    for r in b.records():
        seq = -1 if base_seq < 0 else (base_seq + r.offset - b.base_offset) % (2**31)
        if opts.skip_record_metadata:
            line = "|"
        else:
            line = (f"| offset: {r.offset} {ts_type}: {r.timestamp} "
                    f"keySize: {-1 if r.key is None else len(r.key)} "
                    f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {seq} "
                    f"headerKeys: [{','.join(k for k, _ in r.headers)}]")
        if b.is_control:
            if r.key is not None and len(r.key) >= 4:
                _, ctype = struct.unpack_from(">hh", r.key)
                if ctype in (0, 1) and r.value is not None and len(r.value) >= 6:
                    _, epoch = struct.unpack_from(">hi", r.value)
                    line += f" endTxnMarker: {'COMMIT' if ctype == 1 else 'ABORT'} coordinatorEpoch: {epoch}"
                else:
                    line += f" controlType: UNKNOWN({ctype})"
        elif opts.print_data:
            if opts.decoder == "offsets":
                key, payload = _offsets_key_value(r.key, r.value)
            elif opts.decoder == "transaction-log":
                key, payload = _txn_key_value(r.key, r.value)
            else:
                key, payload = _text(r.key), _text(r.value)
            line += f" key: {key} payload: {payload}"
        yield line


def dump_segment(f: _File, opts: Options) -> int:
    base = _base_offset(f.path)
    opts.out(f"Log starting offset: {base if base is not None else 0}")
    pos = 0
    while pos < f.size:
        if pos >= opts.max_bytes:
            return 0                                # --max-bytes: stop without judging the rest
        head = f.pread(LOG_OVERHEAD, pos)
        if len(head) < LOG_OVERHEAD:
            break
        base_offset, length = _LOG_HEADER.unpack(head)
        if base_offset == 0 and length == 0:
            # Preallocated space of an active segment: the valid data ends here.
            if not any(f.pread(HEADER_SIZE, pos)):
                return 0
        size = length + LOG_OVERHEAD
        if length < LEGACY_MIN_MESSAGE_SIZE or size > f.size - pos:
            break
        if size > opts.max_message_size:
            opts.out(f"Found a batch of {size} bytes at position {pos}, larger than "
                     f"--max-message-size {opts.max_message_size}: stopping")
            return 1
        data = bytearray(f.pread(size, pos))
        if len(data) < size:
            break
        b = RecordBatch(memoryview(data))
        if b.magic != MAGIC or size < HEADER_SIZE:
            opts.out(f"offset: {base_offset} position: {pos} size: {size} magic: {b.magic} "
                     "(a v0/v1 message set: not decoded)")
            pos += size
            continue
        try:
            b.validate()
            valid = True
        except StorageError:
            valid = False
        opts.out(_batch_line(b, pos, valid))
        if opts.deep:
            try:
                for line in _record_lines(b, opts):
                    opts.out(line)
            except StorageError as e:
                opts.out(f"| cannot decode the records of the batch at position {pos}: {e}")
        pos += size
    trailing = f.size - pos
    if trailing > 0:
        opts.out(f"Found {trailing} invalid bytes at the end of {os.path.basename(f.path)}")
        return 1
    return 0


# ------------------------------------------------------------------ other files

def dump_index(f: _File, opts: Options) -> int:
    base = _base_offset(f.path) or 0
    for rel, position in f.entries(_INDEX_ENTRY):
        opts.out(f"offset: {base + rel} position: {position}")
    return 0


def dump_time_index(f: _File, opts: Options) -> int:
    base = _base_offset(f.path) or 0
    for ts, rel in f.entries(_TIME_ENTRY):
        opts.out(f"timestamp: {ts} offset: {base + rel}")
    return 0


def dump_txn_index(f: _File, opts: Options) -> int:
    for version, pid, first, last, lso in f.entries(TXN_ENTRY):
        opts.out(f"version: {version} producerId: {pid} firstOffset: {first} "
                 f"lastOffset: {last} lastStableOffset: {lso}")
    return 0


MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024


def dump_snapshot(f: _File, opts: Options) -> int:
    if f.size > MAX_SNAPSHOT_BYTES:
        raise DumpError(f"{f.path}: {f.size} bytes is too large for a producer snapshot")
    try:
        producers = ProducerStateManager.decode_snapshot(f.pread(f.size, 0))
    except ValueError as e:
        raise DumpError(f"{f.path}: not a producer snapshot: {e}") from None
    for pid in sorted(producers):
        e = producers[pid]
        txn = e.current_txn_first_offset
        line = (f"producerId: {pid} producerEpoch: {e.producer_epoch} "
                f"coordinatorEpoch: {e.coordinator_epoch} "
                f"currentTxnFirstOffset: {'OptionalLong.empty' if txn is None else f'OptionalLong[{txn}]'} "
                f"lastTimestamp: {e.last_timestamp_ms}")
        if e.batches:
            m = e.batches[-1]
            line += (f" firstSequence: {m.first_seq} lastSequence: {m.last_seq} "
                     f"lastOffset: {m.last_offset} offsetDelta: {m.last_offset - m.first_offset} "
                     f"timestamp: {m.timestamp_ms}")
        opts.out(line)
    return 0


def dump_checkpoint(f: _File, opts: Options) -> int:
    """A checkpoint file (version, count, entries), read line by line."""
    name = os.path.basename(f.path)
    fields = ("epoch", "startOffset") if name == LEADER_EPOCH_FILE else ("topic", "partition", "offset")
    pos, lines = 0, []
    buf = b""
    while pos < f.size and len(lines) < 2:
        chunk = f.pread(CHUNK, pos)
        if not chunk:
            break
        pos += len(chunk)
        buf += chunk
        while b"\n" in buf and len(lines) < 2:
            line, buf = buf.split(b"\n", 1)
            lines.append(line)
        if len(buf) > CHUNK:
            break
    if len(lines) < 2 or not all(x.strip().isdigit() for x in lines):
        raise DumpError(f"{f.path}: not a checkpoint file (a version line and a count line)")
    opts.out(f"version: {int(lines[0])} entries: {int(lines[1])}")

    def rest() -> Iterator[bytes]:
        nonlocal buf, pos
        while True:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line
            if pos >= f.size or len(buf) > CHUNK:
                break
            chunk = f.pread(CHUNK, pos)
            if not chunk:
                break
            pos += len(chunk)
            buf += chunk
        if buf:
            yield buf

    for line in rest():
        parts = line.decode("utf-8", "replace").split(" ")
        if len(parts) == len(fields):
            opts.out(" ".join(f"{k}: {v}" for k, v in zip(fields, parts)))
        else:
            opts.out(f"bad entry: {line.decode('utf-8', 'replace')}")
    return 0


def kind_of(path: str) -> Optional[Callable[[_File, Options], int]]:
    name = os.path.basename(path)
    if name in _OFFSET_CHECKPOINTS or name == LEADER_EPOCH_FILE:
        return dump_checkpoint
    for suffix, fn in ((".log", dump_segment), (".index", dump_index), (".timeindex", dump_time_index),
                       (".txnindex", dump_txn_index), (SNAPSHOT_SUFFIX, dump_snapshot)):
        if name.endswith(suffix):
            return fn
    return None


def dump_file(path: str, opts: Options, err: Callable[[str], None]) -> int:
    fn = kind_of(path)
    if fn is None:
        err(f"mpbroker dump-log: ignoring {path}: not a .log, .index, .timeindex, .txnindex, "
            ".snapshot or checkpoint file")
        return 1
    try:
        f = _File(path)
    except DumpError as e:
        err(f"mpbroker dump-log: {e}")
        return 1
    try:
        opts.out(f"Dumping {path}")
        return fn(f, opts)
    except DumpError as e:
        err(f"mpbroker dump-log: {e}")
        return 1
    finally:
        f.close()


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="*", metavar="FILE", help="files to dump")
    p.add_argument("--files", default="", help="comma-separated files to dump (Kafka's flag)")
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    p.add_argument("--print-data-log", "--records", dest="print_data", action="store_true",
                   help="print the records' keys and values (implies --deep-iteration)")
    dec = p.add_mutually_exclusive_group()
    dec.add_argument("--offsets-decoder", action="store_true",
                     help="decode records as __consumer_offsets data (implies --print-data-log)")
    dec.add_argument("--transaction-log-decoder", action="store_true",
                     help="decode records as __transaction_state data (implies --print-data-log)")
    p.add_argument("--max-message-size", type=int, default=DEFAULT_MAX_MESSAGE_SIZE,
                   help="size of the largest batch to read (default 5242880)")
    p.add_argument("--max-bytes", type=int, default=2**31 - 1,
                   help="stop reading a segment after the batches that start in its first N bytes")
    p.add_argument("--skip-record-metadata", action="store_true",
                   help="print only the records' key and payload, not their offsets and sizes")


def run(args) -> int:
    paths = list(args.paths) + [x for x in args.files.split(",") if x]
    if not paths:
        print("mpbroker dump-log: no file given (FILE ... or --files F1,F2)", file=sys.stderr)
        return 2
    if args.max_message_size < 1:
        print("mpbroker dump-log: --max-message-size must be positive", file=sys.stderr)
        return 2
    decoder = "offsets" if args.offsets_decoder else \
        "transaction-log" if args.transaction_log_decoder else "string"
    opts = Options(args.deep_iteration, args.print_data, decoder, args.max_message_size,
                   args.max_bytes, args.skip_record_metadata)
    rc = 0
    for path in paths:
        rc = max(rc, dump_file(path, opts, lambda line: print(line, file=sys.stderr)))
    return rc
