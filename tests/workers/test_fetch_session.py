"""Incremental fetch sessions (KIP-227): creation, epochs (and their wrap), errors,
forgotten partitions, which partitions an incremental response carries, the rotation of
partitions that returned data, and Kafka's eviction rules (stale first, then the least
valuable evictable session, followers privileged), with an injected clock."""
from workers.fetch_session import (CachedPartition, EVICTION_MS, FINAL_EPOCH, INITIAL_EPOCH,
                                   MAX_EPOCH, FetchSessionCache, next_epoch, session_bytes)

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


class Clock:
    def __init__(self):
        self.now = 1_000_000

    def __call__(self):
        return self.now


def new_session(cache, n=1, follower=False):
    return cache.new_context(0, INITIAL_EPOCH, [cp(i) for i in range(n)], [],
                             is_follower=follower).session_id


def test_full_cache_keeps_recent_sessions():
    """Kafka protects sessions younger than the eviction time: a newcomer of the same
    size gets no session instead of evicting the least recently used one."""
    clock = Clock()
    cache = FetchSessionCache(max_sessions=2, clock=clock)
    a, b = new_session(cache), new_session(cache)
    clock.now += 1000
    assert new_session(cache) == 0                     # sessionless, nobody evicted
    assert cache.new_context(a, 1, [], []).error_code == 0
    assert cache.new_context(b, 1, [], []).error_code == 0


def test_stale_session_is_evicted_first():
    clock = Clock()
    cache = FetchSessionCache(max_sessions=2, clock=clock)
    a = new_session(cache, n=5)
    clock.now += 10
    b = new_session(cache, n=1)
    clock.now += EVICTION_MS
    cache.new_context(b, 1, [], [])                    # b used recently, a not
    clock.now += 1
    c = new_session(cache, n=1)                        # a is stale: evicted despite its size
    assert c != 0 and cache.evictions == 1
    assert cache.new_context(a, 1, [], []).error_code == 70
    assert cache.new_context(b, 2, [], []).error_code == 0


def test_bigger_session_evicts_the_smallest_old_one():
    clock = Clock()
    cache = FetchSessionCache(max_sessions=2, clock=clock)
    small, big = new_session(cache, n=2), new_session(cache, n=4)
    clock.now += EVICTION_MS + 1
    # both are past the eviction age once used again, and neither is stale
    cache.new_context(small, 1, [], [])
    cache.new_context(big, 1, [], [])
    assert new_session(cache, n=2) == 0                # not worth more than the smallest
    c = new_session(cache, n=3)
    assert c != 0
    assert cache.new_context(small, 2, [], []).error_code == 70
    assert cache.new_context(big, 2, [], []).error_code == 0


def test_follower_evicts_young_consumer_session_but_not_a_young_follower():
    clock = Clock()
    cache = FetchSessionCache(max_sessions=1, clock=clock)
    consumer = new_session(cache, n=10)
    clock.now += 1
    assert new_session(cache, n=20) == 0               # a consumer never evicts a young one
    follower = new_session(cache, n=1, follower=True)  # privileged beats unprivileged
    assert follower != 0
    assert cache.new_context(consumer, 1, [], []).error_code == 70
    clock.now += 1
    assert new_session(cache, n=50, follower=True) == 0   # young followers are protected
    assert new_session(cache, n=50) == 0
    assert cache.new_context(follower, 1, [], []).error_code == 0


def test_epoch_wraps_to_one():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1 and next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    cache = FetchSessionCache(clock=lambda: 0)
    sid = new_session(cache)
    cache.sessions[sid].epoch = MAX_EPOCH
    assert cache.new_context(sid, MAX_EPOCH, [], []).error_code == 0
    assert cache.sessions[sid].epoch == 1
    assert cache.new_context(sid, 1, [], []).error_code == 0


