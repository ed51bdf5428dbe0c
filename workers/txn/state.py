"""TransactionMetadata and its state machine: pure values, no I/O, clocks passed in.

One TransactionMetadata per transactional id, owned by the worker that owns the
`__transaction_state` partition `abs(javaStringHashCode(transactional_id)) % n`
(`partition_for`). States and transitions are Kafka's (TransactionState /
TransactionMetadata.scala)::

    Empty             <- Empty, CompleteCommit, CompleteAbort        (InitProducerId)
    Ongoing           <- Ongoing, Empty, CompleteCommit, CompleteAbort  (AddPartitions/Offsets)
    PrepareCommit     <- Ongoing                                     (EndTxn commit)
    PrepareAbort      <- Ongoing, PrepareEpochFence                  (EndTxn abort, fencing, timeout)
    CompleteCommit    <- PrepareCommit                               (markers all written)
    CompleteAbort     <- PrepareAbort
    Dead              <- Empty, CompleteCommit, CompleteAbort        (transactional.id expiry)
    PrepareEpochFence <- Ongoing         (in memory only: a new InitProducerId / timeout
                                          bumps the epoch, then aborts with it)

A change is two steps, as in Kafka: `prepare_*` checks the transition and returns a
`TxnTransit` (the next value) while `pending_state` marks the metadata busy (other
requests get CONCURRENT_TRANSACTIONS); once the record is in the log, `complete(transit)`
applies it; `abort_pending()` forgets it when the append failed.
"""
from __future__ import annotations

from typing import NamedTuple

from workers.groups.partitioner import coordinator_partition
from workers.txn.records import TxnLogValue

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, \
    PREPARE_EPOCH_FENCE = range(8)

