"""The group coordinator of one `__consumer_offsets` partition: an I/O-free state machine.

The worker that owns the partition creates one GroupCoordinator per owned offsets
partition and wires three things into it:

* ``clock() -> int``: epoch milliseconds.
* ``scheduler.schedule(delay_ms, callback) -> handle`` with ``handle.cancel()``: the
  worker's timing wheel. Callbacks run on the worker's loop, after the call that
  scheduled them returns; a cancelled handle never fires.
* ``appender(records, callback, **txn) -> int``: append ``records`` (a list of
  ``(key: bytes, value: bytes | None)``; None is a tombstone) to this partition as one
  batch. Either it refuses before writing anything and returns the error code (the
  callback is never called; ``_append`` undoes the caller's change, see below), or it
  returns 0 and calls ``callback(error_code)`` exactly once, now or later, when the batch
  is committed (acks=all semantics) or failed. Batches must land in the log in call
  order. For transactional offset commits ``txn`` is ``producer_id=, producer_epoch=``
  and the batch must be transactional (the transaction coordinator later writes the
  marker and the worker calls ``complete_txn``).

Life cycle: constructed LOADING (every request answers COORDINATOR_LOAD_IN_PROGRESS;
Heartbeat answers NONE and SyncGroup REBALANCE_IN_PROGRESS, as Kafka does), then
``load(records)`` replays the partition, or the worker feeds it in chunks with
``begin_load() / load_records(chunk) / finish_load()`` between loop iterations
(workers/groups/service.py); then ACTIVE. A failed load starts over with ``unload()``
and ``begin_load()``: the coordinator is never ACTIVE with part of its state.
``unload()`` when the partition moves away: waiting JoinGroup/SyncGroup get
NOT_COORDINATOR, timers are cancelled, later append callbacks answer NOT_COORDINATOR, and
every later request gets NOT_COORDINATOR until the next ``begin_load()``.

Handlers take a decoded request dict (docs/INTERFACES.md naming) and its api version, and
answer through ``respond(response_dict)`` exactly once, now or later (JoinGroup waits for
the rebalance, SyncGroup followers for the leader, commits for the append). Multi-group
requests (DescribeGroups, DeleteGroups, ListGroups) return their per-group entries
synchronously for the caller to merge across coordinators; OffsetFetch v8+ takes a request
whose ``groups`` are those this partition coordinates and answers with those groups.
Topic existence and authorization are the caller's checks (UNKNOWN_TOPIC_OR_PARTITION,
GROUP_AUTHORIZATION_FAILED, ...): by the time a request gets here it is authorized.

The rules follow Kafka's classic GroupCoordinator (GroupCoordinator.scala, 2.x-3.x):
KIP-394 member id required on the first JoinGroup (v4+), KIP-345 static membership,
group.initial.rebalance.delay.ms for an Empty group's first rebalance, DelayedJoin
(rebalance timeout), DelayedHeartbeat (session timeout; 5 minutes for a member that has
not completed its first join), DelayedSync (members that never SyncGroup), group.max.size,
KIP-559 protocol type/name checks, KIP-814 skip_assignment, KIP-211 offset expiry.
"""

from __future__ import annotations

import logging
import uuid
from typing import Callable, Iterable, NamedTuple

from workers.groups import errors, responses
from workers.groups import records as rec
from workers.groups.consumer_metadata import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from workers.groups.consumer_protocol import GROUP_TYPE_CONSUMER, ConsumerGroup, ConsumerGroupProtocol
from workers.groups.group import (
    COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, ClassicGroup, CommitRecord,
    Member, OffsetAndMetadata)
from workers.groups.partitioner import coordinator_partition
from workers.groups.responses import JoinResult, SyncResult

log = logging.getLogger(__name__)

LOADING = "loading"
ACTIVE = "active"
UNLOADED = "unloaded"

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
GROUP_TYPE_CLASSIC = "classic"

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


def _tp_list(topics, partitions_key="partitions"):
    return [(t["name"], p) for t in topics for p in t[partitions_key]]


