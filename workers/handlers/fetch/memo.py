"""A connection's memory of its last sessionless consumer Fetch (`FetchMemo`, kept on
`Connection.fetch_memo` by the worker serving the connection; a hand-off starts afresh).

librdkafka fetches without a session (session id 0, epoch -1): each Fetch names every
partition it reads, and a caught-up consumer's next Fetch names the same partitions
(its list rotated by one: each Fetch starts one partition further) at the same offsets,
except those it just got records from. Of the last such Fetch served whole on this
worker (`plan.serve`) the memo keeps, partition by partition: the entry (the decoded
dict), the CachedPartition made of it, the Partition its read looked up, and the
answer. It listens to the fetch purgatory's checks of those
partitions (`Purgatory.listen`): every change of a partition's offsets, LSO, log start,
leader epoch or presence is followed by a check of its key, the contract the long
poll (workers/delayed.py) and the partition states other workers' fronts read
(workers/partition_states.py) rely on. A partition not checked since its last read
would answer what it answered.

The next Fetch of the same shape (version, isolation level, the same partitions, each
once, in any order; any offsets):
* makes CachedPartitions only of the entries that differ (`recall`);
* reads only the partitions whose entry differs, whose last answer was not a caught-up
  one (no records because the offset is at the high watermark, or LSO, and no error),
  or that were checked since; the others keep their last answers (`read`), and the
  answer follows the request's order;
* parks, when it found nothing, without joining a watch list per partition (`Parked`,
  woken by the memo's listening: at `fetch.min.bytes` 1, the first check of a partition
  whose high watermark, or LSO for read_committed, moved past its answer, completing
  at the loop's next turn, after the step that checked; with a larger `min_bytes` it
  parks as any Fetch, DelayedFetch), and reads on wake-up only what was checked since.

So a caught-up long poll over many partitions costs, past decoding and encoding, what
changed, not a pass over every partition. A Fetch of another shape starts a new memo;
a session's, a follower's, one before v10, one with an unknown topic id, one of a
connection whose memo is in use (a Fetch pipelined behind a parked one) or one split
across workers is served without it (and the last drops it), and so is one that names
a partition twice. A memo no longer used stops listening (`forget`: replaced, dropped,
its Fetch failed, or its connection closed).
"""
from __future__ import annotations

import asyncio

from storage import convert
from workers.handlers.fetch.plan import (ZERO_UUID, cached_partition, replica_id,
                                         requested_partitions)
from workers.purgatory import DelayedOperation


