"""Tests for mpbroker.metadata.quota: KIP-599 token buckets with an injected clock."""
from mpbroker.metadata.quota import UNLIMITED, MutationQuotas, MutationResults


class Clock:
    def __init__(self, now=1_000_000):
        self.now = now

    def __call__(self):
        return self.now


def test_unlimited_admits_everything_and_keeps_no_state():
    q = MutationQuotas(clock=Clock())
    quota = q.quota("c", strict=True)
    assert not quota.enabled
    assert all(quota.try_record(1_000_000) for _ in range(5))
    assert quota.throttle_time_ms() == 0 and q.buckets == {}


def test_strict_admits_while_tokens_are_not_negative_then_refuses():
    clock = Clock()
    q = MutationQuotas(rate=2.0, window_num=11, window_size_s=1, clock=clock)
    assert q.burst == 22
    quota = q.quota("c", strict=True)
    assert quota.try_record(20)          # 22 -> 2
    assert quota.throttle_time_ms() == 0
    assert quota.try_record(10)          # admitted at 2 >= 0, goes to -8 (a topic is never split)
    assert q.tokens("c") == -8
    assert quota.throttle_time_ms() == 0  # strict: nothing refused yet
    assert not quota.try_record(1)       # refused, nothing counted
    assert q.tokens("c") == -8
    assert quota.throttle_time_ms() == 4000   # 8 tokens at 2/s
    clock.now += 1000                    # refill: -8 + 2
    assert quota.throttle_time_ms() == 3000
    clock.now += 3000
    assert q.tokens("c") == 0
    assert q.quota("c", strict=True).try_record(1)   # back to >= 0: admitted


def test_permissive_counts_everything_and_reports_the_debt():
    clock = Clock()
    q = MutationQuotas(rate=10.0, window_num=1, window_size_s=1, clock=clock)
    quota = q.quota("old", strict=False)
    assert quota.try_record(5) and quota.throttle_time_ms() == 0
    assert quota.try_record(25)          # 10 -> 5 -> -20
    assert quota.try_record(5)
    assert quota.throttle_time_ms() == 2500


def test_buckets_are_per_client_and_refill_up_to_the_burst():
    clock = Clock()
    q = MutationQuotas(rate=1.0, window_num=2, window_size_s=1, clock=clock)
    assert q.quota("a", True).try_record(3)
    assert not q.quota("a", True).try_record(1)
    assert q.quota("b", True).try_record(1)        # another client id: its own bucket
    clock.now += 3_600_000
    assert q.tokens("a") == 2                      # capped at the burst


def test_rate_changes_apply_and_unlimited_forgets_buckets():
    clock = Clock()
    q = MutationQuotas(rate=100.0, window_num=1, window_size_s=1, clock=clock)
    q.quota("a", True).try_record(50)
    q.configure(10.0)                              # lower rate: tokens clamp to the new burst
    assert q.tokens("a") == 10
    q.configure(UNLIMITED)
    assert q.buckets == {} and q.quota("a", True).try_record(10**9)


def test_full_buckets_are_swept_so_memory_stays_bounded():
    clock = Clock()
    q = MutationQuotas(rate=1.0, window_num=1, window_size_s=1, clock=clock)
    for i in range(5000):
        q.quota(f"client-{i}", True).try_record(1)
        clock.now += 10
    assert len(q.buckets) < 2000


def test_no_client_is_not_counted():
    q = MutationQuotas(rate=1.0, clock=Clock())
    quota = q.quota(None, strict=True)
    assert quota.try_record(10**6) and q.buckets == {}


def test_results_keep_the_throttle_time_through_pickle():
    import pickle
    r = MutationResults([{"name": "t"}])
    r.throttle_time_ms = 1234
    back = pickle.loads(pickle.dumps(r))
    assert back == [{"name": "t"}] and back.throttle_time_ms == 1234
