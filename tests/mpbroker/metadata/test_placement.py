"""The placement map (mpbroker/metadata/placement.py): default spread, config overrides, run-time
assignments, revisions, persistence format, reconcile on a new worker count (the balancing decision: tests/mpbroker/controller/test_balance.py)."""
from __future__ import annotations

import collections

from mpbroker.metadata.placement import (IN_TRANSIT, PlacementTable, default_owner, parse_config,
                               stable_hash)


def test_default_spreads_each_topic_over_all_workers():
    t = PlacementTable(1, 4)
    owners = [t.owner("orders", p) for p in range(8)]
    assert collections.Counter(owners) == {0: 2, 1: 2, 2: 2, 3: 2}
    # consecutive partitions on consecutive workers, starting at the topic's hash
    assert owners[0] == stable_hash("orders") % 4
    assert all((owners[i] + 1) % 4 == owners[i + 1] for i in range(7))
    offsets = collections.Counter(t.owner("__consumer_offsets", p) for p in range(50))
    assert set(offsets) == {0, 1, 2, 3} and max(offsets.values()) - min(offsets.values()) <= 1


def test_stable_hash_is_stable_across_processes():
    import zlib
    assert stable_hash("orders") == zlib.crc32(b"orders")
    assert default_owner("x", 3, 1) == 0


def test_config_overrides_partition_then_topic():
    cfg = parse_config({"orders": "1", "orders-3": "2", "bad": "x", "neg": "-1"})
    assert cfg == {"orders": 1, "orders-3": 2}
    t = PlacementTable(1, 4, cfg)
    assert [t.owner("orders", p) for p in range(5)] == [1, 1, 1, 2, 1]
    assert t.owner("other", 0) == default_owner("other", 0, 4)
    # a worker beyond the count wraps around
    assert PlacementTable(1, 2, {"orders": 3}).owner("orders", 0) == 1


def test_assignments_win_and_in_transit():
    t = PlacementTable(1, 2, {"orders": 1})
    t2 = t.assign({("orders", 0): 0, ("orders", 1): IN_TRANSIT})
    assert t2.revision == 2 and t.revision == 1
    assert t2.owner("orders", 0) == 0 and t2.owner("orders", 1) == IN_TRANSIT
    assert t2.owner("orders", 2) == 1
    assert t2.newer_than(t) and not t.newer_than(t2) and t.newer_than(None)
    assert t2.owned_by(1, [("orders", i) for i in range(3)]) == [("orders", 2)]


def test_json_round_trip():
    t = PlacementTable(7, 3, {"a": 1}, {("b", 2): 0, ("c-1", 0): 2})
    assert PlacementTable.from_json(t.to_json()) == t


def test_reconcile_keeps_moves_for_same_worker_count_only():
    t = PlacementTable(5, 2, {"a": 1}, {("b", 0): 1, ("b", 1): IN_TRANSIT})
    same = t.reconcile(2, {"z": 0})
    assert same.revision == 6 and same.config == {"z": 0}
    assert same.assignments == {("b", 0): 1}          # in-transit marks dropped
    more = t.reconcile(4, {})
    assert more.num_workers == 4 and more.assignments == {}
    assert more.owner("b", 0) == default_owner("b", 0, 4)


def test_partition_and_topic_pins():
    # a partition-level pin counts too
    t2 = PlacementTable(1, 2, {"free-0": 1}, {("free", 1): 1, ("free", 2): 0})
    assert t2.pinned("free", 0) == 1 and t2.pinned("free", 1) is None
    assert PlacementTable(1, 2, {"x": 3}).pinned("x", 5) == 1      # wraps around


def test_reconcile_lets_config_pins_win_over_old_moves():
    t = PlacementTable(4, 2, {}, {("orders", 0): 0, ("other", 0): 1})
    again = t.reconcile(2, {"orders": 1})     # a pin added to the config before a restart
    assert again.owner("orders", 0) == 1 and again.assignments == {("other", 0): 1}


def test_balancer_settings_are_not_pins():
    assert parse_config({"balance.threshold": "0.3", "balance.interval.ms": "60000",
                         "orders": "1"}) == {"orders": 1}
