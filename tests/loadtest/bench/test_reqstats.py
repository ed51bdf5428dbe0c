"""loadtest/bench/reqstats.py: request counts from librdkafka statistics documents, counted
in a window (rate between the snapshots inside it, else interpolation at its edges), and
broker CPU per request. Made-up documents and snapshots; no client, no broker."""

from __future__ import annotations

import time

from loadtest.bench import reqstats
from loadtest.bench.reqstats import NS, ReqStats, count_in, interpolate, value_at


def doc(ts_us: int, *brokers: dict) -> str:
    """A statistics document shaped like librdkafka's (spaces and key order as it writes
    them), with a topics section whose keys must not be taken for request counts."""
    parts = []
    for i, req in enumerate(brokers):
        body = ", ".join(f'"{k}": {v}' for k, v in {"Produce": 0, "Fetch": 0, "ListOffsets": 7, **req}.items())
        parts.append(f'"127.0.0.1:9092/{i}": {{ "name":"127.0.0.1:9092/{i}", "nodeid":{i}, "tx":99, '
                     f'"rtt": {{ "min":1, "cnt":0 }}, "req": {{ {body} }}, "toppars":{{ }} }}')
    return (f'{{ "name": "rdkafka#consumer-1", "client_id": "rdkafka", "type": "consumer", "ts":{ts_us}, '
            f'"time":1795772839, "age":1603658, "brokers":{{ {", ".join(parts)} }}, '
            f'"topics":{{ "t": {{ "topic":"t", "partitions":{{ "0": {{ "fetch_state":"active", "Fetch": 5000, '
            f'"txmsgs":3 }} }} }} }} }}')


def snaps(*points: tuple[float, int, int]) -> list:
    """(seconds, Produce, Fetch) -> snapshots at those wall-clock seconds."""
    return [(int(s * NS), {"Produce": p, "Fetch": f}) for s, p, f in points]


def test_parse_sums_the_request_counters_of_every_broker_connection():
    ts, counts = reqstats.parse(doc(123_456, {"Produce": 40, "Fetch": 6}, {"Produce": 2},
                                    {"ApiVersion": 1}))
    assert ts == 123_456
    assert counts == {"Produce": 42, "Fetch": 6}  # not the topics section's "Fetch": 5000


def test_parse_of_a_document_without_brokers():
    assert reqstats.parse('{ "name": "x", "ts":5, "brokers":{ } }') == (5, {"Produce": 0, "Fetch": 0})
    assert reqstats.parse("{}") == (None, {"Produce": 0, "Fetch": 0})


def test_on_stats_puts_the_documents_monotonic_time_onto_the_wall_clock():
    rs = ReqStats(100)
    assert rs.config() == {"statistics.interval.ms": 100, "stats_cb": rs.on_stats}
    mono_us = time.monotonic_ns() // 1000 - 250_000  # counters read 0.25 s before the callback
    before = time.time_ns()
    rs.on_stats(doc(mono_us, {"Produce": 3}))
    t, counts = rs.snaps[-1]
    assert counts == {"Produce": 3, "Fetch": 0}
    assert before - 0.35 * NS < t < before - 0.15 * NS
    rs.on_stats(doc(1, {"Fetch": 1}))  # a `ts` on some other clock: the callback's time
    assert abs(rs.snaps[-1][0] - time.time_ns()) < NS


def test_count_in_takes_the_rate_between_the_snapshots_inside_the_window():
    # 100 Produce/s inside [1, 5]; the warm-up before and a burst after (a flush) do not count
    s = snaps((0.0, 0, 0), (0.5, 500, 0), (1.5, 600, 10), (2.5, 700, 20), (4.5, 900, 40), (6.0, 5000, 40))
    assert count_in(s, 1 * NS, 5 * NS, "Produce") == 400.0
    assert count_in(s, 1 * NS, 5 * NS, "Fetch") == 40.0


def test_count_in_interpolates_at_the_edges_with_fewer_than_two_snapshots_inside():
    s = snaps((0.0, 0, 0), (2.0, 200, 0), (4.0, 600, 8))
    assert count_in(s, 1 * NS, 3 * NS, "Produce") == 400.0 - 100.0
    assert count_in(s, 1 * NS, 3 * NS, "Fetch") == 4.0
    assert count_in(s, int(2.5 * NS), int(3.5 * NS), "Produce") == 200.0  # no snapshot inside


def test_count_in_is_none_without_snapshots_past_an_edge():
    s = snaps((0.0, 0, 0), (2.0, 200, 0))
    assert count_in(s, 1 * NS, 3 * NS, "Produce") is None
    assert count_in([], 1 * NS, 3 * NS, "Produce") is None
    # snapshots out of order (assume_zero_at appends late) count the same
    assert count_in(list(reversed(snaps((0.0, 0, 0), (2.0, 200, 0), (4.0, 600, 8)))), 1 * NS, 3 * NS,
                    "Produce") == 300.0


def test_value_at_and_interpolate():
    s = snaps((1.0, 10, 0), (3.0, 30, 4))
    assert value_at(s, 2 * NS, "Produce") == 20.0
    assert value_at(s, 3 * NS, "Fetch") == 4.0  # a snapshot at exactly that time
    assert value_at(s, 4 * NS, "Fetch") is None
    assert interpolate([(5, 1.0)], 5) == 1.0
    assert interpolate([(5, 1.0)], 4) is None


def test_a_drainer_counts_from_its_start_to_its_last_record():
    rs = ReqStats(200)
    rs.snaps += snaps((0.5, 0, 0), (1.2, 0, 7), (1.4, 0, 9))
    rs.assume_zero_at(1 * NS)
    assert rs.value_at(int(1.3 * NS)) == {"Produce": 0.0, "Fetch": 8.0}


def test_settle_polls_until_a_snapshot_past_the_time_arrives():
    rs = ReqStats(100)
    polls = []

    def poll(timeout):
        polls.append(timeout)
        if len(polls) == 3:
            rs.snaps.append((10 * NS, {"Produce": 1, "Fetch": 0}))

    assert rs.settle(poll, 9 * NS) is True and len(polls) == 3
    assert rs.settle(poll, 11 * NS, timeout_s=0.01) is False
    assert rs.settle(lambda _t: None, 10 * NS) is True  # already there: no poll needed


def test_total_and_us_per():
    assert reqstats.total([{"Fetch": 2.0}, {"Fetch": 3.5}], "Fetch") == 5.5
    assert reqstats.total([{"Fetch": 2.0}, {"Fetch": None}], "Fetch") is None
    assert reqstats.total([], "Fetch") is None
    assert reqstats.us_per(0.5, 1000) == 500.0
    assert reqstats.us_per(None, 1000) is None
    assert reqstats.us_per(0.5, 0) is None
    assert reqstats.us_per(0.5, None) is None
    assert reqstats.us_per(float("nan"), 3) is None


def test_interval_gives_about_ten_snapshots_per_window_within_bounds():
    assert reqstats.interval_ms(8.0) == 800
    assert reqstats.interval_ms(0.5) == 100
    assert reqstats.interval_ms(60.0) == 1000


def test_final_counts_only_after_a_successful_settle():
    rs = ReqStats(100)
    rs.assume_zero_at(1 * NS)
    assert rs.final() == {}
    rs.snaps += snaps((3.0, 40, 0), (2.0, 30, 0))
    assert rs.settle(lambda _t: None, 3 * NS) is True
    assert rs.final() == {"Produce": 40, "Fetch": 0}
    assert rs.settle(lambda _t: None, 4 * NS, timeout_s=0.0) is False
    assert rs.final() == {}
