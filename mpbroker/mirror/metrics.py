"""Prometheus metrics of an `mpbroker mirror` process (`--metrics-listener
http://HOST:PORT`; with --workers N, worker i serves on PORT + i, PORT 0 picks free
ports, and each process logs its address).

    mpbroker_mirror_records_total{flow, topic, remote_topic}   counter: records written
        to the target since the process started (at-least-once: including re-mirrored)
    mpbroker_mirror_lag_records{flow, topic}                  gauge: records behind the
        source's high watermark over this process's partitions, refreshed every second
    mpbroker_mirror_assigned_partitions{flow}                 gauge
    mpbroker_mirror_held_partitions{flow}                     gauge: assigned, but the
        target could not be made ready yet

Collected on the HTTP thread from values the flow threads keep (dict reads, no client
call), so a scrape never waits for a cluster.
"""
from __future__ import annotations

import logging
from typing import List

from mpbroker.mirror.task import FlowTask

log = logging.getLogger("mpbroker.mirror.metrics")


class MirrorCollector:
    def __init__(self, tasks: List[FlowTask]):
        self.tasks = tasks

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        records = CounterMetricFamily("mpbroker_mirror_records", "Records written to the target",
                                      labels=["flow", "topic", "remote_topic"])
        lag = GaugeMetricFamily("mpbroker_mirror_lag_records",
                                "Records behind the source's high watermark",
                                labels=["flow", "topic"])
        assigned = GaugeMetricFamily("mpbroker_mirror_assigned_partitions",
                                     "Source partitions assigned to this process", labels=["flow"])
        held = GaugeMetricFamily("mpbroker_mirror_held_partitions",
                                 "Assigned partitions waiting for their target", labels=["flow"])
        for t in self.tasks:
            name = t.flow.name
            for topic, n in list(t.sink.counters.totals.items()):
                records.add_metric([name, topic, t.topics.remote(topic)], n)
            for topic, n in list(t.lag.items()):
                lag.add_metric([name, topic], n)
            assigned.add_metric([name], len(t.assigned))
            held.add_metric([name], len(t.held))
        return [records, lag, assigned, held]


def serve(tasks: List[FlowTask], host: str, port: int):
    """Start the endpoint on its own thread; returns the HTTP server. Raises OSError
    when the address cannot be bound."""
    from prometheus_client import CollectorRegistry, start_http_server
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MirrorCollector(tasks))
    httpd, _ = start_http_server(port, addr=host, registry=registry)
    log.info("metrics served at http://%s:%d/metrics", host, httpd.server_address[1])
    return httpd