def test_partitions_with_data_move_to_the_end():
    """IncrementalFetchContext: a partition that returned records goes behind the others,
    so the next fetch reads the others first (no starvation under max_bytes)."""
    cache = FetchSessionCache(clock=lambda: 0)
    sid = cache.new_context(0, INITIAL_EPOCH, [cp(0), cp(1), cp(2)], []).session_id
    ctx = cache.new_context(sid, 1, [], [])
    assert [c.partition for c in ctx.partitions] == [0, 1, 2]
    p0, p1, p2 = ctx.partitions
    assert ctx.include(p0, 0, 10, 10, 0, True)
    assert ctx.include(p1, 0, 10, 10, 0, False)    # hw changed, no records: stays
    assert not ctx.include(p2, 0, -1, -1, -1, False)
    nxt = cache.new_context(sid, 2, [], [])
    assert [c.partition for c in nxt.partitions] == [1, 2, 0]
    # a full (non-incremental) response does not reorder
    full = cache.new_context(0, INITIAL_EPOCH, [cp(0), cp(1)], [])
    assert all(full.include(c, 0, 5, 5, 0, True) for c in full.partitions)
    assert [c.partition for c in cache.new_context(full.session_id, 1, [], []).partitions] == [0, 1]


def test_error_is_resent_when_it_clears_and_diverging_epoch_responds():
    cache = FetchSessionCache(clock=lambda: 0)
    sid = cache.new_context(0, INITIAL_EPOCH, [cp(0)], []).session_id
    ctx = cache.new_context(sid, 1, [], [])
    (p0,) = ctx.partitions
    assert ctx.include(p0, 0, 10, 10, 0, False)
    assert ctx.include(p0, 6, 10, 10, 0, False)        # an error is always sent
    assert ctx.include(p0, 0, 10, 10, 0, False)        # and the same HW again after it
    assert not ctx.include(p0, 0, 10, 10, 0, False)
    assert ctx.include(p0, 0, 10, 10, 0, False, diverging=True)


def test_topic_id_usage_must_not_change():
    cache = FetchSessionCache(clock=lambda: 0)
    sid = cache.new_context(0, INITIAL_EPOCH, [cp(0)], [], uses_topic_ids=True).session_id
    assert cache.new_context(sid, 1, [], [], uses_topic_ids=False).error_code == 106
    assert cache.new_context(sid, 1, [], [], uses_topic_ids=True).error_code == 0


def test_forgetting_every_partition_closes_the_session():
    cache = FetchSessionCache(clock=lambda: 0)
    sid = cache.new_context(0, INITIAL_EPOCH, [cp(0)], []).session_id
    ctx = cache.new_context(sid, 1, [], [("t", 0)])
    assert ctx.session_id == 0 and not ctx.incremental and len(cache) == 0


def test_no_session_when_cache_disabled():
    cache = FetchSessionCache(max_sessions=0, clock=lambda: 0)
    ctx = cache.new_context(0, INITIAL_EPOCH, [cp(0)], [])
    assert ctx.session_id == 0


# ---------------------------------------------------------------- bytes (issue #15)
def test_cache_is_bounded_in_bytes_not_only_slots():
    clock = Clock()
    budget = session_bytes(10)
    cache = FetchSessionCache(max_sessions=1000, clock=clock, max_bytes=budget)
    assert new_session(cache, n=11) == 0                 # larger than the whole budget
    a = new_session(cache, n=6)
    assert a != 0 and cache.bytes == session_bytes(6)
    assert new_session(cache, n=6) == 0                  # would not fit; a is young
    assert cache.bytes <= budget and len(cache) == 1
    cache.new_context(a, FINAL_EPOCH, [], [])            # closing returns the bytes
    assert cache.bytes == 0 and len(cache) == 0


def test_new_session_evicts_as_many_less_valuable_sessions_as_it_needs():
    clock = Clock()
    cache = FetchSessionCache(clock=clock, max_bytes=session_bytes(4) * 3)
    small = [new_session(cache, n=4) for _ in range(3)]
    assert all(small) and len(cache) == 3
    clock.now += EVICTION_MS + 1
    for sid in small:                                   # old now, none stale
        cache.new_context(sid, 1, [], [])
    big = new_session(cache, n=9)
    assert big != 0 and cache.evictions >= 2 and cache.bytes <= cache.max_bytes
    assert cache.new_context(big, 1, [], []).error_code == 0


