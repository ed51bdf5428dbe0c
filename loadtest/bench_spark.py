"""Spark read throughput: format("mpbroker") against the same rows in Parquet.

    python loadtest/bench_spark.py [--records 1000000] [--partitions 3] [--value-bytes 100]
                                   [--rounds 5] [--bootstrap HOST:PORT] [--json OUT]

Without `--bootstrap` it starts an embedded `mpbroker serve` on a free local port.
It produces N records (keyed, `value-bytes` each) into a topic of `partitions`
partitions, reads the topic once with Spark and writes those rows to Parquet, then
times, per round, a full scan of each (`df.write.format("noop")`, which materialises
every column of every row and nothing else) with the same local[2] SparkSession.
Prints rows/s as the median over the rounds, min..max, and the ratio
mpbroker / Parquet. The first (warm-up) round is not counted.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "examples" / "pageviews")]


def produce(bootstrap: str, topic: str, n: int, partitions: int, value_bytes: int) -> float:
    from confluent_kafka import Producer

    from mpbroker.spark import client

    client.ensure_topic({"bootstrap.servers": bootstrap}, topic, partitions)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "enable.idempotence": True, "queue.buffering.max.messages": 500_000})
    pad = b"x" * max(0, value_bytes - 12)
    errors = []
    t = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"k%d" % (i % 1000), value=b"%012d" % i + pad, partition=i % partitions,
                          on_delivery=(lambda e, m: errors.append(e) if e else None))
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(300) or errors:
        raise RuntimeError(f"produce failed: {errors[:3]}")
    return time.perf_counter() - t


def timed_scan(df) -> float:
    t = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bootstrap")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)

    import run as pageviews_run  # examples/pageviews/run.py: broker and session helpers

    workdir = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    proc = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            proc, bootstrap = pageviews_run.start_broker(workdir)
        topic = f"bench-spark-{int(time.time())}"
        produce_s = produce(bootstrap, topic, args.records, args.partitions, args.value_bytes)
        print(f"produced {args.records} records ({args.value_bytes} B values, {args.partitions} partitions) "
              f"in {produce_s:.1f}s")

        spark = pageviews_run.spark_session(workdir)
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        source = (spark.read.format("mpbroker").option("bootstrap.servers", bootstrap)
                  .option("subscribe", topic).load())
        parquet_path = str(workdir / "rows.parquet")
        source.write.parquet(parquet_path)
        parquet = spark.read.parquet(parquet_path)
        assert parquet.count() == args.records, "Parquet copy is short"

        times = {"mpbroker": [], "parquet": []}
        for rnd in range(args.rounds + 1):
            for name, df in (("mpbroker", source), ("parquet", parquet)):
                s = timed_scan(df)
                if rnd:
                    times[name].append(s)
        rates = {name: [args.records / s for s in ts] for name, ts in times.items()}
        med = {name: statistics.median(r) for name, r in rates.items()}
        for name in ("mpbroker", "parquet"):
            print(f"{name:9s} {med[name]:>12,.0f} rows/s median over {args.rounds} rounds "
                  f"(min {min(rates[name]):,.0f}, max {max(rates[name]):,.0f}; "
                  f"{statistics.median(times[name]):.2f}s per scan)")
        ratio = med["mpbroker"] / med["parquet"]
        print(f"ratio mpbroker/parquet = {ratio:.3f} (Parquet is {1 / ratio:.1f}x faster)")
        if args.json:
            Path(args.json).write_text(json.dumps({
                "records": args.records, "partitions": args.partitions, "value_bytes": args.value_bytes,
                "rounds": args.rounds, "rows_per_s_median": med, "rows_per_s_all": rates, "ratio": ratio,
                "spark": spark.version, "master": spark.sparkContext.master}, indent=2))
        spark.stop()
        return 0
    finally:
        if proc is not None:
            pageviews_run.stop_broker(proc)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
