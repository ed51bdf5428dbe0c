"""A worker's metrics: per-API request counts and latency histograms taken on the hot path,
everything else read from the broker's state when the controller asks for a snapshot;
and the optional request log (logger `kafka.request.logger`).

Owner: the worker process (its event loop; nothing here is thread-safe). Contract:

* `instrument(dispatcher, broker)` (workers/server.py) returns a `MeteredDispatcher`
  wrapping the dispatcher when `metrics.listener` is set or the request log is on, else
  the dispatcher itself (no cost at all then). The wrapper times each request from the
  call of `dispatch` (the frame fully read and its header parsed) until its response is
  ready (Kafka's TotalTimeMs stops when the response is sent; here the ordered send
  that follows is not counted). Queue time (Kafka's RequestQueueTimeMs) is the time from
  the read that completed the frame (`Connection.read_at`) to that call: what earlier
  requests of the same read, and the rest of the loop, kept it waiting.
* Per request the hot path is two `perf_counter` calls, one dict lookup and two bucket
  increments (`Histogram.observe`); see loadtest/RESULTS.md for what that costs.
* `snapshot(broker)` -> a plain dict of counters and gauges (no objects of ours), sent to
  the controller process over the controller channel (the `ask` "metrics" message);
  `mpbroker/metrics_server.py` merges the workers' snapshots and renders them. Counters
  only grow within one worker process: the bytes and messages of a partition this
  worker stops hosting are kept per topic (`retired`), as last seen by a snapshot.
* `placement_stats(worker)` -> the counters `mpbroker placement show` samples
  (`Worker.stats`, asked for over the controller channel).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from bisect import bisect_left

from mpbroker.protocol import api_keys, codec
from storage.slices import FileSlice
from workers.answers import EncodedLater

log = logging.getLogger(__name__)
REQUEST_LOGGER = "kafka.request.logger"
request_log = logging.getLogger(REQUEST_LOGGER)

# Upper bounds (ms) of the request-time buckets: 0.25 ms to 30 s.
TIME_BUCKETS_MS = (0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
                   10000, 30000)
# Upper bounds (s) of the event-loop lag buckets.
LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LAG_PROBE_S = 0.5           # how often the loop-lag probe wakes
PRINCIPAL = "User:ANONYMOUS"   # a context without a connection identity


# ISR changes of partitions this process leads, applied (IsrShrinksPerSec /
# IsrExpandsPerSec): [shrinks, expands]; whoever changed it (this leader's AlterPartition
# or the controller, e.g. removing a dead broker's replica).
ISR_CHANGES = [0, 0]


def isr_changed(shrink: bool) -> None:
    ISR_CHANGES[0 if shrink else 1] += 1


class Histogram:
    """Cumulative-at-render bucket counts: `counts[i]` holds observations <= bounds[i]
    and above bounds[i-1]; the last slot is +Inf."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def export(self) -> tuple[list[int], float]:
        return list(self.counts), self.sum


