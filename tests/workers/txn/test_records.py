"""`__transaction_state` record formats (workers/txn/records.py) against bytes laid out
by hand from Kafka's TransactionLogKey/Value schemas."""
import struct

import pytest

from workers.groups.records import RecordFormatError
from workers.txn import records as rec


def test_key_v0_bytes():
    assert rec.encode_key("tx-1") == struct.pack(">hh", 0, 4) + b"tx-1"
    assert rec.decode_key(struct.pack(">hh", 0, 4) + b"tx-1") == "tx-1"


def test_key_other_version_and_truncation_rejected():
    with pytest.raises(RecordFormatError):
        rec.decode_key(struct.pack(">hh", 1, 4) + b"tx-1")
    with pytest.raises(RecordFormatError):
        rec.decode_key(struct.pack(">hh", 0, 9) + b"tx-1")


def _v0_bytes(pid, epoch, timeout, state, parts, last, start):
    out = struct.pack(">hqhib", 0, pid, epoch, timeout, state)
    out += struct.pack(">i", len(parts))
    for topic, ids in parts:
        out += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", len(ids))
        out += b"".join(struct.pack(">i", i) for i in ids)
    return out + struct.pack(">qq", last, start)


def test_value_v1_bytes_are_kafkas_flexible_layout():
    v = rec.TxnLogValue(7, 3, 60000, 1, {"t": [2, 0]}, 1000, 900)
    got = rec.encode_value(v)
    want = (struct.pack(">hqhib", 1, 7, 3, 60000, 1)
            + bytes([2])                      # compact array: 1 entry
            + bytes([2]) + b"t"               # compact string
            + bytes([3]) + struct.pack(">ii", 0, 2)   # partitions sorted
            + bytes([0])                      # struct tags
            + struct.pack(">qq", 1000, 900)
            + bytes([0]))                     # top-level tags: none at defaults
    assert got == want
    assert rec.decode_value(got) == rec.TxnLogValue(7, 3, 60000, 1, {"t": [0, 2]}, 1000, 900)


def test_value_v1_tagged_fields_roundtrip_and_unknown_tags_skipped():
    v = rec.TxnLogValue(7, 0, 1000, 0, {}, 5, -1, previous_producer_id=6,
                        next_producer_id=8, client_txn_version=2)
    data = rec.encode_value(v)
    assert rec.decode_value(data) == v
    # append an unknown tag 9 (2 bytes) by rewriting the tag count
    base = rec.encode_value(rec.TxnLogValue(7, 0, 1000, 0, {}, 5, -1))
    assert base[-1] == 0
    extra = base[:-1] + bytes([1, 9, 2, 0xAB, 0xCD])
    assert rec.decode_value(extra).producer_id == 7


def test_value_v0_decodes():
    data = _v0_bytes(11, 2, 30000, 2, [("a", [1]), ("b", [0, 3])], 77, 66)
    v = rec.decode_value(data)
    assert (v.producer_id, v.producer_epoch, v.txn_timeout_ms, v.state) == (11, 2, 30000, 2)
    assert v.partitions == {"a": [1], "b": [0, 3]}
    assert (v.last_update_ms, v.start_ms) == (77, 66)
    assert rec.encode_value(v, version=0) == data


@pytest.mark.parametrize("bad", [
    b"", struct.pack(">h", 5) + bytes(40),
    _v0_bytes(1, 0, 1, 0, [], 0, 0)[:-3],
    _v0_bytes(1, 0, 1, 0, [], 0, 0) + b"x",
    _v0_bytes(1, 0, 1, 9, [], 0, 0),
])
def test_bad_values_rejected(bad):
    with pytest.raises(RecordFormatError):
        rec.decode_value(bad)
