"""When offset syncs are due, and how the store translates offsets."""
from __future__ import annotations

from mpbroker.mirror.offset_sync import OffsetSyncStore, SyncPolicy

TP = ("t", 0)


def test_first_record_then_every_max_lag():
    s = SyncPolicy(max_lag=10)
    due = [u for u in range(100) if s.update(TP, u)]
    assert due == list(range(0, 100, 10))


def test_gap_in_source_is_synced_and_a_new_owner_starts_with_one():
    s = SyncPolicy(max_lag=100)
    assert s.update(TP, 0)
    assert not s.update(TP, 1)
    assert s.update(TP, 5)                       # skipped 2..4 (compaction, markers)
    assert not s.update(TP, 6)
    s.forget(TP)
    assert s.update(TP, 7)


def test_translate_exact_and_one_past():
    st = OffsetSyncStore()
    st.add(TP, 100, 10)
    st.add(TP, 200, 110)
    assert st.translate(TP, 99) is None
    assert st.translate(TP, 100) == 10
    assert st.translate(TP, 150) == 11            # never skips: resumes just past the sync
    assert st.translate(TP, 200) == 110
    assert st.translate(TP, 10_000) == 111
    assert st.translate(("other", 0), 5) is None


def test_reread_source_replaces_later_syncs():
    st = OffsetSyncStore()
    st.add(TP, 0, 0)
    st.add(TP, 100, 100)
    st.add(TP, 50, 150)                           # a restart re-mirrored from 50
    assert st.translate(TP, 100) == 151
    st.add(TP, 60, 5)                             # target recreated: lower downstream
    assert st.translate(TP, 60) == 5 and st.translate(TP, 55) == 1   # (50, 150) dropped


def test_store_is_bounded_and_keeps_recent_syncs_exact():
    st = OffsetSyncStore(capacity=16)
    for u in range(0, 10_000, 10):
        st.add(TP, u, u * 2)
    assert len(st._ups[TP]) <= 16
    assert st.translate(TP, 9990) == 19980
    old = st.translate(TP, 5)
    assert old is None or old <= 11               # coarse for old offsets, never ahead