class WorkerMetrics:
    """The hot-path counters of one worker."""

    def __init__(self, worker_id: int):
        self.worker_id = worker_id
        self.total_time: dict[int, Histogram] = {}     # api key -> ms
        self.queue_time: dict[int, Histogram] = {}     # api key -> ms
        self.connections_created = 0
        self.loop_lag = Histogram(LAG_BUCKETS_S)
        self.retired: dict[str, list[int]] = {}       # topic -> [bytes in, messages in, bytes out]
        self._seen: dict[tuple, tuple] = {}            # (topic, p) -> (partition, counters)
        self._lag_task: asyncio.Task | None = None

    def on_request(self, api_key: int, total_ms: float, queue_ms: float | None,
                   _bucket=bisect_left, _bounds=TIME_BUCKETS_MS) -> None:
        # the hot path: inlined Histogram.observe for the two histograms of the API
        h = self.total_time.get(api_key)
        if h is None:
            h = self.total_time[api_key] = Histogram(TIME_BUCKETS_MS)
            self.queue_time[api_key] = Histogram(TIME_BUCKETS_MS)
        h.counts[_bucket(_bounds, total_ms)] += 1
        h.sum += total_ms
        if queue_ms is not None:
            q = self.queue_time[api_key]
            q.counts[_bucket(_bounds, queue_ms)] += 1
            q.sum += queue_ms

    # ------------------------------------------------------------ event-loop lag
    def start_lag_probe(self, loop: asyncio.AbstractEventLoop, period_s: float = LAG_PROBE_S):
        if self._lag_task is None:
            self._lag_task = loop.create_task(self._probe(loop, period_s))

    async def _probe(self, loop, period_s: float) -> None:
        while True:
            start = loop.time()
            await asyncio.sleep(period_s)
            # how much later than asked the loop got back to us: time other callbacks held it
            self.loop_lag.observe(max(0.0, loop.time() - start - period_s))

    # ------------------------------------------------------------ per-topic totals
    def topic_totals(self, partitions) -> dict[str, list[int]]:
        """{topic: [bytes in, messages in, bytes out]} over the hosted partitions plus
        those this worker hosted before (as last seen here)."""
        seen = {}
        totals = {t: list(v) for t, v in self.retired.items()}
        for key, p in partitions:
            c = (p.bytes_in, p.messages_in, p.bytes_out)
            seen[key] = (p, c)
            t = totals.setdefault(key[0], [0, 0, 0])
            t[0] += c[0]
            t[1] += c[1]
            t[2] += c[2]
        for key, (p, c) in self._seen.items():
            now = seen.get(key)
            if now is None or now[0] is not p:     # gone, or a new Partition object
                r = self.retired.setdefault(key[0], [0, 0, 0])
                for i in range(3):
                    r[i] += c[i]
                t = totals.setdefault(key[0], [0, 0, 0])
                for i in range(3):
                    t[i] += c[i]
        self._seen = seen
        return totals


class MeteredDispatcher:
    """`Dispatcher` with each request timed (and logged when the request log is on)."""

    def __init__(self, inner, metrics: WorkerMetrics | None, log_requests: bool):
        self.inner = inner
        self.metrics = metrics
        self.log_requests = log_requests

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def dispatch(self, ctx, frame: memoryview, pos: int, _clock=time.perf_counter):
        start = _clock()
        conn = ctx.connection
        queue_ms = None
        if conn is not None:
            d = conn.__dict__
            if "metered" not in d:                         # its first request
                d["metered"] = True
                if self.metrics is not None:
                    self.metrics.connections_created += 1
            read_at = d.get("read_at")
            if read_at is not None:
                queue_ms = (start - read_at) * 1000.0
        result = self.inner.dispatch(ctx, frame, pos)
        if result is None or type(result) is list:
            if self.log_requests:
                self._done(ctx, frame, pos, start, queue_ms, result)
            else:                   # the common case, without a call more
                self.metrics.on_request(ctx.api_key, (_clock() - start) * 1000.0, queue_ms)
        elif type(result) is EncodedLater:
            # timed when its answer is made (held back by a quota: when that is sent)
            finish = result.finish

            def timed(fut):
                try:
                    out = finish(fut)
                except BaseException:
                    self._done(ctx, frame, pos, start, queue_ms, None)
                    raise
                if out is None or type(out) is list:
                    self._done(ctx, frame, pos, start, queue_ms, out)
                else:
                    self._time_future(out, ctx, frame, pos, start, queue_ms)
                return out
            result.finish = timed
        else:
            self._time_future(result, ctx, frame, pos, start, queue_ms)
        return result

    def _time_future(self, fut, ctx, frame, pos, start: float, queue_ms) -> None:
        fut.add_done_callback(
            lambda f: self._done(ctx, frame, pos, start, queue_ms,
                                 None if f.cancelled() or f.exception() else f.result()))

    def _done(self, ctx, frame, pos, start: float, queue_ms, chunks) -> None:
        total_ms = (time.perf_counter() - start) * 1000.0
        if self.metrics is not None:
            self.metrics.on_request(ctx.api_key, total_ms, queue_ms)
        if self.log_requests:
            try:
                log_request(ctx, frame, pos, chunks, total_ms, queue_ms)
            except Exception:       # a log line must never fail a request
                request_log.exception("request log")


