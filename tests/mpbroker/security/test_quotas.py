"""mpbroker/security/quotas.py: entities, validation, Kafka's resolution order, the
sampled rate and the throttle time, on a fake clock."""
import pytest

from mpbroker.security import quotas as q

U, C = q.USER, q.CLIENT_ID


def test_entity_keys_are_sorted_pairs_and_bad_ones_refused():
    assert q.entity_key([(U, "alice"), (C, "app")]) == ((C, "app"), (U, "alice"))
    assert q.entity_key([(C, None)]) == ((C, None),)
    for bad in ([], [("ip", "1.2.3.4")], [(U, "a"), (U, "b")], [(U, "")]):
        with pytest.raises(q.QuotaError):
            q.entity_key(bad)


def test_zookeeper_paths_round_trip_with_default_names():
    cases = {((U, "alice"),): "users/alice", ((C, None),): "clients/<default>",
             ((C, "app"), (U, None)): "users/<default>/clients/app"}
    for key, path in cases.items():
        assert q.zk_path(key) == path
        assert q.from_zk_path("/config/" + path) == key
    with pytest.raises(q.QuotaError):
        q.from_zk_path("/config/topics/t")
    odd = ((U, "CN=a b,O=*"),)                 # Kafka's Sanitizer: URL-encoded, %20, %2A
    assert q.zk_path(odd) == "users/CN%3Da%20b%2CO%3D%2A"
    assert q.from_zk_path(q.zk_path(odd)) == odd


def test_alter_validates_before_changing_anything():
    key = q.entity_key([(C, "app")])
    s = q.alter({}, key, [(q.PRODUCER_BYTE_RATE, 1024, False), (q.REQUEST_PERCENTAGE, 12.5, False)])
    assert s == {key: {q.PRODUCER_BYTE_RATE: 1024.0, q.REQUEST_PERCENTAGE: 12.5}}
    for ops in ([("bogus", 1, False)], [(q.PRODUCER_BYTE_RATE, 1.5, False)],
                [(q.CONSUMER_BYTE_RATE, -1, False)], [(q.CONSUMER_BYTE_RATE, float("nan"), False)],
                [(q.PRODUCER_BYTE_RATE, 5, False), (q.PRODUCER_BYTE_RATE, 6, False)],
                [(q.PRODUCER_BYTE_RATE, 0, True), ("bogus", 0, True)]):
        with pytest.raises(q.QuotaError):
            q.alter(s, key, ops)
    s2 = q.alter(s, key, [(q.PRODUCER_BYTE_RATE, 0, True)])
    assert s2 == {key: {q.REQUEST_PERCENTAGE: 12.5}}
    assert q.alter(s2, key, [(q.REQUEST_PERCENTAGE, 0, True)]) == {}     # entity dropped
    assert s[key][q.PRODUCER_BYTE_RATE] == 1024.0                        # not mutated


def test_resolution_follows_kafkas_eight_levels():
    k = q.PRODUCER_BYTE_RATE
    levels = [
        ([(U, "alice"), (C, "app")], 1, ("alice", "app")),
        ([(U, "alice"), (C, None)], 2, ("alice", "app")),
        ([(U, "alice")], 3, ("alice", "")),
        ([(U, None), (C, "app")], 4, ("alice", "app")),
        ([(U, None), (C, None)], 5, ("alice", "app")),
        ([(U, None)], 6, ("alice", "")),
        ([(C, "app")], 7, ("", "app")),
        ([(C, None)], 8, ("", "app")),
    ]
    stored = {q.entity_key(pairs): {k: float(v)} for pairs, v, _ in levels}
    for pairs, v, metric in levels:
        assert q.resolve(stored, "alice", "app", k) == (float(v), metric)
        del stored[q.entity_key(pairs)]
    assert q.resolve(stored, "alice", "app", k) == (None, ("", ""))


