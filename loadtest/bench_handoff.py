"""What a tailing consumer costs the broker when its connection lands on a worker that
does not own its partitions, with and without connection hand-off
(`worker.connection.handoff`, workers/handoff.py).

    .venv/bin/python -m loadtest.bench_handoff [--records 3000] [--rate 600]
                                               [--min-each 3] [--max-trials 30]

Two brokers side by side, both num.workers=2 with every partition of the topic on
worker 0 (`placement.<topic>=0`): one with hand-off (the default), one with
`worker.connection.handoff=false`. One confluent-kafka producer per broker, kept for the
whole run, whose connection is on worker 0 (producers are opened until one lands
there), so what it costs is the same in every trial. Each trial opens a fresh consumer
(fetch.wait.max.ms=100, fetch.min.bytes=1) that tails every partition, lets it make 15
requests (a remote one is handed over meanwhile), then produces `--records` 1 KiB
records at `--rate` records/s, one at a time (linger.ms=0), and reads the broker's CPU
(user+system of its workers and controller) from the first record sent to the last
one consumed. Trials are classified by where the consumer's connection landed: on
worker 0 (local) or on worker 1 (remote: it stays there without hand-off, it moves to
worker 0 with it), and continue until each broker has `--min-each` of both (or
`--max-trials`).

Printed per broker and class: the median broker CPU µs per record and per consumer
Fetch request (librdkafka's statistics count the Fetches), and the remote/local ratio.
CPU time, unlike wall time, does not grow when other processes take the cores.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

from loadtest.bench_forward import broker_cpu_split, fresh_tx, tx_stats
from loadtest.bench_workers import admin_show, front_of
from loadtest.peers import MpbrokerPeer, create_topic, delete_topic, make_workdir

TOPIC = "handoff-bench"
ARMS = (("handoff", {}), ("no handoff", {"worker.connection.handoff": "false"}))


def handed_over(peer) -> int:
    return sum(w.get("handed_over", 0) for w in admin_show(peer)["workers"])


def producer_on_worker_0(peer, tries: int = 40):
    """A producer whose connection the kernel gave to worker 0 (the owner)."""
    from confluent_kafka import Producer
    for k in range(tries):
        cid = f"hop-{k}-{uuid.uuid4().hex[:6]}"
        p = Producer({"bootstrap.servers": peer.bootstrap, "linger.ms": 0, "acks": "1",
                      "client.id": cid})
        p.produce(TOPIC, b"warm-up", partition=0)
        p.flush(30)
        if front_of(peer, cid, "bytes_in") == 0:
            return p
        p.flush(10)
        del p
    raise RuntimeError(f"no producer connection landed on worker 0 in {tries} tries")


def trial(peer, producer, partitions: int, records: int, rate: float) -> dict | None:
    """One consumer's trial (module docstring): where it landed, CPU µs per record and
    per Fetch, or None when it could not be classified."""
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition
    cid = f"hoc-{uuid.uuid4().hex[:8]}"
    stats, on_stats = tx_stats()
    before = handed_over(peer)
    c = Consumer({"bootstrap.servers": peer.bootstrap, "group.id": cid, "client.id": cid,
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100, "fetch.min.bytes": 1,
                  "statistics.interval.ms": 100, "stats_cb": on_stats})
    try:
        c.assign([TopicPartition(TOPIC, q, OFFSET_END) for q in range(partitions)])
        # its first requests (ListOffsets, then Fetches of 100 ms long polls: 3 of them
        # and it is handed over if it can be, within a second)
        fetches0 = fresh_tx(c, stats)
        while fresh_tx(c, stats) < fetches0 + 15:
            pass
        moved = handed_over(peer) > before
        # its Fetch connection: the one that sent the most (Fetch requests), not the
        # bootstrap or coordinator connection
        front = front_of(peer, cid, "bytes_in")
        if front is None:
            return None
        landed = 1 if moved else front
        fetches0 = fresh_tx(c, stats)
        cpu0 = sum(broker_cpu_split(peer))
        value = b"x" * 1024
        got = 0
        t0 = time.perf_counter()
        for i in range(records):
            producer.produce(TOPIC, value, partition=i % partitions)
            producer.poll(0)
            m = c.poll(0)
            while m is not None:
                if m.error() is None:
                    got += 1
                m = c.poll(0)
            ahead = t0 + (i + 1) / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        producer.flush(60)
        deadline = time.monotonic() + 60
        while got < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumer read {got} of {records} records")
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got += 1
        cpu = sum(broker_cpu_split(peer)) - cpu0
        fetches = fresh_tx(c, stats) - fetches0
        return {"landed": landed, "moved": moved, "per_record": cpu * 1e6 / records,
                "per_fetch": cpu * 1e6 / max(fetches, 1), "fetches": fetches}
    finally:
        c.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=600)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--min-each", type=int, default=3)
    ap.add_argument("--max-trials", type=int, default=30)
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.records <= 0:
        ap.error("--rate and --records must be positive")
    peers = [MpbrokerPeer(make_workdir(f"ho{i}"), {"num.workers": 2, f"placement.{TOPIC}": 0,
                                                   **extra})
             for i, (_, extra) in enumerate(ARMS)]
    for p in peers:
        p.start()
    res = [{0: [], 1: []} for _ in peers]
    try:
        producers = []
        for p in peers:
            create_topic(p.bootstrap, TOPIC, args.partitions)
            producers.append(producer_on_worker_0(p))
        for t in range(args.max_trials):
            order = range(len(peers)) if t % 2 == 0 else reversed(range(len(peers)))
            for i in order:
                r = trial(peers[i], producers[i], args.partitions, args.records, args.rate)
                if r is None:
                    continue
                res[i][r["landed"]].append(r)
                where = "local" if r["landed"] == 0 else (
                    "remote, handed over" if r["moved"] else "remote")
                print(f"trial {t + 1} {ARMS[i][0]}: consumer {where}: {r['fetches']} Fetches, "
                      f"{r['per_record']:6.1f} broker CPU µs per record, "
                      f"{r['per_fetch']:6.1f} per Fetch", flush=True)
            if all(len(r[0]) >= args.min_each and len(r[1]) >= args.min_each for r in res):
                break
        for p, prod in zip(peers, producers):
            prod.flush(30)
            delete_topic(p.bootstrap, TOPIC)
    finally:
        for p in peers:
            p.stop()
    print()
    for (name, _), r in zip(ARMS, res):
        if not r[0] or not r[1]:
            print(f"{name}: not enough trials (local {len(r[0])}, remote {len(r[1])})")
            continue
        (rl, rr), (fl, fr) = ((statistics.median(x[k] for x in r[w]) for w in (0, 1))
                              for k in ("per_record", "per_fetch"))
        print(f"{name}: broker CPU µs per record: consumer local {rl:.1f} (n={len(r[0])}), "
              f"remote {rr:.1f} (n={len(r[1])}), remote/local = {rr / rl:.2f}; per Fetch: "
              f"local {fl:.1f}, remote {fr:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
