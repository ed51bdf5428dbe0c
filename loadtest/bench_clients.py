"""Produce and consume throughput of mpbroker next to Tansu, with confluent-kafka.

    .venv/bin/python -m loadtest.bench_clients [--rounds 2] [--mb 32] [--sizes 100,1024]
                                               [--acks 1,all] [--peers mpbroker,tansu]

Both brokers run side by side on 127.0.0.1 for the whole run (see loadtest/peers.py).
For each record size and acks setting, one producer writes `--mb` MB of records to a
fresh 1-partition topic (linger.ms=5, batch.size=1 MiB, no compression) and flushes;
then one consumer reads them back from the beginning. Rounds alternate the peers
A B A B so that drift of the machine hits both. Printed: every round's figures, the
medians, the ratio mpbroker/Tansu of the medians, and the loopback TCP limit measured in
the same run. Bounded: a fixed volume per measurement and a deadline on every loop.

Broker CPU per request and per MB (`measure_cost`): produce and consume run one after
the other, so each phase's figures are clean per request type. The broker's CPU is its
process tree's (psutil, loadtest/bench/runner.py `tree_cpu_s`) over each call of
produce() / consume() (client start-up included); the requests are those the client sent
from its creation to its last librdkafka statistics snapshot, which the call waits for
after its work (loadtest/bench/reqstats.py). Printed per phase: requests, broker CPU µs
per Produce request and per MB produced, per Fetch request and per MB consumed.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from loadtest.bench.clients import CONSUMER_DEFAULTS
from loadtest.bench.reqstats import ReqStats, us_per
from loadtest.bench.report import fmt
from loadtest.bench.runner import median_of, tree_cpu_s
from loadtest.peers import (MpbrokerPeer, TansuPeer, create_topic, delete_topic,
                            loopback_tcp_limit_mb_s, make_workdir)

MEASURE_TIMEOUT_S = 120.0
STATS_MS = 100          # statistics interval with `reqs`: each call waits up to one for its last snapshot
FIELDS = [  # measure_cost()'s figures as printed: (key, title, format)
    ("produce_mb_s", "produce MB/s", "{:,.1f}"),
    ("consume_mb_s", "consume MB/s", "{:,.1f}"),
    ("produce_reqs", "Produce reqs", "{:,.0f}"),
    ("us_per_produce", "µs/Produce", "{:,.1f}"),
    ("us_per_mb_produced", "µs/MB prod", "{:,.0f}"),
    ("fetch_reqs", "Fetch reqs", "{:,.0f}"),
    ("us_per_fetch", "µs/Fetch", "{:,.1f}"),
    ("us_per_mb_consumed", "µs/MB cons", "{:,.0f}"),
]


def _with_stats(conf: dict, reqs: ReqStats | None) -> dict:
    """`conf` plus the statistics callback of `reqs`; a client made with it has sent no
    request yet."""
    if reqs is None:
        return conf
    reqs.assume_zero_at(time.time_ns())
    return {**conf, **reqs.config()}


def produce(bootstrap: str, topic: str, size: int, count: int, acks: str,
            extra: dict | None = None, reqs: ReqStats | None = None) -> float:
    """Seconds to produce `count` records of `size` bytes and flush (`extra`: more client
    properties, e.g. security; `reqs`: count the requests, waiting after the flush for a
    last statistics snapshot, outside the seconds)."""
    from confluent_kafka import Producer

    p = Producer(_with_stats({**(extra or {}), "bootstrap.servers": bootstrap, "linger.ms": 5,
                              "batch.size": 1 << 20, "acks": acks, "compression.type": "none",
                              "queue.buffering.max.kbytes": 1 << 20, "queue.buffering.max.messages": 1_000_000,
                              "message.timeout.ms": 60000}, reqs))
    value = b"x" * size
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    deadline = time.monotonic() + MEASURE_TIMEOUT_S
    t0 = time.perf_counter()
    i = 0
    while i < count:
        try:
            p.produce(topic, value=value, partition=0, on_delivery=on_delivery)
            i += 1
        except BufferError:
            p.poll(0.001)
            if time.monotonic() > deadline:
                raise TimeoutError("produce queue stuck")
    left = p.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"produce failed: {left} undelivered, errors {errors[:3]}")
    if reqs is not None:
        reqs.settle(p.poll, time.time_ns())
    return elapsed


def consume(bootstrap: str, topic: str, count: int, extra: dict | None = None,
            reqs: ReqStats | None = None) -> float:
    """Seconds to consume `count` records from the beginning, from the first record
    received (the consumer's start-up, metadata and offset lookups are not counted;
    `reqs`: as for produce())."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(_with_stats({**(extra or {}), "bootstrap.servers": bootstrap,
                              "group.id": f"bench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                              "auto.offset.reset": "earliest", "fetch.max.bytes": 52_428_800,
                              "max.partition.fetch.bytes": 10_485_760,
                              # no 1 s pause when its 64 MiB queue is full (loadtest/bench/clients.py)
                              "fetch.queue.backoff.ms": CONSUMER_DEFAULTS["fetch.queue.backoff.ms"]}, reqs))
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + MEASURE_TIMEOUT_S
        got = 0
        t0 = None
        while got < count and time.monotonic() < deadline:
            batch = c.consume(min(10000, count - got), timeout=1.0)
            if batch and t0 is None:
                t0 = time.perf_counter()
            got += sum(1 for m in batch if m.error() is None)
        elapsed = time.perf_counter() - (t0 or time.perf_counter())
        if got < count:
            raise TimeoutError(f"consumed {got} of {count}")
        if reqs is not None:
            reqs.settle(c.poll, time.time_ns())
        return max(elapsed, 1e-6)
    finally:
        c.close()