def test_incremental_growth_past_the_budget_closes_the_session():
    clock = Clock()
    cache = FetchSessionCache(clock=clock, max_bytes=session_bytes(5))
    sid = cache.new_context(0, INITIAL_EPOCH, [cp(0), cp(1)], []).session_id
    ctx = cache.new_context(sid, 1, [cp(p) for p in range(2, 5)], [])
    assert ctx.incremental and ctx.session_id == sid and cache.bytes == session_bytes(5)
    ctx = cache.new_context(sid, 2, [cp(9)], [])          # 6 partitions do not fit
    assert not ctx.incremental and ctx.session_id == 0
    assert sorted(c.partition for c in ctx.partitions) == [0, 1, 2, 3, 4, 9]
    assert len(cache) == 0 and cache.bytes == 0
    assert cache.new_context(sid, 3, [], []).error_code == 70


def test_a_session_moves_with_its_connection_at_its_epoch():
    """workers/handoff.py: `take` forgets it on the front; `adopt` keeps it on the owner
    under its id, where the next incremental fetch goes on at the epoch it expects."""
    import pickle
    front, owner = FetchSessionCache(clock=lambda: 0), FetchSessionCache(clock=lambda: 5)
    sid = front.new_context(0, INITIAL_EPOCH, [cp(0), cp(1)], []).session_id
    assert front.new_context(sid, 1, [cp(1, offset=7)], []).error_code == 0
    moved = pickle.loads(pickle.dumps(front.sessions[sid]))     # as the mesh carries it
    front.take(sid)
    assert len(front) == 0 and front.bytes == 0
    assert front.new_context(sid, 2, [], []).error_code == 70  # FETCH_SESSION_ID_NOT_FOUND
    assert owner.adopt(moved)
    assert owner.bytes == session_bytes(2) and moved.last_used_ms == 5
    assert owner.new_context(sid, 1, [], []).error_code == 71  # its epoch is 2 by now
    ctx = owner.new_context(sid, 2, [], [])
    assert ctx.incremental and ctx.error_code == 0
    assert {(c.partition, c.fetch_offset) for c in ctx.partitions} == {(0, 0), (1, 7)}


def test_a_moved_session_is_not_kept_when_its_id_is_taken_or_there_is_no_room():
    """Not kept, as a new session would not be: the client starts a new one."""
    clock = Clock()
    front = FetchSessionCache(clock=clock)
    sid = new_session(front, 2)
    moved = front.sessions[sid]
    taken = FetchSessionCache(clock=clock)
    taken.sessions[sid] = moved                         # (an id both caches gave out)
    assert not taken.adopt(moved)
    assert not FetchSessionCache(max_sessions=0, clock=clock).adopt(moved)
    full = FetchSessionCache(max_sessions=1, clock=clock)
    new_session(full, 5)                                # young and bigger: not evicted
    assert not full.adopt(moved) and len(full) == 1
    assert not FetchSessionCache(clock=clock, max_bytes=session_bytes(1)).adopt(moved)
    clock.now += EVICTION_MS + 1                        # stale now: it goes for the newcomer
    assert full.adopt(moved) and list(full.sessions) == [sid]


def test_each_worker_gives_out_its_own_session_ids():
    """A session handed to another worker never meets one of its id there."""
    from workers.fetch_session import ID_STRIDE
    caches = [FetchSessionCache(clock=lambda: 0, id_offset=w) for w in range(3)]
    ids = [{new_session(c) for _ in range(200)} for c in caches]
    for w, got in enumerate(ids):
        assert len(got) == 200 and all(0 < i < 2**31 and i % ID_STRIDE == w for i in got)
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2])
