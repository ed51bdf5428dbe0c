"""`df.write.format("mpbroker")` and `df.writeStream.format("mpbroker")`.

Input columns, as for Spark's Kafka sink: `value` (string or binary, required), `key`
(string or binary), `topic` (string; the `topic` option, when set, wins), `partition`
(int; otherwise keyed records go where the Java client's murmur2 partitioner puts them)
and `headers` (array<struct<key: string, value: binary>>). Every producer is
idempotent (acks=all, enable.idempotence): a retried produce request never duplicates
or reorders records.

Batch writes are at-least-once per Spark task, like Spark's own sink: a retried task
writes its rows again.

Streaming writes are exactly-once per micro-batch (`sinkGuarantee=exactly-once`, the
default; `at-least-once` turns it off). Each Spark task of a micro-batch is one *unit of
work*, named by (query id, task partition id); both survive a restart from the
checkpoint, and a replayed batch gives every unit the same rows (Spark replays a
batch with its checkpointed offsets; the query must be deterministic). A marker per
unit, key `<query id>/<partition id>`, lives in a compacted marker topic
(`sinkMarkerTopic`, default `__mpbroker_spark_sink`). Two mechanisms, chosen by
`sinkTransactions` (`auto` (default): use transactions when the broker advertises
InitProducerId, AddPartitionsToTxn, EndTxn and TxnOffsetCommit; `true`; `false`):

* transactions: one transactional.id per unit (`mpbroker-spark-<query>-<partition>`),
  so a restarted unit fences its zombie (the coordinator aborts the zombie's open
  transaction). The unit reads its marker (read_committed, once the transactions open
  on the marker partition are decided); if it shows this batch id or a later one, the
  batch was written and nothing is done. Otherwise the rows and a new marker are produced in one transaction and
  committed together: both or neither become visible.
* markers (no transactions on the broker): the unit reads its marker (as above, so a
  marker of an aborted transactional attempt never counts); `done` for this
  batch id (or a later one) means nothing to do. Otherwise, before the first record
  for a topic it records in a `pending` marker the high watermarks of that topic's
  partitions, and each record carries the header `mpbroker.spark.sink` =
  `<query>/<partition>/<batch>/<content digest>/<n>` (n counts equal records). After
  all rows are acknowledged it writes `done`. A unit that finds a `pending` marker
  for its own batch (the previous attempt died part-way) reads the topics from the
  recorded watermarks (read_uncommitted: its own records are not transactional),
  collects the ids it already wrote and writes only the rest.
  Readers see the records of a batch as they are written (there is no atomic
  visibility without transactions), but none twice.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

from confluent_kafka import TopicPartition as KTP
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from mpbroker.spark import client, options as opt

log = logging.getLogger("mpbroker.spark")

SINK_HEADER = "mpbroker.spark.sink"
# Leading "__": a subscribePattern (and the Metadata auto-create) leave it alone.
DEFAULT_MARKER_TOPIC = "__mpbroker_spark_sink"
MARKER_SCAN_CHUNK = 2000
FLUSH_TIMEOUT_S = 120.0

Record = tuple  # (topic, partition or None, key bytes or None, value bytes or None, headers list or None)


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task did; the driver logs it."""
    partition_id: int
    batch_id: int = -1
    written: int = 0
    skipped: int = 0
    mechanism: str = "none"
    topics: list = field(default_factory=list)


# ---------------------------------------------------------------- rows -> records