class FetchMemo:
    """Per partition, in slots (the order of the Fetch that made the memo): `entries`
    (the request's dicts), `cps`, `results` ((cp, answer)), `looked`; `order`: the
    slots in the current request's order."""

    __slots__ = ("version", "isolation_level", "req", "topic_ids", "entries", "cps", "keys",
                 "slot", "order", "results", "looked", "stale", "purgatory", "listening",
                 "parked", "busy", "forgotten")

    def __init__(self, version: int, req: dict, cps: list, purgatory):
        # the rest is made by the first read (`_start`): a Fetch split across workers
        # drops its memo before that
        self.version = version
        self.isolation_level = req.get("isolation_level", 0)
        self.req = req
        self.cps = cps
        self.results: list | None = None    # None: not read yet
        self.looked: list = []              # the Partition (or None) each read looked up
        self.stale: set = set()             # the slots the next read reads
        self.purgatory = purgatory          # the fetch purgatory, listened to from the read
        self.listening = False
        self.parked: Parked | None = None
        self.busy = True                    # a Fetch is using it (not yet answered)
        self.forgotten = False

    def release(self, _future=None) -> None:
        """The Fetch using it is answered (a parked one's future is done)."""
        self.busy = False

    def forget(self) -> None:
        """Stop listening (the memo is no longer used); a Fetch parked on it ends
        unanswered (its connection is gone)."""
        if self.listening:
            self.purgatory.unlisten(self.keys, self)
            self.listening = False
        self.results = None
        self.forgotten = True
        if self.parked is not None:
            self.parked.force_complete()

    def discard(self, ctx) -> None:
        """Its Fetch is not served through it (split across workers, or failed): the
        connection's next Fetch starts afresh."""
        self.forget()
        self.release()
        if ctx.connection.fetch_memo is self:
            ctx.connection.fetch_memo = None

    def checked(self, key) -> None:
        """The purgatory's check of one of its partitions (Purgatory.listen)."""
        i = self.slot[key]
        self.stale.add(i)
        if self.parked is not None:
            self.parked.checked(i, key)

    def recall(self, broker, req: dict, version: int) -> list | None:
        """This request's CachedPartitions, in its order, if it names the memo's
        partitions, each once (None if not): those of unchanged entries are the
        memo's, the others made anew (and read)."""
        if (self.results is None or version != self.version
                or req.get("isolation_level", 0) != self.isolation_level):
            return None
        topics = req["topics"]
        entries = self.entries
        n = len(entries)
        if len(topics) == 1 and len(self.topic_ids) == 1:
            # librdkafka rotates its partition list from one Fetch to the next: the same
            # cycle from another start is compared in one C loop over the dicts (every
            # slot is this topic's)
            t = topics[0]
            parts = t["partitions"]
            name = self._topic(broker, t, version)
            if name is None or len(parts) != n or not n:
                return None
            k = self.slot.get((name, parts[0]["partition"]))
            if k is None:
                return None
            turned = entries[k:] + entries[:k] if k else entries
            if parts != turned:
                for j, (p, was) in enumerate(zip(parts, turned)):
                    if p != was:
                        if p["partition"] != was["partition"]:
                            return self._recall(broker, topics, version)
                        self._changed((k + j) % n, name, p)
            self.order = list(range(k, n)) + list(range(k)) if k else list(range(n))
            cps = self.cps
            return cps[k:] + cps[:k] if k else list(cps)
        return self._recall(broker, topics, version)

    def _recall(self, broker, topics: list, version: int) -> list | None:
        """`recall` of any request: partition by partition."""
        slot, entries = self.slot, self.entries
        order, changed = [], []
        for t in topics:
            name = self._topic(broker, t, version)
            if name is None:
                return None
            for p in t["partitions"]:
                i = slot.get((name, p["partition"]))
                if i is None:
                    return None
                order.append(i)
                if p != entries[i]:
                    changed.append((i, name, p))
        if len(order) != len(entries) or len(set(order)) != len(order):
            return None
        for i, name, p in changed:
            self._changed(i, name, p)
        self.order = order
        cps = self.cps
        return [cps[i] for i in order]

    def _topic(self, broker, t: dict, version: int) -> str | None:
        """The name of topic entry `t` if the memo knows it by the same id (a topic
        deleted, or made again under another id, is not the one remembered)."""
        if version >= 13:
            name = broker.topic_name_for_id(t["topic_id"])
            return name if name is not None and self.topic_ids.get(name) == t["topic_id"] \
                else None
        name = t["topic"]
        topic = broker.metadata.topics.get(name)
        known = self.topic_ids.get(name)
        return name if known is not None and known == (
            topic.topic_id if topic else ZERO_UUID) else None

    def _changed(self, i: int, name: str, p: dict) -> None:
        self.entries[i] = p
        self.cps[i] = cached_partition(name, self.topic_ids[name], p)
        self.stale.add(i)

    def read(self, plan) -> tuple[list, int, bool]:
        """`plan.read_all()` of the memo's request (`plan.fctx.partitions` are its
        CachedPartitions in `order`), reading only the stale partitions (all of them
        the first time). The results are in the request's order."""
        if self.forgotten:      # a DelayedFetch woken after its connection closed
            return plan.read_all()
        committed = self.isolation_level == 1
        if self.results is None:
            if not self._start():       # a partition named twice: not remembered
                self.forget()
                return plan.read_all()
            # listening from before the read: a check during it (a log dir that fails
            # under it closes partitions already read) makes its slot stale
            self.stale = set()
            self.purgatory.listen(self.keys, self)
            self.listening = True
            looked: list = []
            results, total, any_error = plan.read_all(looked=looked)
            # the first request's order is the slots'
            self.looked = looked
            self.results = results
            self.stale.update(i for i, (cp, data) in enumerate(results)
                              if not caught_up(cp, data, committed))
            return results, total, any_error
        slots = self.results
        total, any_error = 0, False
        if self.stale:
            todo = [i for i in self.order if i in self.stale]    # in the request's order
            stale = self.stale = set()
            cps, was = self.cps, self.looked
            looked: list = []
            fresh, total, any_error = plan.read_all([cps[i] for i in todo], looked=looked)
            slots = self.results = list(slots)
            for i, r, p in zip(todo, fresh, looked):
                slots[i] = r
                was[i] = p
                if not caught_up(r[0], r[1], committed):
                    stale.add(i)
        return [slots[i] for i in self.order], total, any_error

    def _start(self) -> bool:
        """The slots, from the Fetch that made the memo (False: it names a partition
        twice)."""
        cps = self.cps
        self.topic_ids = {cp.topic: cp.topic_id for cp in cps}
        self.entries = [p for t in self.req["topics"] for p in t["partitions"]]
        self.req = None
        self.keys = [(cp.topic, cp.partition) for cp in cps]
        self.slot = {key: i for i, key in enumerate(self.keys)}
        self.order = list(range(len(cps)))
        return len(self.slot) == len(cps)

    def looked_in_order(self) -> list:
        """The Partitions the reads looked up, in the request's order (as `read_all`'s
        `looked`: what a DelayedFetch counts from)."""
        was = self.looked
        return [was[i] for i in self.order]

    def park(self, plan, future: asyncio.Future) -> None:
        """Wait, after a read that found every partition caught up, for the first
        check that brings a partition a byte past its answer (or takes it away), or
        for `max_wait_ms`; then read and answer `future`."""
        op = self.parked = Parked(self, plan, future)
        self.purgatory.add_unwatched(op)


