"""The placement map (shard table): which worker process owns each partition.

Pure values, no I/O (ARCHITECTURE §2, issue 10 "Placement tuning"). Every worker holds a
copy; the controller process is its one writer (it persists it as
`<log.dirs[0]>/__mpbroker_metadata/placement.json`, see `mpbroker/controller/placement.py`)
and pushes each new revision to the workers, which ignore a revision that is not newer
than the one they hold (`PlacementTable.newer_than`).

Owner of partition p of topic t, first match wins:

1. an explicit assignment made at run time (`mpbroker placement move|balance`),
   persisted with the table: `assignments[(t, p)] = worker`, where worker -1 means "in
   transit" (a live move between the old owner closing the log and the new owner opening
   it: nobody serves it, requests get NOT_LEADER_OR_FOLLOWER and clients retry);
2. config `placement.<t>-<p>=<worker>` (one partition);
3. config `placement.<t>=<worker>` (every partition of the topic);
4. the default spread: `(stable_hash(t) + p) % num_workers`, stable_hash = CRC-32 of the
   UTF-8 name. Consecutive partitions of a topic land on consecutive workers, and the
   offset per topic keeps topics with few partitions from all starting on worker 0.
   `__consumer_offsets` is spread the same way, so the group coordinators are spread too.

A key `placement.a-1` is read both as "partition 1 of topic a" and as "topic a-1": the
lookup tries the partition form first, so it is only ambiguous for a topic literally
named like another topic's partition; document-level caveat, not worth a syntax.

Pinned partitions (2 and 3) stay where the config puts them: balancing leaves them
out (their load stays on their worker) and the controller refuses to `move` one, unless
the operator says `--include-pinned`; a run-time assignment of a pinned partition (made
with that flag) lasts until the next start, where `reconcile` drops it: the config is
the operator's word at each start, and a pin added to it later must not lose to an old
move.

Workers outside `range(num_workers)` (a config or an assignment written for more workers
than run now) wrap around (`% num_workers`). When the number of workers changes between
restarts the run-time assignments are dropped (`reconcile`): they balanced a different
set of workers, and the default spread redistributes every partition.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

IN_TRANSIT = -1


def stable_hash(topic: str) -> int:
    return zlib.crc32(topic.encode("utf-8"))


def default_owner(topic: str, partition: int, num_workers: int) -> int:
    return (stable_hash(topic) + partition) % max(1, num_workers)


# `placement.balance.*` are the balancer's settings (mpbroker/config/keys.py), not pins of
# topics named "balance.*".
SETTINGS_PREFIX = "balance."


def parse_config(placement_cfg: Mapping[str, str]) -> dict[str, int]:
    """`config.placement` ({"topic": "1", "topic-3": "0"}) -> {key: worker}; bad values
    and the balancer's settings skipped."""
    out = {}
    for key, value in (placement_cfg or {}).items():
        if key.startswith(SETTINGS_PREFIX):
            continue
        try:
            w = int(str(value).strip())
        except ValueError:
            continue
        if w >= 0 and key:
            out[key] = w
    return out


@dataclass(frozen=True)
class PlacementTable:
    revision: int = 0
    num_workers: int = 1
    config: Mapping[str, int] = field(default_factory=dict)              # from placement.*
    assignments: Mapping[tuple[str, int], int] = field(default_factory=dict)  # run-time moves

    # ------------------------------------------------------------ lookups
    def owner(self, topic: str, partition: int) -> int:
        n = max(1, self.num_workers)
        w = self.assignments.get((topic, partition))
        if w is not None:
            return w if w == IN_TRANSIT else w % n
        w = self.pinned(topic, partition)
        return default_owner(topic, partition, n) if w is None else w

    def pinned(self, topic: str, partition: int) -> int | None:
        """The worker config `placement.*` pins the partition to, or None."""
        if not self.config:
            return None
        w = self.config.get(f"{topic}-{partition}")
        if w is None:
            w = self.config.get(topic)
        return None if w is None else w % max(1, self.num_workers)

    def owned_by(self, worker: int, partitions: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        return [tp for tp in partitions if self.owner(*tp) == worker]

    def newer_than(self, other: "PlacementTable | None") -> bool:
        return other is None or self.revision > other.revision

    # ------------------------------------------------------------ changes (new revisions)
    def assign(self, moves: Mapping[tuple[str, int], int]) -> "PlacementTable":
        a = dict(self.assignments)
        a.update(moves)
        return replace(self, revision=self.revision + 1, assignments=a)

    def reconcile(self, num_workers: int, config: Mapping[str, int]) -> "PlacementTable":
        """The table for this start: the config's placement.* keys, and the persisted
        assignments kept only when the number of workers is the same as when they were made
        (in-transit marks of a move the crash interrupted are dropped either way)."""
        fresh = PlacementTable(self.revision + 1, num_workers, dict(config))
        keep = {} if num_workers != self.num_workers else {
            k: w for k, w in self.assignments.items()
            if 0 <= w < num_workers and fresh.pinned(*k) is None}
        return replace(fresh, assignments=keep)

    # ------------------------------------------------------------ persistence format
    def to_json(self) -> dict:
        return {"revision": self.revision, "num_workers": self.num_workers,
                "config": dict(self.config),
                "assignments": [[t, p, w] for (t, p), w in sorted(self.assignments.items())]}

    @classmethod
    def from_json(cls, data: dict) -> "PlacementTable":
        return cls(int(data.get("revision", 0)), int(data.get("num_workers", 1)),
                   {str(k): int(v) for k, v in (data.get("config") or {}).items()},
                   {(str(t), int(p)): int(w) for t, p, w in data.get("assignments") or ()})