def check_schema(schema: StructType, default_topic: str | None) -> None:
    """Spark's rules for the Kafka sink's input columns, checked on the driver."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise opt.OptionError("the data to write needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise opt.OptionError(f"column '{name}' must be string or binary, not {fields[name].simpleString()}")
    if default_topic is None and "topic" not in fields:
        raise opt.OptionError("set the 'topic' option or give the data a 'topic' column")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise opt.OptionError("column 'topic' must be a string")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise opt.OptionError("column 'partition' must be an int")
    if "headers" in fields:
        h = fields["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"]
              and isinstance(h.elementType["key"].dataType, StringType)
              and isinstance(h.elementType["value"].dataType, BinaryType))
        if not ok:
            raise opt.OptionError("column 'headers' must be array<struct<key: string, value: binary>>")


def _bytes(v) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)  # bytearray from Spark's BinaryType


def to_records(rows: Iterable, default_topic: str | None) -> Iterator[Record]:
    for row in rows:
        d = row.asDict() if hasattr(row, "asDict") else dict(row)
        topic = default_topic or d.get("topic")
        if not topic:
            raise ValueError(f"a row has no topic (set the 'topic' option or a 'topic' column): {row!r}")
        headers = d.get("headers")
        if headers:
            headers = [(h["key"], _bytes(h["value"])) for h in headers]
        yield (topic, d.get("partition"), _bytes(d.get("key")), _bytes(d.get("value")), headers or None)


def digest(record: Record) -> str:
    """Content id of a record, independent of the order rows arrive in."""
    topic, partition, key, value, headers = record
    h = hashlib.blake2b(digest_size=12)
    for part in (topic.encode(), str(partition).encode(), key, value):
        h.update(b"\x00" if part is None else b"\x01" + len(part).to_bytes(4, "big") + part)
    for hk, hv in headers or []:
        h.update(hk.encode() + b"\x00" + (hv or b""))
    return h.hexdigest()


class _Delivery:
    def __init__(self):
        self.errors: list[str] = []
        self.acked = 0

    def __call__(self, err, msg):
        if err is not None:
            self.errors.append(f"{msg.topic()}: {err}")
        else:
            self.acked += 1

    def check(self) -> None:
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} record(s) were not written; first: {self.errors[0]}")


def _produce(p, record: Record, on_delivery, extra_headers: list | None = None) -> None:
    topic, partition, key, value, headers = record
    kw = {"key": key, "value": value, "on_delivery": on_delivery}
    if partition is not None:
        kw["partition"] = int(partition)
    hdrs = (headers or []) + (extra_headers or [])
    if hdrs:
        kw["headers"] = hdrs
    while True:
        try:
            p.produce(topic, **kw)
            return
        except BufferError:  # the local queue is full: let deliveries drain
            p.poll(0.1)


def _flush(p, delivery: _Delivery) -> None:
    left = p.flush(FLUSH_TIMEOUT_S)
    if left:
        raise TimeoutError(f"{left} record(s) not acknowledged after {FLUSH_TIMEOUT_S}s")
    delivery.check()


# ---------------------------------------------------------------- batch sink

class MpbrokerBatchWriter(DataSourceWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType):
        self.conf = opt.client_config(options)
        self.default_topic = opt.get(options, "topic")
        check_schema(schema, self.default_topic)

    def write(self, iterator: Iterator) -> SinkCommit:

        tc = TaskContext.get()
        p = client.producer(self.conf)
        delivery = _Delivery()
        n = 0
        for rec in to_records(iterator, self.default_topic):
            _produce(p, rec, delivery)
            n += 1
            if n % 10000 == 0:
                p.poll(0)
        _flush(p, delivery)
        return SinkCommit(tc.partitionId() if tc else 0, written=n, mechanism="idempotent")

    def commit(self, messages) -> None:
        log.info("batch write committed: %d records", sum(m.written for m in messages if m))

    def abort(self, messages) -> None:
        log.warning("batch write aborted after %d records were written by tasks that finished",
                    sum(m.written for m in messages if m))


# ---------------------------------------------------------------- markers

class MarkerLog:
    """The per-unit markers in the marker topic: the latest value for a key wins."""

    def __init__(self, conf: Mapping[str, str], topic: str, stable_timeout_s: float = FLUSH_TIMEOUT_S):
        self.conf = dict(conf)
        self.topic = topic
        self.stable_timeout_s = stable_timeout_s
        self._partitions: int | None = None

    def partition_for(self, key: str, probe) -> int:
        if self._partitions is None:
            parts = client.topic_partitions(probe, [self.topic]).get(self.topic)
            if not parts:
                raise RuntimeError(f"the sink's marker topic {self.topic!r} does not exist")
            self._partitions = len(parts)
        return zlib.crc32(key.encode()) % self._partitions

    def latest(self, key: str, probe, read_committed: bool = True) -> dict | None:
        """The newest marker for `key` (`probe`: a read_uncommitted consumer, for the
        high watermark).

        read_committed (the default) leaves out markers of aborted transactions. A
        marker is invisible to read_committed readers while a transaction that began
        before it is open (another unit's, on the same marker partition), so this
        first finds the newest record for `key` whatever its transaction's fate, waits
        until the transactions open before it are decided (the last stable offset
        passes it), then reads committed records up to it."""

        part = self.partition_for(key, probe)
        low, high = probe.get_watermark_offsets(KTP(self.topic, part), timeout=client.METADATA_TIMEOUT_S,
                                                cached=False)
        newest = self._scan(key, part, low, high, "read_uncommitted")
        if newest is not None and read_committed:
            self._wait_stable(part, newest[0] + 1)
            newest = self._scan(key, part, low, newest[0] + 1, "read_committed")
        return json.loads(newest[1]) if newest is not None and newest[1] else None

    def _scan(self, key: str, part: int, low: int, end: int, isolation: str) -> tuple[int, bytes] | None:
        """(offset, value) of the last record for `key` before `end`, scanning the
        partition backwards in chunks (the newest one is normally among the last few)."""
        conf = {**self.conf, "isolation.level": isolation}
        chunk = MARKER_SCAN_CHUNK
        want = key.encode()
        while end > low:
            start = max(low, end - chunk)
            found = None
            for msgs in client.read_range(conf, self.topic, part, start, end, fail_on_data_loss=False):
                for m in msgs:
                    if m.key() == want:
                        found = (m.offset(), m.value())
            if found is not None:
                return found
            end, chunk = start, chunk * 4
        return None

    def _wait_stable(self, part: int, offset: int) -> None:
        """Until the last stable offset of the marker partition is at least `offset`
        (bounded: an open transaction ends by its commit, its abort, the fencing of its
        transactional id or the coordinator's timeout)."""

        c = client.consumer(self.conf, **{"isolation.level": "read_committed"})
        try:
            deadline = time.monotonic() + self.stable_timeout_s
            while True:
                lso = c.get_watermark_offsets(KTP(self.topic, part), timeout=client.METADATA_TIMEOUT_S,
                                              cached=False)[1]
                if lso >= offset:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self.topic}-{part}: a transaction open since offset {lso} was not decided in "
                        f"{self.stable_timeout_s:.0f}s (waiting for the last stable offset to reach {offset})")
                time.sleep(0.1)
        finally:
            c.close()

    def put(self, p, key: str, value: dict, probe, on_delivery) -> None:
        p.produce(self.topic, key=key.encode(), value=json.dumps(value).encode(),
                  partition=self.partition_for(key, probe), on_delivery=on_delivery)