def test_resolution_is_per_key():
    stored = {q.entity_key([(U, "alice")]): {q.CONSUMER_BYTE_RATE: 5.0},
              q.entity_key([(C, "app")]): {q.PRODUCER_BYTE_RATE: 7.0}}
    assert q.resolve(stored, "alice", "app", q.PRODUCER_BYTE_RATE) == (7.0, ("", "app"))
    assert q.resolve(stored, "alice", "app", q.CONSUMER_BYTE_RATE) == (5.0, ("alice", ""))
    assert q.resolve(stored, "bob", "other", q.CONSUMER_BYTE_RATE)[0] is None


def test_describe_filters_as_kafka():
    stored = {q.entity_key([(U, "alice")]): {q.CONSUMER_BYTE_RATE: 5.0},
              q.entity_key([(U, None)]): {q.CONSUMER_BYTE_RATE: 1.0},
              q.entity_key([(U, "alice"), (C, "app")]): {q.PRODUCER_BYTE_RATE: 7.0},
              q.entity_key([(C, "app")]): {q.PRODUCER_BYTE_RATE: 3.0}}
    keys = lambda comps, strict: [k for k, _ in q.describe(stored, comps, strict)]   # noqa: E731
    assert keys([(U, q.MATCH_EXACT, "alice")], True) == [((U, "alice"),)]
    assert keys([(U, q.MATCH_EXACT, "alice")], False) == [((C, "app"), (U, "alice")), ((U, "alice"),)]
    assert keys([(U, q.MATCH_DEFAULT, None)], True) == [((U, None),)]
    assert keys([(U, q.MATCH_SPECIFIED, None)], False) == [((C, "app"), (U, "alice")), ((U, "alice"),)]
    assert len(keys([], False)) == 4 and keys([], True) == []
    for bad in ([("ip", 0, "x")], [(U, 0, None)], [(U, 1, None), (U, 2, None)]):
        with pytest.raises(q.QuotaError):
            q.describe(stored, bad, False)


def test_rate_counts_at_least_num_minus_one_windows():
    r = q.Rate(11, 1000, now_ms=0)
    r.record(10000, 0)
    # one burst at t=0 is measured over 10 windows (Kafka's Rate.windowSize), not 0 ms
    assert r.window_size(0) == 10000
    assert r.measure(0) == pytest.approx(1000.0)
    r.record(10000, 5500)
    assert r.measure(5500) == pytest.approx(20000 / 10.5)


def test_old_samples_expire_after_the_quota_window():
    r = q.Rate(3, 1000, now_ms=0)
    r.record(3000, 0)
    assert r.measure(0) == pytest.approx(1500.0)
    r.record(0, 1000)
    r.record(0, 2000)
    assert r.measure(2500) == pytest.approx(3000 / 2.5)
    assert r.measure(3500) == 0.0          # the first sample is older than 3 windows
    assert r.measure(60000) == 0.0


def test_throttle_time_brings_the_rate_back_to_the_quota():
    s = q.Sensors(num=11, window_s=1)
    metric = ("", "app")
    assert s.record(metric, 500, quota=100.0, now_ms=0) == 0          # 500 / 10 s = 50/s
    ms = s.record(metric, 1500, quota=100.0, now_ms=0)                # 2000 / 10 s = 200/s
    assert ms == 10000                                                # (200-100)/100 * 10 s
    assert s.record(metric, 100000, quota=100.0, now_ms=0) == s.max_throttle_ms == 11000
    # a rate measured over more elapsed time: the same bytes weigh less
    before = s.rates[metric].measure(0)
    assert s.rates[metric].measure(10500) == pytest.approx(before * 10 / 10.5)


def test_sensors_expire_idle_rates_when_the_table_grows(monkeypatch):
    monkeypatch.setattr(q.Sensors, "SWEEP_AT", 3)
    s = q.Sensors(num=2, window_s=1)
    for i in range(3):
        s.record(("", str(i)), 1, 1e9, now_ms=0)
    s.record(("", "new"), 1, 1e9, now_ms=10000)
    assert list(s.rates) == [("", "new")]


def test_user_name_of_a_principal():
    assert q.user_name("User:alice") == "alice"
    assert q.user_name("User:CN=a,O=b") == "CN=a,O=b"
    assert q.user_name("ANONYMOUS") == "ANONYMOUS"