def log_request(ctx, frame, pos: int, chunks, total_ms: float, queue_ms) -> None:
    """One line per request, Kafka's "Completed request" of RequestChannel, shorter."""
    try:
        parts = request_partitions(codec.decode_request(ctx.api_key, ctx.api_version,
                                                        frame, pos))
    except Exception:
        parts = []
    shown = ",".join(f"{t}-{p}" for t, p in parts[:20])
    if len(parts) > 20:
        shown += f",...({len(parts)})"
    request_log.debug(
        "Completed request: api=%s version=%d correlation_id=%d client_id=%s client=%s "
        "principal=%s partitions=%s request_bytes=%d response_bytes=%s "
        "total_time_ms=%.3f queue_time_ms=%s",
        api_keys.NAMES.get(ctx.api_key, ctx.api_key), ctx.api_version, ctx.correlation_id,
        ctx.client_id, ctx.client_host, getattr(ctx, "principal", PRINCIPAL), shown or "-", len(frame),
        response_size(chunks) if chunks is not None else "-", total_ms,
        f"{queue_ms:.3f}" if queue_ms is not None else "-")


def response_size(chunks) -> int:
    return sum(c.length if isinstance(c, FileSlice) else len(c) for c in chunks)


def request_partitions(req: dict) -> list[tuple[str, int]]:
    """(topic, partition) pairs named by a decoded request, whatever its API's field
    names (topics/topic_data; name/topic/topic_id; partitions/partition_data/...)."""
    out = []
    for key in ("topic_data", "topics"):
        for t in req.get(key) or ():
            if not isinstance(t, dict):
                continue
            name = t.get("name") or t.get("topic")
            if name is None and t.get("topic_id"):
                name = t["topic_id"].hex()
            parts = (t.get("partition_data") or t.get("partitions")
                     or t.get("partition_indexes") or ())
            for p in parts:
                if isinstance(p, int):
                    out.append((name, p))
                elif isinstance(p, dict):
                    idx = p.get("index", p.get("partition", p.get("partition_index")))
                    if idx is not None:
                        out.append((name, idx))
    return out


def instrument(dispatcher, broker):
    """The dispatcher the worker serves with: metered when metrics or the request log
    are on (`metrics.listener`, `log.requests`, or `kafka.request.logger` at DEBUG)."""
    cfg = broker.config
    metrics_on = bool(cfg.get("metrics.listener"))
    log_on = bool(cfg.get("log.requests"))
    if log_on and not request_log.isEnabledFor(logging.DEBUG):
        request_log.setLevel(logging.DEBUG)
    log_on = log_on or request_log.isEnabledFor(logging.DEBUG)
    if not metrics_on and not log_on:
        return dispatcher
    metrics = None
    if metrics_on:
        metrics = broker.metrics = WorkerMetrics(broker.worker_id)
        metrics.start_lag_probe(asyncio.get_running_loop())
    return MeteredDispatcher(dispatcher, metrics, log_on)


def snapshot(broker) -> dict | None:
    """What the controller's /metrics needs of this worker (plain values only); None
    (left out of the scrape) if taking it failed: a scrape never breaks the channel."""
    try:
        return _snapshot(broker)
    except Exception:
        log.exception("metrics snapshot of worker %s", getattr(broker, "worker_id", "?"))
        return None


