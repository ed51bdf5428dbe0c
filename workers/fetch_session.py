"""Incremental fetch sessions (KIP-227, seed 000 §6.1).

A consumer or follower that fetches many partitions sends the full list once; the
broker keeps it in a session and later requests name only what changed (new fetch
offsets, partitions added) and what to forget. Responses of an incremental fetch carry
only partitions with something to say: records, an error, or a changed high
watermark / last stable offset / log start offset.

Request fields -> meaning (Fetch v7+):

    session_id == 0, epoch == 0   full fetch, create a session (id returned)
    session_id == N, epoch == 0   close session N, full fetch, create a new one
    session_id == *, epoch == -1  full fetch without a session (closes N if given)
    session_id == N, epoch == E>0 incremental on session N, which must be at epoch E

Errors: FETCH_SESSION_ID_NOT_FOUND (70) for an unknown id, INVALID_FETCH_SESSION_EPOCH
(71) for a wrong epoch; both as the top-level error of an otherwise empty response.

The cache is per worker (the front of the connection keeps the session), bounded by
`max.incremental.fetch.session.cache.slots`, least recently used evicted first.
"""
from __future__ import annotations

import collections
import random
from dataclasses import dataclass, field

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


@dataclass
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
                     log_start: int, has_records: bool) -> bool:
        changed = (has_records or error_code != 0 or high_watermark != self.last_high_watermark
                   or lso != self.last_stable_offset or log_start != self.last_log_start_offset)
        self.last_high_watermark = high_watermark
        self.last_stable_offset = lso
        self.last_log_start_offset = log_start
        return changed


@dataclass
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: dict = field(default_factory=dict)  # (topic, partition) -> CachedPartition
    last_used_ms: int = 0


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
                log_start: int, has_records: bool) -> bool:
        respond = cp.must_respond(error_code, high_watermark, lso, log_start, has_records)
        return respond if self.incremental else True


class FetchSessionCache:
    def __init__(self, max_sessions: int = 1000, clock=None):
        self.max_sessions = max_sessions
        self.clock = clock
        self.sessions: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()

    def _new_id(self) -> int:
        while True:
            sid = random.randint(1, 2**31 - 1)
            if sid not in self.sessions:
                return sid

    def new_context(self, session_id: int, epoch: int, requested: list[CachedPartition],
                    forgotten: list[tuple[str, int]], is_follower: bool = False) -> FetchContext:
        if epoch == FINAL_EPOCH or (epoch == INITIAL_EPOCH and session_id != 0):
            self.sessions.pop(session_id, None)
        if epoch == FINAL_EPOCH:
            return FetchContext(requested, None, incremental=False)
        if epoch == INITIAL_EPOCH:
            session = None
            if self.max_sessions > 0 and requested:
                while len(self.sessions) >= self.max_sessions:
                    self.sessions.popitem(last=False)
                session = FetchSession(self._new_id(), 1)
                for cp in requested:
                    session.partitions[(cp.topic, cp.partition)] = cp
                self._touch(session)
            return FetchContext(requested, session, incremental=False)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext([], None, incremental=True, error_code=70)
        if session.epoch != epoch:
            return FetchContext([], None, incremental=True, error_code=71)
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
        session.epoch += 1
        self._touch(session)
        return FetchContext(list(session.partitions.values()), session, incremental=True)

    def _touch(self, session: FetchSession) -> None:
        session.last_used_ms = self.clock() if self.clock else 0
        self.sessions[session.session_id] = session
        self.sessions.move_to_end(session.session_id)

    def __len__(self) -> int:
        return len(self.sessions)
