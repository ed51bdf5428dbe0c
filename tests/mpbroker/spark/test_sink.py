"""format("mpbroker") as a batch and streaming sink, with real local PySpark."""
from __future__ import annotations

import collections
import os
import threading

import pytest

from tests.conftest import require_module

require_module("pyspark")

from tests.mpbroker.spark.util import produce, read_all  # noqa: E402

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


def test_sink_refuses_overwrite_mode(spark, bootstrap, make_topic):
    topic = make_topic(1)
    with pytest.raises(Exception, match="Overwrite is not allowed"):
        (spark.createDataFrame([("v",)], "value string").write.format("mpbroker").mode("overwrite")
         .option("bootstrap.servers", bootstrap).option("topic", topic).save())
    assert read_all(bootstrap, topic, 1) == []


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
@pytest.mark.parametrize("transactions", ["true", "false"], ids=["transactions", "markers"])
def test_replayed_streaming_batch_writes_nothing_twice(spark, bootstrap, make_topic, tmp_path, transactions):
    source, target = make_topic(2), make_topic(2)
    produce(bootstrap, source, [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2}
                                for i in range(120)])
    # The transactional sink's records are visible to read_committed readers only once
    # their transaction committed; read the target that way (the markers sink has no
    # transactions: both isolation levels see the same).
    isolation = "read_committed" if transactions == "true" else "read_uncommitted"
    ckpt = tmp_path / "ckpt"
    stream_copy(spark, bootstrap, source, target, ckpt, sinkTransactions=transactions)
    assert len(read_all(bootstrap, target, 2, expect=120, isolation=isolation)) == 120

    # Lose Spark's record that the last batch completed, as a driver that died after the
    # sink wrote but before Spark committed would: a restart replays that batch.
    commits = sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    assert len(commits) >= 3  # 120 records at most 50 a batch
    last = ckpt / "commits" / str(commits[-1])
    os.remove(last)
    crc = ckpt / "commits" / f".{commits[-1]}.crc"
    if crc.exists():
        os.remove(crc)
    stream_copy(spark, bootstrap, source, target, ckpt, sinkTransactions=transactions)
    assert last.exists(), "the last batch was not replayed"

    for level in {isolation, "read_uncommitted"}:
        msgs = read_all(bootstrap, target, 2, expect=120, isolation=level)
        values = [m.value() for m in msgs]
        assert len(values) == 120 and len(set(values)) == 120, f"a replayed batch wrote records twice ({level})"
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(120))


def binary_schema():
    from pyspark.sql.types import BinaryType, StructField, StructType

    return StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def test_transactions_are_used_where_the_broker_has_them(bootstrap, make_topic):
    """mpbroker has transactions: `auto` and `true` pick them, `false` the markers."""
    from mpbroker.spark import client
    from mpbroker.spark.sink import MpbrokerStreamWriter

    topic = make_topic(1)
    base = {"bootstrap.servers": bootstrap, "topic": topic}
    assert client.supports_transactions(bootstrap)
    assert set(client.TRANSACTION_API_KEYS) <= client.api_keys(bootstrap)
    assert MpbrokerStreamWriter(base, binary_schema()).mechanism == "transactions"
    assert MpbrokerStreamWriter({**base, "sinkTransactions": "auto"}, binary_schema()).mechanism == "transactions"
    assert MpbrokerStreamWriter({**base, "sinkTransactions": "true"}, binary_schema()).mechanism == "transactions"
    assert MpbrokerStreamWriter({**base, "sinkTransactions": "false"}, binary_schema()).mechanism == "markers"
    assert MpbrokerStreamWriter({**base, "sinkGuarantee": "at-least-once"}, binary_schema()).mechanism == \
        "idempotent"
    assert MpbrokerStreamWriter({**base, "sinkGuarantee": "at-least-once", "sinkTransactions": "true"},
                                binary_schema()).mechanism == "idempotent"


def api_versions_v0_answer(keys) -> bytes:
    """An ApiVersions v0 response (after its size prefix) listing `keys`, versions 0..3."""
    import struct

    return struct.pack(">ihi", 1, 0, len(keys)) + b"".join(struct.pack(">hhh", k, 0, 3) for k in sorted(keys))