def measure(peer, size: int, acks: str, mb: float) -> tuple[float, float]:
    """(produce MB/s, consume MB/s) of `mb` MB of `size`-byte records."""
    r = _measure(peer, size, acks, mb, cost=False)
    return r["produce_mb_s"], r["consume_mb_s"]


def measure_cost(peer, size: int, acks: str, mb: float) -> dict:
    """measure()'s figures and the broker's CPU per request and per MB (FIELDS; None where
    not measurable: no broker process known, no statistics snapshot)."""
    return _measure(peer, size, acks, mb, cost=True)


def _measure(peer, size: int, acks: str, mb: float, cost: bool) -> dict:
    count = max(1000, int(mb * 1e6 / size))
    topic = f"bench-{size}-{acks}-{uuid.uuid4().hex[:6]}"
    pid = peer.proc.pid if cost and getattr(peer, "proc", None) is not None else None
    p_reqs, c_reqs = (ReqStats(STATS_MS), ReqStats(STATS_MS)) if cost else (None, None)
    create_topic(peer.bootstrap, topic)
    try:
        cpu0 = tree_cpu_s(pid)
        p_s = produce(peer.bootstrap, topic, size, count, acks, reqs=p_reqs)
        cpu1 = tree_cpu_s(pid)
        c_s = consume(peer.bootstrap, topic, count, reqs=c_reqs)
        cpu2 = tree_cpu_s(pid)
    finally:
        delete_topic(peer.bootstrap, topic)
    volume = count * size / 1e6
    out = {"produce_mb_s": volume / p_s, "consume_mb_s": volume / c_s}
    if cost:
        out.update(cost_figures(volume, cpu1 - cpu0 if pid else None, cpu2 - cpu1 if pid else None,
                                p_reqs.final().get("Produce"), c_reqs.final().get("Fetch")))
    return out


