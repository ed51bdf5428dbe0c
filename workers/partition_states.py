"""The state an owner publishes of the partitions it leads, and a front's copy of it
(ARCHITECTURE §2, Fetch across workers: the notification).

A front that answers a long poll over partitions of other workers keeps, per such
partition, what its owner last published: high watermark, last stable offset, log
start offset, leader epoch and the two byte counters that DelayedFetch counts
(`bytes_appended` for followers, `bytes_committed` for consumers). With it the front
knows, without asking, which partitions a consumer is caught up on, parks the Fetch in
its own fetch purgatory watching every partition (the owners' partitions through their
published state), and asks an owner only for the partitions that have something to
tell: a caught-up long poll over many partitions costs the front alone, and a wake-up
costs one owner answer, not one per worker.

Owner side (`Publisher`): a front subscribes to a partition when it asks the owner for
it; every change of the partition that its fetch purgatory hears of (`check_and_complete`
of its key: every change of its counters, LSO, leadership or presence) marks it, and
the marked partitions whose state differs from the last one sent leave once per loop
iteration, one mesh frame per subscribed front. A partition no longer led here is published as gone (None) and its
subscribers dropped. The answer to a Fetch part that subscribes carries the state its
partitions had when it was read ("state"), the point from which the front counts
what arrives while it parks (`Fanout`, workers/handlers/fetch/fanout.py).

Front side (`RemoteStates`): {(topic, partition): RemoteState}, each from one owner;
`quiet` says whether a consumer's partition can be answered from it (caught up, same
leader epoch: an empty answer with the published offsets); `read` gives a consumer's
new batches as a slice of the owner's active segment when the copy knows where they
start and end (the read point below) and they fit the limit, which the front sends
itself (ARCHITECTURE, "A front reads a consumer's new batches from the owner's file");
the bytes so read are told to the owners each SERVED_REPORT_S, as their partitions'
bytes out (`take_served`); a partition whose owner's
channel closed is dropped, so that the next Fetch asks (and the unreachable owner's
partitions answer NOT_LEADER_OR_FOLLOWER). A partition enters the copy only with the
answer that subscribed it; published changes update what is there. A partition no
Fetch read through this front for a sweep interval (`sweep`, STATE_IDLE_S) is dropped
and its owner told ("unsub"), so that owners stop publishing what nobody reads.

Message (mesh framing, workers/router.py):

    owner -> front  {"op": "state", "parts": [(topic, partition, state | None)]}
                    state: (hw, lso, log start, leader epoch, bytes appended,
                    bytes committed, read point); also as "state" of a subscribing
                    part's "resp". Read point (`Log.read_point`): (active segment
                    path, st_dev, st_ino, position of hw, position of lso or -1, last
                    offset of the segment's last aborted transaction or -1), or None
                    when it cannot tell (the hw before the active segment,
                    a read error)
    front -> owner  {"op": "unsub", "keys": [(topic, partition)]}
    front -> owner  {"op": "served", "parts": [(topic, partition, bytes)]}

A copy remembers the file position of each offset a state named (up to
POSITIONS_KEPT, forgotten when the active segment or the leader epoch changes): a
consumer's next fetch offset is the high watermark or LSO its last answer carried.
Within one segment file and leader epoch an offset's position never changes: a
leader's active segment only grows (a leader that becomes a follower, and could
truncate, is published as gone), and every roll is published (the append that rolls
checks the key, as housekeeping's segment.ms roll does), so a copy stops naming a
segment before compaction or retention can touch it.
"""
from __future__ import annotations

from typing import Callable, Iterable

from storage.slices import FileSlice

STATE_IDLE_S = 60.0     # a front's copy of a partition no Fetch read for this long goes
SERVED_REPORT_S = 1.0   # how often a front tells owners the bytes it read of theirs


POSITIONS_KEPT = 32     # offsets a front's copy remembers the file positions of


def state_of(p) -> tuple | None:
    """What an owner publishes of partition `p` (None: not led here). A partition
    moving between log dirs still serves reads: its state is published."""
    if p is None or p.closed or not getattr(p, "is_leader", True):
        return None
    hw, lso = p.high_watermark, p.last_stable_offset
    return (hw, lso, p.log_start_offset, p.leader_epoch, p.bytes_appended,
            p.bytes_committed, p.log.read_point(hw, lso))


