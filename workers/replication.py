"""Replication in a worker: replica fetchers (follower side) and ISR changes (leader
side). Kafka's ReplicaManager / ReplicaFetcherThread / AbstractFetcherThread, seed 000
§6, KIP-101/279 (truncation by leader epoch), KIP-497 (ISR changes through the
controller).

Ownership: each worker process has one `ReplicaManager` (`broker.replication`), built
by `Worker.start`; it replicates exactly the follower partitions this worker owns by
placement (`broker.followers`). Partition state lives in `workers/partition.py`; this
module only does the I/O around it. Nothing here runs in the embedded single-broker
default (every partition has one replica, no follower, no ISR change).

Follower side.  One `ReplicaFetcher` (an asyncio task with one `KafkaConnection`) per
source broker per worker, created when the first partition led by that broker is
followed and ended when its last partition leaves. Each followed partition is in one
of two states:

* truncating (after becoming follower, a leader change, or a failed append): an
  OffsetForLeaderEpoch v4 request (replica_id = our broker id, current_leader_epoch =
  the epoch from the metadata, leader_epoch = our latest epoch) asks the leader where
  our latest epoch ends; we truncate to min(that, our end of that epoch) and ask again
  with our new latest epoch until both agree (`truncation_offset`). A log without epoch
  information, or a leader that has none, truncates to the high watermark (the pre-KIP-101
  rule).
* fetching: Fetch v12 (topic names, replica_id, last_fetched_epoch, sessionless),
  `replica.fetch.wait.max.ms` / `replica.fetch.min.bytes` / `replica.fetch.max.bytes`
  per partition / `replica.fetch.response.max.bytes` in all, timeout
  `replica.socket.timeout.ms`. Records are appended as they are (`append_as_follower`:
  offsets and epochs of the leader); follower HW = min(leader HW, our LEO); the log
  start offset follows the leader's. A response with `diverging_epoch` (the leader found
  our last fetched epoch ends earlier in its log) truncates like the OffsetForLeaderEpoch
  answer. OFFSET_OUT_OF_RANGE asks the leader's log end / start (ListOffsets v5 with
  replica_id) and truncates to its end, or restarts the log at its start.

Errors back a partition off by `replica.fetch.backoff.ms` (NOT_LEADER_OR_FOLLOWER,
FENCED/UNKNOWN_LEADER_EPOCH: the metadata push that fixes it also re-follows);
connection errors and timeouts close the connection and back the whole fetcher off.

Leader side.  `Partition.on_isr_change` -> `alter_isr`: the controller RPC
`broker.controller.alter_partition(topic, partition, leader_id, leader_epoch,
partition_epoch, new_isr) -> (error_code, PartitionState | None)`; the committed state
is applied at once (and also arrives by a metadata push); a refusal clears the pending
ISR after `replica.fetch.backoff.ms` (so a refused change is not re-sent in a loop).
`Partition.on_hw_change` -> `hw_changed`: completes the DelayedProduce and DelayedFetch
operations watching the partition. `check_isr(now)` (the worker's housekeeping, every
second) shrinks ISRs whose members lag more than `replica.lag.time.max.ms`.
"""
from __future__ import annotations

import asyncio
import logging

from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode
from storage import errors as serr

from mpbroker.security.client import inter_broker_cached
from workers.kafka_client import KafkaConnection

log = logging.getLogger(__name__)

FETCH_VERSION = 12                 # topic names, replica_id, last_fetched_epoch, diverging_epoch
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 5


def truncation_offset(log, leader_epoch: int, leader_end_offset: int) -> tuple[int, bool]:
    """Where a follower truncates after the leader answered (leader_epoch,
    leader_end_offset) for our latest epoch (OffsetForLeaderEpoch, or a Fetch's
    diverging_epoch): (offset, completed). Not completed: truncate, then ask again with
    the (smaller) latest epoch left in our cache (Kafka's getOffsetTruncationState)."""
    leo = log.log_end_offset
    if leader_end_offset < 0:
        # the leader has no epoch information: the pre-KIP-101 rule
        return min(log.high_watermark, leo), True
    if leader_epoch < 0:
        return min(leader_end_offset, leo), True
    f_epoch, f_end = log.end_offset_for_epoch(leader_epoch)
    if f_epoch < 0 or f_end < 0:
        return min(leader_end_offset, leo), True
    if f_epoch != leader_epoch:
        # we do not have the leader's epoch: cut back to the end of the largest epoch
        # we have below it and ask again
        return min(leader_end_offset, f_end), False
    return min(leader_end_offset, f_end), True


def truncate(p, offset: int) -> bool:
    """Truncate follower `p` to `offset` (no-op at or past its log end)."""
    if offset >= p.log.log_end_offset:
        return False
    log.info("truncating %s-%d from %d to %d", p.topic, p.index, p.log.log_end_offset, offset)
    return p.log.truncate_to(offset)


