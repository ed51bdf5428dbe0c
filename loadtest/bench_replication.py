"""Replication benchmark on a real 3-broker cluster (real ZooKeeper, `mpbroker serve`
x 3, 2 workers each; the tests/cluster harness), in one run:

    python loadtest/bench_replication.py [--rounds 5] [--messages 50000] [--size 100]
                                         [--session-ms 4000] [--workers 2]

* failover time: a topic with RF=3, min.insync.replicas=2; a confluent-kafka producer
  (acks=all, message.timeout.ms 2 s) sends a message every 20 ms; the partition leader
  gets kill -9; measured is the time from the kill to the first delivery report of an
  acks=all produce that succeeds afterwards (so it
  includes the ZooKeeper session timeout `--session-ms`, the controller's election, the
  metadata push and the client's metadata refresh). The killed broker is restarted and
  rejoins the ISR before the next round. Median and all rounds are printed, and the part
  that is the session timeout.
* replicated produce throughput: `--messages` of `--size` bytes with acks=all vs acks=1
  to the same RF=3 topic (4 partitions, linger.ms=5), messages/s and MB/s, median of
  `--rounds`, and the ratio acks=all / acks=1.

Needs the `zookeeper` package (Debian) and java, like tests/cluster.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from loadtest.peers import delete_topic  # noqa: E402
from tests.cluster.harness import Cluster, ZooKeeperServer, zookeeper_available  # noqa: E402


def create_topic(c, name, partitions, rf=3, config=None):
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    fs = a.create_topics([NewTopic(name, partitions, rf, config=config or {})],
                         operation_timeout=30, request_timeout=30)
    fs[name].result(30)
    c.wait_for(lambda: all((c.state(name, p) or {}).get("leader", -1) >= 0
                           for p in range(partitions)), 30, "leaders")


def full_isr(c, topic, partitions=1):
    return all(len((c.state(topic, p) or {}).get("isr", ())) == 3 for p in range(partitions))


def produce_one(p: Producer, topic: str, value: bytes, timeout: float) -> bool:
    out = []
    p.produce(topic, value, partition=0, on_delivery=lambda e, m: out.append(e))
    deadline = time.monotonic() + timeout
    while not out and time.monotonic() < deadline:
        p.poll(0.005)
    return bool(out) and out[0] is None


def failover_round(c, topic, i) -> float:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                  "message.timeout.ms": 2000, "retry.backoff.ms": 20,
                  "topic.metadata.refresh.interval.ms": 60000,
                  "reconnect.backoff.max.ms": 200, "socket.connection.setup.timeout.ms": 1000})
    try:
        for k in range(20):
            assert produce_one(p, topic, b"warm-%d-%d" % (i, k), 10), "warm-up produce failed"
        leader = c.state(topic, 0)["leader"]
        ok_at = []

        def cb(err, msg):
            if err is None and not ok_at:
                ok_at.append(time.monotonic())
        t0 = time.monotonic()
        c.kill(leader)
        n = 0
        # a produce every 20 ms (each may time out after message.timeout.ms): the first
        # delivery that succeeds ends the outage
        while not ok_at:
            p.produce(topic, b"after-%d-%d" % (i, n), partition=0, on_delivery=cb)
            n += 1
            p.poll(0.02)
            if time.monotonic() - t0 > 120:
                raise RuntimeError("no successful produce within 120 s of the kill")
        took = ok_at[0] - t0
    finally:
        p.flush(5)
    c.start(leader)
    c.wait_for(lambda: full_isr(c, topic), 60, f"broker {leader} back in the ISR")
    return took


def throughput(c, topic, acks: str, n: int, size: int) -> float:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": acks, "linger.ms": 5,
                  "batch.size": 131072, "queue.buffering.max.messages": 200000,
                  "enable.idempotence": acks == "all"})
    value = os.urandom(size)
    errors = []
    cb = (lambda e, m: errors.append(e) if e else None)
    # metadata + connections first
    p.produce(topic, value, on_delivery=cb)
    p.flush(30)
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.001)
    left = p.flush(120)
    took = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"{left} undelivered, errors {errors[:3]}")
    return n / took


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--messages", type=int, default=50000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--session-ms", type=int, default=4000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-failover", action="store_true")
    args = ap.parse_args(argv)
    why = zookeeper_available()
    if why:
        sys.exit(f"cannot run: {why}")
    work = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    zk = ZooKeeperServer(work / "zk").start()
    c = None
    try:
        c = Cluster(zk, work / "cluster", 3, "/bench", {
            "zookeeper.session.timeout.ms": args.session_ms, "num.workers": args.workers,
            "unclean.leader.election.enable": "false"})
        print(f"cluster: 3 brokers x {args.workers} workers, ZooKeeper session "
              f"{args.session_ms} ms, {os.cpu_count()} cores")
        create_topic(c, "tput", 4, config={"min.insync.replicas": "2"})
        rates = {"all": [], "1": []}
        for r in range(args.rounds):
            for acks in ("1", "all"):
                rates[acks].append(throughput(c, "tput", acks, args.messages, args.size))
        med = {k: statistics.median(v) for k, v in rates.items()}
        for acks in ("1", "all"):
            print(f"produce RF=3 acks={acks:>3}: {med[acks]:>10,.0f} msg/s "
                  f"{med[acks] * args.size / 1e6:7.2f} MB/s  (rounds: "
                  f"{', '.join(f'{x:,.0f}' for x in rates[acks])})")
        print(f"ratio acks=all / acks=1: {med['all'] / med['1']:.2f}")
        if not args.skip_failover:
            create_topic(c, "fo", 1, config={"min.insync.replicas": "2"})
            times = [failover_round(c, "fo", i) for i in range(args.rounds)]
            m = statistics.median(times)
            print(f"failover (kill -9 leader -> first acks=all success): median {m:.2f} s "
                  f"(rounds: {', '.join(f'{t:.2f}' for t in times)}); of which ZooKeeper "
                  f"session timeout {args.session_ms / 1000:.1f} s, the rest "
                  f"{m - args.session_ms / 1000:.2f} s")
            delete_topic(c.bootstrap, "fo")
        delete_topic(c.bootstrap, "tput")
    finally:
        if c is not None:
            c.close()
        zk.stop()


if __name__ == "__main__":
    main()
