"""Micro-benchmark of a caught-up consumer's long poll over many partitions, stage by
stage (prints the median and the mean µs of each stage per Fetch: the mean carries
what happens now and then, such as the purgatory's purges and the garbage collector).

    python -m loadtest.bench_longpoll [--partitions 50] [--fetches 3000] [--front]

One cycle is what a worker does for each Fetch of a librdkafka consumer at the end of
its partitions (a full, sessionless Fetch of every partition each time): decode the
request, resolve its partitions, read them (all caught up), park it in the fetch
purgatory, then one append of one 1 KiB batch to one partition wakes it, it reads again
and its response is encoded. The parts are the worker's own (real Partitions over real
logs in a temporary directory, the real purgatory, timing wheel, fetch session cache
and codec) around the handlers' test broker (tests/workers/test_txn_fetch.py
`MiniBroker`, the least a Fetch reads from a worker); no socket, no event loop turns.

`--front`: the same Fetch on the front of a broker with two workers, where every odd
partition is the other worker's (`fan_out`, workers/handlers/fetch/fanout.py, over
the fan-out tests' fake router: the other worker's partitions answered from the state
it published, caught up). Stages: decode, `fan_out` (resolve, place, pass, park, and
the loop's turn that starts the task awaiting the park), the append (to one of this worker's partitions), the wake-up (the check, then the
pass over what changed, on the loop's next turn), encode.

`--memo`: the same Fetch from a connection, as librdkafka sends it again and again
(workers/handlers/fetch/memo.py: the connection's memory of its last Fetch). Stages:
decode, `serve` (the registry's handler: resolve through the memo, read what changed,
park on it), the append, the wake-up (the check, then the read of what changed, on the
loop's next turn), encode.

To compare two commits, run it in a checkout of each, the same minute, and compare the
medians (the machine's noise moves both alike).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mpbroker.protocol import codec  # noqa: E402
from storage.batch import BatchBuilder  # noqa: E402
from tests.workers.test_txn_fetch import TOPIC, MiniBroker, ctx  # noqa: E402
from workers.handlers.fetch import handle as fetch_handle  # noqa: E402
from workers.handlers.fetch import plan as fetch_plan  # noqa: E402
from workers.handlers.fetch.fanout import fan_out  # noqa: E402

VERSION = 12                    # topic names (v13+ would look topic ids up)
STAGES = ("decode", "partitions", "read", "park", "append", "wake", "encode")
FRONT_STAGES = ("decode", "fan_out", "append", "wake", "encode")
MEMO_STAGES = ("decode", "serve", "append", "wake", "encode")


def fetch_request(broker, partitions: int) -> bytes:
    """A consumer's Fetch of every partition at its high watermark, encoded."""
    return codec.encode_request(1, VERSION, {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 50 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
        "forgotten_topics_data": [],
        "topics": [{"topic": TOPIC, "partitions": [
            {"partition": i, "fetch_offset": broker.partition(TOPIC, i).high_watermark,
             "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
             "log_start_offset": -1, "last_fetched_epoch": -1} for i in range(partitions)]}]})


def record(times: dict, stages: tuple, marks: tuple) -> None:
    """The time of each stage, between its mark and the next."""
    for stage, a, b in zip(stages, marks, marks[1:]):
        times[stage].append(b - a)


async def cycles(broker, partitions: int, fetches: int) -> dict[str, list[float]]:
    batch = BatchBuilder().append(b"k", b"v" * 1024).build()
    times: dict[str, list[float]] = {s: [] for s in STAGES}
    clock = time.perf_counter
    context = ctx(1, VERSION)
    for i in range(fetches):
        frame = memoryview(fetch_request(broker, partitions))
        t0 = clock()
        req = codec.decode_request(1, VERSION, frame, 0)
        t1 = clock()
        requested, forgotten, unknown = fetch_plan.requested_partitions(broker, req, VERSION)
        fctx = broker.fetch_sessions.new_context(0, -1, requested, forgotten,
                                                 is_follower=False, uses_topic_ids=False)
        plan = fetch_plan.FetchPlan(broker, context, req, fctx, unknown)
        t2 = clock()
        looked: list = []           # as plan.serve: the park counts from what the read found
        results, total, error = plan.read_all(looked=looked)
        t3 = clock()
        if error or total:
            raise SystemExit("the fetch was not caught up: nothing to measure")
        future, _ = fetch_plan.park(plan, results, total, looked)
        t4 = clock()
        p = broker.partition(TOPIC, i % partitions)
        p.append(memoryview(bytearray(batch)))
        t5 = clock()
        broker.fetch_purgatory.check_and_complete(p.key)     # what Produce does
        t6 = clock()
        codec.encode_response(1, VERSION, future.result())
        record(times, STAGES, (t0, t1, t2, t3, t4, t5, t6, clock()))
    return times


