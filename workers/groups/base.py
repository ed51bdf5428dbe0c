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
from typing import Callable

from workers.groups import errors
from workers.groups.consumer_protocol import ConsumerGroupProtocol
from workers.groups.group import ClassicGroup
from workers.groups.partitioner import coordinator_partition

LOADING = "loading"
ACTIVE = "active"
UNLOADED = "unloaded"

DEFAULTS = {
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.initial.rebalance.delay.ms": 3000,
    "group.max.size": 2147483647,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offset.metadata.max.bytes": 4096,
}

# APIs that accept an empty group id (legacy: offsets of the "" group)
_EMPTY_GROUP_ID_OK = frozenset({"OffsetCommit", "OffsetFetch", "DescribeGroups", "DeleteGroups"})


class CoordinatorBase:
    def __init__(self, partition_id: int, config, clock: Callable[[], int], scheduler,
                 appender, *, member_id_factory: Callable[[], str] | None = None,
                 topic_metadata: Callable[[], dict] | None = None):
        # topic_metadata() -> {topic name: (topic id, partition count)}: the KIP-848
        # assignor's view of the cluster (the worker's metadata copy)
        # config: a Mapping or anything with .get(key, default) (Kafka key names)
        get = config.get
        cfg = {key: get(key, default) for key, default in DEFAULTS.items()}
        self._config_get = get
        self.partition_id = partition_id
        self.min_session_timeout_ms = int(cfg["group.min.session.timeout.ms"])
        self.max_session_timeout_ms = int(cfg["group.max.session.timeout.ms"])
        self.initial_rebalance_delay_ms = int(cfg["group.initial.rebalance.delay.ms"])
        self.max_group_size = int(cfg["group.max.size"])
        self.offsets_retention_ms = int(cfg["offsets.retention.minutes"]) * 60 * 1000
        self.retention_check_interval_ms = int(cfg["offsets.retention.check.interval.ms"])
        self.max_metadata_size = int(cfg["offset.metadata.max.bytes"])
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
        self.consumer = ConsumerGroupProtocol(self, config, topic_metadata or (lambda: {}))

    @property
    def num_partitions(self) -> int | None:
        """offsets.topic.num.partitions when set (groups hashing to another partition get
        NOT_COORDINATOR). Read at every check, not once: in cluster mode the worker's
        metadata may still be receiving the offsets topic's partitions one by one when
        the coordinator is created, and a count frozen then would refuse its groups."""
        num = self._config_get("offsets.topic.num.partitions", None)
        return int(num) if num is not None else None

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
        return metadata is None or len(metadata.encode("utf-16-le")) // 2 <= self.max_metadata_size

    def _new_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, state_timestamp_ms=self.clock())
        self.groups[group_id] = group
        return group
