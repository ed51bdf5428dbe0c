"""The `.txnindex` file (storage/txn_index.py): its format and reload, a torn tail cut,
a bad version flagging a rebuild, collecting aborted transactions, truncation."""
import os
import struct

import pytest

from storage.txn_index import (ENTRY_SIZE, AbortedTxn, CorruptTxnIndexError, TransactionIndex,
                               decode_entries)


def test_txnindex_file_format_and_reload(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    idx = TransactionIndex(path, 0)
    assert not os.path.exists(path)                 # created on the first append
    idx.append(AbortedTxn(7, 3, 10, 4))
    idx.append(AbortedTxn(-2 ** 63 + 1, 11, 12, 13))
    idx.close()
    data = open(path, "rb").read()
    assert len(data) == 2 * ENTRY_SIZE == 68
    assert struct.unpack(">hqqqq", data[:34]) == (0, 7, 3, 10, 4)
    assert struct.unpack(">hqqqq", data[34:]) == (0, -2 ** 63 + 1, 11, 12, 13)
    again = TransactionIndex(path, 0)
    assert again.entries == [AbortedTxn(7, 3, 10, 4), AbortedTxn(-2 ** 63 + 1, 11, 12, 13)]
    with pytest.raises(ValueError):
        again.append(AbortedTxn(1, 20, 19, 21))     # first after last
    # a marker at or below the last entry: the later (stale) entries give way
    again.append(AbortedTxn(1, 5, 12, 13))
    assert again.entries == [AbortedTxn(7, 3, 10, 4), AbortedTxn(1, 5, 12, 13)]
    again.close()
    assert TransactionIndex(path, 0).entries == again.entries


def test_txnindex_torn_tail_cut_and_bad_version_flags_rebuild(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    with open(path, "wb") as f:
        f.write(AbortedTxn(1, 0, 2, 3).encode() + AbortedTxn(1, 4, 6, 7).encode()[:20])
    idx = TransactionIndex(path, 0)
    assert idx.entries == [AbortedTxn(1, 0, 2, 3)] and not idx.needs_rebuild
    assert os.path.getsize(path) == ENTRY_SIZE
    with open(path, "wb") as f:
        f.write(struct.pack(">hqqqq", 1, 1, 0, 2, 3))
    bad = TransactionIndex(path, 0)
    assert bad.needs_rebuild and bad.entries == []
    with pytest.raises(CorruptTxnIndexError):
        decode_entries(struct.pack(">hqqqq", 0, 1, 5, 2, 3))


def test_txnindex_collect_and_truncate(tmp_path):
    idx = TransactionIndex(str(tmp_path / "x.txnindex"), 0)
    for t in (AbortedTxn(1, 0, 5, 2), AbortedTxn(2, 2, 8, 9), AbortedTxn(3, 9, 12, 20)):
        idx.append(t)
    r = idx.collect_aborted(6, 9)
    assert [t.producer_id for t in r.aborted] == [2] and r.complete   # LSO 9 >= upper 9
    r = idx.collect_aborted(0, 100)
    assert len(r.aborted) == 3 and not r.complete
    idx.truncate_to(8)
    assert [t.producer_id for t in idx.entries] == [1]
    assert TransactionIndex(idx.path, 0).entries == [AbortedTxn(1, 0, 5, 2)]
    idx.truncate_to(0)
    assert not os.path.exists(idx.path)
