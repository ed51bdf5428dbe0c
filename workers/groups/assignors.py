"""The KIP-848 server-side assignors (`group.consumer.assignors`), pure functions.

An assignor takes the subscriptions {member id: set of topic ids}, the partition counts
{topic id: count} and the current target {member id: frozenset of (topic id, partition)}
and returns the new target, every subscribed partition given to exactly one member.
`uniform` is Kafka's UniformAssignor in spirit (balanced, sticky), `range` its
RangeAssignor (contiguous ranges per topic, so co-partitioned topics line up). The
consumer group protocol (consumer_protocol.py) runs them when the group epoch moves.
"""
from __future__ import annotations

from typing import Callable


def uniform_assignor(subs: dict[str, set[bytes]], counts: dict[bytes, int],
                     current: dict[str, frozenset]) -> dict[str, frozenset]:
    """Balanced and sticky: keep what each member had where it is still valid, give the
    rest to the least loaded eligible member, then move partitions from the most to the
    least loaded eligible member until no move lowers the spread (counts differ by at
    most one among members that could take each other's partitions)."""
    members = sorted(subs)
    out: dict[str, set] = {m: set() for m in members}
    taken = set()
    for m in members:
        for tp in sorted(current.get(m, ())):
            if tp[0] in subs[m] and tp[1] < counts.get(tp[0], 0) and tp not in taken:
                out[m].add(tp)
                taken.add(tp)
    all_tps = [(t, p) for t in sorted(counts) for p in range(counts[t])
               if any(t in s for s in subs.values())]
    for tp in all_tps:
        if tp in taken:
            continue
        eligible = [m for m in members if tp[0] in subs[m]]
        best = min(eligible, key=lambda m: (len(out[m]), m))
        out[best].add(tp)
    for _ in range(len(all_tps) + 1):
        moved = False
        for src in sorted(members, key=lambda m: (-len(out[m]), m)):
            for tp in sorted(out[src]):
                dst = min((m for m in members if tp[0] in subs[m]), key=lambda m: (len(out[m]), m))
                if len(out[dst]) + 1 < len(out[src]):
                    out[src].discard(tp)
                    out[dst].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return {m: frozenset(tps) for m, tps in out.items()}


def range_assignor(subs: dict[str, set[bytes]], counts: dict[bytes, int],
                   current: dict[str, frozenset]) -> dict[str, frozenset]:
    """Per topic, the subscribed members in member id order get contiguous ranges (the
    first `partitions % members` one partition more): co-partitioned topics line up."""
    out: dict[str, set] = {m: set() for m in subs}
    for topic_id in sorted(counts):
        members = sorted(m for m, s in subs.items() if topic_id in s)
        if not members:
            continue
        n = counts[topic_id]
        per, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            size = per + (1 if i < extra else 0)
            out[m].update((topic_id, p) for p in range(start, start + size))
            start += size
    return {m: frozenset(tps) for m, tps in out.items()}


ASSIGNORS: dict[str, Callable] = {"uniform": uniform_assignor, "range": range_assignor}


def assignor_names(value) -> list[str]:
    names = value.split(",") if isinstance(value, str) else list(value or [])
    out = []
    for name in names:
        n = str(name).strip().lower()
        n = {"org.apache.kafka.coordinator.group.assignor.uniformassignor": "uniform",
             "org.apache.kafka.coordinator.group.assignor.rangeassignor": "range"}.get(n, n)
        if n in ASSIGNORS and n not in out:
            out.append(n)
    return out or ["uniform", "range"]
