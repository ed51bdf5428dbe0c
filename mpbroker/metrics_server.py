"""The Prometheus endpoint: `/metrics` on `metrics.listener`, served by the controller
process, which merges the workers' snapshots (workers/metrics.py) with its own view.

Owner: the controller process. The HTTP server is prometheus_client's (a daemon thread);
a scrape asks every worker for a snapshot over the controller channels (the placement
manager's `ask_all("metrics")`) on the controller's event loop, and renders the merged
figures with prometheus_client's metric families. A worker that does not answer in time
contributes its last snapshot's counters (none of its gauges).

Names: Kafka's JMX names as the Prometheus JMX exporter's usual Kafka rules map them
(`kafka.server<type=BrokerTopicMetrics, name=BytesInPerSec, topic=t><>Count` ->
`kafka_server_brokertopicmetrics_bytesin_total{topic="t"}`: domain, type and name
lowercased, "PerSec" dropped, `_total` for meters), consumer-group lag as
kafka_exporter names it (`kafka_consumergroup_lag`), and `mpbroker_worker_*` for what
Kafka has no name for (per worker CPU and event-loop lag). Times keep Kafka's unit (ms,
`...totaltimems`), as histograms: percentiles come from `histogram_quantile`.

Counters never go backwards: each worker's counters are kept per worker id, and when a
worker's pid changes (a respawn) the previous process's last values become a base that
the new process's values are added to.

prometheus_client is imported where a server is built: the controller process imports
this module whether or not `metrics.listener` is set, and starts faster without it.
"""
from __future__ import annotations

import asyncio
import logging
import threading

from mpbroker.protocol import api_keys

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 5.0      # a worker that does not answer within this is left out



def _counters(snap: dict) -> dict:
    """The counters of a snapshot, flat: key tuple -> number."""
    out = {}
    for api, ((total, tsum), (queue, qsum)) in snap["requests"].items():
        for i, n in enumerate(total):
            out[("total", api, i)] = n
        out[("total", api, "sum")] = tsum
        for i, n in enumerate(queue):
            out[("queue", api, i)] = n
        out[("queue", api, "sum")] = qsum
    lag, lsum = snap["loop_lag"]
    for i, n in enumerate(lag):
        out[("lag", i)] = n
    out[("lag", "sum")] = lsum
    for topic, (bin_, min_, bout) in snap["topics"].items():
        out[("topic", topic, 0)] = bin_
        out[("topic", topic, 1)] = min_
        out[("topic", topic, 2)] = bout
    for k in ("cpu_s", "connections_created", "isr_shrinks", "isr_expands",
              "forwarded_parts", "peer_file_reads", "handed_over", "taken_over"):
        out[(k,)] = snap[k]
    return out


class _WorkerState:
    __slots__ = ("pid", "base", "last")

    def __init__(self):
        self.pid = None
        self.base: dict = {}
        self.last: dict = {}

    def update(self, snap: dict) -> None:
        if self.pid is not None and snap["pid"] != self.pid:
            for k, v in self.last.items():
                self.base[k] = self.base.get(k, 0) + v
        self.pid = snap["pid"]
        self.last = _counters(snap)

    def totals(self) -> dict:
        out = dict(self.base)
        for k, v in self.last.items():
            out[k] = out.get(k, 0) + v
        return out