class Parked(DelayedOperation):
    """A memo's Fetch waiting for a byte (`fetch.min.bytes` 1) or its `max_wait_ms`,
    woken by the memo's listening, not from a watch list per partition. The bytes
    that count are DelayedFetch's: committed (the high watermark moved) for
    read_uncommitted, below an LSO that moved for read_committed."""

    recheck_after_watch = False

    def __init__(self, memo: FetchMemo, plan, future: asyncio.Future):
        super().__init__(plan.max_wait_ms)
        self.memo = memo
        self.plan = plan
        self.future = future
        self.partition = plan.broker.partition
        self.committed = plan.isolation_level == 1
        self.due = False            # completing at the loop's next turn

    def checked(self, i: int, key) -> None:
        if self.due:
            return
        p = self.partition(*key)
        answer = self.memo.results[i][1]
        if (p is None or p.closed
                or (p.last_stable_offset > answer["last_stable_offset"] if self.committed
                    else p.high_watermark != answer["high_watermark"])):
            # completed once the step that checked has run to its end: partitions it
            # changes and checks after this one (a transaction's markers, a metadata
            # update) are stale by then, and read too (Kafka too completes delayed
            # operations after the request that triggered them)
            self.due = True
            asyncio.get_running_loop().call_soon(self.force_complete)

    def try_complete(self) -> bool:
        return False        # never on a watch list: completed by `checked` or expiry

    def on_complete(self) -> None:
        memo, plan, future = self.memo, self.plan, self.future
        memo.parked = None
        self.memo = self.plan = self.future = None
        try:
            if not future.done():
                if memo.forgotten:              # its connection is gone
                    future.cancel()
                else:
                    results, _, _ = memo.read(plan)
                    future.set_result(plan.response(results))
        except Exception as e:      # the dispatcher answers the failure; the memo goes
            memo.forget()
            if not future.done():
                future.set_exception(e)
        finally:
            memo.release()


def caught_up(cp, data: dict, committed: bool) -> bool:
    """An answer a later read gives again while its partition's state is the same: no
    records because there are none past the fetch offset (not because the request's
    bytes ran out), no error. Such answers are kept and sent again as they are: nothing
    downstream changes them (quotas empty only the records of answers that have some)."""
    return (not data["records"] and not data["error_code"] and "diverging_epoch" not in data
            and cp.fetch_offset == (data["last_stable_offset"] if committed
                                    else data["high_watermark"]))


def resolve(broker, ctx, req) -> tuple[list, list, dict, FetchMemo | None]:
    """`requested_partitions` of `req`, and the connection's memo when this Fetch
    serves with it (marked in use; `plan.serve` gives it back)."""
    version = ctx.api_version
    conn = ctx.connection
    memo = getattr(conn, "fetch_memo", None)
    if memo is not None and memo.forgotten:     # its last Fetch failed
        memo = conn.fetch_memo = None
    if (conn is None or version < convert.ZSTD_MIN_FETCH_VERSION
            or req.get("session_epoch", -1) != -1 or req.get("session_id", 0) != 0
            or replica_id(req) >= 0 or (memo is not None and memo.busy)):
        return (*requested_partitions(broker, req, version), None)
    if memo is not None:
        cps = memo.recall(broker, req, version)
        if cps is not None:
            memo.busy = True
            return cps, [], {}, memo
        memo.forget()
        conn.fetch_memo = None
    requested, forgotten, unknown_ids = requested_partitions(broker, req, version)
    if unknown_ids or not requested:
        return requested, forgotten, unknown_ids, None
    memo = conn.fetch_memo = FetchMemo(version, req, requested, broker.fetch_purgatory)
    return requested, forgotten, unknown_ids, memo


def drop(ctx, memo: FetchMemo | None) -> None:
    """The Fetch that held `memo` is not served by it (split across workers)."""
    if memo is not None:
        memo.discard(ctx)
