"""Forwarded produce vs local produce, by throughput AND by broker CPU per MB, or by
broker CPU per request (`--requests`).

    .venv/bin/python -m loadtest.bench_forward [--mb 32] [--min-each 3] [--max-trials 30]
                                              [--tree DIR]...
    .venv/bin/python -m loadtest.bench_forward --requests 6000 [--rate 1500] [--size 100]

One broker per `--tree` (a checkout of this repository; default: this one), each with
num.workers=2 and `placement.fwd-bench=0` (every partition on worker 0), run side by side,
with `worker.connection.handoff=false` (a tree older than that key warns that it ignores
it) unless `--handoff`: then a remote producer's connection moves to worker 0 after 24
requests (workers/handoff.py), and its trial shows what that saves.
Trials alternate over the brokers; each opens a fresh confluent-kafka producer (own
client.id), asks the broker which worker its connection landed on (local: worker 0,
remote: worker 1, every produce forwarded over the mesh), and produces `--mb` MB of
`--size`-byte records round-robin over `--partitions` partitions (loadtest/bench_workers
settings: linger.ms=5, batch.size=1 MiB, acks=1). Trials continue until every broker has
`--min-each` local and remote trials (or `--max-trials`).

Printed per broker: median MB/s local and remote and their ratio, and the median CPU
seconds (user+system of the broker's child processes: the workers and the controller)
per 100 MB, whose ratio remote/local is the forwarding cost with the noise of a shared
machine mostly removed (CPU time, unlike wall time, does not grow when other processes
take the cores).

`--requests N`: the cost of a forwarded request rather than of forwarded bytes. Each
trial sends N single-record Produce requests at `--rate` records/s (linger.ms=0, acks=1,
one record in flight at a time at that pace: what a latency-bound producer sends), and
prints the broker's CPU µs per Produce request (requests as librdkafka's statistics
count them) local and remote, their medians and ratio, and the medians of its user
and system parts.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Callable

from loadtest.bench_workers import admin_show, front_of, produce
from loadtest.peers import MpbrokerPeer, create_topic, delete_topic, make_workdir

TOPIC = "fwd-bench"


class TreePeer(MpbrokerPeer):
    def __init__(self, workdir, overrides, tree: Path):
        super().__init__(workdir, overrides)
        self.tree = tree

    def env(self) -> dict:
        env = super().env()
        env["PYTHONPATH"] = str(self.tree) + os.pathsep + env.get("PYTHONPATH", "")
        return env


def produce_requests(bootstrap, topic, partitions, size, count, rate, client_id,
                     on_connected, on_sent):
    """Send `count` records one by one at `rate`/s (linger.ms=0); the Produce requests
    librdkafka counted sending them. `on_connected` runs once the connection is up and
    counted, `on_sent` once every record is acknowledged (the broker's CPU is read
    between the two)."""
    from confluent_kafka import Producer
    stats, on_stats = tx_stats()
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "1",
                  "client.id": client_id, "statistics.interval.ms": 100,
                  "stats_cb": on_stats})
    value = b"x" * size
    p.produce(topic, value, partition=0)      # the connection exists before the count
    p.flush(30)
    tx0 = fresh_tx(p, stats)                  # a report written after the warm-up
    on_connected()
    t0 = time.perf_counter()
    for i in range(count):
        p.produce(topic, value, partition=i % partitions)
        p.poll(0)
        ahead = t0 + (i + 1) / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
    if p.flush(60):
        raise RuntimeError("produce failed: records left undelivered")
    on_sent()
    return fresh_tx(p, stats) - tx0


def tx_stats() -> tuple[dict, Callable]:
    """(stats, stats_cb) for a librdkafka client: `stats["tx"]`, the requests it sent to
    the brokers (not to the bootstrap address), from each statistics report."""
    stats = {}

    def on_stats(doc):
        stats["tx"] = sum(b["tx"] for b in json.loads(doc)["brokers"].values()
                          if b["nodeid"] >= 0)
    return stats, on_stats


def fresh_tx(p, stats: dict) -> int:
    """The requests sent so far, from a statistics report written after this call
    (one processed by a flush may predate the requests just acknowledged)."""
    stats.clear()
    deadline = time.monotonic() + 10
    while "tx" not in stats:
        if time.monotonic() > deadline:
            raise RuntimeError("no statistics from librdkafka within 10 s")
        p.poll(0.05)
    return stats["tx"]


def broker_cpu_split(peer) -> tuple[float, float]:
    """(user, system) CPU seconds of the broker's processes below its supervisor (the
    workers and the controller; their sum is what loadtest/bench/runner.py `tree_cpu_s`
    counts of them)."""
    import psutil
    user = system = 0.0
    try:
        procs = psutil.Process(peer.proc.pid).children(recursive=True)
    except psutil.Error:
        return 0.0, 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        user += t.user
        system += t.system
    return user, system


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=32)
    ap.add_argument("--size", type=int, default=None,
                    help="record bytes (default 1024; 100 with --requests)")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--min-each", type=int, default=3)
    ap.add_argument("--max-trials", type=int, default=30)
    ap.add_argument("--tree", action="append", default=[])
    ap.add_argument("--requests", type=int, default=0,
                    help="CPU per request: this many single-record Produce requests a trial")
    ap.add_argument("--rate", type=float, default=1500, help="records/s with --requests")
    ap.add_argument("--handoff", action="store_true",
                    help="leave connection hand-off on: a remote producer moves to worker 0 "
                         "after a few requests (default off: every request of a remote one "
                         "is forwarded, the hop this measures)")
    args = ap.parse_args(argv)
    if args.rate <= 0:
        ap.error("--rate must be positive")
    if args.size is None:
        args.size = 100 if args.requests else 1024
    trees = [Path(t).resolve() for t in args.tree] or [Path(__file__).resolve().parent.parent]
    count = int(args.mb * 1e6 / args.size)
    mb = args.size * count / 1e6
    peers = []
    for i, tree in enumerate(trees):
        overrides = {"num.workers": 2, f"placement.{TOPIC}": 0}
        if not args.handoff:
            overrides["worker.connection.handoff"] = "false"
        peers.append(TreePeer(make_workdir(f"fwd{i}"), overrides, tree))
    for p in peers:
        p.start()
    res = [{0: [], 1: []} for _ in peers]
    try:
        for p in peers:
            create_topic(p.bootstrap, TOPIC, args.partitions)
            owners = {q["partition"]: w["worker"] for w in admin_show(p)["workers"]
                      for q in w["partitions"] if q["topic"] == TOPIC}
            assert set(owners.values()) == {0}, owners
        for trial in range(args.max_trials):
            order = range(len(peers)) if trial % 2 == 0 else reversed(range(len(peers)))
            for i in order:
                peer = peers[i]
                cid = f"fwd-{trial}-{uuid.uuid4().hex[:6]}"
                seen = {}

                def classify():
                    seen["front"] = front_of(peer, cid, "bytes_in")
                    seen["cpu"] = broker_cpu_split(peer)
                if args.requests:
                    def sent():
                        seen["cpu_end"] = broker_cpu_split(peer)
                    n = produce_requests(peer.bootstrap, TOPIC, args.partitions, args.size,
                                         args.requests, args.rate, cid, classify, sent)
                    user, system = (b - a for a, b in zip(seen["cpu"], seen["cpu_end"]))
                    cpu = user + system
                    front = seen.get("front")
                    if front is None or not n:
                        continue
                    res[i][front].append((n, cpu * 1e6 / n, user * 1e6 / n, system * 1e6 / n))
                    print(f"trial {trial + 1} {trees[i]}: worker {front} "
                          f"({'local' if front == 0 else 'remote'}): {n} Produce requests, "
                          f"{cpu * 1e6 / n:6.1f} broker CPU µs per request (user "
                          f"{user * 1e6 / n:.1f}, system {system * 1e6 / n:.1f})", flush=True)
                    continue
                dt = produce(peer.bootstrap, TOPIC, args.partitions, args.size, count, cid,
                             classify)
                cpu = sum(broker_cpu_split(peer)) - sum(seen["cpu"])
                front = seen.get("front")
                if front is None:
                    continue
                res[i][front].append((mb / dt, cpu * 100 / mb))
                print(f"trial {trial + 1} {trees[i]}: worker {front} "
                      f"({'local' if front == 0 else 'remote'}): {mb / dt:7.1f} MB/s, "
                      f"{cpu * 100 / mb:6.3f} CPU s/100MB", flush=True)
            if all(len(r[0]) >= args.min_each and len(r[1]) >= args.min_each for r in res):
                break
        for p in peers:
            delete_topic(p.bootstrap, TOPIC)
    finally:
        for p in peers:
            p.stop()
    print()
    for i, r in enumerate(res):
        if not r[0] or not r[1]:
            print(f"{trees[i]}: not enough trials (local {len(r[0])}, remote {len(r[1])})")
            continue
        ml, mr = (statistics.median(x[0] for x in r[w]) for w in (0, 1))
        cl, cr = (statistics.median(x[1] for x in r[w]) for w in (0, 1))
        if args.requests:
            ul, ur, sl, sr = (statistics.median(x[k] for x in r[w])
                              for k, w in ((2, 0), (2, 1), (3, 0), (3, 1)))
            print(f"{trees[i]}: broker CPU µs per Produce request: local {cl:.1f} "
                  f"(n={len(r[0])}), remote {cr:.1f} (n={len(r[1])}), "
                  f"remote/local = {cr / cl if cl else float('inf'):.2f}; user/system "
                  f"local {ul:.1f}/{sl:.1f}, remote {ur:.1f}/{sr:.1f}")
            continue
        print(f"{trees[i]}: local {ml:.1f} MB/s (n={len(r[0])}), remote {mr:.1f} MB/s "
              f"(n={len(r[1])}), throughput remote/local = {mr / ml:.2f}; CPU s/100MB local "
              f"{cl:.3f}, remote {cr:.3f}, CPU remote/local = {cr / cl:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
