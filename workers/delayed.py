"""The request path's delayed operations (workers/purgatory.py's `DelayedOperation`):
what a Produce, Fetch or DeleteRecords waits for when it cannot answer at once.

* `DelayedProduce` (acks=-1, in `broker.produce_purgatory`, keyed by partition): done
  when every partition's high watermark passed the last offset appended (`satisfied`;
  the Produce handler answers at once, without an operation, when it already is). Also used by
  WriteTxnMarkers and the coordinators' internal appends (workers/coordinator_log.py).
* `DelayedFetch` (in `broker.fetch_purgatory`, keyed by partition): done when the bytes
  appended (followers) or committed (consumers) since it parked reach `min_bytes`; it
  then reads again through its plan (workers/handlers/fetch/plan.py). A check of one
  key recounts that partition only (`try_complete_key`): every change of a partition's
  counters, LSO or presence is followed by `check_and_complete` of its key.
* `DelayedDeleteRecords` (in `broker.delete_records_purgatory`): done when the low
  watermark of every partition reached the DeleteRecords target.

Each holds the asyncio future the handler returned and resolves it exactly once, in
`on_complete` (completion or expiry: the purgatory's single gate). All run on the
worker's one event loop.
"""
from __future__ import annotations

import asyncio

from mpbroker.protocol.errors import ErrorCode
from workers.purgatory import DelayedOperation


