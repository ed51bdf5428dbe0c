"""`mpbroker mirror --status` rendering (the numbers come from the clusters; the
integration test checks them against a running mirror)."""
from __future__ import annotations

from mpbroker.mirror.status import render


def test_render_flows_topics_and_unreachable_ones():
    out = render([
        {"flow": "A->B", "group": "mm2-A->B", "state": "STABLE", "members": 2,
         "exactly_once": True, "topics": {
             "orders": {"remote": "A.orders", "partitions": 6, "lag": 5, "end": 100},
             "pay": {"remote": "A.pay", "partitions": 1, "lag": 0, "end": 7}}},
        {"flow": "B->A", "error": "Local: Broker transport failure"},
    ])
    assert out.splitlines() == [
        "A->B: group mm2-A->B STABLE, 2 members, exactly-once, 2 topics, lag 5",
        "  orders -> A.orders: 6 partitions, end 100, lag 5",
        "  pay -> A.pay: 1 partitions, end 7, lag 0",
        "B->A: unreachable: Local: Broker transport failure",
    ]
