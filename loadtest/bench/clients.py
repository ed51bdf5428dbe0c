"""The benchmark's client processes: producers and consumers on confluent-kafka.

Each runs in its own OS process (multiprocessing "spawn": no librdkafka state is forked),
builds its client, reports "ready" on the result queue and waits for the parent's start
event; the common start time `t0_ns` (wall clock, `time.time_ns()`) then comes from a
shared value, so every process measures the same window:

    t0 .. t0+warmup              warm-up: produced and consumed, not counted
    t0+warmup .. t0+warmup+dur   the measured window (w0 .. w1)

A live consumer is ready only once it is tailing: every partition assigned, positioned
(its ListOffsets answered) and a first fetch answered (the end-of-partition event at
offset 0 of the still empty topic; `_await_first_fetch`). Its start-up (metadata,
librdkafka's offset-query timer, ListOffsets, the first Fetch) then happens before t0
instead of in the round, where on a loaded machine it took longer than a `--tiny`
round's warm-up and window (the consumer read nothing in the window), and it no longer
competes with the producers for the broker.

Record layout: the first 8 bytes of every value are the producer's `time.time_ns()` at
produce(), big-endian; the rest is padding up to the record size. A consumer's end-to-end
latency for a record is its receive time minus that stamp (one machine, one clock).

Request counts: every client counts the Produce and Fetch requests it sent from
librdkafka's statistics (reqstats.py): producers and live consumers those in the
measured window (the rate between the snapshots nearest the window's edges inside it,
scaled to the window), a drainer those from t0 (it assigns its partitions then: none
before) to its last record (interpolated between the snapshots on either side; it waits
for the snapshot after its last record before it closes). They return them as "reqs":
{"Produce": n, "Fetch": m} (floats; None where not measurable).

Every loop stops by itself: a producer after w1 or `max_records` (then flushes), a consumer
once every producer has flushed and it has read up to the high watermarks it then reads,
after `idle_s` without records past w1, or at its deadline. Each process returns one dict on the queue (figures,
or {"error": ...}).
"""

from __future__ import annotations

import os
import time
import traceback
from array import array
from typing import Any, NamedTuple

from loadtest.bench import reqstats

NS = 1_000_000_000
READY_TIMEOUT_S = 60.0
DRAIN_STATS_MS = 200    # a drainer's statistics interval: it waits up to one for its last snapshot

PRODUCER_DEFAULTS = {  # OpenMessaging Benchmark's Kafka driver (kafka-throughput.yaml)
    "acks": "all",
    "linger.ms": 1,
    "batch.size": 1 << 20,
    "compression.type": "none",
    "queue.buffering.max.kbytes": 64 << 10,   # 64 MiB of local queue, like the Java client's buffer.memory
    "queue.buffering.max.messages": 1_000_000,
    "message.timeout.ms": 60_000,
}
CONSUMER_DEFAULTS = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "enable.partition.eof": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 10_485_760,
    # librdkafka stops fetching a partition whose local queue is over queued.max.messages.kbytes
    # (64 MiB) or queued.min.messages (100,000 messages) and looks again only after this
    # backoff, 1 s by default: a broker that sends the 10 MiB per partition asked for fills
    # the queue in a few responses (in one of 100 B records) and then waited out a whole
    # second of each catch-up read. The Java consumer OMB's settings come from fetches again
    # as soon as its buffer is read; 20 ms is close.
    "fetch.queue.backoff.ms": 20,
}


def _wait_start(shared, role: str) -> int:
    shared.result_q.put({"ready": role, "pid": os.getpid()})
    if not shared.start_event.wait(READY_TIMEOUT_S):
        raise TimeoutError("no start signal from the parent")
    t0_ns = int(shared.t0_ns.value)
    delay = t0_ns / NS - time.time()
    if delay > 0:
        time.sleep(delay)
    return t0_ns


def _cpu() -> tuple[float, float]:
    """(CPU seconds of the whole process incl. librdkafka threads, of the Python main thread)."""
    return time.process_time(), time.thread_time()


class Shared(NamedTuple):
    """What the parent shares with every client process of a phase."""
    result_q: Any           # each process puts {"ready": ...}, then its result dict
    start_event: Any        # set by the parent once every process is ready
    t0_ns: Any              # Value("d"): the common start time
    producers_done: Any     # Value("i"): producers that have flushed


def _guarded(fn, spec, shared: Shared) -> None:
    try:
        shared.result_q.put(fn(spec, shared))
    except BaseException as e:  # noqa: BLE001 - the parent reports it and goes on
        shared.result_q.put({"role": fn.__name__.strip("_"), "error": f"{e!r}\n{traceback.format_exc()}"})


