"""PlacementManager's own parts (mpbroker/controller/placement.py) without workers: the
request rates summed over the fronts, the balancer's input (pins, cooldown), the
decision's report, the history file (append, bounded, a torn line skipped) and the
balancer settings read from the config."""
from __future__ import annotations

import asyncio
import json
import time

from mpbroker import config as configmod
from mpbroker.controller import placement


def _manager(tmp_path, **extra):
    props = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
             "log.dirs": str(tmp_path / "data"), "num.workers": "2", **extra}
    cfg = configmod.BrokerConfig(props)

    async def make():
        return placement.PlacementManager(cfg, service=None, num_workers=2)
    return asyncio.run(make())


def test_request_rates_are_summed_over_the_fronts_and_skip_respawned_workers():
    a = {0: {"pid": 10, "time": 100.0, "partition_requests": [["t", 0, 5], ["t", 1, 1]]},
         1: {"pid": 11, "time": 100.0, "partition_requests": [["t", 0, 2]]},
         2: {"pid": 12, "time": 100.0, "partition_requests": [["t", 0, 50]]}}
    b = {0: {"pid": 10, "time": 102.0, "partition_requests": [["t", 0, 25], ["t", 1, 1],
                                                               ["u", 0, 4]]},
         1: {"pid": 11, "time": 102.0, "partition_requests": [["t", 0, 12]]},
         2: {"pid": 99, "time": 102.0, "partition_requests": [["t", 0, 1]]}}
    assert placement._partition_request_rates(a, b) == {("t", 0): 15.0, ("u", 0): 2.0}


def _sample(parts):
    """A `sample()` result: {worker: [(topic, partition, bytes/s, requests/s)]}."""
    return {"workers": [
        {"worker": w, "cpu_s_per_s": 0.0, "partitions": [
            {"topic": t, "partition": p, "bytes_in_per_s": b, "bytes_out_per_s": 0.0,
             "requests_per_s": r} for t, p, b, r in ps]} for w, ps in parts.items()]}


def test_balance_input_freezes_pins_and_recent_moves(tmp_path):
    m = _manager(tmp_path, **{"placement.pinned": "0", "placement.balance.cooldown.ms": "60000"})
    s = _sample({0: [("pinned", 0, 100.0, 1.0), ("hot", 0, 100.0, 1.0), ("hot", 1, 100.0, 1.0)],
                 1: [("cold", 0, 0.0, 0.0)]})
    m.last_moved[("hot", 1)] = time.monotonic()
    smp, frozen = m._balance_input(s, include_pinned=False)
    assert frozen == {("pinned", 0), ("hot", 1)}
    out = m._decide(smp, frozen, 0.2, 64)
    assert out["moves"] == [{"topic": "hot", "partition": 0, "from": 0, "to": 1}]
    assert out["imbalance_before"] == 1.0 and out["imbalance_after_estimate"] < 0.5
    _, frozen_all = m._balance_input(s, include_pinned=True)
    assert frozen_all == {("hot", 1)}


def test_settings_from_the_config_and_not_pins(tmp_path):
    m = _manager(tmp_path, **{"placement.balance.threshold": "0.35",
                              "placement.balance.interval.ms": "60000"})
    assert (m.threshold, m.interval_s, m.cooldown_s) == (0.35, 60.0, 300.0)
    assert m.table.config == {}


def test_history_is_appended_bounded_and_survives_a_torn_line(tmp_path, monkeypatch):
    m = _manager(tmp_path)
    assert m.history() == []
    monkeypatch.setattr(placement, "HISTORY_KEEP", 3)
    for i in range(7):
        m.record([{"time_ms": i, "topic": "t", "partition": i, "from": 0, "to": 1,
                   "reason": "balance"}])
    got = [e["partition"] for e in m.history(limit=0)]
    assert got == [4, 5, 6]          # over 2 x HISTORY_KEEP lines: the newest 3 kept
    with open(m.history_path, "a") as f:
        f.write('{"time_ms": 9, "topic": "t", "parti')           # a crash mid-line
    assert [e["partition"] for e in m.history(limit=2)] == [6]
    assert json.loads(open(m.history_path).readline())["topic"] == "t"
