"""Mirror throughput and end-to-end lag between two local mpbroker processes:

    python -m loadtest.bench_mirror [--messages 100000] [--size 200] [--partitions 6]
                                    [--rounds 3] [--rate 2000] [--seconds 10] [--eos]

* throughput: `--messages` records of `--size` bytes preloaded into a topic of cluster A;
  each round mirrors them to B once with `mpbroker mirror` (a fresh pair of cluster
  aliases per round, so a fresh group and remote topic) and once with a plain
  confluent-kafka pipeline in its own process (a consumer group on A, an idempotent
  acks=all producer to B with the mirror's producer settings, offsets committed every
  10 s: what a hand-written mirror would do). Rate = records that arrived at B between
  the first one and the last one / that time (the end offsets of B's topic polled every
  50 ms), so process start and group join are not counted. Medians over `--rounds`,
  and the ratio mirror / pipeline (goal: at least 0.8).
* end-to-end lag: a producer writes `--rate` records a second for `--seconds` into A
  while the mirror runs; a consumer on B reads them; lag = arrival time at B - the
  record's timestamp (set by the producer, kept by the mirror). p50, p99, max.

Both brokers run with their defaults (2 workers each), on loopback, in temporary dirs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, OffsetSpec  # noqa: E402

from loadtest.peers import REPO_ROOT, MpbrokerPeer, create_topic, make_workdir  # noqa: E402

PRODUCER = {"enable.idempotence": "true", "acks": "all", "linger.ms": "5",
            "compression.type": "none"}


def end_total(admin: AdminClient, topic: str, partitions: int) -> int:
    try:
        futs = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                                   for p in range(partitions)}, request_timeout=10)
        return sum(f.result(10).offset for f in futs.values())
    except KafkaException:                              # the topic is not there yet
        return 0


def measure(bootstrap: str, topic: str, partitions: int, n: int, proc, timeout: float) -> float:
    """Records per second at which `topic` on B went from its first record to n (from
    the call, start-up included, when all n were there at the first look: tiny runs)."""
    called = time.monotonic()
    first_t, first_n = None, 0
    deadline = time.monotonic() + timeout
    # An AdminClient that asked for offsets of a topic before it existed keeps failing
    # for it (librdkafka 2.16), so the probe is made once the topic is there.
    while AdminClient({"bootstrap.servers": bootstrap}).list_topics(
            timeout=10).topics.get(topic) is None:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{topic} never appeared")
        time.sleep(0.05)
    probe = AdminClient({"bootstrap.servers": bootstrap})
    while time.monotonic() < deadline:
        got = end_total(probe, topic, partitions)
        now = time.monotonic()
        if got > 0 and first_t is None:
            first_t, first_n = now, got
        if got >= n:
            if got == first_n:
                return n / max(1e-3, now - called)
            return (got - first_n) / max(1e-3, now - first_t)
        if proc.poll() is not None:
            raise RuntimeError(f"the pipeline exited with {proc.returncode}")
        time.sleep(0.05)
    raise TimeoutError(f"{topic}: not all {n} records after {timeout}s")


def pipeline_main(src: str, dst: str, topic: str, remote: str, group: str) -> None:
    """The plain confluent-kafka consume + produce pipeline (run in a subprocess)."""
    c = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": "false",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    p = Producer({"bootstrap.servers": dst, **PRODUCER})
    c.subscribe([topic])
    last_commit = time.monotonic()
    while True:
        for m in c.consume(1000, timeout=0.2):
            if m.error() is not None:
                continue
            kw = {"partition": m.partition(), "key": m.key(), "value": m.value(),
                  "timestamp": m.timestamp()[1]}
            if m.headers():
                kw["headers"] = m.headers()
            while True:
                try:
                    p.produce(remote, **kw)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
        if time.monotonic() - last_commit > 10:
            p.flush()
            c.commit(asynchronous=True)
            last_commit = time.monotonic()


def mm2_config(path: Path, src: str, dst: str, a: str, b: str, topic: str, eos: bool) -> Path:
    path.write_text(
        f"clusters = {a}, {b}\n{a}.bootstrap.servers = {src}\n{b}.bootstrap.servers = {dst}\n"
        f"{a}->{b}.enabled = true\n{a}->{b}.topics = {topic}\nreplication.factor = 1\n"
        "offset-syncs.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 1\n"
        "checkpoints.topic.replication.factor = 1\n"
        f"exactly.once.support = {'enabled' if eos else 'disabled'}\n")
    return path


def spawn(args: list, log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, *args], stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def preload(bootstrap: str, topic: str, n: int, size: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": "20", "batch.size": 1 << 20})
    value = os.urandom(size)
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, key=str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


def lag_run(src: str, dst: str, work: Path, args) -> dict:
    topic = f"lag-{uuid.uuid4().hex[:6]}"
    create_topic(src, topic, args.partitions)
    a, b = "L", "M"
    proc = spawn(["-m", "mpbroker.cli.main", "mirror", "-c",
                  str(mm2_config(work / "lag.properties", src, dst, a, b, topic, args.eos))],
                 work / "mirror-lag.log")
    remote = f"{a}.{topic}"
    c = Consumer({"bootstrap.servers": dst, "group.id": f"lag-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": "false",
                  "topic.metadata.refresh.interval.ms": 1000})
    c.subscribe([remote])
    p = Producer({"bootstrap.servers": src, "linger.ms": "1"})
    lags = []
    total = int(args.rate * args.seconds)
    try:
        # Warm-up: one record per partition through the mirror, so the measured records
        # find the mirror in its group and the consumer assigned.
        for part in range(args.partitions):
            p.produce(topic, value=b"w", partition=part)
        p.flush(30)
        warm, deadline = 0, time.monotonic() + 120
        while warm < args.partitions and time.monotonic() < deadline:
            warm += sum(1 for m in c.consume(100, timeout=0.1) if m.error() is None)
        start = time.monotonic()
        sent = 0
        while sent < total or len(lags) < total:
            due = min(total, int((time.monotonic() - start) * args.rate))
            while sent < due:
                p.produce(topic, value=b"x" * args.size, partition=sent % args.partitions)
                sent += 1
            p.poll(0)
            for m in c.consume(1000, timeout=0.005):
                if m.error() is None:
                    lags.append(time.time() * 1000 - m.timestamp()[1])
            if time.monotonic() - start > args.seconds + 60:
                break
    finally:
        c.close()
        stop(proc)
    lags.sort()
    return {"n": len(lags), "p50": lags[len(lags) // 2], "p99": lags[int(len(lags) * 0.99)],
            "max": lags[-1]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--eos", action="store_true", help="the mirror with exactly.once.support=enabled")
    ap.add_argument("--pipeline", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.pipeline:
        pipeline_main(*args.pipeline)
        return 0
    work = make_workdir("bench-mirror-")
    src, dst = MpbrokerPeer(work / "A").start(), MpbrokerPeer(work / "B").start()
    try:
        topic = "bench-src"
        create_topic(src.bootstrap, topic, args.partitions)
        preload(src.bootstrap, topic, args.messages, args.size, args.partitions)
        rates = {"mirror": [], "pipeline": []}
        for r in range(args.rounds):
            a, b = f"A{r}", f"B{r}"
            cfg = mm2_config(work / f"mm2-{r}.properties", src.bootstrap, dst.bootstrap, a, b,
                             topic, args.eos)
            proc = spawn(["-m", "mpbroker.cli.main", "mirror", "-c", str(cfg)], work / f"mirror-{r}.log")
            try:
                rates["mirror"].append(measure(dst.bootstrap, f"{a}.{topic}", args.partitions,
                                               args.messages, proc, 600))
            finally:
                stop(proc)
            remote = f"P{r}.{topic}"
            create_topic(dst.bootstrap, remote, args.partitions)
            proc = spawn(["-m", "loadtest.bench_mirror", "--pipeline", src.bootstrap, dst.bootstrap,
                          topic, remote, f"pipeline-{r}"], work / f"pipeline-{r}.log")
            try:
                rates["pipeline"].append(measure(dst.bootstrap, remote, args.partitions, args.messages,
                                                 proc, 600))
            finally:
                stop(proc)
            print(f"round {r + 1}: mirror {rates['mirror'][-1]:,.0f} rec/s, "
                  f"pipeline {rates['pipeline'][-1]:,.0f} rec/s", flush=True)
        mm, pp = statistics.median(rates["mirror"]), statistics.median(rates["pipeline"])
        mb = args.size / 1e6
        print(f"throughput ({args.messages:,} x {args.size} B, {args.partitions} partitions, "
              f"{'exactly-once' if args.eos else 'at-least-once'}), medians of {args.rounds}:")
        print(f"  mpbroker mirror     {mm:>10,.0f} rec/s {mm * mb:>7.1f} MB/s")
        print(f"  plain pipeline      {pp:>10,.0f} rec/s {pp * mb:>7.1f} MB/s")
        print(f"  ratio mirror/pipeline {mm / pp:.2f} (goal >= 0.8)")
        lag = lag_run(src.bootstrap, dst.bootstrap, work, args)
        print(f"end-to-end lag at {args.rate:,.0f} rec/s for {args.seconds:g} s ({lag['n']} records): "
              f"p50 {lag['p50']:.0f} ms, p99 {lag['p99']:.0f} ms, max {lag['max']:.0f} ms")
    finally:
        src.stop()
        dst.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
