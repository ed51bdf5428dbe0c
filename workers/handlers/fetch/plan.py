"""A Fetch's reads: which partitions a request names, and the plan that reads them
and builds the response (Kafka's ReplicaManager.readFromLog and the response of
fetchMessages).

`FetchPlan.read_all` reads every partition once: at most `partition_max_bytes` each and
`max_bytes` in all (capped by the broker's `fetch.max.bytes`); the first partition that
returns data returns at least one whole batch even if it is larger than the limits (so a
big batch can never block a consumer). A Fetch split across workers shares `max_bytes`
out, and each worker's first partition with data returns a whole batch.
`PartPlan` is one worker's share of a Fetch split across workers (fanout.py); `park`
puts a plan in the fetch purgatory (DelayedFetch, workers/delayed.py).

Isolation (v4+): read_uncommitted reads up to the high watermark; read_committed
(`isolation_level=1`) up to the last stable offset and gets `aborted_transactions`
(producer id, first offset) for the returned range (storage/txn_index.py); both get
`last_stable_offset`.

Record data is never copied for v4+: a partition's `records` is a list of FileSlices
sent with sendfile by the connection. v0-v3 fetchers read magic 0/1 message sets: the
slices are read and down-converted (storage/convert.py: v0-v1 magic 0, v2-v3 magic 1;
codec kept, zstd refused). Fetchers before v10 get UNSUPPORTED_COMPRESSION_TYPE from a
topic with compression.type=zstd, as in Kafka.
"""
from __future__ import annotations

import asyncio
import os

from mpbroker.protocol.errors import ErrorCode
from storage import convert
from storage import errors as serr

from storage.slices import FileSlice
from workers.delayed import DelayedFetch
from workers.fetch_session import CachedPartition, FetchContext

ZERO_UUID = bytes(16)


def requested_partitions(broker, req, version) -> tuple[list[CachedPartition], list, dict]:
    """The partitions named in the request, the forgotten ones, and unknown topic ids."""
    requested, unknown_ids = [], {}
    for t in req["topics"]:
        if version >= 13:
            topic_id = t["topic_id"]
            name = broker.topic_name_for_id(topic_id)
            if name is None:
                unknown_ids.setdefault(topic_id, []).extend(p["partition"] for p in t["partitions"])
                continue
        else:
            name = t["topic"]
            topic = broker.metadata.topics.get(name)
            topic_id = topic.topic_id if topic else ZERO_UUID
        for p in t["partitions"]:
            requested.append(cached_partition(name, topic_id, p))
    forgotten = []
    for t in req.get("forgotten_topics_data") or ():
        name = broker.topic_name_for_id(t["topic_id"]) if version >= 13 else t["topic"]
        if name is not None:
            forgotten.extend((name, i) for i in t["partitions"])
    return requested, forgotten, unknown_ids


def cached_partition(name: str, topic_id: bytes, p: dict) -> CachedPartition:
    """The CachedPartition of a request's partition entry `p` of topic `name`."""
    try:        # a decoded v12+ partition has every field: no get() calls
        return CachedPartition(     # positional: the cheapest call, per partition
            name, topic_id, p["partition"], p["fetch_offset"], p["partition_max_bytes"],
            p["log_start_offset"], p["current_leader_epoch"], -1, -1, -1,
            p["last_fetched_epoch"])
    except KeyError:            # older versions: the fields they lack, defaulted
        get = p.get
        return CachedPartition(
            name, topic_id, p["partition"], p["fetch_offset"], p["partition_max_bytes"],
            get("log_start_offset", -1), get("current_leader_epoch", -1), -1, -1, -1,
            get("last_fetched_epoch", -1))


def replica_id(req) -> int:
    """The fetching replica (v15+ in `replica_state`), -1 for a consumer."""
    replica = req.get("replica_state") or {}
    return req.get("replica_id", replica.get("replica_id", -1))


def records_size(records) -> int:
    if not records:
        return 0
    return sum(c.length if isinstance(c, FileSlice) else len(c) for c in records)


