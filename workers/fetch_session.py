"""Incremental fetch sessions (KIP-227, seed 000 §6.1).

A consumer or follower that fetches many partitions sends the full list once; the
broker keeps it in a session and later requests name only what changed (new fetch
offsets, partitions added) and what to forget. Responses of an incremental fetch carry
only partitions with something to say: records, an error, a diverging epoch, or a
changed high watermark / last stable offset / log start offset.

Request fields -> meaning (Fetch v7+):

    session_id == 0, epoch == 0   full fetch, create a session (id returned)
    session_id == N, epoch == 0   close session N, full fetch, create a new one
    session_id == *, epoch == -1  full fetch without a session (closes N if given)
    session_id == N, epoch == E>0 incremental on session N, which must be at epoch E

Errors: FETCH_SESSION_ID_NOT_FOUND (70) for an unknown id, INVALID_FETCH_SESSION_EPOCH
(71) for a wrong epoch, FETCH_SESSION_TOPIC_ID_ERROR (106) when a session made with
topic ids (v13+) is used by a request without them or the other way round; all as the
top-level error of an otherwise empty response. An incremental request that leaves
the session empty closes it and is answered without a session (Kafka's
SessionlessFetchContext).

Epochs follow Kafka's FetchMetadata.nextEpoch: 1, 2, ... up to 2**31-1, then 1 again
(0 and -1 are the reserved INITIAL/FINAL epochs).

Order: the partitions of a session are read in session order, and an incremental
response moves every partition that returned records to the end of that order (Kafka's
IncrementalFetchContext), so under `max_bytes` the partitions behind a busy one get
their turn on the next fetch instead of starving.

Eviction (Kafka's FetchSessionCacheShard.tryEvict): the cache holds at most
`max.incremental.fetch.session.cache.slots` sessions. When it is full, a new session
may take the place of
1. the least recently used session, if it went unused for more than `eviction_ms`
   (Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS, 120 s), else
2. the least valuable evictable session, if the new one is worth more: value is
   (privileged, partition count), followers (replica_id >= 0) being privileged.
   A session is evictable by anyone once it is older than `eviction_ms`; an
   unprivileged one is evictable by privileged newcomers at any age. Evictability is
   decided when a session is used (created or fetched), as in Kafka.
Otherwise the fetch goes on without a session (session id 0).

Bytes (mpbroker, issue #15): slots alone do not bound memory (a session of 100k
partitions holds tens of MB), so the cache also holds at most `max_bytes`
(`max.incremental.fetch.session.cache.bytes`) of sessions, each estimated as
SESSION_BYTES + PARTITION_BYTES per partition (measured on CPython 3.11 with
tracemalloc by loadtest/bench_memory.py). A new session that does not fit makes room by
the same eviction rules as for a slot (one victim after another while they are worth
less); a session larger than the whole budget is never created. An incremental fetch
that adds partitions beyond the budget, when no other session can go, closes its own
session and is answered as a full fetch without a session (session id 0), as an
incremental fetch that empties its session is; the client starts a new one.

The cache is per worker (the front of the connection keeps the session); a session
moves with its connection when that is handed to another worker (`take`, `adopt`:
workers/handoff.py). Clocks are monotonic milliseconds (workers/worker.py
`timer_clock`: CLOCK_MONOTONIC, the same in every process of the machine).
"""
from __future__ import annotations

import collections
import random
from dataclasses import dataclass, field

from mpbroker.protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
EVICTION_MS = 120_000          # Kafka: MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
SESSION_BYTES = 1024           # a session without partitions (object, dict, ids)
PARTITION_BYTES = 360          # one CachedPartition, its key tuple and its dict entry
DEFAULT_MAX_BYTES = 128 * 1024 * 1024
# session ids: 2**31 - 1 split into this many residues, one per worker (`id_offset`)
ID_STRIDE = 4096
MAX_SESSION_ID = 2**31 - 1


def session_bytes(partitions: int) -> int:
    """The estimated memory of a session of `partitions` partitions."""
    return SESSION_BYTES + PARTITION_BYTES * partitions


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    topic: str
    topic_id: bytes
    partition: int
    fetch_offset: int
    max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_high_watermark: int = -1
    last_stable_offset: int = -1
    last_log_start_offset: int = -1
    last_fetched_epoch: int = -1      # Fetch v12+ (followers: divergence check)

    def must_respond(self, error_code: int, high_watermark: int, lso: int,
                     log_start: int, has_records: bool, diverging: bool = False) -> bool:
        changed = has_news(error_code, has_records, diverging, (high_watermark, lso, log_start),
                           (self.last_high_watermark, self.last_stable_offset,
                            self.last_log_start_offset))
        # after an error the high watermark is forgotten, so the partition is sent again
        # once the error is gone (Kafka's CachedPartition.maybeUpdateResponseData)
        self.last_high_watermark = -1 if error_code else high_watermark
        self.last_stable_offset = lso
        self.last_log_start_offset = log_start
        return changed


