"""`spark.read.format("mpbroker")` and `spark.readStream.format("mpbroker")`.

Batch: the driver resolves the subscription to (topic, partition) pairs and the
starting/ending options to concrete offsets, then plans one Spark partition per
(topic, partition, offset range); ranges are cut further by `minPartitions` /
`maxRecordsPerPartition`, so one big partition is loaded by several tasks in parallel.
Each task reads its range with its own confluent-kafka consumer (assign at an offset,
no group) and hands Spark Arrow record batches.

Streaming (micro-batch, including Trigger.AvailableNow): Spark's offsets for this
source are `{"topic": {"partition": next offset}}`, the same JSON as Spark's Kafka
source. Spark writes the end offsets of each micro-batch to the checkpoint's offset
log before running it and marks it done in the commit log afterwards; on restart it
re-runs the last planned batch with exactly those offsets and continues from its end,
so no record is lost or read twice. Nothing is committed to the broker.

Data loss: a planned start offset below the partition's log start offset (retention
or DeleteRecords removed it), or a partition that disappeared, fails the query with
`DataLossError` unless `failOnDataLoss=false`, in which case reading resumes at the
earliest offset still there.

pyarrow is imported inside the reading functions only: the tasks that read need it, the
driver, which only plans, does not load it.
"""
from __future__ import annotations

import logging
from typing import Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from mpbroker.spark import client, options as opt
from mpbroker.spark.sink import MpbrokerBatchWriter, MpbrokerStreamWriter

log = logging.getLogger("mpbroker.spark")

SOURCE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                 "timestamp timestamp, timestampType int")
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"


def source_schema(include_headers: bool) -> str:
    return SOURCE_SCHEMA + (", " + HEADERS_FIELD if include_headers else "")