def _read_slices(slices) -> bytes:
    """The bytes of file slices (v0-v3 down-conversion only: v4+ uses sendfile)."""
    out = []
    for s in slices:
        if s.fd >= 0:
            out.append(os.pread(s.fd, s.length, s.position))
        else:
            with open(s.path, "rb") as f:
                out.append(os.pread(f.fileno(), s.length, s.position))
    return b"".join(out)


class FetchPlan:
    """One request's partitions, and the logic to read them and build the response."""

    memo = None     # the connection's FetchMemo this request reads through (memo.py)

    def __init__(self, broker, ctx, req, fctx, unknown_ids):
        self.broker = broker
        self.version = ctx.api_version
        self.to_magic = convert.fetch_magic(self.version)   # 0/1 for v0-v3, None for v4+
        self.fctx = fctx
        self.unknown_ids = unknown_ids
        # the broker's fetch.max.bytes caps what a request asks for (KIP-541), followers'
        # included; v0-v2 ask for no limit. min_bytes cannot be more than that cap.
        self.max_bytes = min(req.get("max_bytes", 0x7FFFFFFF), broker.config["fetch.max.bytes"])
        self.isolation_level = req.get("isolation_level", 0)
        self.min_bytes = min(req["min_bytes"], self.max_bytes)
        self.max_wait_ms = req["max_wait_ms"]
        self.replica_id = replica_id(req)

    def read_all(self, cps=None, looked: list | None = None) -> tuple[list, int, bool]:
        """Returns ([(cp, partition dict)], bytes read, any error) of `cps` (default:
        every partition of the request), in order. `looked`, when given, gets each
        partition object read (None: not led here), in the same order: what a park
        right after counts from (`park`), without looking them up again."""
        out, total, any_error = [], 0, False
        budget = self.max_bytes
        partition = self.broker.partition
        committed = self.isolation_level == 1
        # A consumer caught up (the common case of a many-partition long poll, read
        # again on every wake-up): answered here, without a log lookup and with the
        # fewest calls; the rest, and every error, go through _read_one.
        fast = self.replica_id < 0 and self.version >= convert.ZSTD_MIN_FETCH_VERSION
        for cp in self.fctx.partitions if cps is None else cps:
            p = partition(cp.topic, cp.partition)
            if looked is not None:
                looked.append(p)
            if fast and p is not None:
                lg = p.log
                hw = lg.high_watermark
                lso = lg.last_stable_offset
                epoch = cp.current_leader_epoch
                if cp.fetch_offset == (lso if committed else hw) and (
                        epoch < 0 or epoch == p.leader_epoch):
                    out.append((cp, {
                        "partition_index": cp.partition, "error_code": 0, "high_watermark": hw,
                        "last_stable_offset": lso, "log_start_offset": lg.log_start_offset,
                        "aborted_transactions": [] if committed else None,
                        "preferred_read_replica": -1, "records": []}))
                    continue
            data = self._read_one(cp, p, budget, min_one=(total == 0))
            size = records_size(data["records"])
            total += size
            budget = max(0, budget - size)
            any_error = any_error or data["error_code"] != 0 or "diverging_epoch" in data
            out.append((cp, data))
        return out, total, any_error

    def read_again(self, results: list) -> tuple[list, int, bool]:
        """`read_all` after a long poll, given its first read (`results`: every
        partition caught up, no records, no error): a partition whose offsets and
        leader epoch are still what that read answered keeps its answer (the answer a
        read now would give, built again), the others are read again. Only the state
        now is trusted, not which partitions were checked meanwhile: several may change
        before the first of their checks completes the Fetch."""
        if self.memo is not None:       # what was checked since (memo.py)
            try:
                return self.memo.read(self)
            except BaseException:       # the memo goes (the connection's next Fetch
                self.memo.forget()      # starts afresh)
                self.memo.release()
                raise
        if self.replica_id >= 0 or self.version < convert.ZSTD_MIN_FETCH_VERSION:
            return self.read_all()      # followers' reads move state; old versions read all
        partition = self.broker.partition
        again, at = [], []
        for i, (cp, data) in enumerate(results):
            p = partition(cp.topic, cp.partition)
            if p is not None:
                lg = p.log
                epoch = cp.current_leader_epoch
                if (lg.high_watermark == data["high_watermark"]
                        and lg.last_stable_offset == data["last_stable_offset"]
                        and lg.log_start_offset == data["log_start_offset"]
                        and (epoch < 0 or epoch == p.leader_epoch)):
                    continue
            again.append(cp)
            at.append(i)
        if not again:
            return results, 0, False
        fresh, total, any_error = self.read_all(again)
        out = list(results)
        for i, r in zip(at, fresh):
            out[i] = r
        return out, total, any_error

    def _read_one(self, cp: CachedPartition, p, budget: int, min_one: bool) -> dict:
        """`cp`'s partition dict; `p` is its partition here (None: not led here)."""
        broker = self.broker
        data = {"partition_index": cp.partition, "error_code": 0, "high_watermark": -1,
                "last_stable_offset": -1, "log_start_offset": -1,
                "aborted_transactions": None if self.isolation_level == 0 else [],
                "preferred_read_replica": -1, "records": b""}
        if p is None:
            data["error_code"] = broker.partition_error(cp.topic, cp.partition)
            return data
        replica = self.replica_id
        if replica >= 0:
            # a follower's fetch (workers/replication.py): only from an assigned replica
            code = p.check_follower(replica)
            if code:
                data["error_code"] = code
                return data
        data["high_watermark"] = p.high_watermark
        data["last_stable_offset"] = p.last_stable_offset
        data["log_start_offset"] = p.log_start_offset
        fenced = p.leader_epoch_error(cp.current_leader_epoch)
        if fenced:
            data["error_code"] = fenced
            return data
        if convert.fetch_zstd_refused(p.log.config, self.version):
            data["error_code"] = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
            return data
        if replica < 0 and cp.fetch_offset == (data["high_watermark"] if self.isolation_level == 0
                                                else data["last_stable_offset"]):
            # caught up: nothing to read, and no log lookup to find that out
            data["records"] = []
            return data
        limit = min(cp.max_bytes, budget)
        if replica >= 0:
            try:
                div = p.diverging_epoch(cp.last_fetched_epoch, cp.fetch_offset) \
                    if cp.last_fetched_epoch >= 0 else None
            except serr.StorageError as e:
                data["error_code"] = e.code
                return data
            if div is not None:     # the follower truncates to it, then fetches again
                data["diverging_epoch"] = {"epoch": div[0], "end_offset": div[1]}
                return data
            if p.log_start_offset <= cp.fetch_offset <= p.log_end_offset:
                p.follower_fetch(replica, cp.fetch_offset, broker.clock(), cp.log_start_offset)
                data["high_watermark"] = p.high_watermark
                data["last_stable_offset"] = p.last_stable_offset
                if broker.delete_records_purgatory.watched(p.key):
                    # the follower's log start may have reached a DeleteRecords target
                    broker.delete_records_purgatory.check_and_complete(p.key)
        if limit <= 0 and not min_one:
            data["records"] = []
            return data
        try:
            if replica >= 0:      # followers read up to the log end, not the HW
                info = p.read_for_follower(cp.fetch_offset, max(limit, 0), min_one_batch=min_one)
            else:
                info = p.read(cp.fetch_offset, max(limit, 0), self.isolation_level,
                              min_one_batch=min_one)
            if self.to_magic is not None and info.slices:
                # v0-v3: no sendfile; read, down-convert, send the bytes (v4+ untouched)
                data["records"] = [convert.down_convert(
                    _read_slices(info.slices), self.to_magic, cp.fetch_offset, max(limit, 1))]
            else:
                data["records"] = info.slices
            if self.isolation_level == 1 and info.slices:
                # read_committed: the aborted transactions in the returned range
                data["aborted_transactions"] = p.aborted_transactions(cp.fetch_offset,
                                                                      info.next_offset)
        except serr.StorageError as e:
            data["error_code"] = e.code
            data["records"] = b""  # empty, never null: librdkafka rejects size -1 here
            return data
        p.bytes_out += records_size(data["records"])
        return data

    def response(self, results) -> dict:
        fctx = self.fctx
        # a full fetch without a session (librdkafka's, every time) carries every
        # partition and leaves nothing to remember: no per-partition session bookkeeping
        include = fctx.include if fctx.incremental or fctx.session is not None else None
        by_id = self.version >= 13
        by_topic: dict = {}         # topic (id) -> its partition dicts, in request order
        for cp, data in results:
            if include is not None and not include(
                    cp, data["error_code"], data["high_watermark"], data["last_stable_offset"],
                    data["log_start_offset"], bool(data["records"]), "diverging_epoch" in data):
                continue
            key = cp.topic_id if by_id else cp.topic
            parts = by_topic.get(key)
            if parts is None:
                parts = by_topic[key] = []
            parts.append(data)
        name = "topic_id" if by_id else "topic"
        responses = [{"partitions": parts, name: key} for key, parts in by_topic.items()]
        for topic_id, parts in self.unknown_ids.items():
            responses.append({"topic_id": topic_id, "partitions": [
                {"partition_index": i, "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                 "high_watermark": -1, "records": b""} for i in parts]})
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": self.fctx.session_id,
                "responses": responses}


class PartPlan(FetchPlan):
    """A FetchPlan over one worker's share of a Fetch (`cps`, sessionless) whose
    `response` is the raw [(CachedPartition, partition dict)] list: the front
    (fanout.py) assembles the client's response from every worker's share."""

    def __init__(self, broker, ctx, req, cps: list):
        super().__init__(broker, ctx, req, FetchContext(cps, None, incremental=False), {})

    def response(self, results):
        return results


def serve(broker, ctx, req, requested: list, forgotten: list, unknown_ids: dict, memo=None):
    """A Fetch whose partitions are all this worker's (or that has no router), from its
    `requested_partitions`: the response now, or a future of it (parked). `memo`: the
    connection's FetchMemo (memo.py) that `requested` came from, read through and
    given back (no longer `busy`) once the Fetch is answered."""
    fctx = broker.fetch_sessions.new_context(
        req.get("session_id", 0), req.get("session_epoch", -1), requested, forgotten,
        is_follower=replica_id(req) >= 0, uses_topic_ids=ctx.api_version >= 13)
    plan = FetchPlan(broker, ctx, req, fctx, unknown_ids)
    if fctx.error_code:
        if memo is not None:
            memo.discard(ctx)
        return {"throttle_time_ms": 0, "error_code": fctx.error_code, "session_id": 0,
                "responses": []}
    if memo is not None:
        plan.memo = memo            # (a failure here: the caller discards the memo)
        results, total, any_error = memo.read(plan)
        looked = None
        if memo.forgotten:          # not remembered (a partition named twice): as any
            memo.release()
            plan.memo = memo = None
    else:
        looked = []
        results, total, any_error = plan.read_all(looked=looked)
    if (plan.max_wait_ms <= 0 or not fctx.partitions or total >= plan.min_bytes or any_error
            or unknown_ids):
        if memo is not None:
            memo.release()
        return plan.response(results)
    if memo is None:
        future, _ = park(plan, results, total, looked)
    elif plan.min_bytes <= 1:
        future = asyncio.get_running_loop().create_future()
        memo.park(plan, future)
    else:           # counted as any Fetch; woken, it reads again through the memo
        future, _ = park(plan, results, total, memo.looked_in_order())
        future.add_done_callback(memo.release)
    return future


def park(plan: FetchPlan, results: list, total: int,
         looked: list | None = None) -> tuple[asyncio.Future, DelayedFetch]:
    """Park `plan` in the fetch purgatory, watching every partition it reads, right
    after its read `results` of `total` bytes (no await between them; `looked`: the
    partitions that read looked up, `read_all`'s, counted from as they are): the future
    resolves to `plan.response(...)` of a read once `min_bytes` arrived, a watched
    partition went away, or `max_wait_ms` expired (workers/delayed.py); that read reads
    again only the partitions whose state changed, unless the first found records
    already (min_bytes over 1): then it reads them all."""
    future = asyncio.get_running_loop().create_future()
    op = DelayedFetch(plan, future, results=None if total else results, looked=looked)
    # its counters were taken just now, after the read: nothing can have arrived
    # since, unless a partition is already gone
    plan.broker.fetch_purgatory.try_complete_else_watch(op, list(op.start_bytes),
                                                        check=op.gone)
    return future, op

