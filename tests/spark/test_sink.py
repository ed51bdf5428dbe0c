"""format("mpbroker") as a batch and streaming sink, with real local PySpark."""
from __future__ import annotations

import collections
import os

import pytest

pytest.importorskip("pyspark")

from tests.spark.util import produce, read_all  # noqa: E402

pytestmark = pytest.mark.integration


def test_batch_sink_round_trip(spark, bootstrap, make_topic):
    from pyspark.sql import functions as F

    topic = make_topic(3)
    df = (spark.range(0, 500)
          .select(F.concat(F.lit("k"), (F.col("id") % 13).cast("string")).alias("key"),
                  F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"),
                  F.array(F.struct(F.lit("id").alias("key"), F.col("id").cast("string").cast("binary")
                                   .alias("value"))).alias("headers")))
    df.write.format("mpbroker").mode("append").option("bootstrap.servers", bootstrap).option("topic", topic).save()

    msgs = read_all(bootstrap, topic, 3, expect=500)
    assert len(msgs) == 500
    by_value = {m.value().decode(): m for m in msgs}
    assert sorted(by_value) == sorted(f"v{i}" for i in range(500))
    for i in range(500):
        m = by_value[f"v{i}"]
        assert m.key() == f"k{i % 13}".encode()
        assert m.headers() == [("id", str(i).encode())]
    # Keyed records are placed by the key (murmur2, as the Java client does): one key, one partition.
    parts_per_key = collections.defaultdict(set)
    for m in msgs:
        parts_per_key[m.key()].add(m.partition())
    assert all(len(p) == 1 for p in parts_per_key.values())

    # ... and read back through the source, with an explicit partition and a topic column.
    topic2 = make_topic(2)
    (spark.createDataFrame([(topic2, 1, b"x", "one"), (topic2, 0, None, "two")], "topic string, partition int, "
                           "key binary, value string")
     .write.format("mpbroker").mode("append").option("bootstrap.servers", bootstrap).save())
    back = (spark.read.format("mpbroker").option("bootstrap.servers", bootstrap).option("subscribe", topic2)
            .load().collect())
    assert sorted((r.partition, r.key and bytes(r.key), bytes(r.value)) for r in back) == \
        [(0, None, b"two"), (1, b"x", b"one")]


def test_sink_rejects_a_frame_without_value(spark, bootstrap, make_topic):
    topic = make_topic(1)
    with pytest.raises(Exception, match="'value' column"):
        (spark.range(3).write.format("mpbroker").mode("append").option("bootstrap.servers", bootstrap)
         .option("topic", topic).save())


def stream_copy(spark, bootstrap, source, target, checkpoint, **sink_options):
    """availableNow: every record of `source` -> `target` through the streaming sink."""
    q = (spark.readStream.format("mpbroker").option("bootstrap.servers", bootstrap)
         .option("subscribe", source).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "50")
         .load().select("key", "value", "partition")
         .writeStream.format("mpbroker").option("bootstrap.servers", bootstrap).option("topic", target)
         .option("checkpointLocation", str(checkpoint)))
    for k, v in sink_options.items():
        q = q.option(k, v)
    q = q.trigger(availableNow=True).start()
    assert q.awaitTermination(180), "availableNow query did not finish"
    if q.exception():
        raise q.exception()
    return q


@pytest.mark.slow
def test_replayed_streaming_batch_writes_nothing_twice(spark, bootstrap, make_topic, tmp_path):
    source, target = make_topic(2), make_topic(2)
    produce(bootstrap, source, [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2}
                                for i in range(120)])
    ckpt = tmp_path / "ckpt"
    stream_copy(spark, bootstrap, source, target, ckpt)
    assert len(read_all(bootstrap, target, 2, expect=120)) == 120

    # Lose Spark's record that the last batch completed, as a driver that died after the
    # sink wrote but before Spark committed would: a restart replays that batch.
    commits = sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    assert len(commits) >= 3  # 120 records at most 50 a batch
    last = ckpt / "commits" / str(commits[-1])
    os.remove(last)
    crc = ckpt / "commits" / f".{commits[-1]}.crc"
    if crc.exists():
        os.remove(crc)
    stream_copy(spark, bootstrap, source, target, ckpt)
    assert last.exists(), "the last batch was not replayed"

    msgs = read_all(bootstrap, target, 2, expect=120)
    values = [m.value() for m in msgs]
    assert len(values) == 120 and len(set(values)) == 120, "a replayed batch wrote records twice"


def binary_schema():
    from pyspark.sql.types import BinaryType, StructField, StructType

    return StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def test_transactions_are_used_only_where_the_broker_has_them(bootstrap, make_topic):
    from mpbroker.spark import client
    from mpbroker.spark.options import OptionError
    from mpbroker.spark.sink import MpbrokerStreamWriter

    topic = make_topic(1)
    base = {"bootstrap.servers": bootstrap, "topic": topic}
    supported = client.supports_transactions(bootstrap)
    assert MpbrokerStreamWriter(base, binary_schema()).mechanism == ("transactions" if supported else "markers")
    assert MpbrokerStreamWriter({**base, "sinkTransactions": "false"}, binary_schema()).mechanism == "markers"
    assert MpbrokerStreamWriter({**base, "sinkGuarantee": "at-least-once"}, binary_schema()).mechanism == \
        "idempotent"
    if not supported:
        with pytest.raises(OptionError, match="does not support transactions"):
            MpbrokerStreamWriter({**base, "sinkTransactions": "true"}, binary_schema())


def test_unit_of_work_resumed_after_a_partial_write_writes_only_the_rest(bootstrap, make_topic):
    """A task that died part-way (rows failed after 40 of 100 were produced) and its
    retry: the retry writes the other 60, nothing twice; a third attempt writes nothing."""
    from mpbroker.spark import client
    from mpbroker.spark.sink import SINK_HEADER, MpbrokerStreamWriter

    topic = make_topic(2)
    writer = MpbrokerStreamWriter({"bootstrap.servers": bootstrap, "topic": topic}, binary_schema())
    expected = "transactions" if client.supports_transactions(bootstrap) else "markers"
    assert writer.mechanism == expected
    if writer.mechanism != "markers":
        pytest.skip("the broker has transactions; the marker mechanism is not the one used")
    records = [(topic, None, f"k{i % 7}".encode(), f"v{i % 50}".encode(), None) for i in range(100)]  # duplicates

    def dies_after(n):
        for i, r in enumerate(records):
            if i == n:
                raise RuntimeError("executor lost")
            yield r

    with pytest.raises(RuntimeError, match="executor lost"):
        writer.write_unit("query-1", 0, 7, dies_after(40))
    assert len(read_all(bootstrap, topic, 2, expect=40)) == 40

    done = writer.write_unit("query-1", 0, 7, iter(records))
    assert (done.written, done.skipped) == (60, 40)
    again = writer.write_unit("query-1", 0, 7, iter(records))
    assert (again.written, again.skipped) == (0, 100)

    msgs = read_all(bootstrap, topic, 2, expect=100)
    assert sorted(m.value() for m in msgs) == sorted(r[3] for r in records)
    ids = [dict(m.headers())[SINK_HEADER] for m in msgs]
    assert len(set(ids)) == 100 and all(i.startswith(b"query-1/0/7/") for i in ids)

    # The next batch of the same unit is written normally; another unit is independent.
    nxt = writer.write_unit("query-1", 0, 8, iter(records[:10]))
    other = writer.write_unit("query-1", 1, 7, iter(records[:10]))
    assert (nxt.written, other.written) == (10, 10)
    assert writer.write_unit("query-1", 2, 7, iter([])).written == 0