def has_news(error_code: int, has_records: bool, diverging: bool, offsets: tuple,
             last_told: tuple) -> bool:
    """A partition an incremental fetch response must carry: an error, records, a
    diverging epoch, or (high watermark, last stable offset, log start offset) other
    than what the client was last told (also the owner's rule when it leaves partitions
    out of a forwarded part's answer, workers/payloads.py)."""
    return bool(has_records or error_code or diverging or tuple(offsets) != tuple(last_told))


@dataclass(eq=False)
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: dict = field(default_factory=dict)  # (topic, partition) -> CachedPartition
    last_used_ms: int = 0
    privileged: bool = False          # created by a follower
    creation_ms: int = 0
    uses_topic_ids: bool = False      # created by a v13+ request
    # decided at each use (FetchSessionCache._touch), as Kafka's evictable maps
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False

    size_bytes: int = 0               # as charged to the cache (session_bytes)

    def value(self) -> tuple:
        """What eviction compares (Kafka's EvictableKey without the id tie-break)."""
        return (self.privileged, len(self.partitions))


class FetchContext:
    """What one Fetch request reads, and how its response is filtered."""

    def __init__(self, partitions: list[CachedPartition], session: FetchSession | None,
                 incremental: bool, error_code: int = 0):
        self.partitions = partitions
        self.session = session
        self.incremental = incremental
        self.error_code = error_code

    @property
    def session_id(self) -> int:
        return self.session.session_id if self.session else 0

    def include(self, cp: CachedPartition, error_code: int, high_watermark: int, lso: int,
                log_start: int, has_records: bool, diverging: bool = False) -> bool:
        """Whether the response carries `cp`; an incremental one also moves a partition
        that returned records to the end of the session's order."""
        respond = cp.must_respond(error_code, high_watermark, lso, log_start, has_records,
                                  diverging)
        if not self.incremental:
            return True
        if respond and has_records and self.session is not None:
            parts = self.session.partitions
            key = (cp.topic, cp.partition)
            if parts.get(key) is cp:
                parts[key] = parts.pop(key)
        return respond


