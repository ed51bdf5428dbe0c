"""format("mpbroker") as a batch and streaming source, with real local PySpark."""
from __future__ import annotations

import json
import time

import pytest

from tests.conftest import require_module

require_module("pyspark")

from tests.integration import broker as harness  # noqa: E402
from tests.mpbroker.spark.util import delete_records, produce, wait_until  # noqa: E402

pytestmark = pytest.mark.integration


def reader(spark, bootstrap, **options):
    r = spark.read.format("mpbroker").option("bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows_of(df) -> list[tuple]:
    return sorted((r.partition, r.offset, r.key, r.value) for r in df.collect())


def test_batch_read_of_three_partition_topic_equals_what_was_produced(spark, bootstrap, make_topic):
    topic = make_topic(3)
    records = [{"key": f"k{i % 11}".encode(), "value": f"value-{i}".encode(), "partition": i % 3,
                "headers": [("n", str(i).encode()), ("src", b"test")]} for i in range(600)]
    acks = produce(bootstrap, topic, records)

    df = reader(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    got = df.collect()
    assert df.rdd.getNumPartitions() == 3  # one task per (topic, partition, range)
    assert len(got) == 600
    want = {(p, o): r for r, (p, o) in zip(records, acks)}
    for row in got:
        r = want.pop((row.partition, row.offset))
        assert (row.topic, bytes(row.key), bytes(row.value)) == (topic, r["key"], r["value"])
        assert [(h.key, bytes(h.value)) for h in row.headers] == r["headers"]
        assert row.timestampType == 0 and row.timestamp is not None
    assert not want

    plain = reader(spark, bootstrap, subscribe=topic)  # includeHeaders defaults to false
    assert "headers" not in plain.schema.fieldNames()
    # minPartitions is a hint (Spark rounds each partition's share of the records): 6 over
    # three equal partitions is 2 ranges each.
    split = reader(spark, bootstrap, subscribe=topic, minPartitions="6")
    assert split.rdd.getNumPartitions() == 6 and split.count() == 600


def test_read_committed_sees_only_committed_transactions(spark, bootstrap, make_topic):
    topic = make_topic(1)
    p = harness.producer(bootstrap, **{"transactional.id": f"spark-src-{topic}"})
    p.init_transactions(30)
    for values, commit in ((["c1", "c2"], True), (["a1", "a2", "a3"], False), (["c3"], True)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v.encode())
        p.flush(30)  # stored before the abort (librdkafka drops what it has not sent yet)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    committed = sorted(bytes(r.value) for r in reader(spark, bootstrap, subscribe=topic,
                                                      **{"isolation.level": "read_committed"}).collect())
    assert committed == [b"c1", b"c2", b"c3"]
    everything = sorted(bytes(r.value) for r in reader(spark, bootstrap, subscribe=topic).collect())
    assert everything == [b"a1", b"a2", b"a3", b"c1", b"c2", b"c3"]


def test_offset_json_bounds_and_ranges_split(spark, bootstrap, make_topic):
    topic = make_topic(2)
    produce(bootstrap, topic, [{"value": str(i).encode(), "partition": i % 2} for i in range(200)])

    df = reader(spark, bootstrap, assign=json.dumps({topic: [0, 1]}),
                startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
                endingOffsets=json.dumps({topic: {"0": 60, "1": -1}}),
                maxRecordsPerPartition="25")
    got = rows_of(df)
    assert df.rdd.getNumPartitions() == 2 + 4  # 50 records -> 2 ranges, 100 -> 4 ranges
    assert [(p, o) for p, o, _, _ in got] == [(0, o) for o in range(10, 60)] + [(1, o) for o in range(100)]

    pattern = reader(spark, bootstrap, subscribePattern=topic.replace("-", "[-]") + ".*").count()
    assert pattern == 200

    # Spark's batch rules: no "latest" start, in words or as -1 in the JSON.
    for starting in ("latest", json.dumps({topic: {"0": -1, "1": -2}})):
        with pytest.raises(Exception, match=r"not allowed for a batch query(: .*-0)?"):
            reader(spark, bootstrap, assign=json.dumps({topic: [0, 1]}), startingOffsets=starting).count()
    # kafka.group.id and groupIdPrefix are taken, as by Spark's connector.
    assert reader(spark, bootstrap, subscribe=topic, **{"kafka.group.id": "spark-reader"}).count() == 200
    assert reader(spark, bootstrap, subscribe=topic, groupIdPrefix="pv-job").count() == 200


def test_read_from_timestamp(spark, bootstrap, make_topic):
    topic = make_topic(2)
    t0 = int(time.time() * 1000) - 3_600_000  # an hour ago, one record a second
    produce(bootstrap, topic, [{"value": str(i).encode(), "partition": i % 2, "timestamp": t0 + i * 1000}
                               for i in range(120)])

    df = reader(spark, bootstrap, subscribe=topic, startingTimestamp=str(t0 + 30_000),
                endingTimestamp=str(t0 + 90_000))
    values = sorted(int(r.value) for r in df.collect())
    assert values == list(range(30, 90))
    stamps = [r.timestamp for r in df.select("timestamp").collect()]
    assert min(stamps).timestamp() * 1000 == pytest.approx(t0 + 30_000, abs=1)

    per_partition = reader(spark, bootstrap, subscribe=topic,
                           startingOffsetsByTimestamp=json.dumps({topic: {"0": t0 + 100_000, "1": t0}}))
    got = sorted(int(r.value) for r in per_partition.collect())
    assert got == sorted([i for i in range(100, 120) if i % 2 == 0] + [i for i in range(120) if i % 2 == 1])

    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        reader(spark, bootstrap, subscribe=topic, startingTimestamp=str(t0 + 10_000_000)).count()


