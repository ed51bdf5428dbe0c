"""The transaction coordinator of one worker: `broker.transactions` (KIP-98, KIP-360, KIP-890 part 1).

Ownership (ARCHITECTURE §1): the coordinator of transactional id T is the worker that
owns partition `abs(javaStringHashCode(T)) % transaction.state.log.num.partitions` of
the compacted internal topic `__transaction_state` on the broker that leads it. That
worker keeps, per owned partition, a `TxnPartitionState`: the TransactionMetadata of
every id hashing there (workers/txn/state.py), loaded by replaying the partition when
the worker becomes its owner (`became_coordinator`; requests meanwhile answer
COORDINATOR_LOAD_IN_PROGRESS) and dropped when it stops (`resigned_coordinator`; later
requests answer NOT_COORDINATOR). The coordinator epoch is the partition's leader
epoch; it goes into every WriteTxnMarkers the coordinator sends.

Every state change is persisted first: one record (workers/txn/records.py: key
transactional id, value TransactionLogValue v1) appended to the partition with acks -1,
committed when the high watermark covers it (workers/coordinator_log.py, shared with the
group coordinator: refused when the partition is not led here or its ISR is below
min.insync.replicas). Append failures map to Kafka's coordinator errors
(NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, UNKNOWN_SERVER_ERROR).

EndTxn: PrepareCommit/PrepareAbort is written, the client is answered, then the
markers go to every partition of the transaction (workers/txn/markers.py): partitions of this
worker through `workers.handlers.write_txn_markers.apply_markers` in process, those of
other workers of this broker as WriteTxnMarkers over the worker mesh (router.forward),
those led by other brokers as WriteTxnMarkers requests on a broker connection
(workers/txn/channel.py); retriable errors are retried with backoff while this worker
is still the coordinator; then CompleteCommit/CompleteAbort is written. A coordinator
that loads a partition resumes the markers of every transaction left in Prepare*.
Deviation: an AddPartitionsToTxn/AddOffsetsToTxn/InitProducerId that arrives while the
previous transaction's markers are still being written waits for them (at most
COMPLETION_WAIT_MS) instead of answering CONCURRENT_TRANSACTIONS at once: the answer a
retry would get, without the client's retry backoff.

Timers (the worker's timing wheel, `LoopTimer.schedule`): every
`transaction.abort.timed.out.transaction.cleanup.interval.ms` the Ongoing transactions
older than their timeout are fenced (epoch bump) and aborted; every
`transaction.remove.expired.transaction.cleanup.interval.ms` the ids idle (Empty or
Complete*) longer than `transactional.id.expiration.ms` are removed (tombstone).

KIP-890 part 1: `verify_partitions` answers AddPartitionsToTxn v4 verifyOnly; the
produce path of the partition owner calls `broker.txn_verifier` (workers/txn/verifier.py)
for a transactional batch whose producer has no open transaction on that partition yet,
which asks the coordinator (in process, over the mesh, or over a broker connection).
KIP-890 part 2 (an epoch bump per transaction) is not served: workers/txn/__init__.py.

Error codes are Kafka's newest (PRODUCER_FENCED for a fenced epoch); the handlers turn
them into what the request version knows (workers/handlers/_txn.py `for_version`).
"""
from __future__ import annotations

import asyncio
import logging

from mpbroker.metadata.model import OFFSETS_TOPIC
from mpbroker.metadata.model import TRANSACTION_STATE_TOPIC as TXN_TOPIC
from mpbroker.protocol.errors import ErrorCode
from storage.batch import BatchBuilder
from workers.coordinator_log import append_committed_async, load_with_backoff, replay
from workers.txn import records as rec
from workers.txn.config import TxnConfig
from workers.txn.markers import MarkerSender
from workers.txn.state import (
    BY_NAME, COMPLETE_ABORT, COMPLETE_COMMIT, DEAD, EMPTY, NAMES, NO_PRODUCER_EPOCH, ONGOING,
    PREPARE_ABORT, PREPARE_COMMIT, PREPARE_EPOCH_FENCE, IllegalTransition, TransactionMetadata,
    is_epoch_exhausted, partition_for)

