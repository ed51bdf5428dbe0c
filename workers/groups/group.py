"""A classic (JoinGroup/SyncGroup) group: members, generation, state machine and offsets.

States and legal transitions (Kafka's GroupMetadata)::

    Empty ──join──> PreparingRebalance ──all joined / timeout──> CompletingRebalance
      ^                  ^     │                                   │ leader's SyncGroup stored
      │                  │     └── no members left ──> Empty       v
      │                  └──────── member change / timeout ─────  Stable
    Dead <── delete / unload / all offsets gone (from any state)

A group has no timers or I/O of its own; the coordinator drives it and keeps the timer
handles (`join_timer`, `sync_timer`, `Member.heartbeat_timer`) on these objects only so
that they are cancelled together with the state they guard.

Offsets live beside the membership: `offsets` holds what is durable in the log,
`pending_offset_commits` what is being appended (a fetch with require_stable answers
UNSTABLE_OFFSET_COMMIT for those), and `pending_txn_offsets` the transactional commits
that wait for their transaction's marker:

    pending_txn_offsets: {producer_id: {(topic, partition): CommitRecord}}

A CommitRecord's `append_seq` is None until its append is acknowledged; the commit marker
then moves every entry of that producer into `offsets` unless `offsets` already holds a
record appended later (a plain commit after the transactional one wins, exactly as
Kafka's `olderThan` on log offsets: appends to one partition land in call order, so the
coordinator's append sequence orders them like log offsets do). An abort drops them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from workers.groups.consumer_metadata import PROTOCOL_TYPE, subscribed_topics

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
ALL_STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)

# state -> states it may be entered from
_VALID_PREVIOUS = {
    DEAD: frozenset(ALL_STATES),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    EMPTY: frozenset({PREPARING_REBALANCE}),
}

TopicPartition = tuple[str, int]


class IllegalGroupTransition(RuntimeError):
    """The coordinator asked for a transition Kafka's state machine forbids (a bug here)."""


class OffsetAndMetadata(NamedTuple):
    offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int  # -1: none (only OffsetCommit v2-v4 with a retention time)


