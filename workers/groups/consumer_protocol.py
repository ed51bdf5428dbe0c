"""KIP-848 consumer groups: ConsumerGroupHeartbeat / ConsumerGroupDescribe, I/O free.

The coordinator of a `__consumer_offsets` partition owns one `ConsumerGroupProtocol`; it
keeps `ConsumerGroup`s in the same `groups` dict as the classic groups (a group id is one
or the other) and shares their offset bookkeeping (`ConsumerGroup` extends `ClassicGroup`
for `offsets`, `pending_*` and expiry; the JoinGroup state machine is never used on it).

The rules are Kafka's (group-coordinator `GroupMetadataManager.consumerGroupHeartbeat`,
`CurrentAssignmentBuilder`, KIP-848):

* **Group epoch.** Bumped whenever the membership or a member's subscription changes, or
  the subscribed topics' metadata (topic id, partition count) changes.
* **Target assignment.** When the group epoch is ahead of the assignment epoch, the
  server-side assignor (`uniform` or `range`, `group.consumer.assignors`; a member may ask
  for one with ServerAssignor) computes the target of every member, and the assignment
  epoch becomes the group epoch.
* **Reconciliation, per member, on its own heartbeats.** A member that owns partitions
  outside its target must first revoke them (state UNREVOKED_PARTITIONS, its epoch does not
  move; the heartbeat's TopicPartitions must stop listing them). Then it moves to the
  assignment epoch and gets the target partitions that nobody else owns any more; those
  still owned by another member (still revoking) come later (UNRELEASED_PARTITIONS). A
  partition is therefore never owned by two members.
* **Member epochs.** A heartbeat with an epoch above the member's is fenced
  (FENCED_MEMBER_EPOCH); below it is accepted only as the previous epoch with owned
  partitions that are a subset of the assignment (a lost response), else fenced.
* **Timers** (through the coordinator's scheduler, i.e. the worker's timing wheel): the
  session timeout (`group.consumer.session.timeout.ms`) restarts on every heartbeat and
  fences the member when it fires; the member's rebalance timeout runs while it has
  partitions to revoke and fences it if it does not.
* **Leaving.** Epoch -1 removes the member (group epoch bump). Epoch -2 is a static
  member's temporary leave: it keeps its assignment and its place until the session
  timeout, and a new member id with the same `group.instance.id` takes it over without a
  rebalance (UNRELEASED_INSTANCE_ID while the old one is still active).
* **Persistence.** Every change is appended to the offsets partition as Kafka's
  ConsumerGroup* records (`records.py`, record types 3, 5, 6, 7, 8) before the heartbeat is
  answered; `load_*` rebuilds the groups from them. Record type 4 (partition metadata) is
  not written; the subscribed topics' metadata is recomputed after a load.
* **Refused appends.** The change is made in memory first and its records are then
  appended, as Kafka's coordinator runtime replays its records before writing them; when
  the appender refuses the records (nothing written: not the leader any more, ISR below
  min.insync.replicas, the log refused them) `Undo` (consumer_undo.py) puts the group back as it was before
  anything else runs (Kafka reverts to its last snapshot), and the member gets the error.
  Records that were written but time out waiting for the followers stay applied: they
  are in the leader's log, as in Kafka.

Where this differs from Kafka: a heartbeat with a non-zero epoch for a group that does
not exist answers UNKNOWN_MEMBER_ID (Kafka: GROUP_ID_NOT_FOUND) so that clients simply
rejoin; regular expressions are Python's `re.fullmatch`, not RE2/J.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter
from typing import Callable, Iterable, Mapping

from workers.groups import errors
from workers.groups import records as rec
from workers.groups.assignors import ASSIGNORS
from workers.groups.config import GroupConfig
from workers.groups.consumer_metadata import PROTOCOL_TYPE, Assignment, Subscription, \
    encode_assignment, encode_subscription
from workers.groups.consumer_group import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH, MEMBER_STABLE, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS,
    ConsumerGroup, ConsumerMember, from_map, to_map)
from workers.groups.consumer_undo import Undo
from workers.groups.group import DEAD, EMPTY, ClassicGroup

log = logging.getLogger(__name__)


def _error_response(code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}


class ConsumerGroupProtocol:
    def __init__(self, coordinator, config: GroupConfig,
                 topic_metadata: Callable[[], Mapping[str, tuple[bytes, int]]]):
        self.coord = coordinator
        self.session_timeout_ms = config.consumer_session_timeout_ms
        self.heartbeat_interval_ms = config.consumer_heartbeat_interval_ms
        self.max_size = config.consumer_max_size
        self.assignors = list(config.consumer_assignors)
        self.topic_metadata = topic_metadata

    # ------------------------------------------------------------------ helpers
    def _now(self) -> int:
        return self.coord.clock()

    def _topics(self) -> Mapping[str, tuple[bytes, int]]:
        try:
            return self.topic_metadata() or {}
        except Exception:  # metadata not there yet
            return {}

    def _resolve(self, member: ConsumerMember, topics) -> set[str]:
        names = {n for n in member.subscribed_topic_names if n in topics}
        if member.subscribed_topic_regex is not None:
            try:
                pattern = re.compile(member.subscribed_topic_regex)
                names.update(n for n in topics if not n.startswith("__") and pattern.fullmatch(n))
            except re.error:
                pass
        return names

    def _subscription_metadata(self, group: ConsumerGroup, topics=None) -> dict:
        topics = self._topics() if topics is None else topics
        names = set()
        for m in group.members.values():
            names |= self._resolve(m, topics)
        return {n: (bytes(topics[n][0]), int(topics[n][1])) for n in names}

    def _refresh_subscribed_topics(self, group: ConsumerGroup) -> None:
        names = set()
        for m in group.members.values():
            names.update(m.subscribed_topic_names)
        group.subscribed_topics = names | group.subscribed_names()

    # ------------------------------------------------------------------ validation
    def _validate(self, req: dict, version: int) -> tuple[int, str] | None:
        member_id = req.get("member_id") or ""
        epoch = req.get("member_epoch", 0)
        if not req.get("group_id"):
            return errors.INVALID_REQUEST, "GroupId can't be empty."
        if req.get("instance_id") == "":
            return errors.INVALID_REQUEST, "InstanceId can't be empty."
        if req.get("rack_id") == "":
            return errors.INVALID_REQUEST, "RackId can't be empty."
        if epoch == 0:
            if version >= 1 and not member_id:
                return errors.INVALID_REQUEST, "MemberId can't be empty."
            if req.get("rebalance_timeout_ms", -1) == -1:
                return errors.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."
            if req.get("topic_partitions") is None or req.get("topic_partitions"):
                return errors.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."
            names, regex = req.get("subscribed_topic_names"), req.get("subscribed_topic_regex")
            if names is None and regex is None:
                return (errors.INVALID_REQUEST,
                        "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not member_id:
                return errors.INVALID_REQUEST, "MemberId can't be empty."
            if req.get("instance_id") is None:
                return errors.INVALID_REQUEST, "InstanceId can't be null."
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return errors.INVALID_REQUEST, f"MemberEpoch is invalid: {epoch}."
        elif not member_id:
            return errors.INVALID_REQUEST, "MemberId can't be empty."
        regex = req.get("subscribed_topic_regex")
        if regex:  # "" means no regex (librdkafka sends it with topic names)
            try:
                re.compile(regex)
            except re.error as e:
                return errors.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex is invalid: {e}"
        assignor = req.get("server_assignor")
        if assignor is not None and assignor not in self.assignors:
            return (errors.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. "
                    f"Supported assignors: {', '.join(self.assignors)}.")
        return None

    @staticmethod
    def _check_epoch(member: ConsumerMember, epoch: int, owned: frozenset | None) -> str | None:
        if epoch > member.member_epoch:
            return (f"The consumer group member has a greater member epoch ({epoch}) than the "
                    f"one known by the group coordinator ({member.member_epoch}).")
        if epoch < member.member_epoch:
            if epoch != member.previous_member_epoch or owned is None or not owned <= member.assigned:
                return (f"The consumer group member has a smaller member epoch ({epoch}) than "
                        f"the one known by the group coordinator ({member.member_epoch}).")
        return None

    @staticmethod
    def _owned(req: dict) -> frozenset | None:
        tps = req.get("topic_partitions")
        if tps is None:
            return None
        return frozenset((bytes(t["topic_id"]), p) for t in tps for p in t.get("partitions", []))

    # ------------------------------------------------------------------ heartbeat
    def heartbeat(self, req: dict, version: int, client_id: str, client_host: str,
                  respond: Callable[[dict], None]) -> None:
        def fail(code: int, message: str | None = None):
            respond(_error_response(code, message))

        bad = self._validate(req, version)
        if bad:
            fail(*bad)
            return
        group_id = req["group_id"]
        error = self.coord._check_status(group_id, "ConsumerGroupHeartbeat")
        if error:
            fail(error)
            return
        member_id = req.get("member_id") or ""
        epoch = req.get("member_epoch", 0)
        records: list = []
        undo = Undo(self, group_id, member_id, req.get("instance_id"))
        group = self.coord.groups.get(group_id)
        if group is not None and not isinstance(group, ConsumerGroup):
            if not (group.is_(EMPTY) or group.is_(DEAD)) or group.members or group.pending_members:
                fail(errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
                return
            group = self._from_classic(group, records) if epoch == 0 else None
        if epoch < 0:
            self._leave(group, member_id, req.get("instance_id"), epoch, respond, undo)
            return
        if group is None:
            if epoch != 0:
                fail(errors.UNKNOWN_MEMBER_ID, f"Group {group_id} has no member {member_id}.")
                return
            group = ConsumerGroup(group_id, state_timestamp_ms=self._now())
            self.coord.groups[group_id] = group

        owned = self._owned(req)
        instance_id = req.get("instance_id")
        new_member = False
        if epoch == 0:
            if not member_id:
                member_id = str(uuid.uuid4())  # v0: the coordinator names the member
            member = group.members.get(member_id)
            current = group.static_members.get(instance_id) if instance_id is not None else None
            if current is not None and current != member_id:
                old = group.members[current]
                if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    fail(errors.UNRELEASED_INSTANCE_ID,
                         f"Static member {instance_id} is still used by member {current}.")
                    return
                member = self._replace_static_member(group, old, member_id, records)
            if member is None:
                if len(group.members) >= self.max_size:
                    fail(errors.GROUP_MAX_SIZE_REACHED,
                         f"The consumer group has reached its maximum capacity of {self.max_size} members.")
                    return
                member = ConsumerMember(member_id, instance_id=instance_id)
                group.members[member_id] = member
                if instance_id is not None:
                    group.static_members[instance_id] = member_id
                new_member = True
        else:
            member = group.members.get(member_id)
            if member is None:
                fail(errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
                return
            if instance_id is not None and group.static_members.get(instance_id) != member_id:
                fail(errors.FENCED_INSTANCE_ID, f"Static member {instance_id} was replaced.")
                return
            message = self._check_epoch(member, epoch, owned)
            if message:
                fail(errors.FENCED_MEMBER_EPOCH, message)
                return

        subscription_changed = self._update_member(member, req, client_id, client_host) or new_member
        if subscription_changed:
            records.append((rec.encode_consumer_group_key(rec.CONSUMER_GROUP_MEMBER_METADATA, group_id,
                                                          member.member_id), member.metadata_value()))
        topics = self._topics()
        metadata = self._subscription_metadata(group, topics)
        if subscription_changed or metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            self._bump_group_epoch(group, records)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, records)

        before = member.reconciliation_state()
        self._reconcile(group, member, owned)
        if member.reconciliation_state() != before or new_member:
            records.append(self._current_assignment_record(group, member))
        self._schedule_session_timeout(group, member)
        self._update_rebalance_timer(group, member)
        self._refresh_subscribed_topics(group)
        group.update_state(self._now())

        # Kafka sends the assignment on a full request or when it changed
        omit_assignment = owned is None and epoch != 0 and member.assigned == before[3]
        response = {"throttle_time_ms": 0, "error_code": errors.NONE, "error_message": None,
                    "member_id": member.member_id, "member_epoch": member.member_epoch,
                    "heartbeat_interval_ms": self.heartbeat_interval_ms,
                    "assignment": None if omit_assignment else {"topic_partitions": [
                        {"topic_id": t, "partitions": ps} for t, ps in to_map(member.assigned).items()]}}
        self._store(records, response, respond, undo)

    def _store(self, records, response, respond, undo: Undo) -> None:
        if not records:
            respond(response)
            return

        def stored(error: int):
            if error:
                respond(_error_response(errors.map_heartbeat_store_error(error)))
            else:
                respond(response)
        stored.after_unload = lambda _e: respond(_error_response(errors.NOT_COORDINATOR))
        self.coord._append(records, stored, on_refused=undo)

    @staticmethod
    def _update_member(member: ConsumerMember, req: dict, client_id: str, client_host: str) -> bool:
        """Apply the request's non-null fields; True if what the assignor sees changed."""
        before = (member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor,
                  member.rack_id, member.rebalance_timeout_ms, member.instance_id,
                  member.client_id, member.client_host)
        if req.get("subscribed_topic_names") is not None:
            member.subscribed_topic_names = sorted(set(req["subscribed_topic_names"]))
        if req.get("subscribed_topic_regex") is not None:
            member.subscribed_topic_regex = req["subscribed_topic_regex"] or None
        if req.get("server_assignor") is not None:
            member.server_assignor = req["server_assignor"]
        if req.get("rack_id") is not None:
            member.rack_id = req["rack_id"]
        if req.get("rebalance_timeout_ms", -1) != -1:
            member.rebalance_timeout_ms = req["rebalance_timeout_ms"]
        if req.get("instance_id") is not None:
            member.instance_id = req["instance_id"]
        member.client_id, member.client_host = client_id, client_host
        after = (member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor,
                 member.rack_id, member.rebalance_timeout_ms, member.instance_id,
                 member.client_id, member.client_host)
        return after != before

    def _bump_group_epoch(self, group: ConsumerGroup, records: list) -> None:
        group.group_epoch += 1
        records.append((rec.encode_consumer_group_key(rec.CONSUMER_GROUP_METADATA, group.group_id),
                        rec.encode_consumer_group_epoch_value(group.group_epoch)))

    def _choose_assignor(self, group: ConsumerGroup) -> str:
        wanted = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        if wanted:
            best = max(wanted.values())
            return min(name for name, n in wanted.items() if n == best)
        return self.assignors[0]

    def _compute_target(self, group: ConsumerGroup, records: list) -> None:
        name = self._choose_assignor(group)
        topics = group.subscription_metadata
        ids = {name_: tid for name_, (tid, _n) in topics.items()}
        counts = {tid: n for tid, n in topics.values()}
        all_topics = self._topics()
        subs = {mid: {ids[t] for t in self._resolve(m, all_topics) if t in ids}
                for mid, m in group.members.items()}
        target = ASSIGNORS[name](subs, counts, group.target)
        for mid in group.members:
            tps = target.get(mid, frozenset())
            if tps != group.target.get(mid) or mid not in group.target:
                records.append((rec.encode_consumer_group_key(
                    rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group.group_id, mid),
                    rec.encode_consumer_target_assignment_value(to_map(tps))))
        group.target = {mid: target.get(mid, frozenset()) for mid in group.members}
        group.assignment_epoch = group.group_epoch
        group.assignor_name = name
        records.append((rec.encode_consumer_group_key(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                                                      group.group_id),
                        rec.encode_consumer_group_epoch_value(group.assignment_epoch)))

    @staticmethod
    def _reconcile(group: ConsumerGroup, member: ConsumerMember, owned: frozenset | None) -> None:
        """Kafka's CurrentAssignmentBuilder: one step towards the target assignment."""
        mid = member.member_id
        target = group.target.get(mid, frozenset())
        target_epoch = group.assignment_epoch
        if member.state == UNREVOKED_PARTITIONS:
            if owned is None or owned & member.pending_revocation:
                return  # still revoking
            for tp in member.pending_revocation:
                if group.partition_owner.get(tp) == mid:
                    del group.partition_owner[tp]
            member.pending_revocation = frozenset()
            member.state = MEMBER_STABLE
        elif member.state == MEMBER_STABLE and member.member_epoch == target_epoch:
            return
        keep = member.assigned & target
        revoke = member.assigned - target
        if revoke:
            member.assigned = keep
            member.pending_revocation = revoke
            member.state = UNREVOKED_PARTITIONS
            return
        add = target - member.assigned
        free = frozenset(tp for tp in add if group.partition_owner.get(tp, mid) == mid)
        for tp in free:
            group.partition_owner[tp] = mid
        member.assigned = keep | free
        member.state = UNRELEASED_PARTITIONS if add - free else MEMBER_STABLE
        if member.member_epoch != target_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = target_epoch

    def _current_assignment_record(self, group: ConsumerGroup, member: ConsumerMember):
        return (rec.encode_consumer_group_key(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                                              group.group_id, member.member_id),
                member.assignment_value())

    # ------------------------------------------------------------------ timers
    def _schedule_session_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        self.coord._cancel(member.heartbeat_timer)
        member.heartbeat_timer = self.coord._schedule(
            self.session_timeout_ms, lambda: self._on_session_timeout(group, member))

    def _update_rebalance_timer(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.state != UNREVOKED_PARTITIONS:
            self.coord._cancel(member.rebalance_timer)
            member.rebalance_timer = None
        elif member.rebalance_timer is None:
            epoch = member.member_epoch
            timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else self.session_timeout_ms
            member.rebalance_timer = self.coord._schedule(
                timeout, lambda: self._on_rebalance_timeout(group, member, epoch))

    def _is_current(self, group: ConsumerGroup, member: ConsumerMember) -> bool:
        return (self.coord.groups.get(group.group_id) is group
                and group.members.get(member.member_id) is member)

    def _on_session_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        member.heartbeat_timer = None
        if self._is_current(group, member):
            log.info("consumer group %s: member %s failed (session timeout), removing it",
                     group.group_id, member.member_id)
            self._fence(group, member)

    def _on_rebalance_timeout(self, group: ConsumerGroup, member: ConsumerMember, epoch: int) -> None:
        member.rebalance_timer = None
        if (self._is_current(group, member) and member.state == UNREVOKED_PARTITIONS
                and member.member_epoch == epoch):
            log.info("consumer group %s: member %s did not revoke its partitions in time, removing it",
                     group.group_id, member.member_id)
            self._fence(group, member)

    def _fence(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        # refused: the member stays, with a new session timeout (the fence is retried)
        undo = Undo(self, group.group_id, member.member_id)
        records: list = []
        self._remove_member(group, member, records)
        self.coord._append(records, lambda e: e and log.warning(
            "consumer group %s: storing a member removal failed: %s", group.group_id, e),
            on_refused=undo)

    # ------------------------------------------------------------------ leaving
    def _remove_member(self, group: ConsumerGroup, member: ConsumerMember, records: list) -> None:
        mid = member.member_id
        self.coord._cancel(member.heartbeat_timer)
        self.coord._cancel(member.rebalance_timer)
        member.heartbeat_timer = member.rebalance_timer = None
        group.members.pop(mid, None)
        if member.instance_id is not None and group.static_members.get(member.instance_id) == mid:
            del group.static_members[member.instance_id]
        for tp in member.assigned | member.pending_revocation:
            if group.partition_owner.get(tp) == mid:
                del group.partition_owner[tp]
        group.target.pop(mid, None)
        for kind in (rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                     rec.CONSUMER_GROUP_MEMBER_METADATA):
            records.append((rec.encode_consumer_group_key(kind, group.group_id, mid), None))
        group.subscription_metadata = self._subscription_metadata(group)
        self._bump_group_epoch(group, records)
        self._refresh_subscribed_topics(group)
        group.update_state(self._now())

    def _leave(self, group: ConsumerGroup | None, member_id: str, instance_id: str | None,
               epoch: int, respond, undo: Undo) -> None:
        member = group.members.get(member_id) if group is not None else None
        if member is None and group is not None and instance_id is not None:
            current = group.static_members.get(instance_id)
            member = group.members.get(current) if current is not None else None
            if member is not None:
                respond(_error_response(errors.FENCED_INSTANCE_ID,
                                        f"Static member {instance_id} is now member {current}."))
                return
        if member is None:
            respond(_error_response(errors.UNKNOWN_MEMBER_ID,
                                    f"Member {member_id} is not a member of the group."))
            return
        records: list = []
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # temporary leave: keep the assignment and the place until the session timeout;
            # the epoch it left at stays as the previous epoch for its successor
            if member.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            records.append(self._current_assignment_record(group, member))
            self._schedule_session_timeout(group, member)
            group.update_state(self._now())
        else:
            self._remove_member(group, member, records)
        response = {"throttle_time_ms": 0, "error_code": errors.NONE, "error_message": None,
                    "member_id": member_id, "member_epoch": epoch,
                    "heartbeat_interval_ms": 0, "assignment": None}
        self._store(records, response, respond, undo)

    def _replace_static_member(self, group: ConsumerGroup, old: ConsumerMember, new_id: str,
                               records: list) -> ConsumerMember:
        """A static member came back under a new member id: it takes over the old one's
        assignment and target; no group epoch bump, so nobody else rebalances."""
        self.coord._cancel(old.heartbeat_timer)
        self.coord._cancel(old.rebalance_timer)
        old_id = old.member_id
        for kind in (rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                     rec.CONSUMER_GROUP_MEMBER_METADATA):
            records.append((rec.encode_consumer_group_key(kind, group.group_id, old_id), None))
        new = ConsumerMember(
            new_id, old.instance_id, old.rack_id, old.client_id, old.client_host,
            list(old.subscribed_topic_names), old.subscribed_topic_regex, old.rebalance_timeout_ms,
            old.server_assignor, member_epoch=old.previous_member_epoch,
            previous_member_epoch=old.previous_member_epoch, state=old.state,
            assigned=old.assigned, pending_revocation=old.pending_revocation)
        members = {(new_id if k == old_id else k): (new if k == old_id else v)
                   for k, v in group.members.items()}
        group.members.clear()
        group.members.update(members)
        group.static_members[old.instance_id] = new_id
        for tp, owner in list(group.partition_owner.items()):
            if owner == old_id:
                group.partition_owner[tp] = new_id
        if old_id in group.target:
            group.target[new_id] = group.target.pop(old_id)
            records.append((rec.encode_consumer_group_key(
                rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group.group_id, new_id),
                rec.encode_consumer_target_assignment_value(to_map(group.target[new_id]))))
        records.append((rec.encode_consumer_group_key(rec.CONSUMER_GROUP_MEMBER_METADATA, group.group_id,
                                                      new_id), new.metadata_value()))
        records.append(self._current_assignment_record(group, new))
        return new

    # ------------------------------------------------------------------ conversions
    def _from_classic(self, classic: ClassicGroup, records: list) -> ConsumerGroup:
        """An empty classic group (offsets only) becomes a consumer group; offsets stay."""
        group = ConsumerGroup(classic.group_id, state_timestamp_ms=self._now())
        group.offsets = classic.offsets
        group.pending_offset_commits = classic.pending_offset_commits
        group.pending_txn_offsets = classic.pending_txn_offsets
        self.coord._cancel_group_timers(classic)
        self.coord.groups[group.group_id] = group
        if classic.generation_id > 0:
            records.append((rec.encode_group_metadata_key(classic.group_id), None))
        return group

    @staticmethod
    def tombstones(group: ConsumerGroup) -> list:
        """Records that delete a consumer group (its members' records first)."""
        out = []
        for mid in list(group.members):
            for kind in (rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                         rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, rec.CONSUMER_GROUP_MEMBER_METADATA):
                out.append((rec.encode_consumer_group_key(kind, group.group_id, mid), None))
        out.append((rec.encode_consumer_group_key(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                                                  group.group_id), None))
        out.append((rec.encode_consumer_group_key(rec.CONSUMER_GROUP_METADATA, group.group_id), None))
        return out

    # ------------------------------------------------------------------ describe
    def describe(self, group_ids: Iterable[str]) -> list[dict]:
        topics = self._topics()
        names = {tid: name for name, (tid, _n) in topics.items()}
        out = []
        for group_id in group_ids:
            entry = {"error_code": errors.NONE, "error_message": None, "group_id": group_id,
                     "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
                     "members": [], "authorized_operations": -2147483648}
            error = self.coord._check_status(group_id, "ConsumerGroupDescribe")
            group = self.coord.groups.get(group_id) if not error else None
            if error:
                entry["error_code"] = error
            elif group is None or group.is_(DEAD):
                entry.update(error_code=errors.GROUP_ID_NOT_FOUND,
                             error_message=f"Group {group_id} not found.")
            elif not isinstance(group, ConsumerGroup):
                entry.update(error_code=errors.GROUP_ID_NOT_FOUND,
                             error_message=f"Group {group_id} is not a consumer group.")
            else:
                entry.update(group_state=group.state, group_epoch=group.group_epoch,
                             assignment_epoch=group.assignment_epoch,
                             assignor_name=group.assignor_name or self._choose_assignor(group))

                def assignment(tps):
                    return {"topic_partitions": [
                        {"topic_id": t, "topic_name": names.get(t, ""), "partitions": ps}
                        for t, ps in to_map(tps).items()]}
                entry["members"] = [{
                    "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch, "client_id": m.client_id,
                    "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "assignment": assignment(m.assigned),
                    "target_assignment": assignment(group.target.get(m.member_id, frozenset()))}
                    for m in group.members.values()]
            out.append(entry)
        return out

    def describe_classic(self, group: ConsumerGroup) -> dict:
        """The group as DescribeGroups shows it (Kafka 4: consumer-protocol bytes)."""
        topics = self._topics()
        names = {tid: name for name, (tid, _n) in topics.items()}

        def by_name(tps):
            return sorted((names[t], ps) for t, ps in to_map(tps).items() if t in names)
        return {
            "group_state": group.state, "protocol_type": PROTOCOL_TYPE,
            "protocol_data": group.assignor_name or self._choose_assignor(group),
            "members": [{
                "member_id": m.member_id, "group_instance_id": m.instance_id,
                "client_id": m.client_id, "client_host": m.client_host,
                "member_metadata": encode_subscription(Subscription(
                    sorted(self._resolve(m, topics) | set(m.subscribed_topic_names)),
                    owned_partitions=by_name(m.assigned), rack_id=m.rack_id)),
                "member_assignment": encode_assignment(Assignment(by_name(m.assigned)))}
                for m in group.members.values()]}

    # ------------------------------------------------------------------ offsets
    @staticmethod
    def validate_offset_commit(group: ConsumerGroup, member_id: str, epoch: int,
                               transactional: bool, version: int) -> int:
        if epoch < 0 and not group.members:
            return errors.NONE  # admin / simple-consumer commits to an empty group
        member = group.members.get(member_id)
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        if not transactional and version < 9:
            return errors.UNSUPPORTED_VERSION
        if epoch != member.member_epoch:
            return errors.STALE_MEMBER_EPOCH
        return errors.NONE

    @staticmethod
    def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, epoch: int) -> int:
        if epoch < 0 and not member_id:
            return errors.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch:
            return errors.STALE_MEMBER_EPOCH
        return errors.NONE

    # ------------------------------------------------------------------ loading
    @staticmethod
    def load_record(state: dict, key: rec.ConsumerGroupKey, value: bytes | None) -> None:
        """Fold one record into `state` ({group: {...}}), last write wins."""
        g = state.setdefault(key.group, {"epoch": None, "assignment_epoch": 0, "members": {},
                                         "target": {}, "current": {}})
        kind = key.kind
        if kind == rec.CONSUMER_GROUP_METADATA:
            if value is None:
                del state[key.group]
            else:
                g["epoch"] = rec.decode_consumer_group_epoch_value(value)
        elif kind == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            g["assignment_epoch"] = rec.decode_consumer_group_epoch_value(value) if value is not None else 0
        elif kind == rec.CONSUMER_GROUP_MEMBER_METADATA:
            if value is None:
                g["members"].pop(key.member_id, None)
            else:
                g["members"][key.member_id] = rec.decode_consumer_member_metadata_value(value)
        elif kind == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                g["target"].pop(key.member_id, None)
            else:
                g["target"][key.member_id] = from_map(rec.decode_consumer_target_assignment_value(value))
        elif kind == rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            if value is None:
                g["current"].pop(key.member_id, None)
            else:
                g["current"][key.member_id] = rec.decode_consumer_current_assignment_value(value)
        # kind 4 (partition metadata): recomputed from the cluster metadata instead

    def build_group(self, group_id: str, g: dict) -> ConsumerGroup | None:
        if g.get("epoch") is None:
            return None
        group = ConsumerGroup(group_id, state_timestamp_ms=self._now())
        group.group_epoch = g["epoch"]
        group.assignment_epoch = g["assignment_epoch"]
        for mid, md in g["members"].items():
            m = ConsumerMember(mid, md.instance_id, md.rack_id, md.client_id, md.client_host,
                               list(md.subscribed_topic_names), md.subscribed_topic_regex,
                               md.rebalance_timeout_ms, md.server_assignor)
            cur = g["current"].get(mid)
            if cur is not None:
                m.member_epoch, m.previous_member_epoch = cur.member_epoch, cur.previous_member_epoch
                m.state = cur.state if cur.state in (MEMBER_STABLE, UNREVOKED_PARTITIONS,
                                                     UNRELEASED_PARTITIONS) else MEMBER_STABLE
                m.assigned, m.pending_revocation = from_map(cur.assigned), from_map(cur.pending_revocation)
            group.members[mid] = m
            if m.instance_id is not None:
                group.static_members[m.instance_id] = mid
            for tp in m.assigned | m.pending_revocation:
                group.partition_owner[tp] = mid
        group.target = {mid: tps for mid, tps in g["target"].items() if mid in group.members}
        group.subscription_metadata = self._subscription_metadata(group)
        self._refresh_subscribed_topics(group)
        group.update_state(self._now())
        return group

    def on_loaded(self, group: ConsumerGroup) -> None:
        for member in group.members.values():
            self._schedule_session_timeout(group, member)
            self._update_rebalance_timer(group, member)
