"""The placement map (workers/placement.py): default spread, config overrides, run-time
assignments, revisions, persistence format, reconcile on a new worker count, balance."""
from __future__ import annotations

import collections

from workers.placement import (IN_TRANSIT, PlacementTable, default_owner, parse_config,
                               plan_balance, stable_hash)


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


def test_plan_balance_moves_heavy_partitions_apart():
    t = PlacementTable(1, 2, {}, {("hot", i): 0 for i in range(4)})   # all moved to 0
    loads = {("hot", 0): 100.0, ("hot", 1): 100.0, ("hot", 2): 10.0, ("hot", 3): 10.0}
    moves = plan_balance(loads, t)
    after = collections.Counter()
    for tp, load in loads.items():
        after[moves.get(tp, t.owner(*tp))] += load
    assert after[0] == after[1] == 110.0
    assert all(w == 1 for w in moves.values())
    # already balanced: nothing to do
    balanced = PlacementTable(1, 2, {}, {("hot", 0): 0, ("hot", 1): 1, ("hot", 2): 0,
                                         ("hot", 3): 1})
    assert plan_balance(loads, balanced) == {}
    assert plan_balance(loads, PlacementTable(1, 1)) == {}


def test_plan_balance_goes_by_load_not_count():
    # 2 partitions on each worker (balanced by count), both heavy ones on worker 0
    t = PlacementTable(1, 2, {}, {("t", 0): 0, ("t", 1): 0, ("t", 2): 1, ("t", 3): 1})
    loads = {("t", 0): 500.0, ("t", 1): 480.0, ("t", 2): 5.0, ("t", 3): 0.0}
    moves = plan_balance(loads, t)
    owners = {tp: moves.get(tp, t.owner(*tp)) for tp in loads}
    assert owners[("t", 0)] != owners[("t", 1)]


def test_plan_balance_leaves_config_pins_alone():
    # "pin" pinned to worker 1 carries most of the load; "free" partition 0 is on 1 too
    t = PlacementTable(1, 2, {"pin": 1}, {("free", 0): 1, ("free", 1): 1, ("free", 2): 0})
    loads = {("pin", 0): 300.0, ("pin", 1): 300.0, ("free", 0): 200.0, ("free", 1): 150.0,
             ("free", 2): 0.0}
    moves = plan_balance(loads, t)
    assert not {tp for tp in moves if tp[0] == "pin"}
    assert moves == {("free", 0): 0, ("free", 1): 0}      # worker 1 keeps the pinned 600
    # with include_pinned they are balanced like the others
    moves_all = plan_balance(loads, t, include_pinned=True)
    assert {tp for tp in moves_all if tp[0] == "pin"}
    # a partition-level pin counts too
    t2 = PlacementTable(1, 2, {"free-0": 1}, {("free", 1): 1, ("free", 2): 0})
    assert ("free", 0) not in plan_balance({("free", 0): 500.0, ("free", 1): 400.0}, t2)
    assert t2.pinned("free", 0) == 1 and t2.pinned("free", 1) is None
    assert PlacementTable(1, 2, {"x": 3}).pinned("x", 5) == 1      # wraps around


def test_reconcile_lets_config_pins_win_over_old_moves():
    t = PlacementTable(4, 2, {}, {("orders", 0): 0, ("other", 0): 1})
    again = t.reconcile(2, {"orders": 1})     # a pin added to the config before a restart
    assert again.owner("orders", 0) == 1 and again.assignments == {("other", 0): 1}