def test_records_deleted_fail_the_read_unless_failOnDataLoss_false(spark, bootstrap, make_topic):
    topic = make_topic(1)
    produce(bootstrap, topic, [{"value": str(i).encode()} for i in range(10)])
    delete_records(bootstrap, topic, 0, 5)

    start = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception) as err:
        reader(spark, bootstrap, subscribe=topic, startingOffsets=start).collect()
    assert "earliest offset the broker has is 5" in str(err.value)
    assert "failOnDataLoss" in str(err.value)

    df = reader(spark, bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert sorted(int(r.value) for r in df.collect()) == list(range(5, 10))
    # "earliest" is where the log starts now: no loss to report.
    assert reader(spark, bootstrap, subscribe=topic).count() == 5


# ---------------------------------------------------------------- streaming

def run_available_now(spark, bootstrap, checkpoint, seen: list, **options):
    """One availableNow run of a stream from mpbroker; rows of each batch go to `seen`."""
    stream = spark.readStream.format("mpbroker").option("bootstrap.servers", bootstrap)
    for k, v in options.items():
        stream = stream.option(k, v)

    def collect(batch_df, batch_id):
        seen.append((batch_id, [(r.topic, r.partition, r.offset, bytes(r.value)) for r in batch_df.collect()]))

    q = (stream.load().writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(180), "availableNow query did not finish"
    if q.exception():
        raise q.exception()


@pytest.mark.slow
def test_available_now_stream_restarted_from_checkpoint_reads_each_record_once(spark, bootstrap, make_topic,
                                                                                tmp_path):
    topic = make_topic(3)
    produce(bootstrap, topic, [{"value": f"a{i}".encode(), "partition": i % 3} for i in range(90)])
    seen: list = []
    opts = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "40"}
    run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, **opts)
    first = [r for _, rows in seen for r in rows]
    assert len(first) == 90
    assert all(len(rows) <= 40 for _, rows in seen) and len([b for b, rows in seen if rows]) >= 3

    # New data while the query is down, then a restart from the same checkpoint.
    produce(bootstrap, topic, [{"value": f"b{i}".encode(), "partition": i % 3} for i in range(60)])
    run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, **opts)
    everything = [r for _, rows in seen for r in rows]
    assert len(everything) == 150
    assert len(set(everything)) == 150, "a record was read twice"
    assert sorted(v for *_, v in everything) == sorted([f"a{i}".encode() for i in range(90)] +
                                                       [f"b{i}".encode() for i in range(60)])
    batch_ids = [b for b, _ in seen]
    assert batch_ids == sorted(set(batch_ids)), "a batch id was run twice"

    # A third run with nothing new reads nothing.
    before = len(everything)
    run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, **opts)
    assert sum(len(rows) for _, rows in seen) == before


@pytest.mark.slow
def test_stream_from_latest_reads_only_what_comes_after_its_start(spark, bootstrap, make_topic, tmp_path):
    topic = make_topic(2)
    produce(bootstrap, topic, [{"value": f"old{i}".encode(), "partition": i % 2} for i in range(10)])
    seen: list = []
    run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, subscribe=topic)  # startingOffsets=latest
    assert [r for _, rows in seen for r in rows] == []
    produce(bootstrap, topic, [{"value": f"new{i}".encode(), "partition": i % 2} for i in range(6)])
    run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, subscribe=topic)
    assert sorted(v for _, rows in seen for *_, v in rows) == sorted(f"new{i}".encode() for i in range(6))


@pytest.mark.slow
def test_stream_fails_on_data_deleted_since_the_checkpoint(spark, bootstrap, make_topic, tmp_path):
    topic = make_topic(1)
    produce(bootstrap, topic, [{"value": str(i).encode()} for i in range(10)])
    seen: list = []
    run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, subscribe=topic, startingOffsets="earliest")
    assert sum(len(r) for _, r in seen) == 10

    produce(bootstrap, topic, [{"value": str(i).encode()} for i in range(10, 20)])
    delete_records(bootstrap, topic, 0, 15)
    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, subscribe=topic)

    seen.clear()
    run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, subscribe=topic, failOnDataLoss="false")
    assert sorted(int(v) for _, rows in seen for *_, v in rows) == list(range(15, 20))


@pytest.mark.slow
def test_stream_fails_when_its_topic_is_deleted(spark, bootstrap, make_topic, tmp_path):
    gone, kept = make_topic(1), make_topic(1)
    produce(bootstrap, gone, [{"value": b"g"}])
    produce(bootstrap, kept, [{"value": b"k"}])
    seen: list = []
    opts = {"subscribe": f"{gone},{kept}", "startingOffsets": "earliest"}
    run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, **opts)
    assert sorted(v for _, rows in seen for *_, v in rows) == [b"g", b"k"]

    a = harness.admin(bootstrap)
    a.delete_topics([gone], operation_timeout=30)[gone].result(30)
    wait_until(lambda: gone not in a.list_topics(timeout=10).topics, what=f"{gone} deleted")
    # Nothing new on either topic: a query that only kept the deleted partition at its
    # offset would plan no batch and never fail; it must fail.
    with pytest.raises(Exception, match="is gone"):
        run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, **opts)

    produce(bootstrap, kept, [{"value": b"k2"}])
    seen.clear()
    run_available_now(spark, bootstrap, tmp_path / "ckpt", seen, **opts, failOnDataLoss="false")
    assert [v for _, rows in seen for *_, v in rows] == [b"k2"]