class RemoteState:
    """One partition of another worker as its owner last published it; `closed` is
    False so that a DelayedFetch counts it like a partition of its own."""

    __slots__ = ("owner", "high_watermark", "last_stable_offset", "log_start_offset",
                 "leader_epoch", "bytes_appended", "bytes_committed", "file", "hw_pos",
                 "lso_pos", "abort_end", "positions")
    closed = False

    def __init__(self, owner: int, state: tuple):
        self.owner = owner
        self.leader_epoch = None
        self.file = None
        self.positions: dict[int, int] = {}
        self.set(state)

    def set(self, state: tuple) -> None:
        """Take a published `state_of` tuple. The file positions of the offsets it
        names are remembered while the active segment and leader epoch stay: a
        consumer fetches from an offset some earlier answer ended at."""
        hw, lso, self.log_start_offset, epoch, self.bytes_appended, \
            self.bytes_committed, point = state
        self.high_watermark, self.last_stable_offset = hw, lso
        positions = self.positions
        if epoch != self.leader_epoch:
            self.leader_epoch = epoch
            positions.clear()
        if point is None:
            self.file = None
            positions.clear()
            return
        file = point[:3]
        if file != self.file:
            self.file = file
            positions.clear()
        self.hw_pos, self.lso_pos, self.abort_end = point[3], point[4], point[5]
        positions[hw] = point[3]
        if point[4] >= 0:
            positions[lso] = point[4]
        while len(positions) > POSITIONS_KEPT:
            del positions[next(iter(positions))]

    def read(self, cp, committed: bool, limit: int) -> FileSlice | None:
        """What a consumer's `cp` (a CachedPartition) reads, as a FileSlice of the
        owner's active segment (fd -1), when this copy can tell it without the owner:
        the fetch offset is one whose position it knows in the segment that holds
        the high watermark (LSO), no aborted transaction ends at or after it
        (read_committed), and all of it up to there fits in `limit` bytes. Else None
        (ask the owner). The same whole batches `Log.read` would return."""
        file = self.file
        if file is None:
            return None
        epoch = cp.current_leader_epoch
        if epoch >= 0 and epoch != self.leader_epoch:
            return None
        offset = cp.fetch_offset
        if committed:
            if self.abort_end >= offset:
                return None
            upper, end = self.last_stable_offset, self.lso_pos
        else:
            upper, end = self.high_watermark, self.hw_pos
        if end < 0 or not self.log_start_offset <= offset < upper:
            return None
        start = self.positions.get(offset)
        if start is None or not 0 < end - start <= limit:
            return None
        return FileSlice(file[0], start, end - start, -1, file[1], file[2])

    def caught_up(self, fetch_offset: int, leader_epoch: int, committed: bool) -> bool:
        """A consumer at `fetch_offset` (knowing `leader_epoch`, -1 if none) has
        nothing to read and no error to hear."""
        return (fetch_offset == (self.last_stable_offset if committed else self.high_watermark)
                and (leader_epoch < 0 or leader_epoch == self.leader_epoch))

    def answer(self, index: int, committed: bool, records: list | None = None) -> dict:
        """The partition's answer for a consumer from these offsets: no records (caught
        up), or `records` (the slices `read` gave)."""
        return {"partition_index": index, "error_code": 0,
                "high_watermark": self.high_watermark,
                "last_stable_offset": self.last_stable_offset,
                "log_start_offset": self.log_start_offset,
                "aborted_transactions": [] if committed else None,
                "preferred_read_replica": -1, "records": [] if records is None else records}