def cost_figures(volume_mb: float, produce_cpu_s: float | None, consume_cpu_s: float | None,
                 produce_reqs: float | None, fetch_reqs: float | None) -> dict:
    """Broker CPU per request and per MB of a produce phase and a consume phase of `volume_mb` MB."""
    return {"produce_reqs": produce_reqs, "fetch_reqs": fetch_reqs,
            "produce_cpu_s": produce_cpu_s, "consume_cpu_s": consume_cpu_s,
            "us_per_produce": us_per(produce_cpu_s, produce_reqs),
            "us_per_mb_produced": us_per(produce_cpu_s, volume_mb),
            "us_per_fetch": us_per(consume_cpu_s, fetch_reqs),
            "us_per_mb_consumed": us_per(consume_cpu_s, volume_mb)}


def median_lines(results: dict[tuple, list[dict]], peers: list[str], sizes: list[int],
                 acks_list: list[str]) -> list[str]:
    """One line per record size, acks and FIELDS figure: the median over rounds per peer
    ("-" where none), and the ratio mpbroker / tansu when both ran."""
    ratio = {"mpbroker", "tansu"} <= set(peers)
    lines = [f"{'size':>6} {'acks':>4} {'figure':>13} " + " ".join(f"{n:>13}" for n in peers)
             + (f" {'ratio':>13}" if ratio else "")]
    for size in sizes:
        for acks in acks_list:
            for key, title, spec in FIELDS:
                med = {n: median_of(results.get((n, size, acks), []), key) for n in peers}
                line = f"{size:>6} {acks:>4} {title:>13} " + " ".join(f"{fmt(med[n], spec):>13}" for n in peers)
                if ratio:
                    a, b = med["mpbroker"], med["tansu"]
                    line += f" {fmt(a / b if a == a and b == b and b else float('nan'), '{:.2f}'):>13}"
                lines.append(line)
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="A B rounds (default 2: A B A B)")
    ap.add_argument("--mb", type=float, default=32.0, help="MB produced per measurement")
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--acks", default="1,all")
    ap.add_argument("--peers", default="mpbroker,tansu")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    acks_list = args.acks.split(",")
    names = args.peers.split(",")

    peers = {}
    for name in names:
        try:
            peer = MpbrokerPeer(make_workdir("bench-mpbroker-")) if name == "mpbroker" else \
                TansuPeer(make_workdir("bench-tansu-"))
            peers[name] = peer.start()
            print(f"# {name}: {peer.describe()} at {peer.bootstrap}")
        except Exception as e:  # noqa: BLE001 - say exactly why a peer could not run
            print(f"# {name}: cannot run: {e}", file=sys.stderr)
    if not peers:
        return 1

    loop_mb_s = loopback_tcp_limit_mb_s()
    print(f"# loopback TCP limit (1 connection, 2 processes): {loop_mb_s:,.0f} MB/s")

    results: dict[tuple, list[dict]] = {}
    print(f"{'round':>5} {'peer':>9} {'size':>6} {'acks':>4} " + " ".join(f"{t:>13}" for _, t, _ in FIELDS))
    for r in range(1, args.rounds + 1):
        for name, peer in peers.items():
            for size in sizes:
                for acks in acks_list:
                    try:
                        res = measure_cost(peer, size, acks, args.mb)
                    except Exception as e:  # noqa: BLE001 - reported, the run goes on
                        print(f"{r:>5} {name:>9} {size:>6} {acks:>4} failed: {e}")
                        continue
                    results.setdefault((name, size, acks), []).append(res)
                    print(f"{r:>5} {name:>9} {size:>6} {acks:>4} "
                          + " ".join(f"{fmt(res.get(k), f):>13}" for k, _, f in FIELDS), flush=True)

    print("\n# medians over rounds (ratio = mpbroker / tansu; MB/s: higher is better, µs: lower)")
    for line in median_lines(results, list(peers), sizes, acks_list):
        print(line)
    print(f"# loopback TCP limit: {loop_mb_s:,.0f} MB/s")
    for p in peers.values():
        p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