# ---------------------------------------------------------------- streaming sink

def choose_mechanism(guarantee: str, wanted: str, advertised, where: str = "the broker") -> str:
    """The streaming sink's mechanism: `idempotent` (at-least-once), `transactions` or
    `markers`. `advertised` is called (once, and only when the choice depends on it) for
    the API keys the broker's ApiVersions answer lists."""
    if guarantee not in ("exactly-once", "at-least-once"):
        raise opt.OptionError("option 'sinkGuarantee' must be exactly-once or at-least-once")
    if wanted not in ("auto", "true", "false"):
        raise opt.OptionError("option 'sinkTransactions' must be auto, true or false")
    if guarantee == "at-least-once":
        return "idempotent"
    if wanted == "false":
        return "markers"
    supported = client.has_transaction_apis(advertised())
    if wanted == "auto":
        return "transactions" if supported else "markers"
    if not supported:
        raise opt.OptionError(
            f"sinkTransactions=true, but the broker at {where} does not support transactions (it must "
            f"offer {', '.join(client.TRANSACTION_API_KEYS.values())}); use sinkTransactions=auto to fall "
            "back to markers")
    return "transactions"


class MpbrokerStreamWriter(DataSourceStreamWriter):
    """Created on the driver (where the mechanism is chosen and the marker topic made)
    and pickled to the tasks of every micro-batch."""

    def __init__(self, options: Mapping[str, str], schema: StructType):
        self.conf = opt.client_config(options)
        self.default_topic = opt.get(options, "topic")
        check_schema(schema, self.default_topic)
        guarantee = (opt.get(options, "sinkGuarantee", "exactly-once") or "").lower()
        self.marker_topic = opt.get(options, "sinkMarkerTopic", DEFAULT_MARKER_TOPIC)
        self.transaction_timeout_ms = opt.get_int(options, "sinkTransactionTimeoutMs", 60000, 1000)
        wanted = (opt.get(options, "sinkTransactions", "auto") or "").lower()
        bootstrap = self.conf["bootstrap.servers"]
        self.mechanism = choose_mechanism(guarantee, wanted, lambda: client.api_keys(bootstrap), bootstrap)
        if self.mechanism != "idempotent":
            client.ensure_topic(self.conf, self.marker_topic, 1,
                                {"cleanup.policy": "compact"})

    def write(self, iterator: Iterator) -> SinkCommit:

        tc = TaskContext.get()
        batch_id = int(tc.getLocalProperty("streaming.sql.batchId"))
        query_id = tc.getLocalProperty("sql.streaming.queryId")
        return self.write_unit(query_id, tc.partitionId(), batch_id, to_records(iterator, self.default_topic))

    def write_unit(self, query_id: str, partition_id: int, batch_id: int, records: Iterator[Record]) -> SinkCommit:
        """One unit of work of one micro-batch (also the entry point of the tests)."""
        if self.mechanism == "idempotent":
            return self._write_plain(partition_id, batch_id, records)
        first = next(records, None)
        if first is None:
            # A replay gives a unit the same rows, so an empty unit never wrote anything:
            # no marker to read or write.
            return SinkCommit(partition_id, batch_id, mechanism=self.mechanism)
        records = itertools.chain([first], records)
        if self.mechanism == "transactions":
            return self._write_transactional(query_id, partition_id, batch_id, records)
        return self._write_with_markers(query_id, partition_id, batch_id, records)

    def _stable_timeout_s(self) -> float:
        # An open transaction of another unit is decided by its commit, by the fencing of
        # a retry, or by the coordinator's timeout (checked every 10 s by default).
        return max(FLUSH_TIMEOUT_S, self.transaction_timeout_ms / 1000 + 30)

    def commit(self, messages, batchId: int) -> None:
        done = [m for m in messages if m]
        log.info("micro-batch %d committed (%s): %d records written, %d skipped as already written", batchId,
                 self.mechanism, sum(m.written for m in done), sum(m.skipped for m in done))

    def abort(self, messages, batchId: int) -> None:
        log.warning("micro-batch %d aborted; its replay writes only what is missing", batchId)

    # -- at-least-once
    def _write_plain(self, partition_id: int, batch_id: int, records: Iterator[Record]) -> SinkCommit:
        p = client.producer(self.conf)
        delivery = _Delivery()
        n = 0
        for rec in records:
            _produce(p, rec, delivery)
            n += 1
        _flush(p, delivery)
        return SinkCommit(partition_id, batch_id, written=n, mechanism=self.mechanism)

    # -- exactly-once with transactions
    def _write_transactional(self, query_id: str, partition_id: int, batch_id: int,
                             records: Iterator[Record]) -> SinkCommit:
        key = f"{query_id}/{partition_id}"
        markers = MarkerLog(self.conf, self.marker_topic, self._stable_timeout_s())
        # librdkafka refuses a transactional producer whose message.timeout.ms exceeds
        # transaction.timeout.ms (a record may not outlive its transaction).
        message_timeout_ms = min(int(self.conf.get("message.timeout.ms", client.MESSAGE_TIMEOUT_MS)),
                                 self.transaction_timeout_ms)
        p = client.producer(self.conf, **{"transactional.id": f"mpbroker-spark-{query_id}-{partition_id}",
                                          "transaction.timeout.ms": self.transaction_timeout_ms,
                                          "message.timeout.ms": message_timeout_ms})
        p.init_transactions(client.METADATA_TIMEOUT_S)  # fences an older attempt of this unit
        probe = client.consumer(self.conf, **{"isolation.level": "read_uncommitted"})  # high watermarks
        try:
            last = markers.latest(key, probe, read_committed=True)
            if last is not None and last["batch"] == batch_id and last["state"] == "pending":
                # An attempt under the markers mechanism died part-way: finish it that way.
                return self._write_with_markers(query_id, partition_id, batch_id, records)
            if last is not None and last["batch"] >= batch_id:
                return SinkCommit(partition_id, batch_id, skipped=sum(1 for _ in records), mechanism="transactions")
            delivery = _Delivery()
            p.begin_transaction()
            try:
                n = 0
                for rec in records:
                    _produce(p, rec, delivery)
                    n += 1
                markers.put(p, key, {"batch": batch_id, "state": "done"}, probe, delivery)
                p.flush(FLUSH_TIMEOUT_S)
                delivery.check()
                p.commit_transaction(FLUSH_TIMEOUT_S)
            except BaseException:
                try:
                    p.abort_transaction(FLUSH_TIMEOUT_S)
                except Exception as e:  # noqa: BLE001 - the original error matters more
                    log.warning("abort_transaction failed: %s", e)
                raise
            return SinkCommit(partition_id, batch_id, written=n, mechanism="transactions")
        finally:
            probe.close()

    # -- exactly-once with markers (no transactions on the broker)
    def _write_with_markers(self, query_id: str, partition_id: int, batch_id: int,
                            records: Iterator[Record]) -> SinkCommit:
        key = f"{query_id}/{partition_id}"
        prefix = f"{key}/{batch_id}/"
        markers = MarkerLog(self.conf, self.marker_topic, self._stable_timeout_s())
        probe = client.consumer(self.conf, **{"isolation.level": "read_uncommitted"})  # high watermarks
        p = client.producer(self.conf)
        delivery = _Delivery()
        try:
            last = markers.latest(key, probe, read_committed=True)
            if last is not None and (last["batch"] > batch_id or
                                     (last["batch"] == batch_id and last["state"] == "done")):
                return SinkCommit(partition_id, batch_id, skipped=sum(1 for _ in records), mechanism="markers")
            resumed = last is not None and last["batch"] == batch_id  # a pending attempt of this batch
            old_marks = {t: {int(k): v for k, v in parts.items()} for t, parts in
                         (last.get("hw", {}) if resumed else {}).items()}
            marks: dict[str, dict[int, int]] = dict(old_marks)
            already: dict[str, set[str]] = {}  # topic -> ids the earlier attempt wrote
            seen: dict[str, int] = {}
            written = skipped = 0
            try:
                for rec in records:
                    topic = rec[0]
                    if topic not in marks:
                        marks[topic] = self._high_watermarks(probe, topic)
                        markers.put(p, key, {"batch": batch_id, "state": "pending", "hw": marks}, probe, delivery)
                        _flush(p, delivery)  # the watermarks are durable before the first record
                    d = digest(rec)
                    n = seen.get(d, 0)
                    seen[d] = n + 1
                    rid = f"{prefix}{d}/{n}"
                    if topic in old_marks:
                        if topic not in already:
                            already[topic] = self._ids_written(probe, topic, old_marks[topic], prefix)
                        if rid in already[topic]:
                            skipped += 1
                            continue
                    _produce(p, rec, delivery, [(SINK_HEADER, rid.encode())])
                    written += 1
            finally:
                # Land what was handed to the client even when the rows failed part-way,
                # so that a replay finds a well-defined prefix.
                p.flush(FLUSH_TIMEOUT_S)
            delivery.check()
            markers.put(p, key, {"batch": batch_id, "state": "done"}, probe, delivery)
            _flush(p, delivery)
            return SinkCommit(partition_id, batch_id, written=written, skipped=skipped, mechanism="markers",
                              topics=sorted(marks))
        finally:
            probe.close()

    @staticmethod
    def _high_watermarks(probe, topic: str) -> dict[int, int]:
        parts = client.topic_partitions(probe, [topic]).get(topic)
        if not parts:
            raise RuntimeError(f"topic {topic!r} does not exist (create it before writing to it)")
        return {p: high for (_t, p), (_low, high) in client.watermarks(probe, [(topic, p) for p in parts]).items()}

    def _ids_written(self, probe, topic: str, since: Mapping[int, int], prefix: str) -> set[str]:
        """Sink ids with `prefix` in `topic` from the recorded watermarks to the end."""
        want = prefix.encode()
        found = set()
        now = self._high_watermarks(probe, topic)
        for part, end in now.items():
            # The sink's own records are not transactional: read_uncommitted sees all of
            # them, also those after a transaction of another producer that is still open.
            for msgs in client.read_range({**self.conf, "isolation.level": "read_uncommitted"}, topic, part,
                                          since.get(part, 0), end, fail_on_data_loss=False):
                for m in msgs:
                    for hk, hv in m.headers() or []:
                        if hk == SINK_HEADER and hv and hv.startswith(want):
                            found.add(hv.decode())
        log.info("resuming %s in %s: %d records of it were written before", prefix, topic, len(found))
        return found
