"""Run the page-view pipeline end to end on an embedded mpbroker.

    python examples/pageviews/run.py [--views 30000] [--workdir DIR] [--bootstrap HOST:PORT]

Needs pyspark (4.x), pyarrow and confluent-kafka, and Java 17 for Spark. Without
`--bootstrap` it starts `mpbroker serve` (embedded metadata, no ZooKeeper) on a free
local port with its data under the work directory, and stops it at the end.

Steps: create `pageviews` (3 partitions) and `pageview-counts`; produce the first
two thirds of three hours of page views (ending five minutes ago); run the streaming
job (AvailableNow) into the counts topic and Parquet; produce the last third and run
the job again (it resumes from its checkpoints); reload one past hour with a batch
read by timestamp and check that it matches what the stream wrote, in Parquet and in
the topic (no window missing, none written twice). Exit code 0 when everything matches.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPO_ROOT)]

import pipeline  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(workdir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(workdir / "broker.log", "ab")
    cmd = [sys.executable, "-m", "mpbroker.cli.main", "serve", "-c", str(REPO_ROOT / "conf" / "server.properties"),
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={workdir / 'broker-data'}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            cwd=workdir, start_new_session=True)
    bootstrap = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"mpbroker exited with {proc.returncode}; see {workdir / 'broker.log'}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, bootstrap
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("mpbroker did not open its port within 60 s")


def stop_broker(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(10)


def create_topics(bootstrap: str) -> None:
    from mpbroker.spark import client

    conf = {"bootstrap.servers": bootstrap}
    client.ensure_topic(conf, pipeline.VIEWS_TOPIC, 3)
    client.ensure_topic(conf, pipeline.COUNTS_TOPIC, 3)


def spark_session(workdir: Path):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    from pyspark.sql import SparkSession

    import mpbroker.spark

    spark = (SparkSession.builder.master("local[2]").appName("pageviews")
             .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.streaming.noDataMicroBatches.enabled", "true")
             .config("spark.local.dir", str(workdir / "spark-local"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    mpbroker.spark.register(spark)
    return spark


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def check(spark, bootstrap: str, workdir: Path, hour_ms: int) -> bool:
    from pyspark.sql import functions as F

    parquet = spark.read.parquet(str(workdir / "counts-parquet"))
    from_parquet = {(r.window_start.strftime("%Y-%m-%dT%H:%M:%SZ"), r.page): r.views for r in parquet.collect()}
    topic_rows = (spark.read.format("mpbroker").option("bootstrap.servers", bootstrap)
                  .option("subscribe", pipeline.COUNTS_TOPIC).load()
                  .select(F.col("value").cast("string").alias("json")).collect())
    from_topic: dict = {}
    duplicates = 0
    for r in topic_rows:
        d = json.loads(r.json)
        k = (d["window_start"], d["page"])
        duplicates += k in from_topic
        from_topic[k] = d["views"]
    reloaded = pipeline.reload_hour(spark, bootstrap, hour_ms).collect()
    from_batch = {(r.window_start.strftime("%Y-%m-%dT%H:%M:%SZ"), r.page): r.views for r in reloaded}
    hour_lo = datetime.fromtimestamp(hour_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    hour_hi = datetime.fromtimestamp(hour_ms / 1000 + 3600, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    parquet_hour = {k: v for k, v in from_parquet.items() if hour_lo <= k[0] < hour_hi}

    ok_topic = from_topic == from_parquet and duplicates == 0
    ok_hour = parquet_hour == from_batch and len(from_batch) > 0
    print(f"  windowed counts in Parquet:           {len(from_parquet)} (window, page) rows, "
          f"{sum(from_parquet.values())} views")
    print(f"  windowed counts in '{pipeline.COUNTS_TOPIC}': {len(from_topic)} rows, {duplicates} duplicates "
          f"-> {'same as Parquet' if ok_topic else 'DIFFERENT from Parquet'}")
    print(f"  batch reload of {iso(hour_ms)} + 1h: {len(from_batch)} rows, {sum(from_batch.values())} views "
          f"-> {'matches the stream' if ok_hour else 'DOES NOT match the stream'}")
    top = sorted(((v, k) for k, v in from_batch.items()), reverse=True)[:3]
    print("  busiest 5-minute windows in that hour: " + ", ".join(f"{p} at {w[11:16]}: {v}" for v, (w, p) in top))
    return ok_topic and ok_hour


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--views", type=int, default=30000, help="page views over three hours (default 30000)")
    ap.add_argument("--workdir", help="where data, checkpoints and Parquet go (default: a new temp dir)")
    ap.add_argument("--bootstrap", help="use this broker instead of starting an embedded one")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="pageviews-"))
    workdir.mkdir(parents=True, exist_ok=True)
    proc = None
    t_start = time.monotonic()
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            proc, bootstrap = start_broker(workdir)
            print(f"[1/6] embedded mpbroker on {bootstrap} (data in {workdir / 'broker-data'})")
        create_topics(bootstrap)
        end_ms = pipeline.now_ms() - 5 * 60_000
        start_ms = end_ms - 3 * 3_600_000
        split_ms = start_ms + 2 * 3_600_000
        first = args.views * 2 // 3
        n1 = pipeline.produce_views(bootstrap, first, start_ms, split_ms, seed=1)
        print(f"[2/6] produced {n1} page views for {iso(start_ms)} .. {iso(split_ms)}")

        spark = spark_session(workdir)
        t = time.monotonic()
        pipeline.stream_counts(spark, bootstrap, str(workdir))
        print(f"[3/6] streaming job (AvailableNow) done in {time.monotonic() - t:.1f}s")

        n2 = pipeline.produce_views(bootstrap, args.views - first, split_ms, end_ms, seed=2)
        print(f"[4/6] produced {n2} more page views up to {iso(end_ms)}")
        t = time.monotonic()
        pipeline.stream_counts(spark, bootstrap, str(workdir))
        print(f"[5/6] streaming job resumed from its checkpoints, done in {time.monotonic() - t:.1f}s")

        hour_ms = pipeline.hour_floor_ms(start_ms) + 3_600_000
        print("[6/6] batch reload of one past hour and checks:")
        ok = check(spark, bootstrap, workdir, hour_ms)
        spark.stop()
        print(f"{'OK' if ok else 'FAILED'}: pipeline ran end to end in {time.monotonic() - t_start:.0f}s "
              f"(work dir {workdir})")
        return 0 if ok else 1
    finally:
        if proc is not None:
            stop_broker(proc)
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