def test_mechanism_follows_the_api_versions_answer():
    """The choice from an explicit ApiVersions answer: one like mpbroker's before it had
    transactions (no InitProducerId, AddPartitionsToTxn, EndTxn, TxnOffsetCommit) and
    one with them."""
    from mpbroker.spark import client
    from mpbroker.spark.options import OptionError
    from mpbroker.spark.sink import choose_mechanism

    with_txn = set(range(0, 30)) | {32, 36, 37, 42, 60, 61, 65, 66}
    without_txn = with_txn - set(client.TRANSACTION_API_KEYS)
    for keys in (with_txn, without_txn, {22, 24, 26}):
        assert client.parse_api_versions_v0(api_versions_v0_answer(keys)) == keys
    assert client.has_transaction_apis(with_txn) and not client.has_transaction_apis(without_txn)
    assert not client.has_transaction_apis({22, 24, 26})  # all four are needed

    asked = []

    def answer(keys):
        def advertised():
            asked.append(1)
            return client.parse_api_versions_v0(api_versions_v0_answer(keys))
        return advertised

    assert choose_mechanism("exactly-once", "auto", answer(with_txn)) == "transactions"
    assert choose_mechanism("exactly-once", "true", answer(with_txn)) == "transactions"
    assert choose_mechanism("exactly-once", "auto", answer(without_txn)) == "markers"
    with pytest.raises(OptionError, match="at h:1 does not support transactions"):
        choose_mechanism("exactly-once", "true", answer(without_txn), "h:1")
    assert len(asked) == 4
    # Neither `false` nor at-least-once asks the broker.
    assert choose_mechanism("exactly-once", "false", answer(with_txn)) == "markers"
    assert choose_mechanism("at-least-once", "true", answer(without_txn)) == "idempotent"
    assert choose_mechanism("at-least-once", "auto", answer(with_txn)) == "idempotent"
    assert len(asked) == 4
    with pytest.raises(OptionError, match="sinkTransactions"):
        choose_mechanism("exactly-once", "yes", answer(with_txn))
    with pytest.raises(OptionError, match="sinkGuarantee"):
        choose_mechanism("exactly-twice", "auto", answer(with_txn))


def test_unit_of_work_resumed_after_a_partial_write_writes_only_the_rest(bootstrap, make_topic):
    """Markers (sinkTransactions=false: no broker transactions used): a task that died
    part-way (rows failed after 40 of 100 were produced) and its retry: the retry
    writes the other 60, nothing twice; a third attempt writes nothing."""
    from mpbroker.spark.sink import SINK_HEADER, MpbrokerStreamWriter

    topic = make_topic(2)
    writer = MpbrokerStreamWriter({"bootstrap.servers": bootstrap, "topic": topic, "sinkTransactions": "false"},
                                  binary_schema())
    assert writer.mechanism == "markers"
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