class FetchSessionCache:
    """`id_offset`: this cache's session ids are `id_offset` modulo ID_STRIDE, so that
    the workers of a broker (`id_offset` = worker id) never give out the same id and a
    session handed over with its connection (`adopt`) never meets another of its id."""

    def __init__(self, max_sessions: int = 1000, clock=None, eviction_ms: int = EVICTION_MS,
                 max_bytes: int = DEFAULT_MAX_BYTES, id_offset: int = 0):
        self.id_offset = id_offset % ID_STRIDE
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.clock = clock
        self.eviction_ms = eviction_ms
        # session id -> session, least recently used first
        self.sessions: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()
        self.evictions = 0
        self.bytes = 0                # sum of the sessions' size_bytes

    def _now(self) -> int:
        return self.clock() if self.clock else 0

    def _new_id(self) -> int:
        while True:
            sid = random.randrange((MAX_SESSION_ID - self.id_offset) // ID_STRIDE) * ID_STRIDE \
                + self.id_offset
            if sid and sid not in self.sessions:
                return sid

    def _remove(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self.bytes -= session.size_bytes

    def new_context(self, session_id: int, epoch: int, requested: list[CachedPartition],
                    forgotten: list[tuple[str, int]], is_follower: bool = False,
                    uses_topic_ids: bool = False) -> FetchContext:
        if epoch == FINAL_EPOCH or (epoch == INITIAL_EPOCH and session_id != 0):
            self._remove(session_id)
        if epoch == FINAL_EPOCH:
            return FetchContext(requested, None, incremental=False)
        if epoch == INITIAL_EPOCH:
            session = None
            if requested:
                session = self._maybe_create(requested, is_follower, uses_topic_ids)
            return FetchContext(requested, session, incremental=False)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext([], None, True, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext([], None, True, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext([], None, True, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        self._update(session, requested, forgotten)
        if not session.partitions:
            self._remove(session.session_id)
            return FetchContext(requested, None, incremental=False)
        if not self._resize(session):
            self._remove(session.session_id)
            return FetchContext(list(session.partitions.values()), None, incremental=False)
        session.epoch = next_epoch(session.epoch)
        self._touch(session, self._now())
        return FetchContext(list(session.partitions.values()), session, incremental=True)

    def _resize(self, session: FetchSession) -> bool:
        """Charge `session`'s new size; False when it no longer fits (it must go)."""
        size = session_bytes(len(session.partitions))
        grow = size - session.size_bytes
        if grow > 0 and self.bytes + grow > self.max_bytes and not self._make_room(
                grow, session.privileged, len(session.partitions), self._now(), keep=session):
            return False
        session.size_bytes = size
        self.bytes += grow
        return True

    @staticmethod
    def _update(session: FetchSession, requested, forgotten) -> None:
        for key in forgotten:
            session.partitions.pop(key, None)
        for cp in requested:
            old = session.partitions.get((cp.topic, cp.partition))
            if old is None:
                session.partitions[(cp.topic, cp.partition)] = cp
            else:
                old.fetch_offset = cp.fetch_offset
                old.max_bytes = cp.max_bytes
                old.log_start_offset = cp.log_start_offset
                old.current_leader_epoch = cp.current_leader_epoch
                old.last_fetched_epoch = cp.last_fetched_epoch

    def _maybe_create(self, requested, privileged: bool, uses_topic_ids: bool):
        """A new session for a full fetch, or None when the cache has no room for it."""
        if self.max_sessions <= 0:
            return None
        now = self._now()
        partitions = {}
        for cp in requested:
            partitions[(cp.topic, cp.partition)] = cp
        size = self._room(len(partitions), privileged, now)
        if size is None:
            return None
        session = FetchSession(self._new_id(), next_epoch(INITIAL_EPOCH), privileged=privileged,
                               creation_ms=now, uses_topic_ids=uses_topic_ids,
                               partitions=partitions, size_bytes=size)
        self.bytes += size
        self._touch(session, now)
        return session

    def _room(self, partitions: int, privileged: bool, now: int) -> int | None:
        """The bytes of a session of `partitions` partitions once the cache has room for
        it, by the rules of a new session (a slot and its bytes, evicting by
        `_try_evict`); None: no room."""
        size = session_bytes(partitions)
        if size > self.max_bytes:
            return None
        if len(self.sessions) >= self.max_sessions and \
                not self._try_evict(privileged, partitions, now):
            return None
        if self.bytes + size > self.max_bytes and \
                not self._make_room(size, privileged, partitions, now):
            return None
        return size

    def _make_room(self, need: int, privileged: bool, size: int, now: int,
                   keep: FetchSession | None = None) -> bool:
        """Evict until `need` more bytes fit; True when they do. Victims are chosen one
        at a time by `_try_evict`'s rules; when the rules stop before there is room,
        the sessions already evicted stay evicted (they were worth less, as Kafka's
        single-slot eviction would have decided for each)."""
        while self.bytes + need > self.max_bytes:
            if not self._try_evict(privileged, size, now, keep):
                return False
        return True

    def _try_evict(self, privileged: bool, size: int, now: int,
                   keep: FetchSession | None = None) -> bool:
        """Make room for a session worth (privileged, size); True when one went."""
        others = [s for s in self.sessions.values() if s is not keep]
        if not others:
            return False
        lru = others[0]
        if now - lru.last_used_ms > self.eviction_ms:
            victim = lru                                        # stale
        else:
            candidates = [s for s in others
                          if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
            if not candidates:
                return False
            victim = min(candidates, key=lambda s: (s.value(), s.session_id))
            # Kafka's EvictableKey order: a tie in value keeps the incumbent
            if (privileged, size) <= victim.value():
                return False
        self._remove(victim.session_id)
        self.evictions += 1
        return True

    def take(self, session_id: int) -> None:
        """Forget session `session_id` here: it went with its connection to another
        worker (workers/handoff.py)."""
        self._remove(session_id)

    def adopt(self, session: FetchSession) -> bool:
        """A session that came with its connection from another worker
        (workers/handoff.py): kept under its id, at its epoch, when the id is free here
        and the cache has room for it by the rules a new session follows (ids are unique
        per worker, `id_offset`: taken only if workers disagree on their ids); False:
        not kept (the client's next incremental fetch is answered
        FETCH_SESSION_ID_NOT_FOUND and it starts a new session, as after an eviction)."""
        if self.max_sessions <= 0 or session.session_id in self.sessions:
            return False
        now = self._now()
        size = self._room(len(session.partitions), session.privileged, now)
        if size is None:
            return False
        session.size_bytes = size
        self.bytes += size
        self._touch(session, now)
        return True

    def _touch(self, session: FetchSession, now: int) -> None:
        session.last_used_ms = now
        old = now - session.creation_ms > self.eviction_ms
        session.evictable_by_all = old
        session.evictable_by_privileged = old or not session.privileged
        self.sessions[session.session_id] = session
        self.sessions.move_to_end(session.session_id)

    def __len__(self) -> int:
        return len(self.sessions)
