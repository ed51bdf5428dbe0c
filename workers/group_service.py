"""Wires the group coordinators (workers/groups/) into a worker.

A worker runs one `GroupCoordinator` per `__consumer_offsets` partition it owns
(seed 001 §5.5: the coordinator of a group is the leader of partition
`abs(javaStringHashCode(group_id)) % offsets.topic.num.partitions`). This module gives
each coordinator what it needs from the worker:

* a scheduler: the worker's timing wheel, through `LoopTimer.schedule`;
* an appender: builds one v2 batch from the (key, value) records (transactional when
  asked), appends it to the partition like any produce, and calls back on the loop once
  the high watermark covers it (one replica: right after the append);
* the replay: when the partition becomes ours the coordinator is loaded from the log,
  batch by batch, with control batches turned into COMMIT/ABORT markers.

It also routes requests: `coordinator_for(group_id)` is the local coordinator, or None
when another worker/broker leads that partition (the handler answers NOT_COORDINATOR).
"""
from __future__ import annotations

import asyncio
import logging

from storage import errors as serr
from storage.batch import BatchBuilder, iter_batches, parse_control_key
from workers.groups.coordinator import GroupCoordinator, LoadRecord, TxnMarker
from workers.groups.partitioner import coordinator_partition

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_CHUNK_BYTES = 4 * 1024 * 1024


class _Scheduler:
    def __init__(self, loop_timer):
        self.loop_timer = loop_timer

    def schedule(self, delay_ms: int, callback):
        return self.loop_timer.schedule(max(0, int(delay_ms)), callback)


class GroupService:
    def __init__(self, broker):
        self.broker = broker
        self.coordinators: dict[int, GroupCoordinator] = {}
        self.scheduler = _Scheduler(broker.loop_timer)

    @property
    def num_partitions(self) -> int:
        t = self.broker.metadata.topics.get(OFFSETS_TOPIC) if self.broker.metadata else None
        if t is not None:
            return len(t.partitions)
        return self.broker.config["offsets.topic.num.partitions"]

    def partition_for(self, group_id: str) -> int:
        return coordinator_partition(group_id, self.num_partitions)

    def coordinator_for(self, group_id: str) -> GroupCoordinator | None:
        return self.coordinators.get(self.partition_for(group_id))

    def _topic_metadata(self) -> dict:
        """{topic name: (topic id, partition count)} for the KIP-848 assignors."""
        md = self.broker.metadata
        if md is None:
            return {}
        return {t.name: (t.topic_id, len(t.partitions)) for t in md.topics.values()
                if not t.name.startswith("__")}

    # ------------------------------------------------------------ life cycle
    def became_coordinator(self, partition) -> None:
        idx = partition.index
        coord = GroupCoordinator(
            idx, _GroupConfig(self.broker), self.broker.clock, self.scheduler,
            self._appender(partition), topic_metadata=self._topic_metadata)
        self.coordinators[idx] = coord
        coord.begin_load()
        try:
            coord.load_records(self._replay(partition))
        except Exception:
            log.exception("loading group coordinator state of %s-%d", OFFSETS_TOPIC, idx)
        coord.finish_load()

    def resigned_coordinator(self, partition) -> None:
        coord = self.coordinators.pop(partition.index, None)
        if coord is not None:
            coord.unload()

    def shutdown(self) -> None:
        for coord in self.coordinators.values():
            coord.unload()
        self.coordinators.clear()

    def housekeeping(self, now_ms: int) -> None:
        pass  # expiry runs on each coordinator's own timer (finish_load schedules it)

    # ------------------------------------------------------------ replay
    @staticmethod
    def _replay(partition):
        log_ = partition.log
        offset = log_.log_start_offset
        end = log_.log_end_offset
        while offset < end:
            data = log_.read_records_bytes(offset, LOAD_CHUNK_BYTES)
            if not data:
                break
            last = offset - 1
            for batch in iter_batches(memoryview(data), allow_partial_tail=True):
                last = batch.last_offset
                if batch.is_control:
                    for r in batch.records():
                        try:
                            _, ctype = parse_control_key(r.key)
                        except serr.StorageError:
                            continue
                        if ctype in (0, 1):  # 0 ABORT, 1 COMMIT
                            yield TxnMarker(batch.producer_id, ctype == 1)
                    continue
                for r in batch.records():
                    if r.key is not None:
                        yield LoadRecord(r.key, r.value, batch.producer_id,
                                         batch.is_transactional)
            if last < offset:
                break
            offset = last + 1

    # ------------------------------------------------------------ appends
    def _appender(self, partition):
        loop = asyncio.get_event_loop()

        def append(records, callback, producer_id: int = -1, producer_epoch: int = -1):
            # A transactional offset commit continues the producer's sequence on this
            # partition (several TxnOffsetCommits in one transaction are not duplicates;
            # an older epoch is refused by the producer state: INVALID_PRODUCER_EPOCH).
            seq = -1
            if producer_id >= 0:
                e = partition.log.producer_state.last_entry(producer_id)
                last = e.last_seq if e is not None else -1
                seq = last + 1 if (e is not None and e.producer_epoch == producer_epoch
                                   and 0 <= last < 0x7FFFFFFF) else 0
            builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                   is_transactional=producer_id >= 0, base_sequence=seq)
            for key, value in records:
                builder.append(key, value)
            try:
                if partition.closed:
                    raise serr.StorageError("partition moved")
                partition.log.append(memoryview(bytearray(builder.build())),
                                     partition.leader_epoch, validate=False)
                # HW = LEO with one replica; with followers it waits for them
                # (workers/partition.py: replicated partitions)
                partition._maybe_increment_high_watermark()
                code = 0
            except serr.StorageError as e:
                log.warning("appending group records to %s-%d failed: %s",
                            OFFSETS_TOPIC, partition.index, e)
                code = e.code if e.code > 0 else 15  # COORDINATOR_NOT_AVAILABLE
            loop.call_soon(callback, code)

        return append


class _GroupConfig:
    """The coordinator reads Kafka's group/offsets keys through `.get`."""

    def __init__(self, broker):
        self.broker = broker

    def get(self, key, default=None):
        if key == "offsets.topic.num.partitions":
            return self.broker.groups.num_partitions if self.broker.groups else \
                self.broker.config[key]
        if key == "offsets.retention.minutes":
            return self.broker.config.get(key, default)
        v = self.broker.config.get(key, default)
        return default if v is None else v