class Aggregator:
    """Merges worker snapshots into metric families (pure: no I/O, no loop)."""

    def __init__(self, listener_name: str = "PLAINTEXT"):
        self.workers: dict[int, _WorkerState] = {}
        self.listener_name = listener_name
        self.time_bounds: tuple = ()      # the bucket bounds the snapshots carry
        self.lag_bounds: tuple = ()

    def families(self, snaps: dict[int, dict], controller: dict) -> list:
        from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                            HistogramMetricFamily)
        for wid, snap in snaps.items():
            self.workers.setdefault(wid, _WorkerState()).update(snap)
            self.time_bounds, self.lag_bounds = snap["time_buckets"], snap["lag_buckets"]
        time_bounds, lag_bounds = self.time_bounds, self.lag_bounds
        per_worker = {wid: st.totals() for wid, st in self.workers.items()}
        summed: dict = {}
        for totals in per_worker.values():
            for k, v in totals.items():
                summed[k] = summed.get(k, 0) + v
        fams = []

        def hist(name, doc, labels, prefix, bounds, series):
            f = HistogramMetricFamily(name, doc, labels=labels)
            for label_values, src, key in series:
                counts = [src.get((*prefix, *key, i), 0) for i in range(len(bounds) + 1)]
                acc, buckets = 0, []
                for bound, n in zip((*bounds, float("inf")), counts):
                    acc += n
                    buckets.append((_le(bound), acc))
                f.add_metric(label_values, buckets, src.get((*prefix, *key, "sum"), 0))
            fams.append(f)

        apis = sorted({k[1] for k in summed if k[0] == "total"})
        names = [api_keys.NAMES.get(a, str(a)) for a in apis]
        reqs = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, per API (Kafka's RequestMetrics RequestsPerSec)",
            labels=["request"])
        for a, n in zip(apis, names):
            reqs.add_metric([n], sum(summed.get(("total", a, i), 0)
                                     for i in range(len(time_bounds) + 1)))
        fams.append(reqs)
        hist("kafka_network_requestmetrics_totaltimems",
             "Time from a request's arrival to its response being ready, ms (TotalTimeMs)",
             ["request"], ("total",), time_bounds,
             [([n], summed, (a,)) for a, n in zip(apis, names)])
        hist("kafka_network_requestmetrics_requestqueuetimems",
             "Time a read request waited for the worker's loop, ms (RequestQueueTimeMs)",
             ["request"], ("queue",), time_bounds,
             [([n], summed, (a,)) for a, n in zip(apis, names)])

        topics = sorted({k[1] for k in summed if k[0] == "topic"})
        for idx, name, doc in (
                (0, "bytesin", "Bytes appended to the topic's logs by producers (BytesInPerSec)"),
                (1, "messagesin", "Records appended to the topic's logs (MessagesInPerSec)"),
                (2, "bytesout", "Record bytes sent to consumers and followers (BytesOutPerSec)")):
            f = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc,
                                    labels=["topic"])
            for t in topics:
                f.add_metric([t], summed.get(("topic", t, idx), 0))
            fams.append(f)

        for key, name, doc in (("isr_shrinks", "isrshrinks", "ISR shrinks (IsrShrinksPerSec)"),
                               ("isr_expands", "isrexpands", "ISR expansions (IsrExpandsPerSec)")):
            f = CounterMetricFamily(f"kafka_server_replicamanager_{name}", doc)
            f.add_metric([], summed.get((key,), 0))
            fams.append(f)

        fresh = snaps.values()
        for key, name, doc in (
                ("under_replicated", "underreplicatedpartitions",
                 "Led partitions whose ISR is smaller than their replica set"),
                ("leaders", "leadercount", "Partitions this broker leads"),
                ("partitions", "partitioncount", "Partitions hosted on this broker")):
            f = GaugeMetricFamily(f"kafka_server_replicamanager_{name}", doc)
            f.add_metric([], sum(s[key] for s in fresh))
            fams.append(f)

        purg = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                                 "Delayed operations waiting (PurgatorySize)",
                                 labels=["delayedoperation"])
        for op in ("Produce", "Fetch", "DeleteRecords"):
            purg.add_metric([op], sum(s["purgatory"].get(op, 0) for s in fresh))
        fams.append(purg)

        for key, name, doc in (
                ("active_controller", "activecontrollercount",
                 "1 when this broker is the active controller"),
                ("offline_partitions", "offlinepartitionscount",
                 "Partitions without a leader (reported by the active controller)")):
            f = GaugeMetricFamily(f"kafka_controller_kafkacontroller_{name}", doc)
            f.add_metric([], controller.get(key, 0))
            fams.append(f)

        # logs: the largest end offsets seen (a leader's beat a follower's here)
        logs: dict = {}
        for s in fresh:
            for tp, v in s["logs"].items():
                cur = logs.get(tp)
                if cur is None or v[3] > cur[3]:
                    logs[tp] = v
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's log (Log Size)",
                                 labels=["topic", "partition"])
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset",
                                  labels=["topic", "partition"])
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset",
                                labels=["topic", "partition"])
        for (t, p), (nbytes, lso, leo, _hw) in sorted(logs.items()):
            size.add_metric([t, str(p)], nbytes)
            start.add_metric([t, str(p)], lso)
            end.add_metric([t, str(p)], leo)
        fams += [size, start, end]

        cur = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                "The group's committed offset", labels=["consumergroup", "topic",
                                                                        "partition"])
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "High watermark minus the group's committed offset "
                                "(partitions hosted on this broker)",
                                labels=["consumergroup", "topic", "partition"])
        committed = {}
        for s in fresh:
            committed.update(s["committed"])
        for (g, t, p), off in sorted(committed.items()):
            cur.add_metric([g, t, str(p)], off)
            hosted = logs.get((t, p))
            if hosted is not None:
                lag.add_metric([g, t, str(p)], max(0, hosted[3] - off))
        fams += [cur, lag]

        conns = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                  "Open client connections that sent a request",
                                  labels=["listener", "worker"])
        created = CounterMetricFamily("kafka_server_socket_server_metrics_connection_creation",
                                      "Client connections made (counted at their first request)",
                                      labels=["listener", "worker"])
        cpu = CounterMetricFamily("mpbroker_worker_cpu_seconds",
                                  "CPU time (user+system) of each worker process",
                                  labels=["worker"])
        forwarded = CounterMetricFamily(
            "mpbroker_worker_forwarded_parts",
            "Request parts this worker sent to the worker owning their partitions or "
            "coordinator (the cost of a client's connection landing on another worker)",
            labels=["worker"])
        file_reads = CounterMetricFamily(
            "mpbroker_worker_peer_file_reads",
            "Fetched partitions of other workers whose new records this worker read from "
            "their segment files itself, without asking their owner",
            labels=["worker"])
        handed = CounterMetricFamily(
            "mpbroker_worker_connections_handed_over",
            "Client connections this worker handed to the worker owning every partition "
            "their Fetches or Produce requests name (worker.connection.handoff)", labels=["worker"])
        taken = CounterMetricFamily(
            "mpbroker_worker_connections_taken_over",
            "Client connections another worker handed to this one (worker.connection.handoff)",
            labels=["worker"])
        for wid in sorted(per_worker):
            tot = per_worker[wid]
            handed.add_metric([str(wid)], tot.get(("handed_over",), 0))
            taken.add_metric([str(wid)], tot.get(("taken_over",), 0))
            if wid in snaps:
                conns.add_metric([self.listener_name, str(wid)], snaps[wid]["connections"])
            created.add_metric([self.listener_name, str(wid)],
                               tot.get(("connections_created",), 0))
            cpu.add_metric([str(wid)], tot.get(("cpu_s",), 0))
            forwarded.add_metric([str(wid)], tot.get(("forwarded_parts",), 0))
            file_reads.add_metric([str(wid)], tot.get(("peer_file_reads",), 0))
        fams += [conns, created, cpu, forwarded, file_reads, handed, taken]
        hist("mpbroker_worker_event_loop_lag_seconds",
             "How late each worker's event loop ran a timer (a probe every 0.5 s)",
             ["worker"], ("lag",), lag_bounds,
             [([str(w)], per_worker[w], ()) for w in sorted(per_worker)])
        up = GaugeMetricFamily("mpbroker_workers_answering",
                               "Workers that answered this scrape")
        up.add_metric([], len(snaps))
        fams.append(up)
        return fams