class RemoteStates:
    """A front's copy of the partitions other workers published (module docstring)."""

    def __init__(self):
        self.states: dict[tuple, RemoteState] = {}
        self.used: set[tuple] = set()       # read by a Fetch since the last sweep
        # {owner: {key: bytes}} read here from its files (`read`), not yet told to it
        self.served: dict[int, dict[tuple, int]] = {}
        self.file_reads = 0         # partitions read so (mpbroker_worker_peer_file_reads)

    def get(self, key: tuple) -> RemoteState | None:
        return self.states.get(key)

    def update(self, owner: int, parts: Iterable, subscribed: bool = False) -> list[tuple]:
        """Apply an owner's state (`subscribed`: of the answer that subscribed its
        partitions, which may enter the copy; else a published change, which updates
        only what is there: a partition swept meanwhile stays out); the keys named."""
        states = self.states
        keys = []
        for topic, index, state in parts:
            key = (topic, index)
            keys.append(key)
            st = states.get(key)
            if state is None:
                if st is not None and st.owner == owner:
                    del states[key]
                continue
            if st is None or st.owner != owner:
                if subscribed:
                    states[key] = RemoteState(owner, state)
            else:
                st.set(state)
        return keys

    def drop_owner(self, owner: int) -> list[tuple]:
        """Forget what `owner` published (its channel closed); the keys dropped."""
        keys = [k for k, st in self.states.items() if st.owner == owner]
        for k in keys:
            del self.states[k]
        self.served.pop(owner, None)        # its counters start again with it
        return keys

    def forget(self, owner: int, keys) -> list[tuple]:
        """Drop the copies of `keys` that `owner` published; the keys dropped."""
        states, dropped = self.states, []
        for key in keys:
            st = states.get(key)
            if st is not None and st.owner == owner:
                del states[key]
                self.used.discard(key)
                dropped.append(key)
        return dropped

    def quiet(self, cp, owner: int, committed: bool) -> RemoteState | None:
        """`cp`'s (a CachedPartition of a consumer) published state when `owner`
        published it and the consumer is caught up on it, else None (ask the owner)."""
        key = (cp.topic, cp.partition)
        st = self.states.get(key)
        if st is None or st.owner != owner or not st.caught_up(
                cp.fetch_offset, cp.current_leader_epoch, committed):
            return None
        self.used.add(key)
        return st

    def read(self, cp, owner: int, committed: bool, limit: int) -> tuple | None:
        """(state, slice) of `cp` read from `owner`'s file without asking it
        (`RemoteState.read`), else None."""
        key = (cp.topic, cp.partition)
        st = self.states.get(key)
        if st is None or st.owner != owner:
            return None
        sl = st.read(cp, committed, limit)
        if sl is None:
            return None
        self.used.add(key)
        return st, sl

    def count_served(self, owner: int, key: tuple, n: int) -> None:
        """`n` bytes of `owner`'s partition `key` read here (`read`) went into an
        answer."""
        self.file_reads += 1
        out = self.served.get(owner)
        if out is None:
            out = self.served[owner] = {}
        out[key] = out.get(key, 0) + n

    def take_served(self) -> dict[int, list]:
        """{owner: [(topic, partition, bytes)]} read here since the last call: the
        owners count them as their partitions' bytes out (metrics, placement)."""
        served, self.served = self.served, {}
        return {w: [(k[0], k[1], n) for k, n in parts.items()] for w, parts in served.items()}

    def sweep(self) -> dict[int, list]:
        """Drop the partitions no Fetch read since the last sweep (neither answered
        from the copy nor asked: `used`); {owner: [keys]} to tell their owners."""
        used, self.used = self.used, set()
        idle: dict[int, list] = {}
        for key, st in list(self.states.items()):
            if key not in used:
                del self.states[key]
                idle.setdefault(st.owner, []).append(key)
        return idle


class Publisher:
    """The owner's side: which fronts hear of which partitions, and the changes not
    yet told. `lookup(topic, index)` is the worker's partition lookup; `send(peer,
    parts)` sends one "state" message to a front."""

    def __init__(self, lookup: Callable, send: Callable[[int, list], None],
                 call_soon: Callable[[Callable], object]):
        self.lookup = lookup
        self.send = send
        self.call_soon = call_soon
        self.subscribers: dict[tuple, set[int]] = {}
        self.sent: dict[tuple, tuple] = {}      # the state each key's last flush told
        self.dirty: set[tuple] = set()
        self.scheduled = False

    def subscribe(self, peer: int, keys: Iterable[tuple]) -> list:
        """`peer` hears of `keys` from now on; their states now (sent before the
        answer that follows, so that the front's copy is never older than it)."""
        subs, lookup = self.subscribers, self.lookup
        parts = []
        for key in keys:
            state = state_of(lookup(*key))
            if state is None:
                continue        # not ours: the answer says so
            s = subs.get(key)
            if s is None:
                subs[key] = {peer}
            else:
                s.add(peer)
            # (`sent` stays: it is what every subscriber was told by a flush, which a
            # newer state here is not, for the others)
            parts.append((key[0], key[1], state))
        return parts

    def unsubscribe(self, peer: int, keys: Iterable) -> None:
        """`peer` no longer hears of `keys` (its copy dropped them)."""
        for key in keys:
            self._drop(peer, tuple(key))

    def unsubscribe_peer(self, peer: int) -> None:
        """`peer` hears of nothing any more (its channel closed)."""
        for key in [k for k, s in self.subscribers.items() if peer in s]:
            self._drop(peer, key)

    def _drop(self, peer: int, key: tuple) -> None:
        s = self.subscribers.get(key)
        if s is not None:
            s.discard(peer)
            if not s:
                del self.subscribers[key]
                self.sent.pop(key, None)

    def changed(self, key: tuple) -> None:
        """The fetch purgatory's hook: `key` changed (its state leaves this iteration)."""
        if key in self.subscribers:
            self.dirty.add(key)
            if not self.scheduled:
                self.scheduled = True
                self.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        dirty, self.dirty = self.dirty, set()
        by_peer: dict[int, list] = {}
        lookup, subs, sent = self.lookup, self.subscribers, self.sent
        for key in dirty:
            peers = subs.get(key)
            if not peers:
                continue
            state = state_of(lookup(*key))
            if state is not None and sent.get(key) == state:
                continue            # checked, not changed (a metadata push checks all)
            entry = (key[0], key[1], state)
            for peer in peers:
                by_peer.setdefault(peer, []).append(entry)
            if state is None:       # gone: its fronts ask whoever leads it next
                del subs[key]
                sent.pop(key, None)
            else:
                sent[key] = state
        for peer, parts in by_peer.items():
            self.send(peer, parts)