class FetchState:
    """One followed partition in a fetcher."""
    __slots__ = ("partition", "truncating", "ready_at_ms", "last_error")

    def __init__(self, partition):
        self.partition = partition
        self.truncating = True
        self.ready_at_ms = 0
        self.last_error = 0

    def error(self, code: int, what: str) -> None:
        """Log a partition error once per change of error code."""
        if code != self.last_error:
            p = self.partition
            log.warning("%s of %s-%d from broker %d: error %d (backing off)", what, p.topic,
                        p.index, p.leader_id, code)
        self.last_error = code

    def delay(self, now_ms: int, ms: int) -> None:
        self.ready_at_ms = now_ms + ms


class ReplicaFetcher:
    """Replicates the partitions this worker follows from one source broker."""

    def __init__(self, manager: "ReplicaManager", leader_id: int):
        self.manager = manager
        self.leader_id = leader_id
        self.parts: dict[tuple[str, int], FetchState] = {}
        self.task: asyncio.Task | None = None
        self.wakeup = asyncio.Event()
        self.fetches = 0

    # -------------------------------------------------------------- membership
    # One task at a time runs the loop (`self.task`); it owns its connection. A fetcher
    # left without partitions cancels its task at once (an in-flight request to a
    # stuck leader must not delay the next partition it gets); `add` starts a new one.
    def add(self, p) -> None:
        self.parts[p.key] = FetchState(p)
        self.wakeup.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run())

    def remove(self, key) -> None:
        self.parts.pop(key, None)
        self.wakeup.set()
        if not self.parts:
            self._cancel()

    def stop(self) -> None:
        self.parts.clear()
        self._cancel()

    def _cancel(self) -> None:
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()

    def _current(self, s: FetchState) -> bool:
        """`s` is still followed by this fetcher (not replaced, removed, or promoted)."""
        p = s.partition
        return self.parts.get(p.key) is s and not p.closed and not p.is_leader

    # -------------------------------------------------------------- the loop
    async def run(self) -> None:
        m = self.manager
        me = asyncio.current_task()
        conn: KafkaConnection | None = None
        try:
            while self.parts and self.task is me:
                now = m.clock()
                ready = [s for s in self.parts.values() if s.ready_at_ms <= now]
                if not ready:
                    nxt = min(s.ready_at_ms for s in self.parts.values())
                    await self._sleep((nxt - now) / 1000)
                    continue
                try:
                    if conn is None or conn.closed:
                        conn = await self._connect()
                    trunc = [s for s in ready if s.truncating]
                    if trunc:
                        await self._truncate(conn, trunc)
                    fetch = [s for s in ready if not s.truncating and self._current(s)]
                    if fetch:
                        await self._fetch(conn, fetch)
                except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                    log.warning("replica fetcher %d->%d: %s", m.broker_id, self.leader_id, e)
                    if conn is not None:
                        conn.abort()
                        conn = None
                    await self._sleep(m.backoff_ms / 1000)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("replica fetcher %d->%d", m.broker_id, self.leader_id)
                    if conn is not None:
                        conn.abort()
                        conn = None
                    await self._sleep(m.backoff_ms / 1000)
        finally:
            if conn is not None:
                conn.abort()
            if self.task is me:
                self.task = None
            if m.fetchers.get(self.leader_id) is self and not self.parts and self.task is None:
                del m.fetchers[self.leader_id]

    async def _sleep(self, seconds: float) -> None:
        self.wakeup.clear()
        try:
            await asyncio.wait_for(self.wakeup.wait(), max(seconds, 0.001))
        except asyncio.TimeoutError:
            pass

    async def _connect(self) -> KafkaConnection:
        m = self.manager
        md = m.broker.metadata
        b = md.brokers.get(self.leader_id) if md is not None else None
        if b is None:
            raise ConnectionError(f"leader broker {self.leader_id} is not registered")
        return await KafkaConnection.connect(
            b.host, b.port, client_id=f"mpbroker-replica-{m.broker_id}-w{m.broker.worker_id}",
            timeout_ms=m.socket_timeout_ms, security=inter_broker_cached(m.broker.config))

    # -------------------------------------------------------------- truncation
    async def _truncate(self, conn: KafkaConnection, states: list[FetchState]) -> None:
        m = self.manager
        ask = []
        for s in states:
            p = s.partition
            epoch = p.log.epoch_cache.latest_epoch
            if epoch < 0:
                # no epoch information: truncate to the high watermark
                truncate(p, p.log.high_watermark)
                s.truncating = False
            else:
                ask.append((s, epoch))
        if not ask:
            return
        topics: dict[str, list] = {}
        for s, epoch in ask:
            p = s.partition
            topics.setdefault(p.topic, []).append(
                {"partition": p.index, "current_leader_epoch": p.leader_epoch,
                 "leader_epoch": epoch})
        resp = await conn.request(api_keys.OFFSET_FOR_LEADER_EPOCH,
                                  OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": m.broker_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
        answers = {(t["topic"], r["partition"]): r for t in resp["topics"]
                   for r in t["partitions"]}
        now = m.clock()
        for s, _ in ask:
            if not self._current(s):
                continue
            p = s.partition
            r = answers.get(p.key)
            if r is None or r["error_code"]:
                s.error(r["error_code"] if r else -1, "OffsetForLeaderEpoch")
                s.delay(now, m.backoff_ms)
                continue
            try:
                offset, done = truncation_offset(p.log, r["leader_epoch"], r["end_offset"])
                truncate(p, offset)
            except serr.StorageError:
                log.exception("truncating %s-%d", p.topic, p.index)
                s.delay(now, m.backoff_ms)
                continue
            s.truncating = not done

    # -------------------------------------------------------------- fetching
    async def _fetch(self, conn: KafkaConnection, states: list[FetchState]) -> None:
        m = self.manager
        topics: dict[str, list] = {}
        for s in states:
            p = s.partition
            topics.setdefault(p.topic, []).append({
                "partition": p.index, "current_leader_epoch": p.leader_epoch,
                "fetch_offset": p.log.log_end_offset,
                "last_fetched_epoch": p.log.epoch_cache.latest_epoch,
                "log_start_offset": p.log.log_start_offset,
                "partition_max_bytes": m.fetch_max_bytes})
        resp = await conn.request(api_keys.FETCH, FETCH_VERSION, {
            "replica_id": m.broker_id, "max_wait_ms": m.fetch_wait_max_ms,
            "min_bytes": m.fetch_min_bytes, "max_bytes": m.fetch_response_max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": ""},
            timeout_ms=m.socket_timeout_ms + m.fetch_wait_max_ms)
        self.fetches += 1
        now = m.clock()
        if resp.get("error_code"):
            for s in states:
                s.delay(now, m.backoff_ms)
            return
        answers = {(t["topic"], d["partition_index"]): d for t in resp["responses"]
                   for d in t["partitions"]}
        for s in states:
            if not self._current(s):
                continue        # promoted, re-followed or dropped while the fetch ran
            d = answers.get(s.partition.key)
            if d is None:
                continue
            try:
                await self._process(conn, s, d, now)
            except serr.StorageError as e:
                p = s.partition
                log.warning("follower append to %s-%d failed (%s): truncating again",
                            p.topic, p.index, e)
                s.truncating = True
                s.delay(now, m.backoff_ms)

    async def _process(self, conn, s: FetchState, d: dict, now: int) -> None:
        m = self.manager
        p = s.partition
        err = d["error_code"]
        if err == ErrorCode.NONE:
            s.last_error = 0
            div = d.get("diverging_epoch") or {}
            if div.get("epoch", -1) >= 0 and div.get("end_offset", -1) >= 0:
                offset, _ = truncation_offset(p.log, div["epoch"], div["end_offset"])
                truncate(p, offset)
                return
            records = d.get("records")
            if records is not None and len(records):
                p.append_as_follower(records)
            p.update_follower_high_watermark(d["high_watermark"], d["log_start_offset"])
        elif err == ErrorCode.OFFSET_OUT_OF_RANGE:
            s.error(err, "Fetch")
            await self._out_of_range(conn, s, now)
        else:
            s.error(err, "Fetch")
            s.delay(now, m.backoff_ms)

    async def _out_of_range(self, conn, s: FetchState, now: int) -> None:
        """Our log end is outside the leader's log: follow its end or its start."""
        m = self.manager
        p = s.partition

        async def offset(ts: int) -> int:
            resp = await conn.request(api_keys.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
                "replica_id": m.broker_id, "isolation_level": 0, "topics": [
                    {"name": p.topic, "partitions": [{
                        "partition_index": p.index, "current_leader_epoch": p.leader_epoch,
                        "timestamp": ts}]}]})
            r = resp["topics"][0]["partitions"][0]
            if r["error_code"]:
                return -1
            return r["offset"]
        leader_end = await offset(-1)
        leader_start = await offset(-2)
        if not self._current(s):
            return
        if leader_end < 0 or leader_start < 0:
            s.delay(now, m.backoff_ms)
            return
        leo = p.log.log_end_offset
        if leader_end < leo:
            log.warning("%s-%d: our log end %d is past the leader's %d: truncating",
                        p.topic, p.index, leo, leader_end)
            truncate(p, leader_end)
        elif leader_start > leo:
            log.warning("%s-%d: our log end %d is below the leader's log start %d: restarting"
                        " the log there", p.topic, p.index, leo, leader_start)
            p.log.truncate_fully_and_start_at(leader_start)
        else:
            s.delay(now, m.backoff_ms)


class ReplicaManager:
    """The worker's replication: fetchers by source broker, ISR changes, HW wake-ups."""

    def __init__(self, broker, clock=None):
        self.broker = broker
        self.clock = clock or broker.clock
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.following: dict[tuple[str, int], int] = {}     # key -> source broker id
        self._tasks: set[asyncio.Task] = set()
        self.reload_config(broker.config)

    @property
    def broker_id(self) -> int:
        return self.broker.broker_id

    def reload_config(self, cfg) -> None:
        g = cfg.get
        self.fetch_wait_max_ms = g("replica.fetch.wait.max.ms", 500)
        self.fetch_min_bytes = g("replica.fetch.min.bytes", 1)
        self.fetch_max_bytes = g("replica.fetch.max.bytes", 1048576)
        self.fetch_response_max_bytes = g("replica.fetch.response.max.bytes", 10485760)
        self.backoff_ms = g("replica.fetch.backoff.ms", 1000)
        self.socket_timeout_ms = g("replica.socket.timeout.ms", 30000)
        self.lag_max_ms = g("replica.lag.time.max.ms", 30000)

    # -------------------------------------------------------------- follower side
    def follow(self, p) -> None:
        """(Re)start replicating follower `p` from `p.leader_id`, truncating first."""
        self.unfollow(p.key)
        if p.leader_id < 0 or p.leader_id == self.broker_id:
            return                  # no leader now: the next metadata push re-follows
        f = self.fetchers.get(p.leader_id)
        if f is None:
            f = self.fetchers[p.leader_id] = ReplicaFetcher(self, p.leader_id)
        f.add(p)
        self.following[p.key] = p.leader_id
        log.info("following %s-%d from broker %d (leader epoch %d, log end %d)", p.topic,
                 p.index, p.leader_id, p.leader_epoch, p.log.log_end_offset)

    def unfollow(self, key) -> None:
        leader = self.following.pop(key, None)
        if leader is None:
            return
        f = self.fetchers.get(leader)
        if f is not None:
            f.remove(key)

    def shutdown(self) -> None:
        for f in list(self.fetchers.values()):
            f.stop()
        self.fetchers.clear()
        self.following.clear()
        for t in list(self._tasks):
            t.cancel()

    # -------------------------------------------------------------- leader side
    def hw_changed(self, p) -> None:
        """Partition.on_hw_change: acks=all produces and consumer fetches may complete."""
        b = self.broker
        b.produce_purgatory.check_and_complete(p.key)
        b.fetch_purgatory.check_and_complete(p.key)

    def alter_isr(self, p, new_isr: tuple) -> None:
        """Partition.on_isr_change: send the change to the controller (async)."""
        t = asyncio.get_running_loop().create_task(
            self._alter(p, tuple(new_isr), p.leader_epoch, p.partition_epoch))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _alter(self, p, new_isr: tuple, leader_epoch: int, partition_epoch: int) -> None:
        fn = getattr(self.broker.controller, "alter_partition", None)
        code, state = ErrorCode.UNKNOWN_SERVER_ERROR, None
        if fn is not None:
            try:
                code, state = await fn(p.topic, p.index, self.broker_id, leader_epoch,
                                       partition_epoch, list(new_isr))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("alter_partition %s-%d %s: %r", p.topic, p.index, list(new_isr), e)
        if p.closed or not p.is_leader or p.leader_epoch != leader_epoch:
            return                  # a newer leadership: its own state applies
        if code == ErrorCode.NONE and state is not None:
            log.info("ISR of %s-%d is now %s (partition epoch %d)", p.topic, p.index,
                     list(state.isr), state.partition_epoch)
            p.pending_isr = None
            if p.update_isr_state(state.isr, state.partition_epoch):
                self.hw_changed(p)
            return
        log.info("ISR change of %s-%d to %s refused (error %s)", p.topic, p.index,
                 list(new_isr), code)
        await asyncio.sleep(self.backoff_ms / 1000)
        if p.pending_isr == new_isr:
            p.isr_change_failed()

    def check_isr(self, now_ms: int) -> None:
        """Housekeeping: shrink the ISR of every led partition with lagging members."""
        for p in list(self.broker.partitions.values()):
            if p.replicated and not p.closed:
                out = p.isr_to_shrink(now_ms, self.lag_max_ms)
                if out:
                    log.info("shrinking ISR of %s-%d: %s lag more than %d ms", p.topic,
                             p.index, list(out), self.lag_max_ms)

    def stats(self) -> dict:
        return {"fetchers": {lid: {"partitions": [f"{t}-{i}" for t, i in f.parts],
                                   "fetches": f.fetches}
                             for lid, f in self.fetchers.items()}}