class GroupCoordinator:
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

    # =================================================================== plumbing

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

    # =================================================================== JoinGroup

    def join_group(self, req: dict, version: int, client_id: str, client_host: str,
                   respond: Callable[[dict], None]) -> None:
        def reply(result: JoinResult):
            respond(responses.join_group(version, result))

        group_id = req.get("group_id")
        member_id = req.get("member_id", "")
        error = self._check_status(group_id, "JoinGroup")
        if error:
            reply(JoinResult(member_id, error))
            return
        session_timeout = req["session_timeout_ms"]
        rebalance_timeout = req.get("rebalance_timeout_ms", -1) if version >= 1 else -1
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout  # v0 has a single timeout
        instance_id = req.get("group_instance_id") if version >= 5 else None
        protocols = [(p["name"], bytes(p["metadata"])) for p in req.get("protocols", [])]
        params = dict(instance_id=instance_id, client_id=client_id, client_host=client_host,
                      rebalance_timeout=rebalance_timeout, session_timeout=session_timeout,
                      protocol_type=req.get("protocol_type", ""), protocols=protocols,
                      version=version, reply=reply)

        if not self.min_session_timeout_ms <= session_timeout <= self.max_session_timeout_ms:
            reply(JoinResult(member_id, errors.INVALID_SESSION_TIMEOUT))
            return
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            if group.members:
                # the group uses the consumer (KIP-848) protocol
                reply(JoinResult(member_id, errors.INCONSISTENT_GROUP_PROTOCOL))
                return
            group = self._classic_from_consumer(group)
        if group is None:
            if member_id:
                reply(JoinResult(member_id, errors.UNKNOWN_MEMBER_ID))
                return
            group = self._new_group(group_id)

        if not self._accept_joining_member(group, member_id):
            member = group.members.get(member_id)
            if member is not None:
                self._cancel_heartbeat(member)
                group.remove(member_id)
            elif group.is_pending(member_id):
                self._remove_pending_member(group, member_id)
            reply(JoinResult("", errors.GROUP_MAX_SIZE_REACHED))
        elif not member_id:
            self._new_member_join(group, require_known=version >= 4 and instance_id is None,
                                  **params)
        else:
            self._current_member_join(group, member_id, **params)
        if group.is_(PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_(PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return ((member is not None and member.is_awaiting_join)
                    or group.num_members_awaiting_join < self.max_group_size)
        return group.has(member_id) or len(group.members) < self.max_group_size

    def _new_member_join(self, group, *, require_known, instance_id, client_id, reply, **params):
        if group.is_(DEAD):
            reply(JoinResult("", errors.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(params["protocol_type"], params["protocols"]):
            reply(JoinResult("", errors.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_member_id = f"{instance_id if instance_id is not None else client_id}-{self._new_uuid()}"
        if instance_id is not None:
            old_member_id = group.static_member_id(instance_id)
            if old_member_id is None:
                self._add_member_and_rebalance(group, new_member_id, instance_id=instance_id,
                                               client_id=client_id, reply=reply, **params)
            else:
                self._update_static_member_and_rebalance(
                    group, old_member_id, new_member_id, instance_id, reply=reply, **params)
        elif require_known:
            # KIP-394: hand out the id and wait for the member to come back with it, so
            # that a client retrying a lost response does not leave a ghost member behind
            group.pending_members.add(new_member_id)
            group.pending_member_timers[new_member_id] = self._schedule(
                params["session_timeout"],
                lambda: self._on_pending_member_expired(group, new_member_id))
            reply(JoinResult(new_member_id, errors.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(group, new_member_id, instance_id=None,
                                           client_id=client_id, reply=reply, **params)

    def _current_member_join(self, group, member_id, *, instance_id, reply, **params):
        if group.is_(DEAD):
            reply(JoinResult(member_id, errors.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(params["protocol_type"], params["protocols"]):
            reply(JoinResult(member_id, errors.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending(member_id):
            if instance_id is not None:
                # only dynamic members get pending ids; a static one using it is confused
                reply(JoinResult(member_id, errors.UNKNOWN_MEMBER_ID))
                return
            self._add_member_and_rebalance(group, member_id, instance_id=None, reply=reply,
                                           **params)
            return
        error = self._validate_current_member(group, member_id, instance_id)
        if error:
            reply(JoinResult(member_id, error))
            return
        member = group.members[member_id]
        protocols = params["protocols"]
        if group.is_(PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, reply=reply, **params)
        elif group.is_(COMPLETING_REBALANCE):
            if member.matches(protocols):
                # the member lost our JoinGroup response: send it again
                reply(self._join_result(group, member, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, reply=reply, **params)
        elif group.is_(STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # the leader rejoins to trigger a rebalance (e.g. metadata changed)
                self._update_member_and_rebalance(group, member, reply=reply, **params)
            else:
                # a follower with unchanged metadata: it may go straight to SyncGroup
                reply(self._join_result(group, member, with_members=False))
        else:
            reply(JoinResult(member_id, errors.UNKNOWN_MEMBER_ID))

    def _join_result(self, group: ClassicGroup, member: Member, with_members: bool) -> JoinResult:
        members = []
        if with_members:
            members = [(m.member_id, m.group_instance_id, md)
                       for m, md in group.current_member_metadata()]
        return JoinResult(member.member_id, errors.NONE, group.generation_id,
                          group.protocol_type, group.protocol_name, group.leader_id,
                          False, members)

    def _add_member_and_rebalance(self, group, member_id, *, instance_id, client_id, client_host,
                                  rebalance_timeout, session_timeout, protocol_type, protocols,
                                  version, reply):
        member = Member(member_id, instance_id, client_id, client_host, rebalance_timeout,
                        session_timeout, protocol_type, protocols, is_new=True)
        if group.is_(PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # extends the initial rebalance delay
        self._cancel(group.pending_member_timers.pop(member_id, None))
        group.add(member, reply, version)
        # A new member cannot heartbeat before its first JoinGroup response, and a client
        # that gave up and retried would leave it behind: expire it if it is still not
        # joined after the new-member timeout.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group)

    def _update_member_and_rebalance(self, group, member, *, rebalance_timeout, session_timeout,
                                     protocols, version, reply, **_):
        group.update_member(member, protocols, rebalance_timeout, session_timeout, reply, version)
        self._maybe_prepare_rebalance(group)

    def _update_static_member_and_rebalance(self, group, old_member_id, new_member_id,
                                            instance_id, *, rebalance_timeout, session_timeout,
                                            protocols, version, reply, **_):
        """KIP-345: a known group.instance.id joined without a member id (a restart)."""
        current_leader = group.leader_id
        member = group.members[old_member_id]
        old_protocols = member.protocols
        old_timeouts = (member.rebalance_timeout_ms, member.session_timeout_ms)
        self._cancel_heartbeat(member)
        group.replace_static_member(instance_id, old_member_id, new_member_id,
                                    JoinResult(old_member_id, errors.FENCED_INSTANCE_ID),
                                    SyncResult(errors.FENCED_INSTANCE_ID))
        group.update_member(member, protocols, rebalance_timeout, session_timeout, reply, version)
        self._schedule_heartbeat(group, member)

        if group.is_(STABLE):
            if group.protocol_name != group.select_protocol():
                self._maybe_prepare_rebalance(group)
                return
            # Same protocol: no rebalance. Persist the new member id and answer with the
            # current generation, without a member list unless the leader may skip
            # the assignment (KIP-814, v9+); older leaders get the old leader id, so they
            # act as followers and fetch their unchanged assignment with SyncGroup.
            generation = group.generation_id

            def stored(error: int):
                if group.members.get(new_member_id) is not member or member.join_callback is not reply:
                    return  # a rebalance or removal got there first and answered
                if error:
                    # the new member id is not durable: put the old one back
                    group.update_member(member, old_protocols, *old_timeouts, None, 0)
                    self._cancel_heartbeat(member)
                    group.replace_static_member(instance_id, new_member_id, old_member_id,
                                                JoinResult(new_member_id, error),
                                                SyncResult(error))
                    self._schedule_heartbeat(group, member)
                    reply(JoinResult("", error, generation, group.protocol_type,
                                     group.protocol_name, current_leader))
                    return
                is_leader = group.is_leader(new_member_id)
                if version >= 9 and is_leader:
                    result = self._join_result(group, member, with_members=True)
                    result.skip_assignment = True
                else:
                    result = self._join_result(group, member, with_members=False)
                    result.leader_id = current_leader
                group.invoke_join_callback(member, result)

            assignment = {m.member_id: m.assignment for m in group.members.values()}
            self._store_group(group, assignment, stored)
        elif group.is_(COMPLETING_REBALANCE):
            # the leader may already be computing an assignment for the old member id
            self._prepare_rebalance(group)
        elif group.is_(PREPARING_REBALANCE):
            pass  # the member is now waiting in the rebalance under its new id
        else:
            raise AssertionError(f"static member in a {group.state} group")

    def _on_pending_member_expired(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_member_timers.pop(member_id, None)
        if group.is_pending(member_id):
            self._remove_pending_member(group, member_id)

    def _remove_pending_member(self, group: ClassicGroup, member_id: str) -> None:
        self._cancel(group.pending_member_timers.pop(member_id, None))
        group.remove(member_id)
        if group.is_(PREPARING_REBALANCE):
            self._try_complete_join(group)

    # ------------------------------------------------------------------- rebalance

    def _maybe_prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.is_(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, errors.REBALANCE_IN_PROGRESS)
        self._cancel(group.sync_timer)
        group.sync_timer = None
        self._cancel(group.join_timer)
        was_empty = group.is_(EMPTY)
        rebalance_timeout = group.rebalance_timeout_ms()
        log.info("group %s: preparing to rebalance in state %s with old generation %d "
                 "(%d members)", group.group_id, group.state, group.generation_id,
                 len(group.members))
        group.transition_to(PREPARING_REBALANCE, self.clock())
        if was_empty:
            # InitialDelayedJoin: wait for more members before the first generation, and
            # extend the wait (up to the rebalance timeout) while members keep coming
            delay = self.initial_rebalance_delay_ms
            group.join_timer_initial = True
            group.join_delay_ms = delay
            group.join_remaining_ms = max(rebalance_timeout - delay, 0)
            group.join_timer = self._schedule(delay, lambda: self._on_initial_join_expired(group))
        else:
            group.join_timer_initial = False
            group.join_timer = self._schedule(rebalance_timeout,
                                              lambda: self._on_join_expired(group))
            self._try_complete_join(group)

    def _try_complete_join(self, group: ClassicGroup) -> None:
        """DelayedJoin.tryComplete: finish the join phase as soon as everyone is in."""
        if (group.is_(PREPARING_REBALANCE) and group.join_timer is not None
                and not group.join_timer_initial and group.has_all_members_joined()):
            self._cancel(group.join_timer)
            group.join_timer = None
            self._on_complete_join(group)

    def _on_join_expired(self, group: ClassicGroup) -> None:
        group.join_timer = None
        self._on_complete_join(group)

    def _on_initial_join_expired(self, group: ClassicGroup) -> None:
        group.join_timer = None
        if group.new_member_added and group.join_remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, group.join_remaining_ms)
            group.join_remaining_ms = max(group.join_remaining_ms - group.join_delay_ms, 0)
            group.join_delay_ms = delay
            group.join_timer = self._schedule(delay, lambda: self._on_initial_join_expired(group))
        else:
            self._on_complete_join(group)

    def _on_complete_join(self, group: ClassicGroup) -> None:
        if group.is_(DEAD) or not group.is_(PREPARING_REBALANCE):
            return
        # dynamic members that did not rejoin in time are out; static ones keep their place
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info("group %s: member %s did not rejoin in time, removing it",
                         group.group_id, member.member_id)
                self._cancel_heartbeat(member)
                group.remove(member.member_id)
        if group.members and not group.maybe_elect_new_joined_leader():
            # nobody rejoined: wait again until session timeouts clear the silent members
            group.join_timer_initial = False
            group.join_timer = self._schedule(group.rebalance_timeout_ms(),
                                              lambda: self._on_join_expired(group))
            return
        group.init_next_generation(self.clock())
        log.info("group %s: stabilized generation %d with %d members", group.group_id,
                 group.generation_id, len(group.members))
        if group.is_(EMPTY):
            self._store_group(group, {}, lambda e: e and log.warning(
                "group %s: storing empty generation failed: %s", group.group_id, e))
            return
        for member in list(group.members.values()):
            result = self._join_result(group, member, with_members=group.is_leader(member.member_id))
            group.invoke_join_callback(member, result)
            self._schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        group.sync_timer = self._schedule(group.rebalance_timeout_ms(),
                                          lambda: self._on_pending_sync_expired(group, generation))

    def _on_pending_sync_expired(self, group: ClassicGroup, generation: int) -> None:
        """DelayedSync: members that got a JoinGroup response but never sent SyncGroup."""
        group.sync_timer = None
        if generation != group.generation_id or group.state not in (COMPLETING_REBALANCE, STABLE):
            return
        if not group.pending_sync_members:
            return
        for member_id in list(group.pending_sync_members):
            member = group.remove(member_id)
            if member is not None:
                self._cancel_heartbeat(member)
        self._prepare_rebalance(group)

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        ptype, pname = (group.protocol_type, group.protocol_name) if error == errors.NONE else (None, None)
        for member in list(group.members.values()):
            result = SyncResult(error, ptype, pname, member.assignment if error == errors.NONE else b"")
            if group.invoke_sync_callback(member, result):
                # restart the session timeout now: an expiry while we waited for the
                # leader or the append was ignored (the member was awaiting sync)
                self._schedule_heartbeat(group, member)

    # ------------------------------------------------------------------- heartbeats

    def _schedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        """completeAndScheduleNextHeartbeatExpiration: the member proved it is alive."""
        self._cancel(member.heartbeat_timer)
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self._schedule(timeout, lambda: self._on_heartbeat_expired(group, member))

    def _cancel_heartbeat(self, member: Member) -> None:
        self._cancel(member.heartbeat_timer)
        member.heartbeat_timer = None

    def _on_heartbeat_expired(self, group: ClassicGroup, member: Member) -> None:
        member.heartbeat_timer = None
        if group.is_(DEAD) or group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            return  # waiting in a rebalance counts as alive; the rebalance's own timers rule
        log.info("group %s: member %s failed (session timeout), removing it",
                 group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member)

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member) -> None:
        # a new member may time out while its JoinGroup waits: answer it so it retries
        group.invoke_join_callback(member, JoinResult("", errors.UNKNOWN_MEMBER_ID))
        group.invoke_sync_callback(member, SyncResult(errors.UNKNOWN_MEMBER_ID))
        self._cancel_heartbeat(member)
        member.is_leaving = True
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.is_(PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _validate_current_member(self, group: ClassicGroup, member_id: str,
                                 instance_id: str | None) -> int:
        if instance_id is not None:
            current = group.static_member_id(instance_id)
            if current is None:
                return errors.UNKNOWN_MEMBER_ID
            if current != member_id:
                return errors.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return errors.UNKNOWN_MEMBER_ID
        return errors.NONE

    # =================================================================== SyncGroup

    def sync_group(self, req: dict, version: int, respond: Callable[[dict], None]) -> None:
        def reply(result: SyncResult):
            respond(responses.sync_group(version, result))

        group_id = req.get("group_id")
        generation_id = req.get("generation_id", -1)
        member_id = req.get("member_id", "")
        instance_id = req.get("group_instance_id") if version >= 3 else None
        protocol_type = req.get("protocol_type") if version >= 5 else None
        protocol_name = req.get("protocol_name") if version >= 5 else None
        if version >= 5 and (protocol_type is None or protocol_name is None):
            reply(SyncResult(errors.INCONSISTENT_GROUP_PROTOCOL))  # mandatory from v5
            return
        error = self._check_status(group_id, "SyncGroup")
        if error == errors.COORDINATOR_LOAD_IN_PROGRESS:
            error = errors.REBALANCE_IN_PROGRESS  # the group will need a rebalance anyway
        if error:
            reply(SyncResult(error))
            return
        group = self.groups.get(group_id)
        if group is None or isinstance(group, ConsumerGroup):
            reply(SyncResult(errors.UNKNOWN_MEMBER_ID))
            return
        if group.is_(DEAD):
            reply(SyncResult(errors.COORDINATOR_NOT_AVAILABLE))
            return
        error = self._validate_current_member(group, member_id, instance_id)
        if not error and generation_id != group.generation_id:
            error = errors.ILLEGAL_GENERATION
        if not error and not (group.is_protocol_type_consistent(protocol_type)
                              and group.is_protocol_name_consistent(protocol_name)):
            error = errors.INCONSISTENT_GROUP_PROTOCOL
        if error:
            reply(SyncResult(error))
            return
        if group.is_(EMPTY):
            reply(SyncResult(errors.UNKNOWN_MEMBER_ID))
        elif group.is_(PREPARING_REBALANCE):
            reply(SyncResult(errors.REBALANCE_IN_PROGRESS))
        elif group.is_(COMPLETING_REBALANCE):
            member = group.members[member_id]
            # a second SyncGroup from the same member replaces the first; answer the first
            group.invoke_sync_callback(member, SyncResult(errors.REBALANCE_IN_PROGRESS))
            member.sync_callback = reply
            group.pending_sync_members.discard(member_id)
            if group.is_leader(member_id):
                self._store_assignment(group, req.get("assignments", []))
        else:  # Stable: the assignment is known, answer at once
            group.pending_sync_members.discard(member_id)
            member = group.members[member_id]
            reply(SyncResult(errors.NONE, group.protocol_type, group.protocol_name, member.assignment))
            self._schedule_heartbeat(group, member)

    def _store_assignment(self, group: ClassicGroup, assignments: list[dict]) -> None:
        given = {a["member_id"]: bytes(a["assignment"]) for a in assignments}
        # members the leader left out get an empty assignment; unknown ids are dropped
        assignment = {mid: given.get(mid, b"") for mid in group.members}
        generation = group.generation_id

        def stored(error: int):
            if not (group.is_(COMPLETING_REBALANCE) and group.generation_id == generation):
                return  # a rebalance or removal overtook us; its members were answered
            if error:
                self._reset_and_propagate_assignment_error(group, error)
                self._maybe_prepare_rebalance(group)
            else:
                for member in group.members.values():
                    member.assignment = assignment.get(member.member_id, b"")
                self._propagate_assignment(group, errors.NONE)
                group.transition_to(STABLE, self.clock())

        self._store_group(group, assignment, stored)

    def _group_metadata_value(self, group: ClassicGroup, assignment: dict[str, bytes]) -> bytes:
        members = [rec.MemberMetadataValue(
            member_id=m.member_id, group_instance_id=m.group_instance_id,
            client_id=m.client_id, client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms, session_timeout=m.session_timeout_ms,
            subscription=m.metadata(group.protocol_name) if group.protocol_name else b"",
            assignment=assignment.get(m.member_id, b""))
            for m in group.members.values()]
        return rec.encode_group_metadata_value(rec.GroupMetadataValue(
            protocol_type=group.protocol_type or "", generation=group.generation_id,
            protocol=group.protocol_name, leader=group.leader_id,
            current_state_timestamp=group.state_timestamp_ms, members=members))

    def _store_group(self, group: ClassicGroup, assignment: dict[str, bytes],
                     callback: Callable[[int], None]) -> None:
        record = (rec.encode_group_metadata_key(group.group_id),
                  self._group_metadata_value(group, assignment))
        self._append([record], lambda error: callback(errors.map_group_store_error(error)))

    # =================================================================== Heartbeat

    def heartbeat(self, req: dict, version: int, respond: Callable[[dict], None]) -> None:
        respond(responses.heartbeat(version, self._heartbeat(req, version)))

    def _heartbeat(self, req: dict, version: int) -> int:
        group_id = req.get("group_id")
        member_id = req.get("member_id", "")
        instance_id = req.get("group_instance_id") if version >= 3 else None
        error = self._check_status(group_id, "Heartbeat")
        if error == errors.COORDINATOR_LOAD_IN_PROGRESS:
            return errors.NONE  # the group is loading: let the member carry on meanwhile
        if error:
            return error
        group = self.groups.get(group_id)
        if group is None or isinstance(group, ConsumerGroup):
            return errors.UNKNOWN_MEMBER_ID
        if group.is_(DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(group, member_id, instance_id)
        if not error and req.get("generation_id", -1) != group.generation_id:
            error = errors.ILLEGAL_GENERATION
        if error:
            return error
        if group.is_(EMPTY):
            return errors.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, group.members[member_id])
        if group.is_(PREPARING_REBALANCE):
            return errors.REBALANCE_IN_PROGRESS
        return errors.NONE  # Stable, or CompletingRebalance (heartbeats may precede SyncGroup)

    # =================================================================== LeaveGroup

    def leave_group(self, req: dict, version: int, respond: Callable[[dict], None]) -> None:
        if version >= 3:
            leaving = [{"member_id": m.get("member_id", ""), "group_instance_id": m.get("group_instance_id")}
                       for m in req.get("members", [])]
        else:
            leaving = [{"member_id": req.get("member_id", ""), "group_instance_id": None}]
        group_id = req.get("group_id")
        error = self._check_status(group_id, "LeaveGroup")
        if error:
            respond(responses.leave_group(version, error, []))
            return
        group = self.groups.get(group_id)
        if group is not None and group.is_(DEAD):
            respond(responses.leave_group(version, errors.COORDINATOR_NOT_AVAILABLE, []))
            return
        results = []
        for identity in leaving:
            if group is None or isinstance(group, ConsumerGroup):
                code = errors.UNKNOWN_MEMBER_ID
            else:
                code = self._leave_one(group, identity["member_id"], identity["group_instance_id"])
            results.append({**identity, "error_code": code})
        respond(responses.leave_group(version, errors.NONE, results))

    def _leave_one(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
        if not member_id:
            # administrative removal of a static member by group.instance.id (KIP-345)
            current = group.static_member_id(instance_id)
            if current is None:
                return errors.UNKNOWN_MEMBER_ID
            self._remove_member_and_update_group(group, group.members[current])
            return errors.NONE
        if group.is_pending(member_id):
            self._remove_pending_member(group, member_id)
            return errors.NONE
        error = self._validate_current_member(group, member_id, instance_id)
        if error:
            return error
        log.info("group %s: member %s left", group.group_id, member_id)
        self._remove_member_and_update_group(group, group.members[member_id])
        return errors.NONE

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

    # =================================================================== admin APIs

    def list_groups(self, states_filter=None, types_filter=None) -> tuple[int, list[dict]]:
        """This partition's groups as ListGroups entries (all fields; the caller shapes and
        merges). Error COORDINATOR_LOAD_IN_PROGRESS while loading, with the groups so far."""
        if self.state == UNLOADED:
            return errors.NONE, []
        states = {s.lower() for s in states_filter or ()}
        types = {t.lower() for t in types_filter or ()}
        error = errors.COORDINATOR_LOAD_IN_PROGRESS if self.state == LOADING else errors.NONE
        out = []
        for g in self.groups.values():
            group_type = GROUP_TYPE_CONSUMER if isinstance(g, ConsumerGroup) else GROUP_TYPE_CLASSIC
            if (states and g.state.lower() not in states) or (types and group_type not in types):
                continue
            out.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "",
                        "group_state": g.state, "group_type": group_type})
        return error, out

    def describe_groups(self, group_ids: Iterable[str], version: int) -> list[dict]:
        """DescribeGroups entries, shaped for ``version``, one per id in order."""
        return [responses.shape(version, responses.DESCRIBED_GROUP, self._describe(gid))
                for gid in group_ids]

    def _describe(self, group_id: str) -> dict:
        out = {"error_code": errors.NONE, "group_id": group_id, "group_state": "",
               "protocol_type": "", "protocol_data": "", "members": [],
               "authorized_operations": responses.NO_AUTHORIZED_OPERATIONS}
        error = self._check_status(group_id, "DescribeGroups")
        if error:
            out["error_code"] = error
            return out
        group = self.groups.get(group_id)
        if group is None:
            out["group_state"] = DEAD
            return out
        if isinstance(group, ConsumerGroup):
            out.update(self.consumer.describe_classic(group))
            return out
        out["group_state"] = group.state
        out["protocol_type"] = group.protocol_type or ""
        stable = group.is_(STABLE)
        if stable:
            out["protocol_data"] = group.protocol_name or ""
        # metadata and assignment are only meaningful (and only sent) when Stable
        out["members"] = [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "member_metadata": m.metadata(group.protocol_name) if stable else b"",
            "member_assignment": m.assignment if stable else b""}
            for m in group.members.values()]
        return out

    def delete_groups(self, group_ids: Iterable[str], version: int = 0) -> list[dict]:
        """DeleteGroups results ({group_id, error_code}), one per id in order.

        Tombstones are appended without waiting, as Kafka does: if they are lost the next
        expiry cycle removes the (then Empty, offset-less) group again."""
        results, eligible = [], []
        for group_id in group_ids:
            error = self._check_status(group_id, "DeleteGroups")
            group = self.groups.get(group_id) if not error else None
            if error:
                pass
            elif group is None or group.is_(DEAD):
                error = errors.GROUP_ID_NOT_FOUND
            elif group.is_(EMPTY):
                group.transition_to(DEAD, self.clock())
                eligible.append(group)
            else:
                error = errors.NON_EMPTY_GROUP
            results.append({"group_id": group_id, "error_code": error})
        for group in eligible:
            self._cleanup_group(group, group.remove_offsets(list(group.offsets)))
        return results

    def offset_delete(self, req: dict, version: int, respond: Callable[[dict], None]) -> None:
        tps = [(t["name"], p["partition_index"]) for t in req.get("topics", []) for p in t["partitions"]]
        group_id = req.get("group_id")
        error = self._check_status(group_id, "OffsetDelete")
        group = self.groups.get(group_id) if not error else None
        if not error and (group is None or group.is_(DEAD)):
            error = errors.GROUP_ID_NOT_FOUND
        if error:
            respond(responses.offset_delete(version, error, []))
            return
        codes = {}
        if group.is_(EMPTY):
            eligible = tps
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            eligible = [tp for tp in tps if not group.is_subscribed_to_topic(tp[0])]
            codes = {tp: errors.GROUP_SUBSCRIBED_TO_TOPIC for tp in tps if group.is_subscribed_to_topic(tp[0])}
        else:
            respond(responses.offset_delete(version, errors.NON_EMPTY_GROUP, []))
            return
        if eligible:
            self._cleanup_group(group, group.remove_offsets(eligible))
        respond(responses.offset_delete(version, errors.NONE,
                                        [(t, p, codes.get((t, p), errors.NONE)) for t, p in tps]))

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
            removed += self._cleanup_group(group, group.remove_expired_offsets(now, self.offsets_retention_ms))
        return removed

    def _schedule_expiry(self) -> None:
        def tick():
            self.expire_offsets()
            self._schedule_expiry()
        self._expiry_timer = self._schedule(self.retention_check_interval_ms, tick)

    def _cancel_group_timers(self, group: ClassicGroup) -> None:
        self._cancel(group.join_timer)
        self._cancel(group.sync_timer)
        group.join_timer = group.sync_timer = None
        for handle in group.pending_member_timers.values():
            self._cancel(handle)
        group.pending_member_timers.clear()
        for member in group.members.values():
            self._cancel_heartbeat(member)
            self._cancel(getattr(member, "rebalance_timer", None))

    def _classic_from_consumer(self, group: ConsumerGroup) -> ClassicGroup:
        """An empty consumer group is taken over by the classic protocol; offsets stay."""
        classic = ClassicGroup(group.group_id, state_timestamp_ms=self.clock())
        classic.offsets = group.offsets
        classic.pending_offset_commits = group.pending_offset_commits
        classic.pending_txn_offsets = group.pending_txn_offsets
        self._cancel_group_timers(group)
        self.groups[group.group_id] = classic
        self._append(self.consumer.tombstones(group), lambda e: e and log.warning(
            "group %s: appending consumer group tombstones failed: %s", group.group_id, e))
        return classic

    # =================================================================== KIP-848

    def consumer_group_heartbeat(self, req: dict, version: int, client_id: str, client_host: str,
                                 respond: Callable[[dict], None]) -> None:
        self.consumer.heartbeat(req, version, client_id, client_host, respond)

    def consumer_group_describe(self, group_ids: Iterable[str]) -> list[dict]:
        """ConsumerGroupDescribe entries, one per id in order (GROUP_ID_NOT_FOUND for
        classic groups, as Kafka answers)."""
        return self.consumer.describe(group_ids)

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
                            pending[gtp] = CommitRecord(self._oam(rec.decode_offset_commit_value(value)), seq)
                    elif value is None:
                        offsets.pop(gtp, None)
                    else:
                        offsets[gtp] = CommitRecord(self._oam(rec.decode_offset_commit_value(value)), seq)
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
    def _oam(v: rec.OffsetCommitValue) -> OffsetAndMetadata:
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
        if len(group.members) > self.max_group_size:
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