def _le(bound: float) -> str:
    if bound == float("inf"):
        return "+Inf"
    return repr(float(bound))


def controller_view(ctl) -> dict:
    """The controller process's own figures (KafkaController's gauges)."""
    md = ctl.metadata()
    active = ctl.active and md is not None
    offline = 0
    if active and md is not None:
        offline = sum(1 for t in md.topics.values() for p in t.partitions.values()
                      if p.leader < 0)
    return {"active_controller": int(bool(active)), "offline_partitions": offline}


class MetricsServer:
    """`/metrics` for the controller process; `ask(what, timeout)` is the placement
    manager's `ask_all`, `ctl` the controller."""

    def __init__(self, host: str, port: int, loop: asyncio.AbstractEventLoop, ask, ctl,
                 listener_name: str = "PLAINTEXT"):
        from prometheus_client import CollectorRegistry
        self.loop = loop
        self.ask = ask
        self.ctl = ctl
        self.aggregator = Aggregator(listener_name)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.host, self.port = host, port
        self.httpd = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve (raises OSError when the address cannot be bound)."""
        from prometheus_client import start_http_server
        self.httpd, self.thread = start_http_server(self.port, addr=self.host,
                                                    registry=self.registry)
        self.port = self.httpd.server_address[1]
        log.info("metrics served at http://%s:%d/metrics", self.host, self.port)

    def close(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    # prometheus_client's collector protocol (called on the HTTP thread)
    def describe(self):
        return []

    def collect(self):
        fut = asyncio.run_coroutine_threadsafe(self.gather(), self.loop)
        return fut.result(SCRAPE_TIMEOUT_S + 5)

    async def gather(self) -> list:
        snaps = await self.ask("metrics", SCRAPE_TIMEOUT_S)
        return self.aggregator.families(snaps, controller_view(self.ctl))
