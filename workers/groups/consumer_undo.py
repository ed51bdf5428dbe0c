"""Undo of a consumer group change whose records the appender refused (`Undo`).

The consumer group protocol (consumer_protocol.py) changes the group in memory first and
appends its records after, as Kafka's coordinator runtime replays its records before
writing them; when the append is refused (nothing written) the `Undo` taken before the
change puts the group back, as Kafka reverts to its last snapshot.
"""
from __future__ import annotations

import copy
import dataclasses

from workers.groups.consumer_group import ConsumerGroup, ConsumerMember

_TIMER_FIELDS = frozenset({"heartbeat_timer", "rebalance_timer", "join_timer", "sync_timer",
                           "pending_member_timers"})


def _fields(obj) -> dict:
    """A dataclass's fields, containers copied (one level), timers left out."""
    out = {}
    for f in dataclasses.fields(obj):
        if f.name not in _TIMER_FIELDS:
            v = getattr(obj, f.name)
            out[f.name] = copy.copy(v) if isinstance(v, (dict, set, list)) else v
    return out


class Undo:
    """Puts a consumer group back as it was when its change's records were refused.

    Taken before the change: which group object the coordinator had under the id, that
    group's fields, and the fields of the members the change is about (by member id, and
    the member holding the instance id): a heartbeat, leave or fence changes no other
    member. Called synchronously by the append that refused the records, so nothing else
    ran in between. Members the change added lose their timers; the members it was about
    get fresh ones (a session timeout from now, the rebalance timer if revoking)."""

    def __init__(self, protocol, group_id: str,
                 member_id: str | None = None, instance_id: str | None = None):
        self.protocol = protocol
        self.group_id = group_id
        self.group = group = protocol.coord.groups.get(group_id)
        self.group_fields = None
        self.members = []
        if isinstance(group, ConsumerGroup):
            self.group_fields = _fields(group)
            ids = {member_id, group.static_members.get(instance_id)}
            self.members = [(m, _fields(m)) for m in group.members.values() if m.member_id in ids]

    def __call__(self) -> None:
        groups = self.protocol.coord.groups
        before = self.group_fields["members"].values() if self.group_fields else ()
        kept = {id(m) for m in before}
        current = groups.get(self.group_id)
        if isinstance(current, ConsumerGroup):
            for m in current.members.values():
                if id(m) not in kept:
                    self._stop_timers(m)
        if self.group is None:
            groups.pop(self.group_id, None)
        else:
            groups[self.group_id] = self.group
        if self.group_fields is None:
            return
        for name, value in self.group_fields.items():
            setattr(self.group, name, value)
        for member, fields in self.members:
            for name, value in fields.items():
                setattr(member, name, value)
            if self.group.members.get(member.member_id) is member:
                self._stop_timers(member)
                self.protocol._schedule_session_timeout(self.group, member)
                self.protocol._update_rebalance_timer(self.group, member)

    def _stop_timers(self, member: ConsumerMember) -> None:
        self.protocol.coord._cancel(member.heartbeat_timer)
        self.protocol.coord._cancel(member.rebalance_timer)
        member.heartbeat_timer = member.rebalance_timer = None
