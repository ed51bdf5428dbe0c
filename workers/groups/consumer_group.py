"""The KIP-848 consumer group and its members: the state the consumer group protocol
(consumer_protocol.py) keeps and the records it writes of them.

A `ConsumerGroup` extends the classic group (group.py) for its offset bookkeeping and
adds the group epoch, the assignment epoch and the target assignment; its state is
derived from them (`update_state`: Empty, Assigning, Reconciling, Stable). A
`ConsumerMember` holds its subscription and its reconciliation state (epochs, assigned
partitions, partitions pending revocation), as Kafka's ConsumerGroupMember does.
Partitions are (topic id, partition) pairs; `to_map` / `from_map` convert them to and
from the records' {topic id: sorted partitions}.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from workers.groups import records as rec
from workers.groups.consumer_metadata import PROTOCOL_TYPE
from workers.groups.group import EMPTY, STABLE, ClassicGroup

ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
GROUP_TYPE_CONSUMER = "consumer"

# member states (Kafka's MemberState byte values, stored in record type 8)
MEMBER_STABLE = 0
UNREVOKED_PARTITIONS = 1
UNRELEASED_PARTITIONS = 2

LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

TopicPartition = tuple[bytes, int]  # (topic id, partition)
Partitions = frozenset  # of TopicPartition


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = MEMBER_STABLE
    assigned: frozenset = frozenset()
    pending_revocation: frozenset = frozenset()
    heartbeat_timer: object = None  # session timeout
    rebalance_timer: object = None  # revocation deadline

    def metadata_value(self) -> bytes:
        return rec.encode_consumer_member_metadata_value(rec.ConsumerMemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host,
            list(self.subscribed_topic_names), self.subscribed_topic_regex,
            self.rebalance_timeout_ms, self.server_assignor))

    def assignment_value(self) -> bytes:
        return rec.encode_consumer_current_assignment_value(rec.ConsumerCurrentAssignmentValue(
            self.member_epoch, self.previous_member_epoch, self.state,
            to_map(self.assigned), to_map(self.pending_revocation)))

    def reconciliation_state(self) -> tuple:
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned,
                self.pending_revocation)


@dataclass(eq=False)
class ConsumerGroup(ClassicGroup):
    group_epoch: int = 0
    assignment_epoch: int = 0
    target: dict = field(default_factory=dict)  # member id -> frozenset of TopicPartition
    partition_owner: dict = field(default_factory=dict)  # TopicPartition -> member id
    subscription_metadata: dict = field(default_factory=dict)  # topic name -> (id, partitions)
    assignor_name: str | None = None

    def __post_init__(self):
        self.protocol_type = PROTOCOL_TYPE

    def update_state(self, now_ms: int) -> None:
        if not self.members:
            state = EMPTY
        elif self.group_epoch > self.assignment_epoch:
            state = ASSIGNING
        elif any(m.member_epoch != self.assignment_epoch or m.state != MEMBER_STABLE
                 for m in self.members.values()):
            state = RECONCILING
        else:
            state = STABLE
        if state != self.state:
            self.state = state
            self.state_timestamp_ms = now_ms

    def subscribed_names(self) -> set[str]:
        return set(self.subscription_metadata)


def to_map(tps: Iterable[TopicPartition]) -> dict[bytes, list[int]]:
    out: dict[bytes, list[int]] = {}
    for topic_id, p in tps:
        out.setdefault(topic_id, []).append(p)
    return {t: sorted(ps) for t, ps in out.items()}


def from_map(m: Mapping[bytes, Iterable[int]] | None) -> frozenset:
    return frozenset((bytes(t), p) for t, ps in (m or {}).items() for p in ps)
