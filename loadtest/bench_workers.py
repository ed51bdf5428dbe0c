"""num.workers 1 vs 2, and the cost of cross-worker routing, with confluent-kafka.

    .venv/bin/python -m loadtest.bench_workers [--rounds 2] [--mb 64] [--size 1024]
                                              [--partitions 8] [--routing-trials 8]

Part 1, workers: one broker with num.workers=1 and one with num.workers=2 run side by side
(loadtest/peers.py). Each round, for each broker: one producer writes `--mb` MB of
`--size`-byte records round-robin over a fresh `--partitions`-partition topic
(linger.ms=5, batch.size=1 MiB, acks=1, no compression) and flushes; then one consumer
reads them back from the beginning. Rounds alternate the brokers (A B A B). With two
workers the client's connection lands on one of them, so about half the partitions are
served through the other worker (routing) -- that is the real-world shape.

Part 2, routing cost: one broker with num.workers=2 and `placement.<topic>=0`, so every
partition of the topic lives on worker 0. SO_REUSEPORT picks the front at random, so
each trial opens a new client with its own `client.id` and then asks the broker which
worker served that client's data connection (`mpbroker placement show --json` lists
every worker's connections with their client id and bytes): trials whose connection
landed on worker 0 are "local" (no hop), those on worker 1 are "remote" (every request
forwarded over the mesh, fetch data still sent with sendfile by the front). Printed:
MB/s of each trial, the medians, and the ratio remote/local for produce and consume.

On a 2-CPU machine the client, the controller and both workers share the 2 cores, so
part 1 measures contention as much as scaling; the figures say what this machine did.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

from loadtest.peers import MpbrokerPeer, create_topic, delete_topic, make_workdir

TIMEOUT_S = 120.0


def produce(bootstrap, topic, partitions, size, count, client_id=None, on_connected=None):
    """Seconds to produce `count` records round-robin and flush."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
                  "acks": "1", "compression.type": "none", "queue.buffering.max.kbytes": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000, "message.timeout.ms": 60000,
                  "client.id": client_id or f"bench-{uuid.uuid4().hex[:8]}"})
    value = b"x" * size
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)
    # warm-up: the connection exists (and may be classified) before the clock starts
    p.produce(topic, value, partition=0, on_delivery=cb)
    p.flush(30)
    if on_connected:
        on_connected()
    t0 = time.perf_counter()
    deadline = time.monotonic() + TIMEOUT_S
    for i in range(count):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
                if time.monotonic() > deadline:
                    raise TimeoutError("produce timed out")
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(TIMEOUT_S)
    dt = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"produce failed: {left} undelivered, errors {errors[:3]}")
    return dt


def consume(bootstrap, topic, partitions, count, client_id=None, on_connected=None):
    """Seconds to read `count` records from the beginning of every partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 8 << 20,
                  "queued.max.messages.kbytes": 1 << 20,
                  "client.id": client_id or f"bench-{uuid.uuid4().hex[:8]}"})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    first = c.consume(1, 10)            # connection up, first fetch answered
    got += len([m for m in first if m.error() is None])
    if on_connected:
        on_connected()
    t0 = time.perf_counter()
    deadline = time.monotonic() + TIMEOUT_S
    while got < count and time.monotonic() < deadline:
        for m in c.consume(min(10000, count - got), 1.0):
            if m.error() is None:
                got += 1
    dt = time.perf_counter() - t0
    c.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count}")
    return dt


def admin_show(peer) -> dict:
    from mpbroker.cli.main import admin_call
    return admin_call(str(peer.workdir / "server.properties"), [],
                       {"cmd": "show", "interval": 0.05}, 30)


def front_of(peer, client_id: str, key: str) -> int | None:
    """The worker holding the client's busiest connection (by `key`: bytes_in/bytes_out)."""
    best = None
    for w in admin_show(peer)["workers"]:
        for c in w["connections"]:
            if c["client_id"] == client_id and (best is None or c[key] > best[0]):
                best = (c[key], w["worker"])
    return best[1] if best else None