# ---------------------------------------------------------------- producer


def _producer(spec, shared: Shared) -> dict:
    from confluent_kafka import Producer

    w_acked = {"msgs": 0, "errors": 0, "first_error": None}
    window = [0, 0]

    def on_delivery(err, _msg):
        if err is not None:
            w_acked["errors"] += 1
            w_acked["first_error"] = w_acked["first_error"] or str(err)
            return
        now = time.time_ns()
        if window[0] <= now < window[1]:
            w_acked["msgs"] += 1

    reqs = reqstats.ReqStats(reqstats.interval_ms(spec["duration_s"]))
    conf = {"bootstrap.servers": spec["bootstrap"], "on_delivery": on_delivery, **PRODUCER_DEFAULTS,
            **spec.get("producer_config", {}), **reqs.config()}
    p = Producer(conf)
    topic, size = spec["topic"], spec["record_size"]
    pad = b"\x00" * max(0, size - 8)
    rate = float(spec.get("rate") or 0.0)  # records/s of this process; 0 = as fast as it goes
    max_records = int(spec["max_records"])

    t0 = _wait_start(shared, "producer")
    window[0] = t0 + int(spec["warmup_s"] * NS)
    window[1] = window[0] + int(spec["duration_s"] * NS)
    cpu0 = _cpu()
    sent = 0
    while sent < max_records:
        now = time.time_ns()
        if now >= window[1]:
            break
        if rate > 0:
            due = min(int((now - t0) / NS * rate) - sent, 10_000)
            if due <= 0:
                p.poll(0)
                time.sleep(0.0002)
                continue
        else:
            due = 1000
        for _ in range(due):
            try:
                p.produce(topic, time.time_ns().to_bytes(8, "big") + pad)
                sent += 1
            except BufferError:  # local queue full: serve delivery reports, then go on
                p.poll(0.001)
        p.poll(0)
    wall = (time.time_ns() - t0) / NS
    cpu1 = _cpu()
    left = p.flush(30)
    with shared.producers_done.get_lock():
        shared.producers_done.value += 1
    return {"role": "producer", "sent": sent, "acked_in_window": w_acked["msgs"], "errors": w_acked["errors"],
            "first_error": w_acked["first_error"], "undelivered": left, "hit_max_records": sent >= max_records,
            "cpu_s": cpu1[0] - cpu0[0], "main_thread_cpu_s": cpu1[1] - cpu0[1], "wall_s": wall,
            "reqs": reqs.count_in(window[0], window[1]), "req_snapshots": len(reqs.snaps)}


# ---------------------------------------------------------------- consumers