log = logging.getLogger(__name__)

MARKER_RETRY_MAX_MS = 1000
COMPLETION_WAIT_MS = 200

# Append errors -> what the coordinator answers (Kafka's TransactionStateManager).
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
# Marker errors that end the attempt for a partition (the others are retried).
_MARKER_FATAL = (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                 ErrorCode.INVALID_REQUEST, ErrorCode.CORRUPT_MESSAGE)


class TxnPartitionState:
    """What one worker knows of one owned `__transaction_state` partition."""

    def __init__(self, partition):
        self.partition = partition
        self.index = partition.index
        self.coordinator_epoch = partition.leader_epoch
        self.txns: dict[str, TransactionMetadata] = {}
        self.loading = True
        self.active = True
        self.load_task: asyncio.Task | None = None  # the replay (became_coordinator)


class TransactionService:
    def __init__(self, broker):
        self.broker = broker
        self.states: dict[int, TxnPartitionState] = {}
        self.markers = MarkerSender(broker)
        self._tasks: set[asyncio.Task] = set()
        self._completing: dict[TransactionMetadata, asyncio.Future] = {}
        self._timers = []
        self._closed = False
        self.config = TxnConfig.from_config(broker.config)
        self._arm(self.config.abort_interval_ms, self.abort_timed_out_transactions)
        self._arm(self.config.remove_interval_ms, self.remove_expired_transactional_ids)

    # ------------------------------------------------------------ plumbing
    @property
    def num_partitions(self) -> int:
        md = self.broker.metadata
        t = md.topics.get(TXN_TOPIC) if md is not None else None
        if t is not None and t.partitions:
            return t.num_partitions
        return int(self.broker.config["transaction.state.log.num.partitions"])

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def _arm(self, interval_ms: int, fn) -> None:
        lt = self.broker.loop_timer
        if lt is None or self._closed:
            return

        def fire():
            if self._closed:
                return
            try:
                fn()
            except Exception:
                log.exception("transaction coordinator timer %s", fn.__name__)
            self._arm(interval_ms, fn)
        self._timers.append(lt.schedule(max(1, interval_ms), fire))
        if len(self._timers) > 8:
            self._timers = self._timers[-4:]

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t):
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("transaction coordinator task failed", exc_info=t.exception())
        task.add_done_callback(done)
        return task

    def _now(self) -> int:
        return self.broker.clock()

    def lookup(self, transactional_id: str):
        """(TxnPartitionState, error code) for the id's partition on this worker."""
        md = self.broker.metadata
        if md is None or TXN_TOPIC not in md.topics:
            return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
        ps = self.states.get(self.partition_for(transactional_id))
        if ps is None or not ps.active:
            return None, ErrorCode.NOT_COORDINATOR
        if ps.loading:
            return None, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ps, ErrorCode.NONE

    def _lookup_request(self, tid: str):
        """(TxnPartitionState, its TransactionMetadata of `tid` or None, error code) for a
        client request naming `tid` (INVALID_REQUEST without one)."""
        if not tid:
            return None, None, ErrorCode.INVALID_REQUEST
        ps, code = self.lookup(tid)
        return ps, (ps.txns.get(tid) if ps is not None else None), code

    def _current(self, ps: TxnPartitionState) -> bool:
        return ps.active and self.states.get(ps.index) is ps and not ps.partition.closed

    # ------------------------------------------------------------ life cycle
    def became_coordinator(self, partition) -> None:
        """Load the partition in the background (`_load_and_resume`); its ids answer
        COORDINATOR_LOAD_IN_PROGRESS until the state is complete."""
        old = self.states.pop(partition.index, None)
        if old is not None:
            self._drop(old)
        ps = TxnPartitionState(partition)
        self.states[partition.index] = ps
        ps.load_task = self._spawn(self._load_and_resume(ps))

    def resigned_coordinator(self, partition) -> None:
        ps = self.states.pop(partition.index, None)
        if ps is not None:
            self._drop(ps)

    @staticmethod
    def _drop(ps: TxnPartitionState) -> None:
        ps.active = False
        if ps.load_task is not None:
            ps.load_task.cancel()
        ps.txns.clear()

    def shutdown(self) -> None:
        self._closed = True
        for t in self._timers:
            try:
                t.cancel()
            except Exception:
                pass
        for task in list(self._tasks):
            task.cancel()
        for ps in self.states.values():
            ps.active = False
        self.states.clear()
        self.markers.close()

    async def _load_and_resume(self, ps: TxnPartitionState) -> None:
        """Replay the partition (retried after a backoff while it is still ours: the
        state is never served half-loaded), then finish the transactions the previous
        coordinator left in Prepare*. Cancelled when the partition is lost."""
        what = f"transaction state of {TXN_TOPIC}-{ps.index}"
        txns = await load_with_backoff(lambda: self._load(ps), lambda: self._current(ps), what)
        if txns is None or not self._current(ps):
            return
        ps.txns = txns
        ps.loading = False
        # Transactions left half-way: finish what the previous coordinator decided.
        for meta in txns.values():
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                self._spawn(self._complete_transaction(ps, meta, meta.state == PREPARE_COMMIT))

    async def _load(self, ps: TxnPartitionState) -> dict[str, TransactionMetadata]:
        """The partition's transactions (workers/coordinator_log.py `replay`), read in
        chunks of `transaction.state.log.load.buffer.size` bytes."""
        txns: dict[str, TransactionMetadata] = {}

        def on_batch(batch):
            if not batch.is_control:
                self._load_batch(ps, batch, txns)
        await replay(ps.partition.log, self.config.load_buffer_bytes, on_batch, f"{TXN_TOPIC}-{ps.index}",
                     lambda: self._current(ps))
        return txns

    @staticmethod
    def _load_batch(ps: TxnPartitionState, batch, txns: dict) -> None:
        for r in batch.records():
            if r.key is None:
                continue
            try:
                tid = rec.decode_key(r.key)
                if r.value is None:
                    txns.pop(tid, None)
                    continue
                v = rec.decode_value(r.value)
            except rec.RecordFormatError as e:
                log.warning("%s-%d offset %d: skipping bad record: %s",
                            TXN_TOPIC, ps.index, r.offset, e)
                continue
            if v.state == DEAD:
                txns.pop(tid, None)
            else:
                txns[tid] = TransactionMetadata.from_value(tid, v)

    # ------------------------------------------------------------ the log
    async def _write(self, ps: TxnPartitionState, meta: TransactionMetadata, transit) -> int:
        """Persist `transit` (None: a tombstone) for `meta`; 0 once committed."""
        if not self._current(ps):
            return ErrorCode.NOT_COORDINATOR
        if ps.coordinator_epoch != ps.partition.leader_epoch:
            return ErrorCode.NOT_COORDINATOR
        value = None if transit is None else rec.encode_value(transit.to_value())
        data = BatchBuilder(clock=self._now).append(rec.encode_key(meta.transactional_id),
                                                    value).build()
        code = await append_committed_async(self.broker, ps.partition, data,
                                            required_acks=-1, timeout_ms=self.config.append_timeout_ms)
        if code:
            log.warning("appending to %s-%d failed: error %d", TXN_TOPIC, ps.index, code)
            return _APPEND_ERRORS.get(code, ErrorCode.UNKNOWN_SERVER_ERROR)
        if not self._current(ps):
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    async def _transition(self, ps, meta, transit) -> int:
        code = await self._write(ps, meta, transit)
        if code:
            meta.abort_pending()
        else:
            meta.complete(transit)
        return code

    # ------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, ctx, req) -> dict:
        resp = {"throttle_time_ms": 0, "error_code": 0, "producer_id": -1, "producer_epoch": -1}
        code, pid, epoch = await self._init_producer_id(ctx.api_version, req)
        resp["error_code"] = code
        if not code:
            resp["producer_id"], resp["producer_epoch"] = pid, epoch
        return resp

    async def _init_producer_id(self, version: int, req) -> tuple[int, int, int]:
        tid = req["transactional_id"]
        if tid == "":
            return ErrorCode.INVALID_REQUEST, -1, -1
        timeout = req.get("transaction_timeout_ms", 0)
        if timeout <= 0 or timeout > self.config.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        expected = None
        if version >= 3 and req.get("producer_id", -1) != -1:
            expected = (req["producer_id"], req.get("producer_epoch", -1))
        ps, code = self.lookup(tid)
        if code:
            return code, -1, -1
        meta = ps.txns.get(tid)
        if meta is None:
            new_pid = await self.broker.next_producer_id()
            ps, code = self.lookup(tid)
            if code:
                return code, -1, -1
            meta = ps.txns.get(tid)
            if meta is None:
                meta = TransactionMetadata(tid, new_pid, NO_PRODUCER_EPOCH, timeout, EMPTY,
                                           last_update_ms=self._now())
                ps.txns[tid] = meta
        if expected is not None and not _valid_producer_id(meta, expected):
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT) and await self._await_completion(meta):
            return await self._init_producer_id(version, req)
        if meta.pending or meta.state in (PREPARE_COMMIT, PREPARE_ABORT, DEAD,
                                          PREPARE_EPOCH_FENCE):
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if meta.state == ONGOING:
            # Fence the current producer: bump the epoch and abort what it left open; the
            # client retries (CONCURRENT_TRANSACTIONS) and then gets a second bump.
            meta.fence_epoch()
            code = await self._end_transaction(ps, meta, meta.producer_id, meta.producer_epoch,
                                               False, from_client=False)
            return (code or ErrorCode.CONCURRENT_TRANSACTIONS), -1, -1
        now = self._now()
        if is_epoch_exhausted(meta.producer_epoch) and (
                expected is None or expected[1] == meta.producer_epoch):
            new_pid = await self.broker.next_producer_id()
            if ps.txns.get(tid) is not meta or not self._current(ps):
                return ErrorCode.NOT_COORDINATOR, -1, -1
            if meta.pending or meta.state not in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            transit = meta.prepare_rotation(new_pid, timeout, now, expected is not None)
        else:
            code, transit = meta.prepare_increment_epoch(
                timeout, expected[1] if expected is not None else None, now)
            if code:
                return code, -1, -1
        code = await self._transition(ps, meta, transit)
        if code:
            return code, -1, -1
        return ErrorCode.NONE, meta.producer_id, meta.producer_epoch

    # ------------------------------------------------------------ AddPartitionsToTxn
    def _check_producer(self, meta, producer_id: int, producer_epoch: int) -> int:
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        return ErrorCode.NONE

    async def add_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]]) -> int:
        """The client path (v0-v3, and v4+ without verifyOnly): one error for all."""
        ps, meta, code = self._lookup_request(tid)
        if code:
            return code
        code = self._check_producer(meta, producer_id, producer_epoch)
        if code:
            return code
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT) and await self._await_completion(meta):
            return await self.add_partitions(tid, producer_id, producer_epoch, partitions)
        if meta.pending or meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if meta.state == ONGOING and set(partitions) <= meta.partitions:
            return ErrorCode.NONE
        try:
            transit = meta.prepare_add_partitions(partitions, self._now())
        except IllegalTransition:
            return ErrorCode.INVALID_TXN_STATE
        return await self._transition(ps, meta, transit)

    def verify_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]]) -> dict:
        """AddPartitionsToTxn v4 verifyOnly (KIP-890): {(topic, p): error code}."""
        ps, code = self.lookup(tid) if tid else (None, ErrorCode.INVALID_REQUEST)
        if not code:
            meta = ps.txns.get(tid)
            code = self._check_producer(meta, producer_id, producer_epoch)
            if not code and meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                code = ErrorCode.CONCURRENT_TRANSACTIONS
        if code:
            return {tp: code for tp in partitions}
        ongoing = meta.state == ONGOING
        return {tp: ErrorCode.NONE if ongoing and tp in meta.partitions else ErrorCode.INVALID_TXN_STATE
                for tp in partitions}

    # ------------------------------------------------------------ AddOffsetsToTxn
    async def add_offsets(self, tid: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> int:
        if group_id is None or group_id == "":
            return ErrorCode.INVALID_GROUP_ID
        if OFFSETS_TOPIC not in self.broker.metadata.topics:
            await self.broker.controller.ensure_internal_topic(OFFSETS_TOPIC)
        groups = self.broker.groups
        if groups is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return await self.add_partitions(tid, producer_id, producer_epoch,
                                         [(OFFSETS_TOPIC, groups.partition_for(group_id))])

    # ------------------------------------------------------------ EndTxn
    async def end_txn(self, tid: str, producer_id: int, producer_epoch: int, commit: bool) -> int:
        ps, meta, code = self._lookup_request(tid)
        if code:
            return code
        if meta is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        return await self._end_transaction(ps, meta, producer_id, producer_epoch, commit,
                                           from_client=True)

    async def _end_transaction(self, ps, meta, producer_id, producer_epoch, commit: bool,
                               from_client: bool) -> int:
        if meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if from_client and meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        fencing = meta.pending_state == PREPARE_EPOCH_FENCE
        if meta.pending and not (fencing and not from_client):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = meta.state
        if state == ONGOING:
            try:
                transit = meta.prepare_abort_or_commit(commit, self._now())
            except IllegalTransition:
                meta.abort_pending()
                return ErrorCode.INVALID_TXN_STATE
        elif state == COMPLETE_COMMIT:
            return ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE
        elif state == COMPLETE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.NONE
        elif state == PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        elif state == PREPARE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS
        else:
            return ErrorCode.INVALID_TXN_STATE
        code = await self._transition(ps, meta, transit)
        if code:
            return code
        self._spawn(self._complete_transaction(ps, meta, commit))
        return ErrorCode.NONE

    async def _await_completion(self, meta, wait_ms: int = COMPLETION_WAIT_MS) -> bool:
        """Wait (bounded) for the markers + Complete* of `meta`'s decided transaction.
        True when it completed in time (the caller re-runs its checks)."""
        fut = self._completing.get(meta)
        if fut is None:
            return False
        try:
            await asyncio.wait_for(asyncio.shield(fut), wait_ms / 1000)
        except asyncio.TimeoutError:
            return False
        return True

    async def _complete_transaction(self, ps, meta, commit: bool) -> None:
        if meta in self._completing:
            return
        fut = self._completing[meta] = asyncio.get_running_loop().create_future()
        try:
            await self._send_markers_and_complete(ps, meta, commit)
        finally:
            del self._completing[meta]
            fut.set_result(None)

    async def _send_markers_and_complete(self, ps, meta, commit: bool) -> None:
        """Markers to every partition, then Complete* (retried while we coordinate)."""
        pid, epoch = meta.producer_id, meta.producer_epoch
        remaining = set(meta.partitions)
        delay = 0.01
        while remaining:
            if not self._current(ps) or ps.txns.get(meta.transactional_id) is not meta:
                return
            results = await self.markers.write(pid, epoch, commit, ps.coordinator_epoch,
                                               sorted(remaining))
            for tp, code in results.items():
                if code == ErrorCode.NONE:
                    remaining.discard(tp)
                elif code in _MARKER_FATAL or (code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                                               and not self._partition_exists(*tp)):
                    log.warning("transaction %s: marker for %s-%d failed (%s), giving up "
                                "on that partition", meta.transactional_id, tp[0], tp[1], code)
                    remaining.discard(tp)
            if remaining:
                await asyncio.sleep(delay)
                delay = min(delay * 2, MARKER_RETRY_MAX_MS / 1000)
        delay = 0.01
        while self._current(ps) and ps.txns.get(meta.transactional_id) is meta:
            if meta.state not in (PREPARE_COMMIT, PREPARE_ABORT):
                return
            if meta.pending:
                await asyncio.sleep(delay)
                continue
            transit = meta.prepare_complete(self._now())
            code = await self._transition(ps, meta, transit)
            if code in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR):
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, MARKER_RETRY_MAX_MS / 1000)

    def _partition_exists(self, topic: str, index: int) -> bool:
        t = self.broker.metadata.topics.get(topic)
        return t is not None and index in t.partitions

    # ------------------------------------------------------------ timers
    def _loaded_transactions(self):
        """(partition state, metadata) of every transaction of the loaded partitions,
        listed first (the timers' actions change them)."""
        return [(ps, meta) for ps in list(self.states.values()) if not ps.loading and ps.active
                for meta in list(ps.txns.values())]

    def abort_timed_out_transactions(self) -> int:
        """Ongoing transactions past their timeout: fence the epoch, then abort."""
        now = self._now()
        n = 0
        for ps, meta in self._loaded_transactions():
            if (meta.state == ONGOING and not meta.pending and meta.start_ms >= 0
                    and meta.start_ms + meta.txn_timeout_ms < now):
                log.info("aborting transaction %s (producer %d epoch %d): timed out "
                         "after %d ms", meta.transactional_id, meta.producer_id,
                         meta.producer_epoch, now - meta.start_ms)
                meta.fence_epoch()
                self._spawn(self._end_transaction(ps, meta, meta.producer_id,
                                                  meta.producer_epoch, False, from_client=False))
                n += 1
        return n

    def remove_expired_transactional_ids(self) -> int:
        now = self._now()
        n = 0
        for ps, meta in self._loaded_transactions():
            if (meta.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) and not meta.pending
                    and meta.last_update_ms + self.config.id_expiration_ms <= now):
                self._spawn(self._expire(ps, meta))
                n += 1
        return n

    async def _expire(self, ps, meta) -> None:
        try:
            transit = meta.prepare_dead(self._now())
        except IllegalTransition:
            return
        code = await self._write(ps, meta, None)
        if code:
            meta.abort_pending()
            return
        meta.complete(transit)
        if ps.txns.get(meta.transactional_id) is meta:
            del ps.txns[meta.transactional_id]

    # ------------------------------------------------------------ admin
    def describe(self, tid: str) -> dict:
        out = {"error_code": 0, "transactional_id": tid, "transaction_state": "",
               "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
               "producer_id": -1, "producer_epoch": -1, "topics": []}
        ps, code = self.lookup(tid) if tid else (None, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        meta = ps.txns.get(tid) if ps is not None else None
        if not code and (meta is None or meta.state == DEAD):
            code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        if code:
            out["error_code"] = code
            return out
        out.update(transaction_state=NAMES[meta.state],
                   transaction_timeout_ms=meta.txn_timeout_ms,
                   transaction_start_time_ms=meta.start_ms, producer_id=meta.producer_id,
                   producer_epoch=meta.producer_epoch,
                   topics=[{"topic": t, "partitions": ps_}
                           for t, ps_ in meta.topic_partitions().items()])
        return out

    def list_transactions(self, state_filters, pid_filters, duration_ms: int) -> dict:
        states = set()
        unknown = []
        for s in state_filters or ():
            if s in BY_NAME:
                states.add(BY_NAME[s])
            else:
                unknown.append(s)
        pids = set(pid_filters or ())
        now = self._now()
        error = ErrorCode.NONE
        out = []
        for ps in self.states.values():
            if ps.loading:
                error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                continue
            for meta in ps.txns.values():
                if meta.state == DEAD:
                    continue
                if state_filters and meta.state not in states:
                    continue
                if pids and meta.producer_id not in pids:
                    continue
                if duration_ms >= 0 and (meta.start_ms < 0 or now - meta.start_ms < duration_ms):
                    continue
                out.append({"transactional_id": meta.transactional_id,
                            "producer_id": meta.producer_id,
                            "transaction_state": NAMES[meta.state]})
        return {"throttle_time_ms": 0, "error_code": error, "unknown_state_filters": unknown,
                "transaction_states": out}


def _valid_producer_id(meta: TransactionMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360: a producer that sends its id and epoch is fenced unless the metadata is
    brand new, the id is the current one, or it is the previous one with an exhausted
    epoch (a retry of the rotation whose answer was lost)."""
    pid, epoch = expected
    return (meta.producer_epoch == NO_PRODUCER_EPOCH or pid == meta.producer_id
            or (pid == meta.last_producer_id and is_epoch_exhausted(epoch)))
