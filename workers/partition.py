"""A partition replica owned by this worker: its log plus the replication state.

Owner: exactly one worker process (the placement map says which); only that process
calls `append`. Offsets kept here, with the invariant checked on every change:

    log_start_offset <= high_watermark <= log_end_offset

With one replica (the embedded default) the high watermark follows the log end offset
right after every append; DelayedProduce (acks=-1) still waits on the high watermark,
through the same purgatory that replication completes when followers catch up.

`bytes_appended` only grows: a DelayedFetch remembers it when it starts waiting and
counts the difference towards `fetch.min.bytes`, which avoids asking the log for byte
positions on every check.

Replication (Kafka's Partition.scala; ARCHITECTURE §5).  `replicated` is False for a
one-replica partition: then the high watermark is the log end offset after every
append, exactly the single-broker path.  A replicated leader (`is_leader`) keeps a
`ReplicaState` per follower (LEO, last caught-up time), updated by follower Fetches
(`follower_fetch`), and moves the high watermark to the minimum LEO of the
`maximal_isr` (committed ISR plus an in-flight expansion, KIP-497).  ISR changes are
proposed through `on_isr_change(partition, new_isr)` (the worker sends the controller's
`alter_partition`; `pending_isr` until `update_isr_state` / `isr_change_failed`):
expansion when a follower's LEO reaches the HW and the leader epoch's start offset,
shrink (`isr_to_shrink`, housekeeping) when a member has not caught up within
`replica.lag.time.max.ms`.  `bytes_committed` is `bytes_appended` as of the last HW
move: consumer DelayedFetches count it (they only see committed data), follower
DelayedFetches count `bytes_appended`.  A follower partition (`is_leader` False) is
only written by the replica fetcher (`append_as_follower`, `truncate` through the log,
`update_follower_high_watermark`).

Storage errors (KAFKA_STORAGE_ERROR from the log: every failed append was undone, see
storage/log.py) go to `on_storage_error(partition, error)`: a full disk (`disk_full`)
is logged once and the partition keeps answering KAFKA_STORAGE_ERROR until an append
succeeds again (then `on_storage_error(partition, None)`); anything else is a log-dir
failure.

Transactions: `last_stable_offset` is the log's LSO (min(first open transaction's first
offset, high watermark)); read_committed reads (`isolation_level=1`) stop there and
`aborted_transactions(start, upper)` lists what they must drop.  `write_txn_marker`
(leader only; called by workers/handlers/write_txn_markers.py, which then wakes the
fetch and produce purgatories) appends a COMMIT/ABORT control batch and answers a
Kafka error code.
"""
from __future__ import annotations

from mpbroker.protocol.errors import ErrorCode
from storage import errors as serr
from storage.batch import build_control_batch
from storage.log import Log
from workers import metrics

CONTROL_BATCH_SIZE = len(build_control_batch(0, 0, 0, True, 0, 0))   # 78 bytes, fixed