def _consumer(spec, shared: Shared) -> dict:
    """Live (tailing) consumer: throughput in the window and end-to-end latency."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    # enable.partition.eof: the readiness check's signal (`_await_first_fetch`); later such
    # an event (the tail reached, right after records) is neither a record nor an error
    reqs = reqstats.ReqStats(reqstats.interval_ms(spec["duration_s"]))
    c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"], **CONSUMER_DEFAULTS,
                  **spec.get("consumer_config", {}), "enable.partition.eof": True, **reqs.config()})
    topic, parts = spec["topic"], spec["partitions"]
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        _await_first_fetch(c, topic, parts, float(spec.get("ready_timeout_s", READY_TIMEOUT_S / 2)))
    except BaseException:
        c.close()
        raise
    t0 = _wait_start(shared, "consumer")
    w0 = t0 + int(spec["warmup_s"] * NS)
    w1 = w0 + int(spec["duration_s"] * NS)
    deadline = w1 + int(spec["drain_timeout_s"] * NS)
    idle_ns = int(spec.get("idle_s", 5.0) * NS)
    ends = None  # {partition: high watermark} once every producer has flushed
    lat = array("q")
    max_samples = int(spec.get("max_latency_samples", 20_000_000))
    cpu0 = _cpu()
    got = got_bytes = w_msgs = w_bytes = errors = 0
    last_rx = time.time_ns()
    try:
        while True:
            msgs = _next_records(c)
            now = time.time_ns()
            if msgs:
                last_rx = now
            elif now >= deadline or (now > w1 and now - last_rx > idle_ns):
                break
            elif shared.producers_done.value >= spec["producers"]:
                ends = ends or {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
                if _caught_up(c, topic, ends):
                    break
            in_window = w0 <= now < w1
            for m in msgs:
                if m.error() is not None:
                    errors += m.error().code() != KafkaError._PARTITION_EOF
                    continue
                v = m.value()
                n = len(v)
                got += 1
                got_bytes += n
                if in_window:
                    w_msgs += 1
                    w_bytes += n
                ts = int.from_bytes(v[:8], "big")
                if w0 <= ts < w1 and len(lat) < max_samples:
                    lat.append(now - ts)
            if now >= deadline:
                break
        cpu1 = _cpu()
    finally:
        c.close()
    from loadtest.bench.hist import Histogram

    return {"role": "consumer", "received": got, "received_bytes": got_bytes, "window_msgs": w_msgs,
            "window_bytes": w_bytes, "errors": errors, "latency_hist": Histogram().add_ns(lat).to_json(),
            "latency_samples": len(lat), "cpu_s": cpu1[0] - cpu0[0], "main_thread_cpu_s": cpu1[1] - cpu0[1],
            "wall_s": (time.time_ns() - t0) / NS, "reqs": reqs.count_in(w0, w1), "req_snapshots": len(reqs.snaps)}


def _await_first_fetch(c, topic: str, parts: list[int], timeout_s: float) -> None:
    """Until every partition of `parts` reported its end (PARTITION_EOF: positioned, a Fetch
    answered). The topic is new and nothing produces before the start event, so a record
    here is a bug of the bench; so is no end within `timeout_s` (the partitions never
    became fetchable)."""
    from confluent_kafka import KafkaError

    waiting = set(parts)
    last_error = None       # client errors meanwhile (a lost connection...): librdkafka retries
    deadline = time.monotonic() + timeout_s
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"live consumer: no first fetch of {topic} partitions {sorted(waiting)} "
                               f"within {timeout_s:.0f}s (last client error: {last_error})")
        m = c.poll(min(0.5, left))
        if m is None:
            continue
        err = m.error()
        if err is None:
            raise RuntimeError(f"live consumer: a record in {topic} [{m.partition()}] at offset "
                               f"{m.offset()} before the start (the topic must be new)")
        if err.code() == KafkaError._PARTITION_EOF:
            waiting.discard(m.partition())
        else:
            last_error = err


def _next_records(c) -> list:
    """What librdkafka holds now, or else the first record within 0.1 s and what came with it.
    (consume(n, timeout) alone waits for n records or the whole timeout: that wait would be
    counted as end-to-end latency.)"""
    msgs = c.consume(10_000, timeout=0)
    if msgs:
        return msgs
    first = c.poll(0.1)
    return [] if first is None else [first] + c.consume(10_000, timeout=0)


def _caught_up(c, topic: str, ends: dict[int, int]) -> bool:
    from confluent_kafka import TopicPartition

    pos = c.position([TopicPartition(topic, p) for p in ends])
    return all(tp.offset >= ends[tp.partition] or ends[tp.partition] <= 0 for tp in pos)


def _drainer(spec, shared: Shared) -> dict:
    """Catch-up read of a backlog: from the start of its partitions up to their high watermarks."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    reqs = reqstats.ReqStats(DRAIN_STATS_MS)
    c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"], **CONSUMER_DEFAULTS,
                  **spec.get("consumer_config", {}), **reqs.config()})
    topic = spec["topic"]
    remaining = {}
    for p in spec["partitions"]:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        if hi > lo:
            remaining[p] = hi
    expected = sum(remaining.values())  # offsets to reach, per partition
    t0 = _wait_start(shared, "drainer")
    reqs.assume_zero_at(t0)  # nothing assigned before: no Fetch yet
    deadline = t0 + int(spec["drain_timeout_s"] * NS)
    cpu0 = _cpu()
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in remaining])
    got = got_bytes = errors = 0
    t_last = t0
    try:
        while remaining and time.time_ns() < deadline:
            for m in c.consume(10_000, timeout=0.1):
                if m.error() is not None:
                    errors += 1
                    continue
                got += 1
                got_bytes += len(m)
                p = m.partition()
                if p in remaining and m.offset() + 1 >= remaining[p]:
                    del remaining[p]
            t_last = time.time_ns()
        cpu1 = _cpu()
        reqs.settle(c.poll, t_last)
    finally:
        c.close()
    return {"role": "drainer", "received": got, "received_bytes": got_bytes, "errors": errors,
            "complete": not remaining, "expected_offsets": expected, "t_end_ns": t_last,
            "cpu_s": cpu1[0] - cpu0[0], "main_thread_cpu_s": cpu1[1] - cpu0[1], "wall_s": (t_last - t0) / NS,
            "reqs": reqs.value_at(t_last), "req_snapshots": len(reqs.snaps)}


# Process targets (module-level so that "spawn" can pickle them by name).
def producer(*args) -> None:
    _guarded(_producer, *args)


def consumer(*args) -> None:
    _guarded(_consumer, *args)


def drainer(*args) -> None:
    _guarded(_drainer, *args)
