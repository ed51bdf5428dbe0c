"""Loading: the partition's records replayed into groups and offsets, and unloading.

``load(records)`` replays the partition, or the worker feeds it in chunks with
``begin_load() / load_records(chunk) / finish_load()`` between loop iterations
(workers/groups/service.py); then ACTIVE. Records are `LoadRecord`s (or plain ``(key,
value)`` tuples) and `TxnMarker`s for COMMIT/ABORT control records: transactional
offsets count only once their producer's COMMIT marker is read. A failed load starts
over with ``unload()`` and ``begin_load()``. ``unload()`` answers everything waiting with
NOT_COORDINATOR.

A part of `GroupCoordinator` (coordinator.py), a mixin over `CoordinatorBase` (base.py).
"""
from __future__ import annotations

import logging
from typing import Iterable, NamedTuple

from workers.groups import errors
from workers.groups import records as rec
from workers.groups.base import ACTIVE, LOADING, UNLOADED, CoordinatorBase
from workers.groups.consumer_group import ConsumerGroup
from workers.groups.group import DEAD, EMPTY, STABLE, ClassicGroup, CommitRecord, Member, OffsetAndMetadata
from workers.groups.responses import JoinResult, SyncResult

log = logging.getLogger(__name__)


class LoadRecord(NamedTuple):
    """One record of the partition, for ``load``; plain ``(key, value)`` tuples also work."""

    key: bytes
    value: bytes | None
    producer_id: int = -1
    is_transactional: bool = False


class TxnMarker(NamedTuple):
    """A COMMIT/ABORT control record of the partition, for ``load``."""

    producer_id: int
    commit: bool


