"""mpbroker/metrics_server.py: merging worker snapshots (sums, per-worker series, counters
that survive a respawn, lag joined from another worker's log), the controller's gauges,
and the real HTTP endpoint rendered by prometheus_client."""
from __future__ import annotations

import asyncio
import threading
import urllib.request
from types import SimpleNamespace

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mpbroker import metrics_server as ms
from mpbroker.metadata.model import ClusterMetadata, PartitionState, Topic
from mpbroker.protocol import api_keys

TB = (1, 10)
LB = (0.01, 0.1)


def snap(worker, pid, *, produce=(0, 0, 0), topics=None, logs=None, committed=None,
         cpu=1.0, created=0, lag=(0, 0, 0), conns=0, urp=0, forwarded=0, file_reads=0,
         handed=0, taken=0):
    return {"worker": worker, "pid": pid, "time_buckets": TB, "lag_buckets": LB,
            "cpu_s": cpu, "requests": {api_keys.PRODUCE: ((list(produce), 5.0),
                                                          ([sum(produce), 0, 0], 0.5))},
            "loop_lag": (list(lag), 0.001), "connections": conns,
            "connections_created": created, "forwarded_parts": forwarded,
            "peer_file_reads": file_reads, "handed_over": handed, "taken_over": taken,
            "topics": topics or {}, "logs": logs or {},
            "leaders": 1, "partitions": 1, "under_replicated": urp, "isr_shrinks": 0,
            "isr_expands": 0, "purgatory": {"Produce": 1, "Fetch": 2, "DeleteRecords": 0},
            "committed": committed or {}}


def render(fams) -> dict:
    class Reg:
        def collect(self):
            return fams
    out = {}
    for fam in text_string_to_metric_families(generate_latest(Reg()).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_sums_over_workers_and_keeps_per_worker_series():
    agg = ms.Aggregator()
    m = render(agg.families({
        0: snap(0, 100, produce=(1, 2, 0), topics={"t": [100, 10, 40]}, cpu=2.0, created=3,
                conns=2, urp=1),
        1: snap(1, 101, produce=(0, 1, 1), topics={"t": [50, 5, 0], "u": [7, 1, 0]}, cpu=3.0,
                forwarded=9, file_reads=4, handed=2, taken=1),
    }, {"active_controller": 1, "offline_partitions": 0}))
    assert m[("kafka_network_requestmetrics_requests_total", (("request", "Produce"),))] == 5
    assert m[("kafka_network_requestmetrics_totaltimems_bucket",
              (("le", "1.0"), ("request", "Produce")))] == 1
    assert m[("kafka_network_requestmetrics_totaltimems_bucket",
              (("le", "10.0"), ("request", "Produce")))] == 4
    assert m[("kafka_network_requestmetrics_totaltimems_bucket",
              (("le", "+Inf"), ("request", "Produce")))] == 5
    assert m[("kafka_network_requestmetrics_totaltimems_sum", (("request", "Produce"),))] == 10.0
    assert m[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "t"),))] == 150
    assert m[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "u"),))] == 1
    assert m[("kafka_server_brokertopicmetrics_bytesout_total", (("topic", "t"),))] == 40
    assert m[("mpbroker_worker_cpu_seconds_total", (("worker", "1"),))] == 3.0
    assert m[("mpbroker_worker_forwarded_parts_total", (("worker", "1"),))] == 9
    assert m[("mpbroker_worker_peer_file_reads_total", (("worker", "1"),))] == 4
    assert m[("mpbroker_worker_peer_file_reads_total", (("worker", "0"),))] == 0
    assert m[("mpbroker_worker_connections_handed_over_total", (("worker", "1"),))] == 2
    assert m[("mpbroker_worker_connections_taken_over_total", (("worker", "1"),))] == 1
    assert m[("mpbroker_worker_connections_taken_over_total", (("worker", "0"),))] == 0
    assert m[("kafka_server_socket_server_metrics_connection_count",
              (("listener", "PLAINTEXT"), ("worker", "0")))] == 2
    assert m[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 1
    assert m[("kafka_server_delayedoperationpurgatory_purgatorysize",
              (("delayedoperation", "Fetch"),))] == 4
    assert m[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert m[("mpbroker_workers_answering", ())] == 2


def test_counters_survive_a_respawn_and_a_silent_worker():
    agg = ms.Aggregator()
    ctl = {"active_controller": 1, "offline_partitions": 0}
    agg.families({0: snap(0, 100, produce=(3, 0, 0), topics={"t": [100, 10, 0]})}, ctl)
    # worker 0 respawned (new pid): its new counters add to the old process's
    m = render(agg.families({0: snap(0, 200, produce=(1, 0, 0), topics={"t": [5, 1, 0]})}, ctl))
    assert m[("kafka_network_requestmetrics_requests_total", (("request", "Produce"),))] == 4
    assert m[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "t"),))] == 105
    # worker 0 does not answer this scrape: its counters stay, its gauges are left out
    m = render(agg.families({}, ctl))
    assert m[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "t"),))] == 11
    assert ("kafka_server_socket_server_metrics_connection_count",
            (("listener", "PLAINTEXT"), ("worker", "0"))) not in m
    assert m[("mpbroker_workers_answering", ())] == 0