class OffsetRange(InputPartition):
    """One Spark task's work: offsets [start, end) of one topic partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


# ---------------------------------------------------------------- reading records into Arrow

class _RangeReader:
    """Shared by the batch and stream readers: parsed options and `read`."""

    def __init__(self, options: Mapping[str, str], schema: StructType):
        self.options = dict(options)
        self.schema = schema
        self.conf = opt.client_config(options)
        self.subscription = opt.subscription(options)
        self.fail_on_data_loss = opt.get_bool(options, "failOnDataLoss", True)
        self.include_headers = opt.get_bool(options, "includeHeaders", False)
        self.poll_timeout_ms = opt.get_int(options, "kafkaConsumer.pollTimeoutMs", client.DEFAULT_POLL_TIMEOUT_MS, 1)
        self.min_partitions = opt.get_int(options, "minPartitions", None, 1)
        self.max_records_per_partition = opt.get_int(options, "maxRecordsPerPartition", None, 1)
        self.group_id_prefix = opt.get(options, "groupIdPrefix", "mpbroker-spark")
        self.ts_strategy = (opt.get(options, "startingOffsetsByTimestampStrategy", "error") or "error").lower()
        if self.ts_strategy not in ("error", "latest"):
            raise opt.OptionError("option 'startingOffsetsByTimestampStrategy' must be error or latest")
        self._driver_client = None

    # The reader object is pickled to the executors: the driver's client stays behind.
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_driver_client"] = None
        return state

    @property
    def driver_client(self):
        if self._driver_client is None:
            self._driver_client = client.consumer(self.conf, self.group_id_prefix)
        return self._driver_client

    def close_driver_client(self) -> None:
        if self._driver_client is not None:
            self._driver_client.close()
            self._driver_client = None

    def plan(self, start: Mapping[opt.TopicPartition, int], end: Mapping[opt.TopicPartition, int]) -> list[OffsetRange]:
        """Offset ranges for the tasks; a partition with more than
        `maxRecordsPerPartition` records, or fewer ranges than `minPartitions`, is cut."""
        spans = [(tp, start[tp], end[tp]) for tp in sorted(end) if tp in start and end[tp] > start[tp]]
        total = sum(e - s for _, s, e in spans)
        out = []
        for (t, p), s, e in spans:
            pieces = 1
            if self.max_records_per_partition:
                pieces = max(pieces, -(-(e - s) // self.max_records_per_partition))
            if self.min_partitions and self.min_partitions > len(spans) and total:
                pieces = max(pieces, round(self.min_partitions * (e - s) / total))
            out += [OffsetRange(t, p, lo, hi) for lo, hi in opt.split_range(s, e, pieces)]
        return out

    def read(self, partition: OffsetRange):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        for msgs in client.read_range(self.conf, partition.topic, partition.partition, partition.start,
                                      partition.end, fail_on_data_loss=self.fail_on_data_loss,
                                      poll_timeout_ms=self.poll_timeout_ms,
                                      group_id_prefix=self.group_id_prefix):
            yield pa.RecordBatch.from_arrays(self._columns(msgs, arrow_schema), schema=arrow_schema)

    def _columns(self, msgs: list, arrow_schema) -> list:
        import pyarrow as pa

        stamps = [m.timestamp() for m in msgs]
        n = len(msgs)
        cols = {
            "key": pa.array([m.key() for m in msgs], pa.binary()),
            "value": pa.array([m.value() for m in msgs], pa.binary()),
            "topic": pa.array([msgs[0].topic()] * n, pa.string()),
            "partition": pa.array([msgs[0].partition()] * n, pa.int32()),
            "offset": pa.array([m.offset() for m in msgs], pa.int64()),
            "timestamp": pa.array([ts * 1000 if kind else None for kind, ts in stamps],
                                  arrow_schema.field("timestamp").type),
            # librdkafka: 1 CreateTime, 2 LogAppendTime; Spark/Java: 0 and 1.
            "timestampType": pa.array([max(kind - 1, 0) for kind, _ in stamps], pa.int32()),
        }
        if self.include_headers:
            cols["headers"] = pa.array(
                [[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in msgs],
                arrow_schema.field("headers").type)
        return [cols[name] for name in arrow_schema.names]


# ---------------------------------------------------------------- batch

class MpbrokerBatchReader(_RangeReader, DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType):
        super().__init__(options, schema)
        self.starting = opt.offset_spec(options, "starting", "earliest")
        self.ending = opt.offset_spec(options, "ending", "latest")
        # Spark's rules for batch queries (offset_spec already refuses -2 in endingOffsets).
        latest = [f"{t}-{p}" for t, parts in sorted(self.starting.offsets.items())
                  for p, o in sorted(parts.items()) if o == opt.LATEST]
        if self.starting.kind == "latest" or (self.starting.kind == "offsets" and latest):
            raise opt.OptionError("startingOffsets='latest' (or -1 in its JSON) is not allowed for a "
                                  "batch query" + (f": {', '.join(latest)}" if latest else ""))
        if self.ending.kind == "earliest":
            raise opt.OptionError("endingOffsets='earliest' is not allowed for a batch query")
        self._ranges: list[OffsetRange] | None = None

    def partitions(self) -> list[OffsetRange]:
        if self._ranges is None:
            self._ranges = self._plan_batch()
        return list(self._ranges)

    def _plan_batch(self) -> list[OffsetRange]:
        try:
            c = self.driver_client
            tps = client.resolve_subscription(c, self.subscription)
            marks = client.watermarks(c, tps)
            start = client.resolve_offsets(c, self.starting, tps, marks, which="starting",
                                           ts_strategy=self.ts_strategy)
            end = client.resolve_offsets(c, self.ending, tps, marks, which="ending")
        finally:
            self.close_driver_client()
        for tp in tps:
            if start[tp] > end[tp]:
                raise opt.OptionError(f"{tp[0]}-{tp[1]}: the starting offset {start[tp]} is after the ending "
                                      f"offset {end[tp]}")
            if start[tp] < marks[tp][0]:
                client.data_loss(f"Cannot read {tp[0]}-{tp[1]} from offset {start[tp]}: the earliest offset the "
                                 f"broker has is {marks[tp][0]}", self.fail_on_data_loss)
                start[tp] = min(marks[tp][0], end[tp])
        ranges = self.plan(start, end)
        log.info("batch read of %d partitions planned as %d ranges", len(tps), len(ranges))
        return ranges


# ---------------------------------------------------------------- streaming

class MpbrokerStreamReader(_RangeReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str], schema: StructType):
        super().__init__(options, schema)
        self.starting = opt.offset_spec(options, "starting", "latest")
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if opt.get(options, name):
                raise opt.OptionError(f"option '{name}' is for batch queries only")
        self.max_offsets_per_trigger = opt.get_int(options, "maxOffsetsPerTrigger", None, 1)
        self.available_now_target: dict[opt.TopicPartition, int] | None = None

    # -- Spark's streaming source contract
    def initialOffset(self) -> dict:
        c = self.driver_client
        tps = client.resolve_subscription(c, self.subscription)
        marks = client.watermarks(c, tps)
        start = client.resolve_offsets(c, self.starting, tps, marks, which="starting",
                                       ts_strategy=self.ts_strategy)
        return opt.to_json_offsets(opt.nest(start))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_offsets_per_trigger:
            return ReadMaxRows(self.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_target = self._latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = opt.flatten(opt.from_json_offsets(start, "the checkpointed offsets"))
        latest = self._latest()
        target = self.available_now_target
        if target is not None:
            # Nothing past the target; a partition that appeared after it is not read.
            latest = {tp: min(o, target[tp]) if tp in target else begin[tp]
                      for tp, o in latest.items() if tp in target or tp in begin}
        # New partitions start at their earliest offset (as Spark's Kafka source does).
        begin_all = {**self._new_partition_starts(begin, latest), **begin}
        end = {tp: max(o, begin_all.get(tp, o)) for tp, o in latest.items()}
        for tp in sorted(set(begin) - set(latest)):
            # Fails the query here: a batch that only kept the gone partition at its start
            # offset would plan nothing, and the query would stall instead of failing.
            client.data_loss(f"Partition {tp[0]}-{tp[1]} is gone (its topic was deleted?)",
                             self.fail_on_data_loss)
        if isinstance(limit, ReadMaxRows):
            end = opt.rate_limit(begin_all, end, limit.max_rows)
        return opt.to_json_offsets(opt.nest(end))

    def reportLatestOffset(self) -> dict | None:
        return opt.to_json_offsets(opt.nest(self._latest()))

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        begin = opt.flatten(opt.from_json_offsets(start, "the checkpointed start offsets"))
        finish = opt.flatten(opt.from_json_offsets(end, "the checkpointed end offsets"))
        if begin == finish:
            return []
        c = self.driver_client
        existing = client.topic_partitions(c, sorted({t for t, _ in finish}))
        live = [tp for tp in finish if tp[1] in existing.get(tp[0], [])]
        for tp in sorted(set(finish) - set(live)):
            client.data_loss(f"Partition {tp[0]}-{tp[1]} is gone (its topic was deleted?)", self.fail_on_data_loss)
        marks = client.watermarks(c, live)
        starts = {}
        for tp in live:
            s = begin.get(tp)
            if s is None:  # a partition found after the batch began: read it from its start
                s = marks[tp][0]
            if s < marks[tp][0]:
                client.data_loss(f"Cannot read {tp[0]}-{tp[1]} from offset {s}: the earliest offset the broker "
                                 f"has is {marks[tp][0]}", self.fail_on_data_loss)
                s = min(marks[tp][0], finish[tp])
            starts[tp] = s
        return self.plan(starts, {tp: finish[tp] for tp in live})

    def commit(self, end: dict) -> None:
        """Offsets stay in Spark's checkpoint; nothing is committed to the broker."""

    def stop(self) -> None:
        self.close_driver_client()

    # -- helpers
    def _latest(self) -> dict[opt.TopicPartition, int]:
        c = self.driver_client
        tps = client.resolve_subscription(c, self.subscription)
        return {tp: high for tp, (_low, high) in client.watermarks(c, tps).items()}

    def _new_partition_starts(self, begin: Mapping, latest: Mapping) -> dict[opt.TopicPartition, int]:
        new = [tp for tp in latest if tp not in begin]
        if not new:
            return {}
        return {tp: low for tp, (low, _high) in client.watermarks(self.driver_client, new).items()}


# ---------------------------------------------------------------- the data source

class MpbrokerDataSource(DataSource):
    """format("mpbroker"): Spark's Kafka connector options and schema over mpbroker
    (or any Kafka-protocol broker) through confluent-kafka."""

    @classmethod
    def name(cls) -> str:
        return "mpbroker"

    def schema(self) -> str:
        return source_schema(opt.get_bool(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return MpbrokerBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MpbrokerStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool):
        if overwrite:
            # As Spark's Kafka sink: a topic cannot be truncated and rewritten.
            raise opt.OptionError("save mode Overwrite is not allowed for format('mpbroker'): "
                                  "use mode('append')")

        return MpbrokerBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        return MpbrokerStreamWriter(self.options, schema)
