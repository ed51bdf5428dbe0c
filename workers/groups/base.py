"""The group coordinator's state and plumbing, shared by its parts.

`CoordinatorBase` holds what every part of a `GroupCoordinator`
(workers/groups/coordinator.py) reads and writes: the partition's groups, the
coordinator's state (LOADING, ACTIVE, UNLOADED), its clock, scheduler and appender (the
contracts are in coordinator.py's docstring), and the checks every request starts with
(`_check_status`: Kafka's validateGroupStatus). The parts (membership.py, offsets.py,
admin.py, load.py) are mixins over it; they call each other's methods through `self`.
"""
from __future__ import annotations

import uuid
from typing import Callable, Mapping

from mpbroker.config import BrokerConfig
from workers.groups import errors
from workers.groups.config import GroupConfig
from workers.groups.consumer_protocol import ConsumerGroupProtocol
from workers.groups.group import ClassicGroup
from workers.groups.partitioner import coordinator_partition

LOADING = "loading"
ACTIVE = "active"
UNLOADED = "unloaded"

# APIs that accept an empty group id (legacy: offsets of the "" group)
_EMPTY_GROUP_ID_OK = frozenset({"OffsetCommit", "OffsetFetch", "DescribeGroups", "DeleteGroups"})


def _count_in(config: Mapping) -> Callable[[], int | None]:
    def count():
        num = config.get("offsets.topic.num.partitions")
        return int(num) if num is not None else None
    return count


def _no_count() -> None:
    return None


class CoordinatorBase:
    def __init__(self, partition_id: int, config: GroupConfig | BrokerConfig | Mapping,
                 clock: Callable[[], int], scheduler, appender, *,
                 member_id_factory: Callable[[], str] | None = None,
                 topic_metadata: Callable[[], dict] | None = None,
                 num_partitions: Callable[[], int | None] | None = None):
        # topic_metadata() -> {topic name: (topic id, partition count)}: the KIP-848
        # assignor's view of the cluster (the worker's metadata copy)
        # num_partitions() -> offsets.topic.num.partitions as the worker's metadata has it
        # (None: no check); without it, a plain mapping config's key, read at every check
        if num_partitions is None:
            num_partitions = _count_in(config) if isinstance(config, Mapping) else _no_count
        self._num_partitions = num_partitions
        self.config = config if isinstance(config, GroupConfig) else GroupConfig.from_config(config)
        self.partition_id = partition_id
        self.clock = clock
        self.scheduler = scheduler
        self.appender = appender
        self._new_uuid = member_id_factory or (lambda: str(uuid.uuid4()))
        self.state = LOADING
        self.groups: dict[str, ClassicGroup] = {}
        self._producer_groups: dict[int, set[str]] = {}  # producer id -> groups with pending txn offsets
        self._epoch = 0  # bumped by unload: stale timers and append callbacks see it
        self._append_seq = 0
        self._expiry_timer = None
        self._loading = None
        self.consumer = ConsumerGroupProtocol(self, self.config, topic_metadata or (lambda: {}))

    @property
    def num_partitions(self) -> int | None:
        """offsets.topic.num.partitions when set (groups hashing to another partition get
        NOT_COORDINATOR). Read at every check, not once: in cluster mode the worker's
        metadata may still be receiving the offsets topic's partitions one by one when
        the coordinator is created, and a count frozen then would refuse its groups."""
        return self._num_partitions()

    def _schedule(self, delay_ms: int, fn: Callable[[], None]):
        epoch = self._epoch

        def fire():
            if epoch == self._epoch:
                fn()
        return self.scheduler.schedule(max(0, int(delay_ms)), fire)

    @staticmethod
    def _cancel(handle) -> None:
        if handle is not None:
            handle.cancel()

    def _append(self, records, callback: Callable[[int], None],
                on_refused: Callable[[], None] | None = None, **txn) -> int:
        """Append and return the append's sequence number (log order of this partition).

        An append the appender refused (nothing written) first calls ``on_refused()``, so
        the caller can restore what it changed before anything else runs, then
        ``callback(error)``. After an unload the callback is not called;
        ``callback.after_unload(error)`` is, if the callback has that attribute (commits
        still owe their caller an answer)."""
        self._append_seq += 1
        seq = self._append_seq
        epoch = self._epoch
        after_unload = getattr(callback, "after_unload", None)

        def done(error_code: int):
            if epoch == self._epoch:
                callback(error_code)
            elif after_unload is not None:
                after_unload(error_code)
        refused = self.appender(records, done, **txn)
        if refused:
            if on_refused is not None:
                on_refused()
            done(refused)
        return seq

    def _check_status(self, group_id, api: str) -> int:
        """Kafka's validateGroupStatus: the group-level error, or NONE."""
        if group_id is None or (group_id == "" and api not in _EMPTY_GROUP_ID_OK):
            return errors.INVALID_GROUP_ID
        if self.state == UNLOADED:
            return errors.NOT_COORDINATOR
        if self.state == LOADING:
            return errors.COORDINATOR_LOAD_IN_PROGRESS
        num = self.num_partitions  # a metadata lookup: once
        if num is not None and coordinator_partition(group_id, num) != self.partition_id:
            return errors.NOT_COORDINATOR
        return errors.NONE

    def _metadata_ok(self, metadata: str | None) -> bool:
        # Kafka compares String.length(): UTF-16 code units
        return metadata is None or len(metadata.encode("utf-16-le")) // 2 <= self.config.max_metadata_size

    def _new_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, state_timestamp_ms=self.clock())
        self.groups[group_id] = group
        return group