def test_transactional_unit_of_work_that_died_is_redone_in_one_transaction(bootstrap, make_topic):
    """Transactions: a task that died part-way (rows failed after 40 of 100 were
    produced) aborts its transaction, and a zombie attempt of the same unit (a process
    that lost contact before its commit) leaves one open, with the batch's `done`
    marker in it; read_committed readers see neither. The retry fences the zombie (its
    open transaction is aborted, its commit refused) and writes all 100 rows and its
    marker in one committed transaction; a third attempt writes nothing."""
    from confluent_kafka import KafkaError, KafkaException

    from mpbroker.spark import client
    from mpbroker.spark.sink import DEFAULT_MARKER_TOPIC, MarkerLog, MpbrokerStreamWriter
    from tests.integration import broker as harness

    topic = make_topic(2)
    query = f"query-{topic}"  # a transactional.id (and a marker) of this test's own
    writer = MpbrokerStreamWriter({"bootstrap.servers": bootstrap, "topic": topic, "sinkTransactions": "true",
                                   "sinkTransactionTimeoutMs": "60000"}, binary_schema())
    assert writer.mechanism == "transactions"
    records = [(topic, None, f"k{i % 7}".encode(), f"v{i % 50}".encode(), None) for i in range(100)]  # duplicates

    def dies_after(n):
        for i, r in enumerate(records):
            if i == n:
                raise RuntimeError("executor lost")
            yield r

    with pytest.raises(RuntimeError, match="executor lost"):
        writer.write_unit(query, 0, 7, dies_after(40))
    assert read_all(bootstrap, topic, 2, expect=0, isolation="read_committed") == []
    assert len(read_all(bootstrap, topic, 2, isolation="read_uncommitted")) <= 40

    # A zombie of the same unit (an attempt that lost contact just before its commit):
    # its transaction is open and holds 40 records and the `done` marker of this batch.
    markers = MarkerLog(writer.conf, DEFAULT_MARKER_TOPIC)
    probe = client.consumer(writer.conf, **{"isolation.level": "read_uncommitted"})
    zombie = harness.producer(bootstrap, **{"transactional.id": f"mpbroker-spark-{query}-0",
                                            "transaction.timeout.ms": 60000})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for r in records[:40]:
        zombie.produce(topic, key=r[2], value=r[3])
    markers.put(zombie, f"{query}/0", {"batch": 7, "state": "done"}, probe, None)
    harness.flush(zombie)
    assert read_all(bootstrap, topic, 2, expect=0, isolation="read_committed") == []
    uncommitted = len(read_all(bootstrap, topic, 2, isolation="read_uncommitted"))
    assert 40 <= uncommitted <= 80
    assert markers.latest(f"{query}/0", probe, read_committed=False) == {"batch": 7, "state": "done"}

    done = writer.write_unit(query, 0, 7, iter(records))
    assert (done.written, done.skipped, done.mechanism) == (100, 0, "transactions")
    with pytest.raises(KafkaException) as fenced:  # the retry's init_transactions bumped the epoch
        zombie.commit_transaction(30)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH), fenced.value

    assert markers.latest(f"{query}/0", probe, read_committed=True) == {"batch": 7, "state": "done"}

    again = writer.write_unit(query, 0, 7, iter(records))
    assert (again.written, again.skipped) == (0, 100)

    committed = read_all(bootstrap, topic, 2, expect=100, isolation="read_committed")
    assert sorted(m.value() for m in committed) == sorted(r[3] for r in records)
    assert len({(m.partition(), m.offset()) for m in committed}) == 100
    everything = read_all(bootstrap, topic, 2, isolation="read_uncommitted")
    assert len(everything) == uncommitted + 100  # the aborted records stay in the log, hidden from read_committed

    # The next batch of the same unit is written normally; another unit is independent.
    nxt = writer.write_unit(query, 0, 8, iter(records[:10]))
    other = writer.write_unit(query, 1, 7, iter(records[:10]))
    assert (nxt.written, other.written) == (10, 10)
    assert writer.write_unit(query, 2, 7, iter([])).written == 0
    assert len(read_all(bootstrap, topic, 2, expect=120, isolation="read_committed")) == 120

    # Another unit's transaction, open on the marker partition since before this unit
    # committed batch 9, hides that marker from read_committed readers until it is
    # decided: the replay of batch 9 waits for that instead of writing it again.
    other_zombie = harness.producer(bootstrap, **{"transactional.id": f"mpbroker-spark-{query}-3",
                                                  "transaction.timeout.ms": 60000})
    other_zombie.init_transactions(30)
    other_zombie.begin_transaction()
    markers.put(other_zombie, f"{query}/3", {"batch": 9, "state": "done"}, probe, None)
    harness.flush(other_zombie)
    assert writer.write_unit(query, 0, 9, iter(records[10:20])).written == 10
    aborting = threading.Event()

    def abort():
        aborting.set()
        other_zombie.abort_transaction(30)
    threading.Timer(2.0, abort).start()       # the scenario: decided while the replay waits
    replay = writer.write_unit(query, 0, 9, iter(records[10:20]))
    assert (replay.written, replay.skipped) == (0, 10)
    assert aborting.is_set()  # it waited for the abort
    assert markers.latest(f"{query}/3", probe) is None  # the aborted marker never counts
    probe.close()
    assert len(read_all(bootstrap, topic, 2, expect=130, isolation="read_committed")) == 130
