"""Offsets: OffsetCommit, OffsetFetch, TxnOffsetCommit and their transaction markers
(`complete_txn`), and KIP-211 expiry (`expire_offsets` every
offsets.retention.check.interval.ms, and the tombstones of removed offsets and dead
groups, `_cleanup_group`).

A part of `GroupCoordinator` (coordinator.py), a mixin over `CoordinatorBase`
(base.py). A commit changes the group only as pending until the appender's callback
says the batch is committed; transactional commits wait in `pending_txn_offsets` until
the marker of their producer reaches this partition.
"""
from __future__ import annotations

import logging
from typing import Callable

from workers.groups import errors, responses
from workers.groups import records as rec
from workers.groups.base import ACTIVE, CoordinatorBase
from workers.groups.consumer_group import ConsumerGroup
from workers.groups.group import (
    COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, ClassicGroup, CommitRecord,
    OffsetAndMetadata)

log = logging.getLogger(__name__)


def _tp_list(topics, partitions_key="partitions"):
    return [(t["name"], p) for t in topics for p in t[partitions_key]]


class Offsets(CoordinatorBase):
    # =================================================================== offsets

    def _validate_offset_commit(self, group: ClassicGroup, generation_id: int, member_id: str,
                                instance_id: str | None, transactional: bool, version: int = 9) -> int:
        if group.is_(DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE
        if isinstance(group, ConsumerGroup):
            return self.consumer.validate_offset_commit(group, member_id, generation_id,
                                                        transactional, version)
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self._validate_current_member(group, member_id, instance_id)
            if not error and generation_id != group.generation_id:
                error = errors.ILLEGAL_GENERATION
            return error
        if not transactional and not group.is_(EMPTY):
            return errors.UNKNOWN_MEMBER_ID  # only members commit to a live group
        return errors.NONE

    def offset_commit(self, req: dict, version: int, respond: Callable[[dict], None]) -> None:
        now = self.clock()
        retention_ms = req.get("retention_time_ms", -1) if 2 <= version <= 4 else -1
        entries = []  # (topic, partition, OffsetAndMetadata) in request order
        for topic in req.get("topics", []):
            for p in topic.get("partitions", []):
                commit_ts = p.get("commit_timestamp", -1) if version == 1 else -1
                epoch = p.get("committed_leader_epoch", -1) if version >= 6 else -1
                metadata = p.get("committed_metadata")
                entries.append((topic["name"], p["partition_index"], OffsetAndMetadata(
                    p["committed_offset"], epoch if epoch >= 0 else -1,
                    metadata if metadata is not None else "",
                    commit_ts if commit_ts != -1 else now,
                    now + retention_ms if retention_ms != -1 else -1)))

        def reply(codes: Callable[[str, int, OffsetAndMetadata], int]):
            respond(responses.offset_commit(version, [(t, p, codes(t, p, oam)) for t, p, oam in entries]))

        group_id = req.get("group_id")
        generation = req.get("generation_id_or_member_epoch", -1) if version >= 1 else -1
        member_id = req.get("member_id", "") if version >= 1 else ""
        instance_id = req.get("group_instance_id") if version >= 7 else None
        error = self._check_status(group_id, "OffsetCommit")
        if error:
            reply(lambda *_: error)
            return
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                # a member of a generation this coordinator does not know (v9+ says so)
                error = errors.GROUP_ID_NOT_FOUND if version >= 9 else errors.ILLEGAL_GENERATION
                reply(lambda *_: error)
                return
            group = self._new_group(group_id)  # a simple consumer: offsets only
        error = self._validate_offset_commit(group, generation, member_id, instance_id, False, version)
        if not error and group.is_(COMPLETING_REBALANCE) and not isinstance(group, ConsumerGroup):
            # the member has the new generation but not yet its assignment
            error = errors.REBALANCE_IN_PROGRESS
        if error:
            reply(lambda *_: error)
            return
        if group.state in (STABLE, PREPARING_REBALANCE) and not isinstance(group, ConsumerGroup):
            self._schedule_heartbeat(group, group.members[member_id])
        self._store_offsets(group, entries, reply)

    def _store_offsets(self, group: ClassicGroup, entries, reply, producer_id: int = -1,
                       producer_epoch: int = -1) -> None:
        valid = {(t, p): oam for t, p, oam in entries if self._metadata_ok(oam.metadata)}
        if not valid:
            reply(lambda *_: errors.OFFSET_METADATA_TOO_LARGE)
            return
        transactional = producer_id >= 0
        records = [(rec.encode_offset_commit_key(group.group_id, t, p),
                    rec.encode_offset_commit_value(rec.OffsetCommitValue(
                        offset=oam.offset, metadata=oam.metadata,
                        commit_timestamp=oam.commit_timestamp_ms, leader_epoch=oam.leader_epoch,
                        expire_timestamp=oam.expire_timestamp_ms)))
                   for (t, p), oam in valid.items()]
        if transactional:
            group.prepare_txn_offset_commit(producer_id, valid)
            self._producer_groups.setdefault(producer_id, set()).add(group.group_id)
        else:
            group.prepare_offset_commit(valid)
        # _append numbers this append next; the callback may run before _append returns
        seq = self._append_seq + 1

        def appended(error: int):
            if not group.is_(DEAD):
                for tp, oam in valid.items():
                    if error == errors.NONE and transactional:
                        group.on_txn_offset_commit_append(producer_id, tp, CommitRecord(oam, seq))
                    elif error == errors.NONE:
                        group.on_offset_commit_append(tp, CommitRecord(oam, seq))
                    elif transactional:
                        group.fail_pending_txn_offset_commit(producer_id, tp)
                    else:
                        group.fail_pending_offset_write(tp, oam)
                if transactional and producer_id not in group.pending_txn_offsets:
                    self._forget_producer_group(producer_id, group.group_id)
            code = errors.map_offset_store_error(error)
            reply(lambda t, p, oam: code if self._metadata_ok(oam.metadata) else errors.OFFSET_METADATA_TOO_LARGE)

        appended.after_unload = lambda _e: reply(lambda *_: errors.NOT_COORDINATOR)
        txn = {"producer_id": producer_id, "producer_epoch": producer_epoch} if transactional else {}
        self._append(records, appended, **txn)

    def _forget_producer_group(self, producer_id: int, group_id: str) -> None:
        groups = self._producer_groups.get(producer_id)
        if groups is not None:
            groups.discard(group_id)
            if not groups:
                del self._producer_groups[producer_id]

    def offset_fetch(self, req: dict, version: int, respond: Callable[[dict], None]) -> None:
        require_stable = bool(req.get("require_stable", False)) if version >= 7 else False
        if version >= 8:
            out = []
            for g in req.get("groups", []):
                error, entries = self._fetch_offsets(g.get("group_id"), g.get("topics"), require_stable,
                                                     g.get("member_id"), g.get("member_epoch", -1))
                out.append({"group_id": g.get("group_id"), "error_code": error,
                            "topics": responses.fetched_topics(entries) if not error else []})
            respond(responses.offset_fetch(version, groups=out))
            return
        topics = req.get("topics")
        error, entries = self._fetch_offsets(req.get("group_id"), topics, require_stable)
        if not error:
            respond(responses.offset_fetch(version, topics=responses.fetched_topics(entries)))
        else:
            respond(responses.offset_fetch_error(version, error, topics))

    def _fetch_offsets(self, group_id, topics, require_stable: bool, member_id: str | None = None,
                       member_epoch: int = -1):
        error = self._check_status(group_id, "OffsetFetch")
        if error:
            return error, []
        requested = None if topics is None else _tp_list(topics, "partition_indexes")
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            # v9+: a KIP-848 member proves its membership (Kafka's validateOffsetFetch)
            error = self.consumer.validate_offset_fetch(group, member_id, member_epoch)
            if error:
                return error, []
        if group is None or group.is_(DEAD):
            return errors.NONE, [(t, p, -1, -1, "", errors.NONE) for t, p in requested or []]
        tps = requested if requested is not None else sorted(group.offsets)
        entries = []
        for t, p in tps:
            if require_stable and group.has_pending_commits_for((t, p)):
                entries.append((t, p, -1, -1, "", errors.UNSTABLE_OFFSET_COMMIT))
                continue
            record = group.offsets.get((t, p))
            if record is None:
                entries.append((t, p, -1, -1, "", errors.NONE))
            else:
                oam = record.oam
                entries.append((t, p, oam.offset, oam.leader_epoch, oam.metadata, errors.NONE))
        return errors.NONE, entries

    def txn_offset_commit(self, req: dict, version: int, respond: Callable[[dict], None]) -> None:
        """Transactional commit: the offsets wait in ``pending_txn_offsets`` until the
        transaction's marker reaches this partition and the worker calls ``complete_txn``.
        The caller (transactions issue) checks the producer epoch / AddOffsetsToTxn first."""
        now = self.clock()
        entries = []
        for topic in req.get("topics", []):
            for p in topic.get("partitions", []):
                epoch = p.get("committed_leader_epoch", -1) if version >= 2 else -1
                metadata = p.get("committed_metadata")
                entries.append((topic["name"], p["partition_index"], OffsetAndMetadata(
                    p["committed_offset"], epoch if epoch >= 0 else -1,
                    metadata if metadata is not None else "", now, -1)))

        def reply(codes):
            respond(responses.txn_offset_commit(version, [(t, p, codes(t, p, oam)) for t, p, oam in entries]))

        group_id = req.get("group_id")
        error = self._check_status(group_id, "TxnOffsetCommit")
        if error:
            reply(lambda *_: error)
            return
        group = self.groups.get(group_id) or self._new_group(group_id)
        generation = req.get("generation_id", -1) if version >= 3 else -1
        member_id = req.get("member_id", "") if version >= 3 else ""
        instance_id = req.get("group_instance_id") if version >= 3 else None
        error = self._validate_offset_commit(group, generation, member_id, instance_id, True)
        if error:
            reply(lambda *_: error)
            return
        self._store_offsets(group, entries, reply, req["producer_id"], req.get("producer_epoch", -1))

    def complete_txn(self, producer_id: int, committed: bool) -> None:
        """The COMMIT (or ABORT) marker of ``producer_id`` is committed on this partition."""
        for group_id in self._producer_groups.pop(producer_id, set()):
            group = self.groups.get(group_id)
            if group is not None:
                group.complete_pending_txn_offset_commit(producer_id, committed)

    def _cleanup_group(self, group: ClassicGroup, removed: dict) -> int:
        """Write tombstones for removed offsets; an Empty group without offsets dies."""
        if group.is_(EMPTY) and not group.has_offsets() and not group.pending_members:
            group.transition_to(DEAD, self.clock())
        tombstones = [(rec.encode_offset_commit_key(group.group_id, t, p), None) for t, p in removed]
        if group.is_(DEAD) and self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
            self._cancel_group_timers(group)
            if isinstance(group, ConsumerGroup):
                tombstones.extend(self.consumer.tombstones(group))
            elif group.generation_id > 0:
                # generation 0 groups only stored offsets: they have no metadata record
                tombstones.append((rec.encode_group_metadata_key(group.group_id), None))
        if tombstones:
            self._append(tombstones, lambda e: e and log.warning(
                "group %s: appending tombstones failed: %s", group.group_id, e))
        return len(removed)

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """Drop offsets older than offsets.retention.minutes (and dead Empty groups);
        returns how many offsets were removed. Runs every offsets.retention.check.interval.ms
        once loaded; public for tests and for an operator-triggered cleanup."""
        if self.state != ACTIVE:
            return 0
        now = self.clock() if now_ms is None else now_ms
        removed = 0
        for group in list(self.groups.values()):
            removed += self._cleanup_group(group, group.remove_expired_offsets(now, self.config.offsets_retention_ms))
        return removed

    def _schedule_expiry(self) -> None:
        def tick():
            self.expire_offsets()
            self._schedule_expiry()
        self._expiry_timer = self._schedule(self.config.retention_check_interval_ms, tick)