class ReplicaMovingError(serr.StorageError):
    """Writes are paused while the replica moves to another log dir
    (workers/handlers/alter_replica_log_dirs.py): NOT_LEADER_OR_FOLLOWER, retriable."""
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class Partition:
    def __init__(self, topic: str, index: int, topic_id: bytes, log: Log,
                 leader_epoch: int = 0, leader_id: int = -1, replicated: bool = False):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.leader_epoch = leader_epoch
        self.leader_id = leader_id
        if not replicated:
            log.update_high_watermark(log.log_end_offset)  # one replica: all of it is committed
        # replication state (see "Replication" below; defaults = one replica, leader)
        self.replicated = replicated
        self.is_leader = True
        self.local_id = leader_id
        self.replicas: tuple = ()
        self.isr: tuple = ()
        self.pending_isr: tuple | None = None     # an ISR change in flight (alter_partition)
        self.partition_epoch = 0
        self.leader_epoch_start_offset = -1
        self.followers: dict[int, ReplicaState] = {}
        self.min_isr = 1
        self.on_isr_change = None   # callable(partition, new_isr): sends alter_partition
        self.on_hw_change = None    # callable(partition): wakes the purgatories
        # callable(partition, KafkaStorageError): the worker logs a full disk once and
        # treats any other storage error as a log-dir failure (workers/worker.py)
        self.on_storage_error = None
        self.disk_full = False      # the last append failed for want of space
        self.bytes_committed = 0    # bytes_appended as of the last high watermark move
        self.bytes_appended = 0
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.closed = False
        self.moving = False         # moving to another log dir: writes answer NOT_LEADER_OR_FOLLOWER

    def _check_not_moving(self) -> None:
        if self.moving:
            raise ReplicaMovingError(f"{self.topic}-{self.index} is moving to another log dir")

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def has_ongoing_txn(self, producer_id: int) -> bool:
        return self.log.has_ongoing_txn(producer_id)

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[dict]:
        """Fetch's `aborted_transactions` for [start_offset, upper_bound_offset)."""
        return [{"producer_id": pid, "first_offset": first} for pid, first in
                self.log.collect_aborted_transactions(start_offset, upper_bound_offset)]

    def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                         coordinator_epoch: int) -> int:
        """Append a COMMIT (commit=True) or ABORT marker; a Kafka error code (0 = done).

        INVALID_PRODUCER_EPOCH (47) / TRANSACTION_COORDINATOR_FENCED (52) from the
        producer state, KAFKA_STORAGE_ERROR-like codes from the log.  The caller wakes
        the purgatories (the LSO may have moved)."""
        if not getattr(self, "is_leader", True) or self.closed or self.moving:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        try:
            info = self.log.append_control(producer_id, producer_epoch, commit,
                                           coordinator_epoch, self.leader_epoch)
        except serr.KafkaStorageError as e:
            self._storage_error(e)
            return e.code
        except serr.StorageError as e:
            return e.code
        self._appended()
        if not info.duplicate:
            self.bytes_appended += CONTROL_BATCH_SIZE     # read_uncommitted waiters see it
        self._maybe_increment_high_watermark()
        return 0

    def _storage_error(self, e: serr.KafkaStorageError) -> None:
        if self.on_storage_error is not None:
            self.on_storage_error(self, e)

    def _appended(self) -> None:
        if self.disk_full:
            self.disk_full = False
            if self.on_storage_error is not None:
                self.on_storage_error(self, None)       # serving again: logged

    def append(self, records: memoryview, validated: bool = False):
        """A client's batches (`validated`: already checked as the log checks them,
        storage/validator.py, so the log does not again)."""
        self._check_not_moving()
        try:
            info = self.log.append(records, self.leader_epoch, validate=not validated)
        except serr.KafkaStorageError as e:
            self._storage_error(e)
            raise
        self._appended()
        if not info.duplicate:
            self.bytes_appended += len(records)
            self.bytes_in += len(records)
            self.messages_in += info.record_count
        self._maybe_increment_high_watermark()
        return info

    def _maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark up if it can; True when it moved."""
        if self.replicated:
            return self._maybe_increment_replicated_hw()
        # Single replica: the ISR is {self}, so everything appended is committed.
        self.bytes_committed = self.bytes_appended
        leo = self.log.log_end_offset
        if leo > self.log.high_watermark:
            self.log.update_high_watermark(leo)
            return True
        return False

    def _check(self) -> None:
        assert self.log.log_start_offset <= self.high_watermark <= self.log.log_end_offset, (
            self.topic, self.index, self.log.log_start_offset, self.high_watermark,
            self.log.log_end_offset)

    def read(self, offset: int, max_bytes: int, isolation_level: int = 0,
             min_one_batch: bool = True):
        upper = self.high_watermark if isolation_level == 0 else self.last_stable_offset
        return self._read(offset, max_bytes, upper, min_one_batch)

    def _read(self, offset: int, max_bytes: int, max_offset, min_one_batch: bool):
        try:
            return self.log.read(offset, max_bytes, max_offset=max_offset,
                                 min_one_batch=min_one_batch)
        except serr.KafkaStorageError as e:
            self._storage_error(e)
            raise

    def leader_epoch_error(self, current_leader_epoch: int) -> int:
        """The fencing check of a request naming the leader epoch it knows (Kafka's
        Partition.checkCurrentLeaderEpoch): -1 (not given) and ours pass (NONE); an
        older one is FENCED_LEADER_EPOCH, a newer one (we have not heard of it yet)
        UNKNOWN_LEADER_EPOCH."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        return self.log.epoch_cache.epoch_for_offset(offset)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: offset -1 means the high watermark. Returns the new low watermark."""
        self._check_not_moving()
        if offset == -1:
            offset = self.high_watermark
        self.log.delete_records_before(offset)
        self._check()
        return self.log.log_start_offset

    def close(self) -> None:
        self.closed = True
        self.log.close()

    def delete(self) -> None:
        self.closed = True
        self.log.delete()

    # ------------------------------------------------------------ replication
    # Kafka's Partition.scala, leader and follower side. Called on the owner worker
    # only: by Worker._reconcile (make_leader / make_follower / update_isr_state), the
    # Fetch handler (follower_fetch, for a Fetch with replica_id >= 0), the replica
    # fetcher (append_as_follower, update_follower_high_watermark, workers/replication.py)
    # and the housekeeping loop (isr_to_shrink).

    @property
    def maximal_isr(self) -> tuple:
        """The ISR the high watermark is computed over: the committed ISR plus what an
        in-flight expansion adds (KIP-497: an in-flight shrink still counts the
        members it removes, until the controller committed it)."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    def make_leader(self, local_id: int, leader_epoch: int, replicas, isr,
                    partition_epoch: int, now_ms: int) -> bool:
        """Become (or stay, with a new epoch) the leader. A new leader epoch starts at
        the log end offset (epoch cache entry); follower states are reset (LEO unknown,
        caught up now if in the ISR). True when the high watermark moved."""
        new_epoch = leader_epoch != self.leader_epoch or not self.is_leader
        if self.is_leader and self.isr and len(isr) != len(self.isr):
            metrics.isr_changed(shrink=len(isr) < len(self.isr))     # IsrShrinks/ExpandsPerSec
        self.local_id = local_id
        self.leader_id = local_id
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.pending_isr = None
        self.partition_epoch = partition_epoch
        self.replicated = len(self.replicas) > 1
        if new_epoch or self.leader_epoch_start_offset < 0:
            self.leader_epoch = leader_epoch
            self.leader_epoch_start_offset = self.log.log_end_offset
            if self.replicated:
                self.log.epoch_cache.assign(leader_epoch, self.log.log_end_offset)
            self.followers = {r: ReplicaState(now_ms if r in self.isr else 0)
                              for r in self.replicas if r != local_id}
        else:
            for r in self.replicas:
                if r != local_id and r not in self.followers:
                    self.followers[r] = ReplicaState(0)
            for r in list(self.followers):
                if r not in self.replicas:
                    del self.followers[r]
        self.is_leader = True
        return self._maybe_increment_high_watermark()

    def make_follower(self, leader_id: int, leader_epoch: int, replicas, isr,
                      partition_epoch: int) -> bool:
        """Become a follower of `leader_id`. True when the leader or its epoch changed
        (the fetcher then truncates again before fetching)."""
        changed = self.is_leader or leader_id != self.leader_id or \
            leader_epoch != self.leader_epoch
        self.is_leader = False
        self.replicated = True
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.pending_isr = None
        self.partition_epoch = partition_epoch
        self.followers = {}
        self.leader_epoch_start_offset = -1
        return changed

    def update_isr_state(self, isr, partition_epoch: int) -> bool:
        """A committed ISR for the current leader epoch (alter_partition's answer or a
        metadata push); ignored when older than what we have. True when the high
        watermark moved."""
        if partition_epoch < self.partition_epoch:
            return False
        if self.is_leader and self.isr and len(isr) != len(self.isr):
            metrics.isr_changed(shrink=len(isr) < len(self.isr))     # IsrShrinks/ExpandsPerSec
        self.isr = tuple(isr)
        self.partition_epoch = partition_epoch
        if self.pending_isr is not None and set(self.pending_isr) == set(self.isr):
            self.pending_isr = None
        return self._maybe_increment_high_watermark()

    def isr_change_failed(self) -> None:
        """alter_partition refused or failed: back to the committed ISR (retried by
        the next follower fetch or shrink check)."""
        self.pending_isr = None

    def check_follower(self, replica_id: int) -> int:
        """Error code for a follower Fetch/OffsetForLeaderEpoch of `replica_id`."""
        if not self.is_leader or replica_id not in self.followers:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return 0

    def read_for_follower(self, offset: int, max_bytes: int, min_one_batch: bool = True):
        """A follower reads up to the log end offset, not the high watermark."""
        return self._read(offset, max_bytes, None, min_one_batch)

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int):
        """Fetch v12+ (KIP-595 style) divergence check for a follower: (epoch, end
        offset) when its log diverges from ours, None when it does not, raises
        OffsetOutOfRangeError when our epoch cache cannot tell."""
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0 or end < 0:
            raise serr.OffsetOutOfRangeError(
                f"cannot determine the end offset of epoch {last_fetched_epoch}")
        if fetch_offset < self.log.log_start_offset:
            raise serr.OffsetOutOfRangeError(f"fetch offset {fetch_offset} below log start")
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                       log_start_offset: int = -1) -> None:
        """A follower read at `fetch_offset` (its log end offset) succeeded: update its
        state (Kafka's updateFollowerFetchState; `log_start_offset` is the follower's,
        which DeleteRecords waits on), maybe expand the ISR, maybe advance the high
        watermark (then `on_hw_change`)."""
        st = self.followers.get(replica_id)
        if st is None or not self.is_leader:
            return
        st.log_start_offset = log_start_offset
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            st.last_caught_up_ms = now_ms
        elif fetch_offset >= st.last_fetch_leader_leo >= 0:
            st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
        st.last_fetch_leader_leo = leo
        st.last_fetch_ms = now_ms
        st.leo = min(fetch_offset, leo)
        if (replica_id not in self.isr and self.pending_isr is None
                and st.leo >= self.high_watermark
                and st.leo >= self.leader_epoch_start_offset):
            self._propose_isr(self.isr + (replica_id,))
        if self._maybe_increment_replicated_hw() and self.on_hw_change is not None:
            self.on_hw_change(self)

    def isr_to_shrink(self, now_ms: int, lag_max_ms: int) -> tuple | None:
        """The members of the ISR that have not caught up within `lag_max_ms`
        (replica.lag.time.max.ms); proposes the smaller ISR and returns the removed
        ones, or None when nothing is to be done (or a change is in flight)."""
        if not self.is_leader or not self.replicated or self.pending_isr is not None:
            return None
        out = tuple(r for r in self.isr if r != self.local_id and
                    now_ms - self.followers.get(r, _NEVER).last_caught_up_ms > lag_max_ms)
        if not out:
            return None
        self._propose_isr(tuple(r for r in self.isr if r not in out))
        return out

    def _propose_isr(self, new_isr: tuple) -> None:
        self.pending_isr = new_isr
        if self.on_isr_change is not None:
            self.on_isr_change(self, new_isr)

    def _maybe_increment_replicated_hw(self) -> bool:
        if not self.is_leader:
            return False
        hw = self.log.log_end_offset
        local = self.local_id
        for r in self.maximal_isr:
            if r != local:
                st = self.followers.get(r)
                leo = st.leo if st is not None else -1
                if leo < hw:
                    hw = leo
        if hw > self.log.high_watermark:
            self.log.update_high_watermark(hw)
            self.bytes_committed = self.bytes_appended
            return True
        return False

    def not_enough_replicas(self) -> bool:
        """acks=all precondition: the committed ISR is smaller than min.insync.replicas."""
        return self.is_leader and len(self.isr or (self.local_id,)) < self.min_isr

    # -- follower side
    def append_as_follower(self, records):
        """Append batches copied from the leader (their offsets and epochs kept)."""
        self._check_not_moving()
        try:
            info = self.log.append(records, -1, assign_offsets=False)
        except serr.KafkaStorageError as e:
            self._storage_error(e)
            raise
        self._appended()
        if info.first_offset >= 0:
            self.bytes_appended += len(records)
            self.bytes_in += len(records)
            self.messages_in += info.record_count
        return info

    def update_follower_high_watermark(self, leader_hw: int, leader_log_start: int) -> None:
        """Follower HW = min(leader HW, local LEO); the log start follows the leader's
        (DeleteRecords / retention on the leader) as far as our HW allows."""
        hw = min(leader_hw, self.log.log_end_offset)
        if hw > self.log.high_watermark:
            self.log.update_high_watermark(hw)
            self.bytes_committed = self.bytes_appended
        if self.log.log_start_offset < leader_log_start <= self.log.high_watermark:
            self.log.delete_records_before(leader_log_start)


class ReplicaState:
    """What the leader knows of one follower (Kafka's ReplicaState): its log end
    offset and log start offset (-1 unknown), when it was last caught up, and the
    leader's LEO/time at its previous fetch (a fetch at >= that LEO means it was caught
    up back then)."""
    __slots__ = ("leo", "log_start_offset", "last_caught_up_ms", "last_fetch_leader_leo",
                 "last_fetch_ms")

    def __init__(self, last_caught_up_ms: int):
        self.leo = -1
        self.log_start_offset = -1
        self.last_caught_up_ms = last_caught_up_ms
        self.last_fetch_leader_leo = -1
        self.last_fetch_ms = 0

    def __repr__(self):
        return (f"ReplicaState(leo={self.leo}, caught_up={self.last_caught_up_ms}, "
                f"last_fetch_leader_leo={self.last_fetch_leader_leo})")


_NEVER = ReplicaState(0)