async def memo_cycles(broker, partitions: int, fetches: int) -> dict[str, list[float]]:
    batch = BatchBuilder().append(b"k", b"v" * 1024).build()
    times: dict[str, list[float]] = {s: [] for s in MEMO_STAGES}
    clock = time.perf_counter
    context = ctx(1, VERSION)
    context.connection = types.SimpleNamespace(fetch_memo=None)
    for i in range(fetches):
        frame = memoryview(fetch_request(broker, partitions))
        t0 = clock()
        req = codec.decode_request(1, VERSION, frame, 0)
        t1 = clock()
        future = fetch_handle(broker, context, req)
        t2 = clock()
        if not isinstance(future, asyncio.Future) or future.done():
            raise SystemExit("the fetch did not park: nothing to measure")
        p = broker.partition(TOPIC, i % partitions)
        p.append(memoryview(bytearray(batch)))
        t3 = clock()
        broker.fetch_purgatory.check_and_complete(p.key)     # what Produce does
        await asyncio.sleep(0)          # completed at the loop's next turn
        t4 = clock()
        codec.encode_response(1, VERSION, future.result())
        record(times, MEMO_STAGES, (t0, t1, t2, t3, t4, clock()))
    return times


async def front_cycles(broker, partitions: int, fetches: int) -> dict[str, list[float]]:
    from tests.workers.handlers.fetch.test_fanout import FakeRouter
    from workers.partition_states import state_of
    router = FakeRouter(broker)
    router.owner = lambda topic, index: index % 2
    router.states.update(1, [(TOPIC, i, state_of(broker.partition(TOPIC, i)))
                             for i in range(1, partitions, 2)], subscribed=True)
    batch = BatchBuilder().append(b"k", b"v" * 1024).build()
    times: dict[str, list[float]] = {s: [] for s in FRONT_STAGES}
    clock = time.perf_counter
    context = ctx(1, VERSION)
    for i in range(fetches):
        frame = memoryview(fetch_request(broker, partitions))
        t0 = clock()
        req = codec.decode_request(1, VERSION, frame, 0)
        t1 = clock()
        task = asyncio.ensure_future(fan_out(router, context, req, None))
        await asyncio.sleep(0)          # one turn: the task waits on the park
        t2 = clock()
        if router.forwarded or len(broker.fetch_purgatory) != 1:
            raise SystemExit("the fetch did not park: nothing to measure")
        p = broker.partition(TOPIC, 2 * i % partitions)
        p.append(memoryview(bytearray(batch)))
        t3 = clock()
        broker.fetch_purgatory.check_and_complete(p.key)     # what Produce does
        resp = await task
        t4 = clock()
        codec.encode_response(1, VERSION, resp)
        record(times, FRONT_STAGES, (t0, t1, t2, t3, t4, clock()))
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--fetches", type=int, default=3000)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--front", action="store_true",
                      help="the front of two workers, every odd partition the other's")
    mode.add_argument("--memo", action="store_true",
                      help="from a connection, through its memory of the last Fetch")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-longpoll-"))
    broker = MiniBroker(tmp, partitions=args.partitions)
    run, stages = ((front_cycles, FRONT_STAGES) if args.front else
                   (memo_cycles, MEMO_STAGES) if args.memo else (cycles, STAGES))
    try:
        times = asyncio.run(run(broker, args.partitions, args.fetches))
    finally:
        broker.close()
        shutil.rmtree(tmp, ignore_errors=True)
    total = total_mean = 0.0
    print(f"caught-up long poll over {args.partitions} partitions"
          f"{', half of them on another worker' if args.front else ''}"
          f"{', through the connection memo' if args.memo else ''}, {args.fetches} "
          f"Fetches, µs per Fetch (median, mean):")
    for stage in stages:
        m, mean = statistics.median(times[stage]) * 1e6, statistics.fmean(times[stage]) * 1e6
        total += m
        total_mean += mean
        print(f"  {stage:10s} {m:8.1f} {mean:8.1f}")
    print(f"  {'total':10s} {total:8.1f} {total_mean:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
