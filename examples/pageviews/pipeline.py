"""The page-view reference pipeline on mpbroker and PySpark.

Three steps, each usable on its own against any bootstrap address:

* `produce_views`: an activity stream (page views as JSON, keyed by user, the record
  timestamp = the view's time) into the `pageviews` topic;
* `stream_counts`: a Structured Streaming job that counts views per page in 5-minute
  event-time windows (10-minute watermark) and writes each finished window both to the
  `pageview-counts` topic (the mpbroker sink, exactly-once per micro-batch) and to
  Parquet files (Spark's file sink). Run with Trigger.AvailableNow it processes what is
  there and stops; run again, it continues from its checkpoints;
* `reload_hour`: a batch job that reloads one past hour of `pageviews` by timestamp
  (`startingTimestamp` / `endingTimestamp`) and recounts it, so the streaming results
  can be checked or rebuilt.

`run.py` beside this file runs them end to end on an embedded broker.
"""
from __future__ import annotations

import json
import random
import time

VIEWS_TOPIC = "pageviews"
COUNTS_TOPIC = "pageview-counts"
WINDOW = "5 minutes"
WATERMARK = "10 minutes"
VIEW_SCHEMA = "user string, page string, ts long, referrer string"


def produce_views(bootstrap: str, n: int, start_ms: int, end_ms: int, *, topic: str = VIEWS_TOPIC,
                  pages: int = 25, users: int = 1000, seed: int = 7) -> int:
    """n page views spread evenly over [start_ms, end_ms), in time order; popular pages
    follow a Zipf-like law. Returns how many were acknowledged."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(pages)]
    names = [f"/page/{i:02d}" for i in range(pages)]
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "compression.type": "lz4", "partitioner": "murmur2_random"})
    acked, errors = [0], []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)
        else:
            acked[0] += 1

    step = (end_ms - start_ms) / max(n, 1)
    for i in range(n):
        ts = int(start_ms + i * step)
        user = f"u{rng.randrange(users):04d}"
        view = {"user": user, "page": rng.choices(names, weights)[0], "ts": ts,
                "referrer": rng.choice(["search", "social", "direct", "email"])}
        while True:
            try:
                p.produce(topic, key=user.encode(), value=json.dumps(view).encode(), timestamp=ts,
                          on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 5000 == 0:
            p.poll(0)
    left = p.flush(60)
    if left or errors:
        raise RuntimeError(f"{left} views not acknowledged; errors: {errors[:3]}")
    return acked[0]


def parse_views(views_df):
    """Rows of format("mpbroker") over `pageviews` -> (page, event_time)."""
    from pyspark.sql import functions as F

    parsed = views_df.select(F.from_json(F.col("value").cast("string"), VIEW_SCHEMA).alias("v"),
                             F.col("timestamp").alias("event_time"))
    return parsed.select("v.page", "event_time")


def stream_counts(spark, bootstrap: str, workdir: str, *, max_offsets_per_trigger: int | None = None,
                  timeout_s: float = 600) -> None:
    """One AvailableNow run of the streaming job (both sinks)."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("mpbroker").option("bootstrap.servers", bootstrap)
              .option("subscribe", VIEWS_TOPIC).option("startingOffsets", "earliest"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    counts = (parse_views(reader.load())
              .withWatermark("event_time", WATERMARK)
              .groupBy(F.window("event_time", WINDOW), "page")
              .agg(F.count("*").alias("views"))
              .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                      "page", "views"))

    to_topic = (counts.select(F.col("page").alias("key"),
                              F.to_json(F.struct(F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'")
                                                 .alias("window_start"), "page", "views")).alias("value"))
                .writeStream.format("mpbroker").outputMode("append")
                .option("bootstrap.servers", bootstrap).option("topic", COUNTS_TOPIC)
                .option("checkpointLocation", f"{workdir}/checkpoints/counts-topic")
                .trigger(availableNow=True).start())
    to_parquet = (counts.writeStream.format("parquet").outputMode("append")
                  .option("path", f"{workdir}/counts-parquet")
                  .option("checkpointLocation", f"{workdir}/checkpoints/counts-parquet")
                  .trigger(availableNow=True).start())
    for q in (to_topic, to_parquet):
        if not q.awaitTermination(timeout_s):
            q.stop()
            raise TimeoutError(f"streaming query {q.name or q.id} did not finish in {timeout_s}s")
        if q.exception():
            raise q.exception()


def reload_hour(spark, bootstrap: str, hour_start_ms: int):
    """Batch: the views of [hour_start, hour_start + 1h) read back by timestamp, counted
    per 5-minute window and page."""
    from pyspark.sql import functions as F

    views = (spark.read.format("mpbroker").option("bootstrap.servers", bootstrap)
             .option("subscribe", VIEWS_TOPIC)
             .option("startingTimestamp", str(hour_start_ms))
             .option("endingTimestamp", str(hour_start_ms + 3_600_000))
             .load())
    return (parse_views(views).groupBy(F.window("event_time", WINDOW), "page")
            .agg(F.count("*").alias("views"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "page", "views"))


def hour_floor_ms(ms: int) -> int:
    return ms - ms % 3_600_000


def now_ms() -> int:
    return int(time.time() * 1000)