def _snapshot(broker) -> dict:
    m = getattr(broker, "metrics", None)
    if m is None:
        m = broker.metrics = WorkerMetrics(broker.worker_id)
    times = os.times()
    router = getattr(broker, "router", None)
    partitions = list(broker.partitions.items())
    followers = list(broker.followers.items())
    logs = {}
    under_replicated = leaders = 0
    for (t, i), p in partitions + followers:
        try:
            logs[(t, i)] = (p.log.size_bytes, p.log.log_start_offset, p.log.log_end_offset,
                            p.high_watermark)
        except Exception:       # a closed or failed log: no figures for it
            continue
    for _, p in partitions:
        if getattr(p, "is_leader", True):
            leaders += 1
            if p.replicated and len(p.isr) < len(p.replicas):
                under_replicated += 1
    committed = {}
    groups = broker.groups
    if groups is not None:
        for coord in list(groups.coordinators.values()):
            for gid, g in list(coord.groups.items()):
                for tp, rec in list(getattr(g, "offsets", {}).items()):
                    committed[(gid, tp[0], tp[1])] = rec.oam.offset
    return {
        "worker": broker.worker_id,
        "pid": os.getpid(),
        "time_buckets": TIME_BUCKETS_MS,
        "lag_buckets": LAG_BUCKETS_S,
        "cpu_s": times.user + times.system,
        "requests": {k: (h.export(), m.queue_time[k].export())
                     for k, h in m.total_time.items()},
        "loop_lag": m.loop_lag.export(),
        "connections": sum(1 for c in list(broker.clients) if not c.closed),
        "connections_created": m.connections_created,
        "forwarded_parts": router.forwarded if router is not None else 0,
        "peer_file_reads": router.states.file_reads if router is not None else 0,
        "handed_over": _handoff(router, "moved_out"),
        "taken_over": _handoff(router, "moved_in"),
        "topics": m.topic_totals(partitions),
        "logs": logs,
        "leaders": leaders,
        "partitions": len(partitions) + len(followers),
        "under_replicated": under_replicated,
        "isr_shrinks": ISR_CHANGES[0],
        "isr_expands": ISR_CHANGES[1],
        "purgatory": {"Produce": len(broker.produce_purgatory),
                      "Fetch": len(broker.fetch_purgatory),
                      "DeleteRecords": len(broker.delete_records_purgatory)},
        "committed": committed,
    }


def placement_stats(worker) -> dict:
    """What `mpbroker placement show` reports of a worker (`Worker.stats`: counters;
    the caller takes two samples and divides)."""
    parts = {}
    bin_, bout = worker.retired_bytes
    for (t, i), p in worker.partitions.items():
        parts[f"{t}-{i}"] = {"topic": t, "partition": i, "bytes_in": p.bytes_in,
                             "bytes_out": p.bytes_out, "messages_in": p.messages_in,
                             "size": p.log.size_bytes}
        bin_ += p.bytes_in
        bout += p.bytes_out
    times = os.times()
    try:
        core = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        core = []
    r = worker.router
    return {"worker": worker.worker_id, "pid": os.getpid(), "cores": core,
            "placement_revision": worker.placement.revision,
            "partitions": parts, "bytes_in": bin_, "bytes_out": bout,
            "requests": worker.requests_total, "requests_served": worker.requests_served,
            "forwarded": r.forwarded if r else 0,
            "handed_over": _handoff(r, "moved_out"), "taken_over": _handoff(r, "moved_in"),
            "cpu_s": times.user + times.system, "time": time.monotonic(),
            "purgatory": {"produce": len(worker.produce_purgatory),
                          "fetch": len(worker.fetch_purgatory),
                          "delete_records": len(worker.delete_records_purgatory)},
            "fetch_sessions": len(worker.fetch_sessions),
            "connections": [{"client_id": getattr(c, "client_id", None),
                             "peer": c.client_host, "bytes_in": c.bytes_in,
                             "bytes_out": c.bytes_out}
                            for c in list(worker.clients) if not c.closed]}


def _handoff(router, counter: str) -> int:
    """Connections this worker handed to others or took from them (workers/handoff.py)."""
    handoff = getattr(router, "handoff", None)
    return getattr(handoff, counter) if handoff is not None else 0