def part_workers(args, size, count) -> dict:
    peers = {n: MpbrokerPeer(make_workdir(f"workers{n}"), {"num.workers": n}) for n in (1, 2)}
    for p in peers.values():
        p.start()
    res = {n: {"produce": [], "consume": []} for n in peers}
    mb = size * count / 1e6
    try:
        for r in range(args.rounds):
            order = (1, 2) if r % 2 == 0 else (2, 1)
            for n in order:
                peer = peers[n]
                topic = f"bw-{uuid.uuid4().hex[:8]}"
                create_topic(peer.bootstrap, topic, args.partitions)
                try:
                    tp = produce(peer.bootstrap, topic, args.partitions, size, count)
                    tc = consume(peer.bootstrap, topic, args.partitions, count + 1)
                finally:
                    delete_topic(peer.bootstrap, topic)
                res[n]["produce"].append(mb / tp)
                res[n]["consume"].append(mb / tc)
                print(f"round {r + 1} num.workers={n}: produce {mb / tp:7.1f} MB/s, "
                      f"consume {mb / tc:7.1f} MB/s", flush=True)
    finally:
        for p in peers.values():
            p.stop()
    return res


def part_routing(args, size, count) -> dict:
    topic = "routing-bench"
    peer = MpbrokerPeer(make_workdir("routing"), {"num.workers": 2, f"placement.{topic}": 0})
    peer.start()
    res = {"produce": {0: [], 1: []}, "consume": {0: [], 1: []}}
    mb = size * count / 1e6
    try:
        create_topic(peer.bootstrap, topic, args.partitions)
        owners = {p["partition"]: w["worker"] for w in admin_show(peer)["workers"]
                  for p in w["partitions"] if p["topic"] == topic}
        assert set(owners.values()) == {0}, owners
        produce(peer.bootstrap, topic, args.partitions, size, count)   # data for consumers
        for kind in ("produce", "consume"):
            for trial in range(args.routing_trials):
                cid = f"rt-{kind}-{trial}-{uuid.uuid4().hex[:6]}"
                seen = {}

                def classify():
                    seen["front"] = front_of(peer, cid, "bytes_in" if kind == "produce" else "bytes_out")
                if kind == "produce":
                    dt = produce(peer.bootstrap, topic, args.partitions, size, count, cid, classify)
                else:
                    dt = consume(peer.bootstrap, topic, args.partitions, count, cid, classify)
                front = seen.get("front")
                if front is None:
                    continue
                res[kind][front].append(mb / dt)
                print(f"{kind} trial {trial + 1}: connection on worker {front} "
                      f"({'local' if front == 0 else 'remote'}): {mb / dt:7.1f} MB/s", flush=True)
        delete_topic(peer.bootstrap, topic)
    finally:
        peer.stop()
    return res


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mb", type=float, default=64)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--routing-trials", type=int, default=8)
    ap.add_argument("--skip-workers", action="store_true")
    ap.add_argument("--skip-routing", action="store_true")
    args = ap.parse_args(argv)
    count = int(args.mb * 1e6 / args.size)
    print(f"{args.mb:g} MB of {args.size}-byte records per measurement, "
          f"{args.partitions} partitions, confluent-kafka", flush=True)
    if not args.skip_workers:
        res = part_workers(args, args.size, count)
        print("\nmedians:")
        for what in ("produce", "consume"):
            one, two = med(res[1][what]), med(res[2][what])
            print(f"  {what:8s} num.workers=1 {one:7.1f} MB/s   num.workers=2 {two:7.1f} MB/s   "
                  f"ratio 2/1 = {two / one:.2f}")
    if not args.skip_routing:
        res = part_routing(args, args.size, count)
        print("\nrouting cost (all partitions on worker 0):")
        for what in ("produce", "consume"):
            loc, rem = med(res[what][0]), med(res[what][1])
            print(f"  {what:8s} local front {loc:7.1f} MB/s (n={len(res[what][0])})   "
                  f"remote front {rem:7.1f} MB/s (n={len(res[what][1])})   "
                  f"ratio remote/local = {rem / loc:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