@dataclass
class CommitRecord:
    """An offset with the position of its record among this partition's appends."""

    oam: OffsetAndMetadata
    append_seq: int | None = None

    def older_than(self, other: "CommitRecord") -> bool:
        return self.append_seq < other.append_seq


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    assignment: bytes = b""
    join_callback: Callable[[Any], None] | None = None  # set while a JoinGroup waits
    sync_callback: Callable[[Any], None] | None = None  # set while a SyncGroup waits
    join_version: int = 0  # version of the waiting JoinGroup (KIP-814 skip_assignment)
    is_new: bool = False  # joined in this rebalance; expires after the new-member timeout
    is_leaving: bool = False
    heartbeat_timer: Any = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return list(self.protocols) == list(protocols)

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass
class ClassicGroup:
    group_id: str
    state: str = EMPTY
    state_timestamp_ms: int = -1  # when the current state was entered
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # join order
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)  # KIP-394 ids handed out
    pending_sync_members: set[str] = field(default_factory=set)
    num_members_awaiting_join: int = 0
    supported_protocols: Counter = field(default_factory=Counter)
    new_member_added: bool = False  # for the initial rebalance delay
    subscribed_topics: set[str] | None = None  # None: unknown (treat as all)
    offsets: dict[TopicPartition, CommitRecord] = field(default_factory=dict)
    pending_offset_commits: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    pending_txn_offsets: dict[int, dict[TopicPartition, CommitRecord]] = field(default_factory=dict)
    join_timer: Any = None  # the DelayedJoin / InitialDelayedJoin of this rebalance
    join_timer_initial: bool = False
    join_remaining_ms: int = 0  # InitialDelayedJoin: how much longer it may be extended
    join_delay_ms: int = 0
    sync_timer: Any = None  # the DelayedSync of this generation
    pending_member_timers: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ state

    def is_(self, state: str) -> bool:
        return self.state == state

    def transition_to(self, state: str, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalGroupTransition(
                f"group {self.group_id}: {self.state} -> {state} is not allowed")
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[PREPARING_REBALANCE]

    # ------------------------------------------------------------------ members

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        current = self.static_member_id(instance_id)
        return current is not None and current != member_id

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return (len(self.members) == self.num_members_awaiting_join
                and not self.pending_members)

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def add(self, member: Member, join_callback=None, join_version: int = 0) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        assert self.protocol_type == member.protocol_type
        self.members[member.member_id] = member
        self.supported_protocols.update(name for name, _ in member.protocols)
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.is_static:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)
        self.set_join_callback(member, join_callback, join_version)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(name for name, _ in member.protocols)
            self.supported_protocols += Counter()  # drop zero counts
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.is_static and self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(self, member: Member, protocols, rebalance_timeout_ms: int,
                      session_timeout_ms: int, join_callback, join_version: int) -> None:
        self.supported_protocols.subtract(name for name, _ in member.protocols)
        self.supported_protocols.update(name for name, _ in protocols)
        self.supported_protocols += Counter()
        member.protocols = list(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self.set_join_callback(member, join_callback, join_version)

    def set_join_callback(self, member: Member, callback, version: int) -> None:
        if callback is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.join_callback = callback
        member.join_version = version

    def invoke_join_callback(self, member: Member, result) -> bool:
        callback = member.join_callback
        if callback is None:
            return False
        self.set_join_callback(member, None, 0)
        callback(result)
        return True

    def invoke_sync_callback(self, member: Member, result) -> bool:
        callback, member.sync_callback = member.sync_callback, None
        if callback is None:
            return False
        callback(result)
        return True

    def replace_static_member(self, instance_id: str, old_member_id: str,
                              new_member_id: str, fenced_join, fenced_sync) -> Member:
        """A static member rejoined with a new member id: the old id is fenced at once."""
        member = self.members.pop(old_member_id)
        self.invoke_join_callback(member, fenced_join)
        self.invoke_sync_callback(member, fenced_sync)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[instance_id] = new_member_id
        return member

    def maybe_elect_new_joined_leader(self) -> bool:
        """Make a member that rejoined the leader if the leader did not; False if none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # ------------------------------------------------------------------ protocols

    def supports_protocols(self, protocol_type: str, protocols) -> bool:
        names = [name for name, _ in protocols]
        if self.is_(EMPTY):  # Kafka checks the state, not the member count
            return bool(protocol_type) and bool(names)
        return (self.protocol_type == protocol_type
                and any(self.supported_protocols[n] == len(self.members) for n in names))

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Every member votes for its most preferred protocol that all members support.

        Ties go to the protocol the earliest-joined member prefers most, so the choice is
        deterministic (Kafka leaves ties to map iteration order)."""
        if not self.members:
            raise IllegalGroupTransition("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        first = next(iter(self.members.values()))
        return next(name for name, _ in first.protocols if votes.get(name) == best)

    def is_protocol_type_consistent(self, protocol_type: str | None) -> bool:
        return protocol_type is None or protocol_type == self.protocol_type

    def is_protocol_name_consistent(self, protocol_name: str | None) -> bool:
        return protocol_name is None or protocol_name == self.protocol_name

    def current_member_metadata(self) -> list[tuple[Member, bytes]]:
        if self.protocol_name is None:
            raise IllegalGroupTransition("no protocol selected")
        return [(m, m.metadata(self.protocol_name)) for m in self.members.values()]

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != PROTOCOL_TYPE or self.protocol_name is None or not self.members:
            return None
        return subscribed_topics(m.metadata(self.protocol_name) for m in self.members.values())

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = None
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members.clear()

    # ------------------------------------------------------------------ offsets

    def has_offsets(self) -> bool:
        return bool(self.offsets or self.pending_offset_commits or self.pending_txn_offsets)

    def has_pending_commits_for(self, tp: TopicPartition) -> bool:
        return (tp in self.pending_offset_commits
                or any(tp in pending for pending in self.pending_txn_offsets.values()))

    def prepare_offset_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        self.pending_offset_commits.update(offsets)

    def on_offset_commit_append(self, tp: TopicPartition, record: CommitRecord) -> None:
        if tp in self.pending_offset_commits:
            current = self.offsets.get(tp)
            if current is None or current.older_than(record):
                self.offsets[tp] = record
            if self.pending_offset_commits[tp] == record.oam:
                del self.pending_offset_commits[tp]
        # else the offset was deleted while the append was in flight: it stays deleted

    def fail_pending_offset_write(self, tp: TopicPartition, oam: OffsetAndMetadata) -> None:
        if self.pending_offset_commits.get(tp) == oam:
            del self.pending_offset_commits[tp]

    def prepare_txn_offset_commit(self, producer_id: int,
                                  offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        pending = self.pending_txn_offsets.setdefault(producer_id, {})
        for tp, oam in offsets.items():
            pending[tp] = CommitRecord(oam)

    def on_txn_offset_commit_append(self, producer_id: int, tp: TopicPartition,
                                    record: CommitRecord) -> None:
        pending = self.pending_txn_offsets.get(producer_id)
        if pending is not None and tp in pending and pending[tp].oam == record.oam:
            pending[tp] = record

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: TopicPartition) -> None:
        pending = self.pending_txn_offsets.get(producer_id)
        if pending is not None:
            pending.pop(tp, None)
            if not pending:
                del self.pending_txn_offsets[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, is_commit: bool) -> None:
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not is_commit or not pending:
            return
        for tp, record in pending.items():
            if record.append_seq is None:
                continue  # its append failed or never finished: nothing durable to expose
            current = self.offsets.get(tp)
            if current is None or current.older_than(record):
                self.offsets[tp] = record

    def remove_offsets(self, tps) -> dict[TopicPartition, OffsetAndMetadata]:
        removed = {}
        for tp in list(tps):
            self.pending_offset_commits.pop(tp, None)
            for pending in self.pending_txn_offsets.values():
                pending.pop(tp, None)
            record = self.offsets.pop(tp, None)
            if record is not None:
                removed[tp] = record.oam
        return removed

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> dict[TopicPartition, OffsetAndMetadata]:
        """Kafka's GroupMetadata.removeExpiredOffsets (KIP-211 semantics)."""
        def expired(base_timestamp, subscribed=frozenset()):
            out = {}
            for tp, record in self.offsets.items():
                if tp[0] in subscribed or tp in self.pending_offset_commits:
                    continue
                oam = record.oam
                if oam.expire_timestamp_ms >= 0:
                    is_expired = now_ms >= oam.expire_timestamp_ms  # pre-KIP-211 commit
                else:
                    is_expired = now_ms - base_timestamp(oam) >= retention_ms
                if is_expired:
                    out[tp] = oam
            return out

        if self.protocol_type is not None and self.is_(EMPTY):
            # retention counts from when the group became empty (or the commit, for
            # groups loaded from records without a state timestamp)
            ts = self.state_timestamp_ms
            found = expired(lambda oam: ts if ts >= 0 else oam.commit_timestamp_ms)
        elif (self.protocol_type == PROTOCOL_TYPE and self.subscribed_topics is not None
              and self.is_(STABLE)):
            found = expired(lambda oam: oam.commit_timestamp_ms, self.subscribed_topics)
        elif self.protocol_type is None:
            found = expired(lambda oam: oam.commit_timestamp_ms)  # simple consumers
        else:
            found = {}
        for tp in found:
            del self.offsets[tp]
        return found
