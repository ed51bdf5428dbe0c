"""Offset syncs: when the pipeline records one, and how they translate offsets (pure).

An offset sync says "source offset U of topic-partition tp is target offset D". The
pipeline emits one (MirrorSourceTask's rule, `SyncPolicy.update`) when

* it is the first record of tp this process mirrors,
* `offset.lag.max` or more records went by since the last sync (so a translated offset
  is never more than that stale), or
* the source skipped offsets (compaction, transaction markers, aborted records).

`OffsetSyncStore` (the checkpoint side, fed from the offset-syncs topic) translates a
consumer group's source offset U: with the newest sync (u, d) where u <= U, the target
offset is d when u == U, else d + 1 (the record at u is replicated, what lies between u
and U is not known record by record, so the group resumes just after d: it may re-read
at most up to the next sync, never skip). No sync at or below U: no translation.

The store keeps the syncs of each partition sorted, at most `capacity`: beyond it the
older half is thinned to every other sync, so recent offsets translate precisely and
old ones coarsely (MM2 keeps exponentially spaced syncs for the same reason).
"""
from __future__ import annotations

import bisect
from typing import Dict, List, Optional, Tuple

TopicPartition = Tuple[str, int]


class SyncPolicy:
    """Per source partition: is an offset sync due at the record with source offset U?

    Decided when the record is written, on source offsets alone (the target offset is
    known only from the delivery report, which the pipeline asks for just for these
    records): the first record, a gap, or `max_lag` records since the last sync. A
    partition's target offsets advance one per record, so this is MM2's rule as long as
    the target is not truncated (which the store notices: see `OffsetSyncStore.add`)."""

    def __init__(self, max_lag: int):
        self.max_lag = max(1, max_lag)
        self._state: Dict[TopicPartition, List[int]] = {}   # tp -> [last synced U, previous U]

    def update(self, tp: TopicPartition, upstream: int) -> bool:
        st = self._state.get(tp)
        if st is None:
            self._state[tp] = [upstream, upstream]
            return True
        due = upstream - st[0] >= self.max_lag or upstream - st[1] != 1
        if due:
            st[0] = upstream
        st[1] = upstream
        return due

    def forget(self, tp: TopicPartition) -> None:
        """The partition was revoked: its next owner starts with a sync."""
        self._state.pop(tp, None)


class OffsetSyncStore:
    def __init__(self, capacity: int = 64):
        self.capacity = max(4, capacity)
        self._ups: Dict[TopicPartition, List[int]] = {}
        self._downs: Dict[TopicPartition, List[int]] = {}

    def add(self, tp: TopicPartition, upstream: int, downstream: int) -> None:
        ups = self._ups.setdefault(tp, [])
        downs = self._downs.setdefault(tp, [])
        # A sync at or below a known upstream offset means the source was re-read (a
        # restart re-mirrors from its last commit); one with a lower downstream offset
        # means the target was recreated or rewound. Either way, what came after no
        # longer describes the target's log.
        i = bisect.bisect_left(ups, upstream)
        del ups[i:], downs[i:]
        while downs and downs[-1] > downstream:
            ups.pop()
            downs.pop()
        ups.append(upstream)
        downs.append(downstream)
        self._thin(tp)

    def _thin(self, tp: TopicPartition) -> None:
        ups, downs = self._ups[tp], self._downs[tp]
        if len(ups) <= self.capacity:
            return
        half = len(ups) // 2
        keep = list(range(0, half, 2)) + list(range(half, len(ups)))
        self._ups[tp] = [ups[k] for k in keep]
        self._downs[tp] = [downs[k] for k in keep]

    def translate(self, tp: TopicPartition, upstream: int) -> Optional[int]:
        """The target offset for source offset `upstream`, or None when unknown."""
        ups = self._ups.get(tp)
        if not ups:
            return None
        i = bisect.bisect_right(ups, upstream) - 1
        if i < 0:
            return None
        down = self._downs[tp][i]
        return down if ups[i] == upstream else down + 1

    def partitions(self) -> List[TopicPartition]:
        return [tp for tp, ups in self._ups.items() if ups]
