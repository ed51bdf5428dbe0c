"""Group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalance
(Kafka's classic GroupCoordinator), and the KIP-848 ConsumerGroupHeartbeat handed to
`ConsumerGroupProtocol` (consumer_protocol.py).

A part of `GroupCoordinator` (coordinator.py), a mixin over `CoordinatorBase`
(base.py): the rules follow GroupCoordinator.scala (2.x-3.x): KIP-394 member id
required on the first JoinGroup (v4+), KIP-345 static membership,
group.initial.rebalance.delay.ms for an Empty group's first rebalance, DelayedJoin
(rebalance timeout), DelayedHeartbeat (session timeout; NEW_MEMBER_JOIN_TIMEOUT_MS for a
member that has not completed its first join), DelayedSync (members that never
SyncGroup), group.max.size, KIP-559 protocol type/name checks, KIP-814 skip_assignment.
The timers are the scheduler's; each group's are cancelled with `_cancel_group_timers`.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable

from workers.groups import errors, responses
from workers.groups import records as rec
from workers.groups.base import CoordinatorBase
from workers.groups.consumer_group import ConsumerGroup
from workers.groups.group import (
    COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, ClassicGroup, Member)
from workers.groups.responses import JoinResult, SyncResult

log = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class Membership(CoordinatorBase):
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

        if not self.config.min_session_timeout_ms <= session_timeout <= self.config.max_session_timeout_ms:
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
                    or group.num_members_awaiting_join < self.config.max_group_size)
        return group.has(member_id) or len(group.members) < self.config.max_group_size

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
            delay = self.config.initial_rebalance_delay_ms
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
            delay = min(self.config.initial_rebalance_delay_ms, group.join_remaining_ms)
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