class DelayedProduce(DelayedOperation):
    """acks=-1: done when every partition's high watermark passed its last offset (or
    the partition is no longer led here: NOT_LEADER_OR_FOLLOWER); a partition whose
    maximal ISR shrank below min.insync.replicas meanwhile answers
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, one that timed out REQUEST_TIMED_OUT."""

    def __init__(self, delay_ms: int, waiting: list, response: dict, future: asyncio.Future):
        super().__init__(delay_ms)
        self.waiting = waiting  # [(partition, last_offset, result dict)]
        self.response = response
        self.future = future

    @staticmethod
    def satisfied(waiting: list) -> bool:
        """Every partition's high watermark passed its last offset, or the partition
        is no longer led here (its error is then NOT_LEADER_OR_FOLLOWER)."""
        for p, last_offset, _ in waiting:
            if p.high_watermark <= last_offset and not p.closed and p.is_leader:
                return False
        return True

    @staticmethod
    def settle(waiting: list) -> None:
        """Each partition's error code, once it is done (or timed out)."""
        for p, last_offset, result in waiting:
            if not p.is_leader or (p.closed and p.high_watermark <= last_offset):
                result["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif p.high_watermark <= last_offset:
                result["error_code"] = ErrorCode.REQUEST_TIMED_OUT
            elif p.replicated and len(p.maximal_isr) < p.min_isr:
                result["error_code"] = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    def try_complete(self) -> bool:
        if not self.satisfied(self.waiting):
            return False
        return self.force_complete()

    def on_expiration(self) -> None:
        pass  # on_complete already marked the partitions that did not make it

    def on_complete(self) -> None:
        self.settle(self.waiting)
        if not self.future.done():
            self.future.set_result(self.response)


class DelayedFetch(DelayedOperation):
    """A Fetch (or one worker's part of it) waiting for `plan.min_bytes`; on completion
    the plan reads again and `plan.response` of the reads resolves the future.

    `plan` is a FetchPlan (workers/handlers/fetch/plan.py): `broker`, `fctx.partitions`,
    `isolation_level`, `replica_id`, `min_bytes`, `max_wait_ms`, `read_all()`,
    `response(results)`, `read_again(results)`. `start` ({key: (bytes appended,
    bytes committed, LSO)}) gives the counters a partition counts from when they are
    older than now (what was read before the op could park: what arrived since wakes it
    at once); `base` is what the read found already, towards `min_bytes`. A counter
    that went back (the partition was replaced) completes the op: it reads again.

    `results`, the read the op parks right after (its counters taken with it, `start`
    None): on completion `plan.read_again(results)` keeps the answers of the
    partitions whose state is still what that read found, instead of building them
    again. Without it, everything is read again. `looked`: the Partition objects that
    read looked up (None where a partition is not led here), in `fctx.partitions`' order:
    counted from as they are now, not looked up again (`start` is then not used)."""

    recheck_after_watch = False     # try_complete only reads, and reads nothing else
    unwatch_on_complete = True      # watched on every partition, woken by one

    def __init__(self, plan, future: asyncio.Future, lookup=None, start=None, base: int = 0,
                 results=None, looked=None):
        super().__init__(plan.max_wait_ms)
        self.plan = plan
        self.future = future
        self.results = results
        # a partition absent or closed when the op was made: its first check completes it
        self.gone = False
        # (topic, index) -> what a partition counts from (a Partition here; the front
        # of a Fetch across workers also counts other workers' published state)
        self.lookup = lookup if lookup is not None else plan.broker.partition
        self.start_bytes = {}
        # read_committed: only data below the LSO counts, so bytes appended count once
        # the LSO moved (a COMMIT/ABORT marker, or non-transactional data with no open
        # transaction), not while a transaction is open.
        self.committed = plan.isolation_level == 1
        self.start_lso = {}
        # followers wait for appended bytes, consumers for committed ones (the HW moved)
        self.counter = "bytes_appended" if plan.replica_id >= 0 else "bytes_committed"
        # what each partition counted at its last check, and their sum: a check of one
        # key (`try_complete_key`) recounts that partition only
        self.counted = {}
        self.base = base
        self.accumulated = base
        partition = self.lookup
        start_bytes, start_lso, counter = self.start_bytes, self.start_lso, self.counter
        which = 0 if plan.replica_id >= 0 else 1
        # the Partitions the read before the park looked up, in order, else a lookup
        found = iter(looked) if looked is not None else None
        for cp in plan.fctx.partitions:
            key = (cp.topic, cp.partition)
            if found is not None:
                p = next(found)
            else:
                snap = start.get(key) if start else None
                if snap is not None:
                    start_bytes[key] = snap[which]
                    if self.committed:
                        start_lso[key] = snap[2]
                    continue
                p = partition(*key)
            if p is None or p.closed:
                self.gone = True
            start_bytes[key] = getattr(p, counter) if p else 0
            if self.committed:
                start_lso[key] = p.last_stable_offset if p else -1

    def _count(self, key, p) -> int:
        """What partition `p` at `key` counts towards min_bytes now."""
        if self.committed and p.last_stable_offset <= self.start_lso[key]:
            return 0
        return getattr(p, self.counter) - self.start_bytes[key]

    def try_complete(self) -> bool:
        partition = self.lookup
        min_bytes, counted, counter = self.plan.min_bytes, self.counted, self.counter
        committed, start_lso = self.committed, self.start_lso
        accumulated = self.base
        for key, start in self.start_bytes.items():
            p = partition(*key)
            if p is None or p.closed:
                return self.force_complete()
            # as _count, inline: this loop runs over every partition at each park
            if committed and p.last_stable_offset <= start_lso[key]:
                n = 0
            else:
                n = getattr(p, counter) - start
                if n < 0:
                    return self.force_complete()
            counted[key] = n
            accumulated += n
            if accumulated >= min_bytes:
                return self.force_complete()
        self.accumulated = accumulated
        return False

    def try_complete_key(self, key) -> bool:
        """`try_complete` after a change of `key` only: the other partitions count
        what they counted at their last check (every change of a partition's bytes,
        LSO or presence is followed by a check of its key), so a wake-up costs one
        partition, not every partition the fetch reads."""
        if key not in self.start_bytes:
            return self.try_complete()
        p = self.lookup(*key)
        if p is None or p.closed:
            return self.force_complete()
        n = self._count(key, p)
        if n < 0:
            return self.force_complete()
        self.accumulated += n - self.counted.get(key, 0)
        self.counted[key] = n
        if self.accumulated >= self.plan.min_bytes:
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        plan = self.plan
        if self.future is not None and not self.future.done():
            if self.results is not None:
                results, _, _ = plan.read_again(self.results)
            else:
                results, _, _ = plan.read_all()
            self.future.set_result(plan.response(results))
        # A completed op has left its watch lists and the timer (unwatch_on_complete),
        # but whoever parked it may hold it a while longer: it keeps nothing per
        # partition alive, so that thousands of such objects do not reach the
        # collector's oldest generation (workers/gc_freeze.py).
        self.start_bytes, self.start_lso, self.counted = {}, {}, {}
        self.results = None
        plan.fctx = None
        self.future = None          # its answer is the waiter's now


def low_watermark(p, alive) -> int:
    """The smallest log start offset over the leader and the followers on `alive`
    brokers (-1 while one of them has not reported it since this leadership began)."""
    lw = p.log_start_offset
    for replica_id, st in p.followers.items():
        if replica_id in alive and st.log_start_offset < lw:
            lw = st.log_start_offset
    return lw


def alive_brokers(broker):
    """The broker ids the controller's metadata lists (the live ones)."""
    md = broker.metadata
    return md.brokers if md is not None else ()


class DelayedDeleteRecords(DelayedOperation):
    """Waits until the low watermark of every partition in `waiting` reached its target.

    `waiting`: [(partition, required offset, result dict)]; each result starts as
    REQUEST_TIMED_OUT with the low watermark known when it was deleted on the leader,
    and is settled once (reached, or lost leadership)."""

    def __init__(self, delay_ms: int, broker, waiting: list, response: dict,
                 future: asyncio.Future):
        super().__init__(delay_ms)
        self.broker = broker
        self.pending = list(waiting)
        self.response = response
        self.future = future

    def try_complete(self) -> bool:
        alive = alive_brokers(self.broker)
        still = []
        for p, required, result in self.pending:
            if self.broker.partition(p.topic, p.index) is not p or p.closed or not p.is_leader:
                result.update(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, low_watermark=-1)
                continue
            lw = low_watermark(p, alive)
            if lw >= required:
                result.update(error_code=ErrorCode.NONE, low_watermark=lw)
            else:
                still.append((p, required, result))
        self.pending = still
        if still:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.response)
