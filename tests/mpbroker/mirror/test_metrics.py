"""The mirror's Prometheus collector reads what the flow threads keep."""
from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from mpbroker.mirror.metrics import MirrorCollector


def test_families_per_flow_and_topic():
    task = SimpleNamespace(
        flow=SimpleNamespace(name="A->B"), sink=SimpleNamespace(counters=SimpleNamespace(totals={"t": 5})),
        lag={"t": 3}, assigned=[0, 1], held={("t", 1)},
        topics=SimpleNamespace(remote=lambda topic: f"A.{topic}"))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MirrorCollector([task]))
    text = generate_latest(registry).decode()
    for line in ('mpbroker_mirror_records_total{flow="A->B",remote_topic="A.t",topic="t"} 5.0',
                 'mpbroker_mirror_lag_records{flow="A->B",topic="t"} 3.0',
                 'mpbroker_mirror_assigned_partitions{flow="A->B"} 2.0',
                 'mpbroker_mirror_held_partitions{flow="A->B"} 1.0'):
        assert line in text, text
