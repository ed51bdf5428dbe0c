"""Incremental fetch sessions (KIP-227): creation, epochs, errors, forgotten partitions,
which partitions an incremental response carries, and LRU eviction."""
from workers.fetch_session import CachedPartition, FetchSessionCache, FINAL_EPOCH, INITIAL_EPOCH

TID = b"\x01" * 16


def cp(p, offset=0, max_bytes=1000, topic="t"):
    return CachedPartition(topic, TID, p, offset, max_bytes)


def test_full_fetch_creates_session_and_returns_all_partitions():
    cache = FetchSessionCache(clock=lambda: 0)
    ctx = cache.new_context(0, INITIAL_EPOCH, [cp(0), cp(1)], [])
    assert ctx.session_id != 0 and not ctx.incremental and ctx.error_code == 0
    assert [c.partition for c in ctx.partitions] == [0, 1]
    # a full response includes every partition, changed or not
    assert all(ctx.include(c, 0, 5, 5, 0, False) for c in ctx.partitions)
    assert len(cache) == 1


def test_incremental_keeps_partitions_and_bumps_epoch():
    cache = FetchSessionCache(clock=lambda: 0)
    sid = cache.new_context(0, INITIAL_EPOCH, [cp(0), cp(1)], []).session_id
    ctx = cache.new_context(sid, 1, [cp(1, offset=7)], [])
    assert ctx.incremental and ctx.session_id == sid
    assert sorted(c.partition for c in ctx.partitions) == [0, 1]
    assert [c.fetch_offset for c in ctx.partitions if c.partition == 1] == [7]
    # the next request must carry epoch 2; epoch 1 again is INVALID_FETCH_SESSION_EPOCH
    assert cache.new_context(sid, 1, [], []).error_code == 71
    assert cache.new_context(sid, 2, [], []).error_code == 0


def test_unknown_session_id():
    cache = FetchSessionCache(clock=lambda: 0)
    assert cache.new_context(12345, 1, [], []).error_code == 70


def test_forgotten_partitions_leave_the_session():
    cache = FetchSessionCache(clock=lambda: 0)
    sid = cache.new_context(0, INITIAL_EPOCH, [cp(0), cp(1), cp(2)], []).session_id
    ctx = cache.new_context(sid, 1, [], [("t", 1)])
    assert sorted(c.partition for c in ctx.partitions) == [0, 2]


def test_incremental_response_carries_only_changes():
    cache = FetchSessionCache(clock=lambda: 0)
    first = cache.new_context(0, INITIAL_EPOCH, [cp(0), cp(1)], [])
    for c in first.partitions:  # the full response records what the client was told
        first.include(c, 0, 10, 10, 0, False)
    ctx = cache.new_context(first.session_id, 1, [], [])
    p0, p1 = sorted(ctx.partitions, key=lambda c: c.partition)
    assert not ctx.include(p0, 0, 10, 10, 0, False)   # nothing new
    assert ctx.include(p1, 0, 11, 11, 0, False)       # high watermark moved
    ctx2 = cache.new_context(first.session_id, 2, [], [])
    q0, q1 = sorted(ctx2.partitions, key=lambda c: c.partition)
    assert ctx2.include(q0, 0, 10, 10, 0, True)       # records
    assert ctx2.include(q1, 3, 11, 11, 0, False)      # error


def test_final_epoch_closes_session_and_fetches_without_one():
    cache = FetchSessionCache(clock=lambda: 0)
    sid = cache.new_context(0, INITIAL_EPOCH, [cp(0)], []).session_id
    ctx = cache.new_context(sid, FINAL_EPOCH, [cp(0)], [])
    assert ctx.session_id == 0 and not ctx.incremental
    assert cache.new_context(sid, 1, [], []).error_code == 70


def test_initial_epoch_with_id_replaces_the_session():
    cache = FetchSessionCache(clock=lambda: 0)
    sid = cache.new_context(0, INITIAL_EPOCH, [cp(0)], []).session_id
    new = cache.new_context(sid, INITIAL_EPOCH, [cp(1)], [])
    assert new.session_id != sid and len(cache) == 1


def test_least_recently_used_session_is_evicted():
    cache = FetchSessionCache(max_sessions=2, clock=lambda: 0)
    a = cache.new_context(0, INITIAL_EPOCH, [cp(0)], []).session_id
    b = cache.new_context(0, INITIAL_EPOCH, [cp(0)], []).session_id
    cache.new_context(a, 1, [], [])            # a is now the most recent
    c = cache.new_context(0, INITIAL_EPOCH, [cp(0)], []).session_id
    assert cache.new_context(b, 1, [], []).error_code == 70
    assert cache.new_context(a, 2, [], []).error_code == 0
    assert cache.new_context(c, 1, [], []).error_code == 0


def test_no_session_when_cache_disabled():
    cache = FetchSessionCache(max_sessions=0, clock=lambda: 0)
    ctx = cache.new_context(0, INITIAL_EPOCH, [cp(0)], [])
    assert ctx.session_id == 0
