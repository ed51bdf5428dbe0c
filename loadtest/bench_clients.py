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
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

from loadtest.peers import (MpbrokerPeer, TansuPeer, create_topic, delete_topic,
                            loopback_tcp_limit_mb_s, make_workdir)

MEASURE_TIMEOUT_S = 120.0


def produce(bootstrap: str, topic: str, size: int, count: int, acks: str,
            extra: dict | None = None) -> float:
    """Seconds to produce `count` records of `size` bytes and flush (`extra`: more client
    properties, e.g. security)."""
    from confluent_kafka import Producer

    p = Producer({**(extra or {}), "bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": acks,
                  "compression.type": "none", "queue.buffering.max.kbytes": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000, "message.timeout.ms": 60000})
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
    return elapsed


def consume(bootstrap: str, topic: str, count: int, extra: dict | None = None) -> float:
    """Seconds to consume `count` records from the beginning, from the first record
    received (the consumer's start-up, metadata and offset lookups are not counted)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({**(extra or {}), "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
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
        return max(elapsed, 1e-6)
    finally:
        c.close()


def measure(peer, size: int, acks: str, mb: float) -> tuple[float, float]:
    count = max(1000, int(mb * 1e6 / size))
    topic = f"bench-{size}-{acks}-{uuid.uuid4().hex[:6]}"
    create_topic(peer.bootstrap, topic)
    try:
        p_s = produce(peer.bootstrap, topic, size, count, acks)
        c_s = consume(peer.bootstrap, topic, count)
    finally:
        delete_topic(peer.bootstrap, topic)
    volume = count * size / 1e6
    return volume / p_s, volume / c_s


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

    results: dict[tuple, list[tuple[float, float]]] = {}
    print(f"{'round':>5} {'peer':>9} {'size':>6} {'acks':>4} {'produce MB/s':>13} {'consume MB/s':>13}")
    for r in range(1, args.rounds + 1):
        for name, peer in peers.items():
            for size in sizes:
                for acks in acks_list:
                    try:
                        pr, co = measure(peer, size, acks, args.mb)
                    except Exception as e:  # noqa: BLE001 - reported, the run goes on
                        print(f"{r:>5} {name:>9} {size:>6} {acks:>4} failed: {e}")
                        continue
                    results.setdefault((name, size, acks), []).append((pr, co))
                    print(f"{r:>5} {name:>9} {size:>6} {acks:>4} {pr:>13.1f} {co:>13.1f}", flush=True)

    print("\n# medians over rounds")
    print(f"{'size':>6} {'acks':>4} " + " ".join(f"{n + ' prod':>14} {n + ' cons':>14}" for n in peers) +
          ("  ratio prod  ratio cons (mpbroker/tansu)" if {"mpbroker", "tansu"} <= set(peers) else ""))
    for size in sizes:
        for acks in acks_list:
            med = {}
            for n in peers:
                rows = results.get((n, size, acks), [])
                med[n] = (statistics.median(x for x, _ in rows), statistics.median(y for _, y in rows)) \
                    if rows else (float("nan"), float("nan"))
            line = f"{size:>6} {acks:>4} " + " ".join(f"{med[n][0]:>14.1f} {med[n][1]:>14.1f}" for n in peers)
            if "mpbroker" in med and "tansu" in med:
                line += f"  {med['mpbroker'][0] / med['tansu'][0]:>10.2f}  {med['mpbroker'][1] / med['tansu'][1]:>10.2f}"
            print(line)
    print(f"# loopback TCP limit: {loop_mb_s:,.0f} MB/s")
    for p in peers.values():
        p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