NAMES = {EMPTY: "Empty", ONGOING: "Ongoing", PREPARE_COMMIT: "PrepareCommit",
         PREPARE_ABORT: "PrepareAbort", COMPLETE_COMMIT: "CompleteCommit",
         COMPLETE_ABORT: "CompleteAbort", DEAD: "Dead", PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
BY_NAME = {v: k for k, v in NAMES.items()}

VALID_PREVIOUS = {
    EMPTY: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    ONGOING: {ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    PREPARE_COMMIT: {ONGOING},
    PREPARE_ABORT: {ONGOING, PREPARE_EPOCH_FENCE},
    COMPLETE_COMMIT: {PREPARE_COMMIT},
    COMPLETE_ABORT: {PREPARE_ABORT},
    DEAD: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    PREPARE_EPOCH_FENCE: {ONGOING},
}

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767


def partition_for(transactional_id: str, num_partitions: int) -> int:
    return coordinator_partition(transactional_id, num_partitions)


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch free for fencing: 32766 and up are exhausted."""
    return epoch >= MAX_EPOCH - 1


class IllegalTransition(Exception):
    pass


class TxnTransit(NamedTuple):
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: int
    partitions: frozenset
    start_ms: int
    last_update_ms: int

    def to_value(self) -> TxnLogValue:
        by_topic: dict[str, list[int]] = {}
        if self.state not in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD):
            for t, p in self.partitions:
                by_topic.setdefault(t, []).append(p)
        return TxnLogValue(self.producer_id, self.producer_epoch, self.txn_timeout_ms,
                           self.state, {t: sorted(ps) for t, ps in by_topic.items()},
                           self.last_update_ms, self.start_ms,
                           previous_producer_id=self.last_producer_id)


class TransactionMetadata:
    __slots__ = ("transactional_id", "producer_id", "last_producer_id", "producer_epoch",
                 "last_producer_epoch", "txn_timeout_ms", "state", "partitions", "start_ms",
                 "last_update_ms", "pending_state", "fenced_epoch_backup")

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 txn_timeout_ms: int, state: int = EMPTY, partitions=(), start_ms: int = -1,
                 last_update_ms: int = -1, last_producer_id: int = NO_PRODUCER_ID,
                 last_producer_epoch: int = NO_PRODUCER_EPOCH):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.last_producer_id = last_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = state
        self.partitions: set = set(partitions)
        self.start_ms = start_ms
        self.last_update_ms = last_update_ms
        self.pending_state: int | None = None
        self.fenced_epoch_backup = None

    @classmethod
    def from_value(cls, tid: str, v: TxnLogValue) -> "TransactionMetadata":
        parts = {(t, p) for t, ps in (v.partitions or {}).items() for p in ps}
        return cls(tid, v.producer_id, v.producer_epoch, v.txn_timeout_ms, v.state, parts,
                   v.start_ms, v.last_update_ms, last_producer_id=v.previous_producer_id)

    def __repr__(self):
        return (f"TransactionMetadata({self.transactional_id!r}, pid={self.producer_id}, "
                f"epoch={self.producer_epoch}, state={NAMES[self.state]}, "
                f"pending={NAMES.get(self.pending_state)}, partitions={sorted(self.partitions)})")

    @property
    def pending(self) -> bool:
        return self.pending_state is not None

    def topic_partitions(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for t, p in sorted(self.partitions):
            out.setdefault(t, []).append(p)
        return out

    # ------------------------------------------------------------ transitions
    def _prepare(self, state: int, *, producer_id=None, last_producer_id=None, epoch=None,
                 last_epoch=None, timeout=None, partitions=None, start_ms=None,
                 now: int) -> TxnTransit:
        if self.pending_state is not None and self.pending_state != PREPARE_EPOCH_FENCE:
            raise IllegalTransition(f"{self.transactional_id}: {NAMES[self.pending_state]} "
                                    f"is pending")
        current = self.state if self.pending_state is None else self.pending_state
        if current not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {NAMES[current]} -> {NAMES[state]}")
        self.pending_state = state
        return TxnTransit(
            self.producer_id if producer_id is None else producer_id,
            self.last_producer_id if last_producer_id is None else last_producer_id,
            self.producer_epoch if epoch is None else epoch,
            self.last_producer_epoch if last_epoch is None else last_epoch,
            self.txn_timeout_ms if timeout is None else timeout,
            state, frozenset(self.partitions if partitions is None else partitions),
            self.start_ms if start_ms is None else start_ms, now)

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None,
                                now: int) -> tuple[int, TxnTransit | None]:
        """InitProducerId on an idle id: epoch + 1. With an expected epoch (KIP-360):
        the current one bumps, the previous one (a retry) keeps it, else PRODUCER_FENCED.
        Returns (error code, transit)."""
        if is_epoch_exhausted(self.producer_epoch):
            raise IllegalTransition("epoch exhausted: rotate the producer id")
        bumped = self.producer_epoch + 1
        if expected_epoch is None or expected_epoch < 0:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return 90, None  # PRODUCER_FENCED
        return 0, self._prepare(EMPTY, epoch=epoch, last_epoch=last, timeout=timeout_ms,
                                partitions=(), start_ms=-1, now=now)

    def prepare_rotation(self, new_producer_id: int, timeout_ms: int, now: int,
                         record_last_epoch: bool) -> TxnTransit:
        """Epoch exhausted (or a brand new id): a new producer id at epoch 0."""
        return self._prepare(EMPTY, producer_id=new_producer_id,
                             last_producer_id=self.producer_id, epoch=0,
                             last_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             timeout=timeout_ms, partitions=(), start_ms=-1, now=now)

    def fence_epoch(self) -> None:
        """PrepareEpochFence: bump the epoch in memory (not past the last one) so that the
        abort that follows writes markers that fence the current producer."""
        if self.state != ONGOING or self.pending_state is not None:
            raise IllegalTransition(f"fencing {self!r}")
        self.fenced_epoch_backup = (self.producer_epoch, self.last_producer_epoch)
        if self.producer_epoch < MAX_EPOCH:
            self.producer_epoch += 1
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        self.pending_state = PREPARE_EPOCH_FENCE

    def undo_fence(self) -> None:
        if self.fenced_epoch_backup is not None:
            self.producer_epoch, self.last_producer_epoch = self.fenced_epoch_backup
            self.fenced_epoch_backup = None
        if self.pending_state == PREPARE_EPOCH_FENCE:
            self.pending_state = None

    def prepare_add_partitions(self, added, now: int) -> TxnTransit:
        start = now if self.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) else self.start_ms
        return self._prepare(ONGOING, partitions=self.partitions | set(added),
                             start_ms=start, now=now)

    def prepare_abort_or_commit(self, commit: bool, now: int) -> TxnTransit:
        return self._prepare(PREPARE_COMMIT if commit else PREPARE_ABORT, now=now)

    def prepare_complete(self, now: int) -> TxnTransit:
        state = COMPLETE_COMMIT if self.state == PREPARE_COMMIT else COMPLETE_ABORT
        return self._prepare(state, partitions=(), now=now)

    def prepare_dead(self, now: int) -> TxnTransit:
        return self._prepare(DEAD, partitions=(), now=now)

    def complete(self, t: TxnTransit) -> None:
        if self.pending_state != t.state:
            raise IllegalTransition(f"completing {NAMES[t.state]} while "
                                    f"{NAMES.get(self.pending_state)} is pending")
        self.producer_id = t.producer_id
        self.last_producer_id = t.last_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.txn_timeout_ms = t.txn_timeout_ms
        self.state = t.state
        self.partitions = set(t.partitions)
        self.start_ms = t.start_ms
        self.last_update_ms = t.last_update_ms
        self.pending_state = None
        self.fenced_epoch_backup = None

    def abort_pending(self) -> None:
        if self.fenced_epoch_backup is not None:
            self.undo_fence()
        self.pending_state = None