class Loading(CoordinatorBase):
    # =================================================================== load / unload

    def load(self, records: Iterable) -> None:
        """Rebuild groups and offsets from the partition's records, in offset order."""
        self.begin_load()
        self.load_records(records)
        self.finish_load()

    def begin_load(self) -> None:
        if self.state == ACTIVE:
            raise RuntimeError("begin_load on an active coordinator: unload() first")
        self.state = LOADING
        self.groups.clear()
        self._producer_groups.clear()
        self._loading = {"offsets": {}, "groups": {}, "txn": {}, "consumer": {}}

    def load_records(self, records: Iterable) -> None:
        if self.state != LOADING or self._loading is None:
            raise RuntimeError("load_records outside begin_load/finish_load")
        st = self._loading
        offsets, groups, txn = st["offsets"], st["groups"], st["txn"]
        for item in records:
            self._append_seq += 1
            seq = self._append_seq
            if isinstance(item, TxnMarker):
                pending = txn.pop(item.producer_id, {})
                if item.commit:
                    for key, record in pending.items():
                        current = offsets.get(key)
                        if current is None or current.older_than(record):
                            offsets[key] = record
                continue
            if isinstance(item, LoadRecord):
                key_bytes, value, producer_id, transactional = item
            else:
                key_bytes, value = item
                producer_id, transactional = -1, False
            if key_bytes is None:
                continue
            try:
                key = rec.decode_key(key_bytes)
                if isinstance(key, rec.OffsetCommitKey):
                    gtp = (key.group, key.topic, key.partition)
                    if transactional:
                        pending = txn.setdefault(producer_id, {})
                        if value is None:
                            pending.pop(gtp, None)
                        else:
                            pending[gtp] = CommitRecord(self._offset_and_metadata(rec.decode_offset_commit_value(value)), seq)
                    elif value is None:
                        offsets.pop(gtp, None)
                    else:
                        offsets[gtp] = CommitRecord(self._offset_and_metadata(rec.decode_offset_commit_value(value)), seq)
                elif isinstance(key, rec.GroupMetadataKey):
                    if value is None:
                        groups.pop(key.group, None)
                    else:
                        groups[key.group] = rec.decode_group_metadata_value(value)
                elif isinstance(key, rec.ConsumerGroupKey):
                    self.consumer.load_record(st["consumer"], key, value)
                else:
                    log.warning("offsets partition %d: skipping record with unknown key version %d",
                                self.partition_id, key.version)
            except (rec.RecordFormatError, KeyError, ValueError) as exc:
                # one unreadable record must not cost every group of the partition
                log.warning("offsets partition %d: skipping unreadable record: %s",
                            self.partition_id, exc)

    @staticmethod
    def _offset_and_metadata(v: rec.OffsetCommitValue) -> OffsetAndMetadata:
        return OffsetAndMetadata(v.offset, v.leader_epoch if v.leader_epoch >= 0 else -1,
                                 v.metadata, v.commit_timestamp, v.expire_timestamp)

    def finish_load(self) -> None:
        if self.state != LOADING or self._loading is None:
            raise RuntimeError("finish_load outside begin_load")
        st, self._loading = self._loading, None
        for group_id, value in st["groups"].items():
            self.groups[group_id] = self._group_from_record(group_id, value)
        for group_id, value in st["consumer"].items():
            group = self.consumer.build_group(group_id, value)
            if group is not None:
                self.groups[group_id] = group
        for (group_id, topic, partition), record in st["offsets"].items():
            group = self.groups.get(group_id)
            if group is None:  # offsets only (simple consumers, or members all gone)
                group = ClassicGroup(group_id, state_timestamp_ms=self.clock())
                self.groups[group_id] = group
            group.offsets[(topic, partition)] = record
        for producer_id, pending in st["txn"].items():
            for (group_id, topic, partition), record in pending.items():
                group = self.groups.get(group_id)
                if group is None:
                    group = ClassicGroup(group_id, state_timestamp_ms=self.clock())
                    self.groups[group_id] = group
                group.pending_txn_offsets.setdefault(producer_id, {})[(topic, partition)] = record
                self._producer_groups.setdefault(producer_id, set()).add(group_id)
        self.state = ACTIVE
        for group in list(self.groups.values()):
            self._on_group_loaded(group)
        self._schedule_expiry()

    def _group_from_record(self, group_id: str, value: rec.GroupMetadataValue) -> ClassicGroup:
        group = ClassicGroup(group_id, state=STABLE if value.members else EMPTY,
                             state_timestamp_ms=value.current_state_timestamp,
                             protocol_type=value.protocol_type or None,
                             protocol_name=value.protocol, generation_id=value.generation)
        for m in value.members:
            protocols = [(value.protocol, m.subscription)] if value.protocol is not None else []
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout, m.session_timeout, value.protocol_type,
                            protocols, assignment=m.assignment)
            group.add(member)
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def _on_group_loaded(self, group: ClassicGroup) -> None:
        if isinstance(group, ConsumerGroup):
            self.consumer.on_loaded(group)
            return
        if len(group.members) > self.config.max_group_size:
            # over capacity (group.max.size was lowered): rebalance, the extra members
            # get GROUP_MAX_SIZE_REACHED when they rejoin
            self._prepare_rebalance(group)
        for member in group.members.values():
            self._schedule_heartbeat(group, member)

    def unload(self) -> None:
        """The partition moved away: answer everything waiting with NOT_COORDINATOR."""
        self._epoch += 1  # before answering: stale timers and appends are now no-ops
        self._cancel(self._expiry_timer)
        self._expiry_timer = None
        self.state = UNLOADED
        self._loading = None
        groups, self.groups = self.groups, {}
        self._producer_groups.clear()
        for group in groups.values():
            self._cancel_group_timers(group)
            group.transition_to(DEAD, self.clock())
            if isinstance(group, ConsumerGroup):
                continue
            for member in list(group.members.values()):
                group.invoke_join_callback(member, JoinResult(member.member_id, errors.NOT_COORDINATOR))
                group.invoke_sync_callback(member, SyncResult(errors.NOT_COORDINATOR))