def test_group_lag_joins_the_coordinators_offsets_with_the_owners_log():
    agg = ms.Aggregator()
    m = render(agg.families({
        0: snap(0, 1, committed={("g", "t", 0): 4, ("g", "other", 0): 1}),
        1: snap(1, 2, logs={("t", 0): (1234, 0, 10, 9)}),
    }, {}))
    assert m[("kafka_consumergroup_lag",
              (("consumergroup", "g"), ("partition", "0"), ("topic", "t")))] == 5
    assert m[("kafka_consumergroup_current_offset",
              (("consumergroup", "g"), ("partition", "0"), ("topic", "t")))] == 4
    assert m[("kafka_log_log_size", (("partition", "0"), ("topic", "t")))] == 1234
    assert m[("kafka_log_log_logendoffset", (("partition", "0"), ("topic", "t")))] == 10
    # a partition hosted by no answering worker: its offset, no lag
    assert ("kafka_consumergroup_lag",
            (("consumergroup", "g"), ("partition", "0"), ("topic", "other"))) not in m


def _md(controller_id, leaders):
    parts = {i: PartitionState(i, leader, 0, (1,), (1,) if leader >= 0 else ())
             for i, leader in enumerate(leaders)}
    return ClusterMetadata("c", controller_id, {}, {"t": Topic("t", b"\0" * 16, parts)}, 1)


def test_controller_view():
    embedded = SimpleNamespace(active=True, metadata=lambda: _md(1, [1, -1, 1]))
    assert ms.controller_view(embedded) == {"active_controller": 1, "offline_partitions": 1}
    standby = SimpleNamespace(active=False, metadata=lambda: _md(2, [-1]))
    assert ms.controller_view(standby) == {"active_controller": 0, "offline_partitions": 0}


def test_endpoint_serves_scrapes_answered_on_the_loop():
    """The real HTTP server: a scrape (HTTP thread) asks on the event loop's thread."""
    loop = asyncio.new_event_loop()
    asked = []

    async def ask(what, timeout):
        asked.append((what, threading.current_thread() is loop_thread))
        return {0: snap(0, 1, produce=(1, 0, 0))}

    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    ctl = SimpleNamespace(active=True, metadata=lambda: _md(1, [1]))
    server = ms.MetricsServer("127.0.0.1", 0, loop, ask, ctl)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as r:
            text = r.read().decode()
    finally:
        server.close()
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(10)
        loop.close()
    assert 'kafka_network_requestmetrics_requests_total{request="Produce"} 1.0' in text
    assert asked == [("metrics", True)]


def test_dashboard_uses_only_metric_names_the_endpoint_serves():
    import json
    import re
    from pathlib import Path
    dash = json.loads((Path(__file__).resolve().parents[2] / "conf" /
                       "grafana-dashboard.json").read_text())
    used = set()
    for panel in dash["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"\b((?:kafka|mpbroker)_[a-z_]+)", target["expr"]))
    for var in dash["templating"]["list"]:
        used |= set(re.findall(r"\b((?:kafka|mpbroker)_[a-z_]+)", str(var.get("definition", ""))))
    served = render(ms.Aggregator().families({0: snap(
        0, 1, produce=(1, 0, 0), topics={"t": [1, 1, 1]}, logs={("t", 0): (1, 0, 1, 1)},
        committed={("g", "t", 0): 0})}, {"active_controller": 1, "offline_partitions": 0}))
    names = {name for name, _ in served}
    assert used and used <= names, used - names
