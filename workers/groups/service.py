"""Wires the group coordinators (workers/groups/) into a worker.

A worker runs one `GroupCoordinator` per `__consumer_offsets` partition it owns
(seed 001 §5.5: the coordinator of a group is the leader of partition
`abs(javaStringHashCode(group_id)) % offsets.topic.num.partitions`). This module gives
each coordinator what it needs from the worker:

* a scheduler: the worker's timing wheel, through `LoopTimer.schedule`;
* an appender: builds one v2 batch from the (key, value) records (transactional when
  asked; compressed with `offsets.topic.compression.codec`, as Kafka does) and hands it
  to `workers.coordinator_log.append_committed` with `offsets.commit.required.acks` and
  `offsets.commit.timeout.ms`: the coordinator's callback runs once the high watermark
  covers the batch (at once with one replica), and a batch refused before anything was
  written comes back as the appender's return value so the coordinator can undo its
  change (the coordinator's appender contract, workers/groups/coordinator.py);
* the load: when the partition becomes ours the coordinator starts LOADING and an
  asyncio task replays the partition into it in chunks of `offsets.load.buffer.size`
  bytes (workers/coordinator_log.py `replay`), the loop free in between; requests for
  its groups meanwhile get COORDINATOR_LOAD_IN_PROGRESS. A load that fails starts over
  after a backoff (the coordinator stays LOADING: never ACTIVE with part of its state);
  the task is cancelled when the partition is lost (follower, moved, deleted) or becomes
  ours again.

It also routes requests: `coordinator_for(group_id)` is the local coordinator, or None
when another worker/broker leads that partition (the handler answers NOT_COORDINATOR).
"""
from __future__ import annotations

import asyncio
import logging
import time

from mpbroker.metadata.model import OFFSETS_TOPIC
from storage import errors as serr
from storage.batch import BatchBuilder, parse_control_key
from workers.coordinator_log import append_committed, load_with_backoff, replay
from workers.groups.config import GroupConfig
from workers.groups.coordinator import GroupCoordinator, LoadRecord, TxnMarker
from workers.groups.partitioner import coordinator_partition

log = logging.getLogger(__name__)


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
        self._loads: dict[int, asyncio.Task] = {}
        self.config = GroupConfig.from_config(broker.config)

    @property
    def num_partitions(self) -> int:
        t = self.broker.metadata.topics.get(OFFSETS_TOPIC) if self.broker.metadata else None
        if t is not None:
            return t.num_partitions
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
        self._stop(idx)  # a previous incarnation (a new leader epoch)
        coord = GroupCoordinator(
            idx, self.config, self.broker.clock, self.scheduler, self._appender(partition),
            topic_metadata=self._topic_metadata, num_partitions=lambda: self.num_partitions)
        self.coordinators[idx] = coord
        coord.begin_load()
        self._loads[idx] = self.broker.loop_timer.loop.create_task(self._load(partition, coord))

    def resigned_coordinator(self, partition) -> None:
        self._stop(partition.index)

    def _stop(self, idx: int) -> None:
        task = self._loads.pop(idx, None)
        if task is not None:
            task.cancel()
        coord = self.coordinators.pop(idx, None)
        if coord is not None:
            coord.unload()

    def loading(self) -> list[asyncio.Task]:
        """The loads in progress (what a test waits for)."""
        return [t for t in self._loads.values() if not t.done()]

    def shutdown(self) -> None:
        for idx in list(self.coordinators):
            self._stop(idx)

    # ------------------------------------------------------------ the load
    async def _load(self, partition, coord: GroupCoordinator) -> None:
        idx = partition.index
        what = f"group coordinator state of {OFFSETS_TOPIC}-{idx}"
        started = time.monotonic()

        async def load() -> int:
            chunks = await replay(partition.log, self.config.load_buffer_bytes,
                                  lambda batch: coord.load_records(_load_items(batch)), what)
            coord.finish_load()  # no await since the last chunk: nothing was missed
            return chunks

        def restart() -> None:
            coord.unload()       # whatever finish_load may have started
            coord.begin_load()   # LOADING again: requests keep getting LOAD_IN_PROGRESS

        chunks = await load_with_backoff(
            load, lambda: not partition.closed and self.coordinators.get(idx) is coord,
            what, restart)
        if chunks is None:
            return
        if self._loads.get(idx) is asyncio.current_task():
            del self._loads[idx]
        log.info("loaded %d groups of %s-%d in %.0f ms (%d chunks)", len(coord.groups),
                 OFFSETS_TOPIC, idx, (time.monotonic() - started) * 1000, chunks)

    # ------------------------------------------------------------ appends
    def _appender(self, partition):
        broker = self.broker

        def append(records, callback, producer_id: int = -1, producer_epoch: int = -1) -> int:
            # A transactional offset commit continues the producer's sequence on this
            # partition (several TxnOffsetCommits in one transaction are not duplicates;
            # an older epoch is refused by the producer state: INVALID_PRODUCER_EPOCH).
            seq = -1
            if producer_id >= 0 and not partition.closed:
                e = partition.log.producer_state.last_entry(producer_id)
                last = e.last_seq if e is not None else -1
                seq = last + 1 if (e is not None and e.producer_epoch == producer_epoch
                                   and 0 <= last < 0x7FFFFFFF) else 0
            builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                   is_transactional=producer_id >= 0, base_sequence=seq,
                                   compression=self.config.compression, clock=broker.clock)
            for key, value in records:
                builder.append(key, value)
            code = append_committed(broker, partition, builder.build(), callback,
                                    required_acks=self.config.commit_required_acks,
                                    timeout_ms=self.config.commit_timeout_ms)
            if code:
                log.warning("appending group records to %s-%d failed: error %d",
                            OFFSETS_TOPIC, partition.index, code)
            return code

        return append


def _load_items(batch) -> list:
    """What `GroupCoordinator.load_records` takes for one batch: LoadRecords, and
    TxnMarkers for COMMIT/ABORT control records."""
    if not batch.is_control:
        return [LoadRecord(r.key, r.value, batch.producer_id, batch.is_transactional)
                for r in batch.records() if r.key is not None]
    items = []
    for r in batch.records():
        try:
            _, ctype = parse_control_key(r.key)
        except serr.StorageError:
            continue
        if ctype in (0, 1):  # 0 ABORT, 1 COMMIT
            items.append(TxnMarker(batch.producer_id, ctype == 1))
    return items
