"""Cross-worker routing: the SO_REUSEPORT front splits requests by owner (ARCHITECTURE §2).

A connection lands on an arbitrary worker, its *front*. For the APIs in `ROUTES` the
dispatcher hands the decoded request to `Router.route` instead of the handler:

* partition-scoped (Produce, ListOffsets, DeleteRecords, OffsetForLeaderEpoch,
  DescribeProducers,
  WriteTxnMarkers: `split_markers`/`merge_markers`, per marker per partition): the
  request dict is split by owner (`split_partitions`, the placement map's owner of each
  (topic, partition)); the local part runs through the normal handler at once, each
  remote part goes as ONE message to its owner over the mesh, which runs its normal
  handler on it; the parts are merged back in request order (`merge_partitions`: the
  topics and partitions in the order the client sent them, errors per partition).
* Fetch: the front keeps the incremental fetch session (KIP-227) and resolves which
  partitions the request reads; it reads its own partitions itself and forwards the
  others as *sessionless* Fetch requests (session_epoch -1) with a share of `max_bytes`.
  Owners answer FileSlices with fd=-1 (segment path, position, length, and the st_dev/
  st_ino of the file read): the front's connection opens the file by path and sendfiles
  it, so record bytes are never copied between processes (produce payloads are, once,
  to the owner). The front pins each slice to a handle of that very file as the answer
  arrives (`Connection.pin`): a path that names another file by now (the topic deleted
  and created again, a compacted segment swapped in) never has its bytes sent for the
  slice; the partition is answered NOT_LEADER_OR_FOLLOWER instead and the client
  fetches again.
  Long polling: the parts are forwarded with the request's max_wait_ms/min_bytes, each
  owner parks its part in its own fetch purgatory (woken by its appends); when the
  first part answers with data or an error (or the local part completes), the front
  tells the other owners `{"op": "complete", "id"}`, which force-complete their parked
  part, and answers once all parts are in. This is how "the owners notify the front"
  of ARCHITECTURE §2 is realised: the owner's answer IS the notification, and the
  timeout runs on each owner's timing wheel rather than on the front's (deviation: it
  saves a second message per wake-up and a watch registry on the owners).
* coordinator-scoped group APIs: forwarded whole to the worker that owns partition
  `coordinator_partition(group_id)` of `__consumer_offsets`; requests naming several
  groups (DescribeGroups, DeleteGroups, ConsumerGroupDescribe, OffsetFetch v8+) are
  split per coordinator and merged in request order; ListGroups fans out to every worker.
* DescribeLogDirs fans out to every worker (each reports the partitions it owns),
  merged per log dir.
* transaction coordinator APIs (InitProducerId with a transactional id,
  AddPartitionsToTxn, AddOffsetsToTxn, EndTxn): forwarded whole to the worker owning
  partition `coordinator_partition(transactional_id)` of `__transaction_state`;
  AddPartitionsToTxn v4+ and DescribeTransactions are split per coordinator and merged,
  ListTransactions fans out to every worker; TxnOffsetCommit goes to the group's
  coordinator like OffsetCommit.
* everything else (Metadata, ApiVersions, admin APIs, FindCoordinator, InitProducerId
  without a transactional id) runs on the front: metadata comes from the controller's
  pushes.

Mesh messages (`workers/mesh.py` framing):

    front -> owner  {"op": "req", "id", "api_key", "version", "body", "client_id",
                     "client_host", ["keys"], ["oneway"]}
                    Produce: each partition's "records" is the index of a raw buffer
                    sent after the pickle (`detach_records`/`attach_records`), never
                    pickled; the owner appends from a memoryview of the received frame
    owner -> front  {"op": "resp", "id", "body"} | {"op": "resp", "id", "error": str}
    front -> owner  {"op": "complete", "id"}           (Fetch long poll: answer now)

Failure: a handler that raises on the owner answers its part's error response (the
API's error code on that part's partitions, `workers/handler_errors.py`, logged once by
the owner), which the front merges like any answer. A part whose owner is unreachable (dead peer, channel closed, or a partition
in transit during a move) is answered by running the *local* handler on it: this worker
does not own those partitions/coordinators, so the handler answers per partition
NOT_LEADER_OR_FOLLOWER (or NOT_COORDINATOR for groups), both retriable; clients refresh
metadata and retry, and a respawned worker is reachable again through the new socket
pair the supervisor hands over (`replace_peer`).

Produce with acks=0 forwards with "oneway": the owner answers only if the append
failed, and then the front closes the client's connection (Kafka's only way to tell an
acks=0 producer), as the local handler does by raising.

The split/merge functions at the top are pure (unit-tested in tests/workers).
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import weakref
from typing import Any, Callable, NamedTuple

from mpbroker.protocol import api_keys as K
from mpbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


# ============================================================================ pure split / merge
class PartSpec(NamedTuple):
    req_topics: str
    req_name: str
    req_parts: str
    req_index: str
    resp_topics: str
    resp_name: str
    resp_parts: str
    resp_index: str


PART_SPECS = {
    K.PRODUCE: PartSpec("topic_data", "name", "partition_data", "index",
                        "responses", "name", "partition_responses", "index"),
    K.LIST_OFFSETS: PartSpec("topics", "name", "partitions", "partition_index",
                             "topics", "name", "partitions", "partition_index"),
    K.DELETE_RECORDS: PartSpec("topics", "name", "partitions", "partition_index",
                               "topics", "name", "partitions", "partition_index"),
    K.OFFSET_FOR_LEADER_EPOCH: PartSpec("topics", "topic", "partitions", "partition",
                                        "topics", "topic", "partitions", "partition"),
    # request partitions are plain indexes (req_index None)
    K.DESCRIBE_PRODUCERS: PartSpec("topics", "name", "partition_indexes", None,
                                   "topics", "name", "partitions", "partition_index"),
}


def split_partitions(req: dict, spec: PartSpec, owner_of: Callable[[str, int], int]) -> dict:
    """{owner: sub-request}: each sub-request is `req` with only that owner's partitions,
    topics (and partitions within them) in request order, topics without any dropped."""
    by_owner: dict[int, list] = {}
    for t in req.get(spec.req_topics) or ():
        name = t[spec.req_name]
        per: dict[int, list] = {}
        for p in t[spec.req_parts]:
            idx = p if spec.req_index is None else p[spec.req_index]
            per.setdefault(owner_of(name, idx), []).append(p)
        for w, parts in per.items():
            by_owner.setdefault(w, []).append({**t, spec.req_parts: parts})
    if not by_owner:
        return {}
    return {w: {**req, spec.req_topics: topics} for w, topics in by_owner.items()}


def merge_partitions(req: dict, spec: PartSpec, responses: list[dict]) -> dict:
    """One response in request order from the parts' responses. Top-level fields come
    from the first part (throttle_time_ms: the largest). A partition no part answered
    (cannot happen unless a handler dropped it) is left out."""
    found: dict[tuple, collections.deque] = {}
    for resp in responses:
        for t in resp.get(spec.resp_topics) or ():
            for p in t[spec.resp_parts]:
                found.setdefault((t[spec.resp_name], p[spec.resp_index]),
                                 collections.deque()).append(p)
    out = {k: v for k, v in responses[0].items() if k != spec.resp_topics} if responses else {}
    if "throttle_time_ms" in out:
        out["throttle_time_ms"] = max(r.get("throttle_time_ms", 0) for r in responses)
    topics = []
    for t in req.get(spec.req_topics) or ():
        name = t[spec.req_name]
        parts = []
        for p in t[spec.req_parts]:
            q = found.get((name, p if spec.req_index is None else p[spec.req_index]))
            if q:
                parts.append(q.popleft())
        topics.append({spec.resp_name: name, spec.resp_parts: parts})
    out[spec.resp_topics] = topics
    return out


class GroupSpec(NamedTuple):
    req_field: str            # the list of groups in the request
    resp_field: str           # the list of per-group answers in the response
    dict_items: bool          # request items are dicts with `key` (else plain names)
    key: str = "group_id"     # the id field of items (transactions: "transactional_id")


GROUP_MULTI = {
    K.DESCRIBE_GROUPS: GroupSpec("groups", "groups", False),
    K.DELETE_GROUPS: GroupSpec("groups_names", "results", False),
    K.CONSUMER_GROUP_DESCRIBE: GroupSpec("group_ids", "groups", False),
    K.OFFSET_FETCH: GroupSpec("groups", "groups", True),            # v8+
}

GROUP_SINGLE = (K.JOIN_GROUP, K.SYNC_GROUP, K.HEARTBEAT, K.LEAVE_GROUP, K.OFFSET_COMMIT,
                K.OFFSET_DELETE, K.CONSUMER_GROUP_HEARTBEAT, K.OFFSET_FETCH,
                K.TXN_OFFSET_COMMIT)

# Transaction coordinator APIs: to the worker owning the `__transaction_state` partition
# of the transactional id (InitProducerId only when it names one; AddPartitionsToTxn
# v4+ batches transactions and is split like the multi-group APIs).
TXN_SINGLE = (K.INIT_PRODUCER_ID, K.ADD_PARTITIONS_TO_TXN, K.ADD_OFFSETS_TO_TXN, K.END_TXN)
TXN_MULTI = {
    K.ADD_PARTITIONS_TO_TXN: GroupSpec("transactions", "results_by_transaction", True,
                                       "transactional_id"),
    K.DESCRIBE_TRANSACTIONS: GroupSpec("transactional_ids", "transaction_states", False,
                                       "transactional_id"),
}
TXN_TOPIC = "__transaction_state"


def _gid(item, spec: GroupSpec) -> str:
    return item[spec.key] if spec.dict_items else item


def split_groups(req: dict, spec: GroupSpec, owner_of: Callable[[str], int]) -> dict:
    by_owner: dict[int, list] = {}
    for item in req.get(spec.req_field) or ():
        by_owner.setdefault(owner_of(_gid(item, spec)), []).append(item)
    return {w: {**req, spec.req_field: items} for w, items in by_owner.items()}


def merge_groups(req: dict, spec: GroupSpec, responses: list[dict]) -> dict:
    found: dict[str, collections.deque] = {}
    for resp in responses:
        for g in resp.get(spec.resp_field) or ():
            found.setdefault(g.get(spec.key), collections.deque()).append(g)
    out = {k: v for k, v in responses[0].items() if k != spec.resp_field} if responses else {}
    if "throttle_time_ms" in out:
        out["throttle_time_ms"] = max(r.get("throttle_time_ms", 0) for r in responses)
    items = []
    for item in req.get(spec.req_field) or ():
        q = found.get(_gid(item, spec))
        if q:
            items.append(q.popleft())
    out[spec.resp_field] = items
    return out


def merge_list_transactions(responses: list[dict]) -> dict:
    error = next((r.get("error_code", 0) for r in responses if r.get("error_code")), 0)
    return {"throttle_time_ms": max((r.get("throttle_time_ms", 0) for r in responses), default=0),
            "error_code": error,
            "unknown_state_filters": responses[0].get("unknown_state_filters", []) if responses else [],
            "transaction_states": [t for r in responses for t in r.get("transaction_states") or ()]}


def merge_list_groups(responses: list[dict]) -> dict:
    error = next((r.get("error_code", 0) for r in responses if r.get("error_code")), 0)
    return {"throttle_time_ms": max((r.get("throttle_time_ms", 0) for r in responses), default=0),
            "error_code": error, "groups": [g for r in responses for g in r.get("groups") or ()]}


def split_markers(req: dict, owner_of: Callable[[str, int], int]) -> dict:
    """WriteTxnMarkers split by partition owner: {owner: (sub-request, [marker index])};
    each sub-request keeps, per marker, only that owner's topics and partitions."""
    by_owner: dict[int, tuple[dict, list]] = {}
    for i, m in enumerate(req.get("markers") or ()):
        per: dict[int, list] = {}
        for t in m.get("topics") or ():
            parts: dict[int, list] = {}
            for idx in t.get("partition_indexes") or ():
                parts.setdefault(owner_of(t["name"], idx), []).append(idx)
            for w, idxs in parts.items():
                per.setdefault(w, []).append({**t, "partition_indexes": idxs})
        for w, topics in per.items():
            sub, order = by_owner.setdefault(w, ({**req, "markers": []}, []))
            sub["markers"].append({**m, "topics": topics})
            order.append(i)
    return by_owner


def merge_markers(req: dict, parts: list[tuple[list, dict]]) -> dict:
    """One WriteTxnMarkers response in request order from [(marker indexes, response)]."""
    codes: dict[tuple, int] = {}
    for order, resp in parts:
        for i, m in zip(order, resp.get("markers") or ()):
            for t in m.get("topics") or ():
                for p in t.get("partitions") or ():
                    codes[(i, t["name"], p["partition_index"])] = p["error_code"]
    markers = []
    for i, m in enumerate(req.get("markers") or ()):
        topics = [{"name": t["name"], "partitions": [
            {"partition_index": idx, "error_code": codes.get((i, t["name"], idx), -1)}
            for idx in t.get("partition_indexes") or ()]} for t in m.get("topics") or ()]
        markers.append({"producer_id": m["producer_id"], "topics": topics})
    return {"markers": markers}


def fetch_subrequest(req: dict, version: int, cps: list, max_bytes: int, max_wait_ms: int,
                     min_bytes: int) -> dict:
    """A sessionless Fetch of `cps` (CachedPartitions, in order) for their owner."""
    topics: list[dict] = []
    for cp in cps:
        key = cp.topic_id if version >= 13 else cp.topic
        if not topics or topics[-1]["_k"] != key:
            entry = {"_k": key, "partitions": []}
            entry["topic_id" if version >= 13 else "topic"] = key
            topics.append(entry)
        topics[-1]["partitions"].append({
            "partition": cp.partition, "fetch_offset": cp.fetch_offset,
            "partition_max_bytes": cp.max_bytes, "log_start_offset": cp.log_start_offset,
            "current_leader_epoch": cp.current_leader_epoch,
            "last_fetched_epoch": cp.last_fetched_epoch})
    for t in topics:
        del t["_k"]
    sub = {k: v for k, v in req.items() if k not in ("topics", "forgotten_topics_data")}
    sub.update(topics=topics, forgotten_topics_data=[], session_id=0, session_epoch=-1,
               max_bytes=max_bytes, max_wait_ms=max_wait_ms, min_bytes=min_bytes)
    return sub


def fetch_has_news(resp: dict) -> bool:
    """An owner's Fetch answer carries records or an error (the front stops waiting)."""
    if resp.get("error_code"):
        return True
    for t in resp.get("responses") or ():
        for p in t.get("partitions") or ():
            if p.get("error_code") or p.get("records") or p.get("diverging_epoch"):
                return True
    return False


def portable(api_key: int, body: dict) -> dict:
    """A request body that survives pickling: Produce records (memoryviews over the
    request frame) become bytearrays (the one copy to the owner)."""
    if api_key == K.PRODUCE:
        return {**body, "topic_data": [
            {**t, "partition_data": [
                {**p, "records": bytearray(p["records"])} if isinstance(p.get("records"), memoryview)
                else p for p in t["partition_data"]]} for t in body["topic_data"]]}
    return body


def detach_records(api_key: int, body: dict) -> tuple[dict, list]:
    """A Produce body for the mesh with every partition's records replaced by the index
    of its raw buffer, and the buffers (memoryviews over the client's request frame, not
    copied): the mesh sends them raw after the pickled body (workers/mesh.py), so the
    one copy to the owner is the kernel's. Other APIs: (body, [])."""
    if api_key != K.PRODUCE:
        return body, []
    bufs: list = []
    topics = []
    for t in body["topic_data"]:
        parts = []
        for p in t["partition_data"]:
            recs = p.get("records")
            if recs is not None and not isinstance(recs, int):
                parts.append({**p, "records": len(bufs)})
                bufs.append(recs)
            else:
                parts.append(p)
        topics.append({**t, "partition_data": parts})
    return {**body, "topic_data": topics}, bufs


def attach_records(body: dict, raw) -> None:
    """The owner's side of `detach_records`: buffer indexes become the (writable)
    memoryviews the mesh received, in place. An index out of range is a bad frame."""
    for t in body.get("topic_data") or ():
        for p in t.get("partition_data") or ():
            recs = p.get("records")
            if isinstance(recs, int):
                if not 0 <= recs < len(raw):
                    raise ValueError(f"records buffer {recs} of {len(raw)}")
                p["records"] = raw[recs]


def sanitize_response(api_key: int, body):
    """FileSlices leave the owner with fd=-1: fds are per process (the front opens by path)."""
    if api_key != K.FETCH or not isinstance(body, dict):
        return body
    from storage.slices import FileSlice
    for t in body.get("responses") or ():
        for p in t.get("partitions") or ():
            recs = p.get("records")
            if isinstance(recs, list):
                p["records"] = [c._replace(fd=-1) if isinstance(c, FileSlice) else bytes(c)
                                for c in recs]
            elif isinstance(recs, memoryview):
                p["records"] = bytes(recs)
    return body


def pin_records(data: dict, conn) -> dict:
    """The front's side of `sanitize_response`: an owner's partition answer with each
    FileSlice pinned to a handle of `conn` on the file the owner read; a slice whose
    file is gone or replaced turns the partition into NOT_LEADER_OR_FOLLOWER without
    records (retriable: the client refreshes metadata and fetches again)."""
    recs = data.get("records")
    if conn is None or not isinstance(recs, list):
        return data
    from storage.slices import FileSlice
    pinned = []
    for c in recs:
        if isinstance(c, FileSlice):
            held = conn.pin(c)
            if held is None:
                log.info("fetch of %s: the segment file was deleted or replaced under the "
                         "read; answering NOT_LEADER_OR_FOLLOWER", c.path)
                return {**data, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "records": b"",
                        "high_watermark": -1, "last_stable_offset": -1,
                        "log_start_offset": -1}
            c = held
        pinned.append(c)
    return {**data, "records": pinned}


# ============================================================================ the router
class PeerGone(Exception):
    pass


class RemoteContext:
    """The RequestContext of a request forwarded by a front (no connection here)."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "client_host",
                 "connection", "forwarded_from")

    def __init__(self, msg: dict, peer: int):
        self.api_key = msg["api_key"]
        self.api_version = msg["version"]
        self.correlation_id = 0
        self.client_id = msg.get("client_id")
        self.client_host = msg.get("client_host", "")
        self.connection = None
        self.forwarded_from = peer


async def _value(x):
    if inspect.isawaitable(x):
        return await x
    return x


class Router:
    def __init__(self, broker):
        self.broker = broker
        self.peers: dict[int, Any] = {}            # worker id -> PeerLink
        self.pending: dict[int, tuple[asyncio.Future, int]] = {}   # id -> (future, peer)
        self.serving: dict[tuple[int, int], tuple] = {}  # (peer, id) -> (future, keys)
        self.conns = weakref.WeakValueDictionary()        # acks=0 token -> Connection
        self.loop: asyncio.AbstractEventLoop | None = None
        self._next_id = 0
        self.forwarded = 0          # parts this worker sent to owners
        self.served = 0             # parts this worker ran for fronts
        # partition-level requests this worker received as the front, per (topic,
        # partition) whoever owns it: the request-rate input of placement balancing
        # (mpbroker/controller/balance.py; the controller sums the workers' counts)
        self.partition_requests: collections.Counter = collections.Counter()
        self.routes = {
            K.PRODUCE: self._route_partitions, K.LIST_OFFSETS: self._route_partitions,
            K.DELETE_RECORDS: self._route_partitions,
            K.OFFSET_FOR_LEADER_EPOCH: self._route_partitions,
            K.DESCRIBE_PRODUCERS: self._route_partitions,
            K.FETCH: self._route_fetch, K.LIST_GROUPS: self._route_list_groups,
        }
        for k in GROUP_SINGLE:
            self.routes[k] = self._route_group
        for k in GROUP_MULTI:
            self.routes.setdefault(k, self._route_group_multi)
        for k in TXN_SINGLE:
            self.routes[k] = self._route_txn
        self.routes[K.DESCRIBE_TRANSACTIONS] = self._route_txn_multi
        self.routes[K.LIST_TRANSACTIONS] = self._route_list_transactions
        self.routes[K.WRITE_TXN_MARKERS] = self._route_markers
        self.routes[K.DESCRIBE_LOG_DIRS] = self._route_log_dirs
        self.routes[K.ALTER_REPLICA_LOG_DIRS] = self._route_alter_log_dirs

    # ------------------------------------------------------------ peers
    @property
    def me(self) -> int:
        return self.broker.worker_id

    @property
    def active(self) -> bool:
        return self.broker.placement.num_workers > 1

    def start(self, loop) -> None:
        self.loop = loop
        for link in self.peers.values():
            if link.loop is None:
                link.attach(loop)

    def add_peer(self, wid: int, sock) -> None:
        """A mesh socket to worker `wid` (at boot, or a new one after `wid` respawned)."""
        from workers.mesh import PeerLink
        old = self.peers.pop(wid, None)
        if old is not None:
            old.close()
        link = PeerLink(sock, lambda m: self.on_message(wid, m), self._closed)
        link.worker = wid
        self.peers[wid] = link
        if self.loop is not None:
            link.attach(self.loop)

    def _closed(self, link) -> None:
        wid = link.worker
        if self.peers.get(wid) is link:
            del self.peers[wid]
        for rid, (fut, peer) in list(self.pending.items()):
            if peer == wid:
                del self.pending[rid]
                if not fut.done():
                    fut.set_exception(PeerGone(f"worker {wid} is gone"))
        for key in [k for k in self.serving if k[0] == wid]:
            del self.serving[key]
        log.warning("worker %d: lost the mesh channel to worker %d", self.me, wid)

    def live_peers(self) -> list[int]:
        return [w for w, link in self.peers.items() if not link.closed]

    # ------------------------------------------------------------ owners
    def owner(self, topic: str, partition: int) -> int:
        """The worker to send (topic, partition) to; `me` when that is this worker, when
        the partition is unknown (the local handler answers the error), in transit, or
        its owner unreachable (the local handler answers NOT_LEADER_OR_FOLLOWER)."""
        md = self.broker.metadata
        t = md.topics.get(topic) if md is not None else None
        if t is None or partition not in t.partitions:
            return self.me
        w = self.broker.placement.owner(topic, partition)
        if w == self.me or w < 0:
            return self.me
        link = self.peers.get(w)
        return w if link is not None and not link.closed else self.me

    def group_owner(self, group_id: str) -> int:
        md = self.broker.metadata
        t = md.topics.get(OFFSETS_TOPIC) if md is not None else None
        if t is None or not t.partitions or group_id is None:
            return self.me
        from workers.groups.partitioner import coordinator_partition
        return self.owner(OFFSETS_TOPIC, coordinator_partition(group_id, len(t.partitions)))

    def txn_owner(self, transactional_id: str) -> int:
        md = self.broker.metadata
        t = md.topics.get(TXN_TOPIC) if md is not None else None
        if t is None or not t.partitions or not transactional_id:
            return self.me
        from workers.groups.partitioner import coordinator_partition
        return self.owner(TXN_TOPIC, coordinator_partition(transactional_id, len(t.partitions)))

    # ------------------------------------------------------------ front side
    def route(self, ctx, req: dict, handle: Callable):
        fn = self.routes.get(ctx.api_key)
        if fn is None or not self.active:
            return handle(self.broker, ctx, req)
        spec = PART_SPECS.get(ctx.api_key)
        if spec is not None:
            self._count((t[spec.req_name], p if spec.req_index is None else p[spec.req_index])
                        for t in req.get(spec.req_topics) or () for p in t[spec.req_parts])
        return fn(ctx, req, handle)

    def _count(self, keys) -> None:
        """Count requests of (topic, partition) `keys` (placement balancing's input),
        those of partitions that exist only: the counts never grow with the names
        clients send."""
        md = self.broker.metadata
        if md is None:
            return
        topics, count = md.topics, self.partition_requests
        for key in keys:
            t = topics.get(key[0])
            if t is not None and key[1] in t.partitions:
                count[key] += 1

    def request_counts(self) -> list[list]:
        """[[topic, partition, requests]] for the controller's stats; the counts of
        partitions deleted since are dropped here."""
        md = self.broker.metadata
        topics = md.topics if md is not None else {}
        out = []
        for key, n in list(self.partition_requests.items()):
            t = topics.get(key[0])
            if t is None or key[1] not in t.partitions:
                del self.partition_requests[key]
            else:
                out.append([key[0], key[1], n])
        return out

    def forward(self, wid: int, ctx, body: dict, keys=None, oneway: bool = False):
        """Send one part to its owner; a future of the owner's response dict, or None if
        the owner cannot be reached (the caller answers the part locally)."""
        link = self.peers.get(wid)
        if link is None or link.closed:
            return None
        self._next_id += 1
        rid = self._next_id
        body, raw = detach_records(ctx.api_key, body)
        msg = {"op": "req", "id": rid, "api_key": ctx.api_key, "version": ctx.api_version,
               "body": body, "client_id": ctx.client_id, "client_host": ctx.client_host}
        if keys is not None:
            msg["keys"] = keys
        fut = None
        if oneway:
            conn = getattr(ctx, "connection", None)
            if conn is not None:
                msg["oneway"] = id(conn)
                self.conns[id(conn)] = conn
            else:
                msg["oneway"] = 0
        else:
            fut = self.loop.create_future()
            self.pending[rid] = (fut, wid)
        try:
            link.send(msg, raw)
        except ConnectionError:
            self.pending.pop(rid, None)
            return None
        self.forwarded += 1
        if oneway:
            return True
        fut.rid = rid
        return fut

    def _route_partitions(self, ctx, req, handle):
        spec = PART_SPECS[ctx.api_key]
        parts = split_partitions(req, spec, self.owner)
        me = self.me
        if not parts or set(parts) == {me}:
            return handle(self.broker, ctx, req)
        oneway = ctx.api_key == K.PRODUCE and req.get("acks") == 0
        results: dict[int, Any] = {}
        for w, sub in parts.items():
            if w == me:
                continue
            fut = self.forward(w, ctx, sub, oneway=oneway)
            if fut is None:       # unreachable: answered locally (NOT_LEADER_OR_FOLLOWER)
                results[w] = handle(self.broker, ctx, sub)
            else:
                results[w] = fut
        if me in parts:
            results[me] = handle(self.broker, ctx, parts[me])
        if oneway:
            return None
        order = list(parts)
        if not any(inspect.isawaitable(r) for r in results.values()):
            return merge_partitions(req, spec, [results[w] for w in order])

        async def gather():
            out = []
            for w in order:
                try:
                    out.append(await _value(results[w]))
                except PeerGone:
                    out.append(await _value(handle(self.broker, ctx, parts[w])))
            return merge_partitions(req, spec, out)
        return gather()

    # ---- coordinators (groups, transactions)
    def _to_worker(self, w: int, ctx, req, handle):
        """Run `req` on worker `w` (in place when that is us, or when `w` is gone)."""
        if w == self.me:
            return handle(self.broker, ctx, req)
        fut = self.forward(w, ctx, req)
        if fut is None:
            return handle(self.broker, ctx, req)

        async def wait():
            try:
                return await fut
            except PeerGone:
                return await _value(handle(self.broker, ctx, req))
        return wait()

    def _split_by_coordinator(self, ctx, req, handle, spec, owner):
        """Batched coordinator requests (OffsetFetch v8+, AddPartitionsToTxn v4+): one
        sub-request per owning worker, answers merged back in the request's order."""
        parts = split_groups(req, spec, owner)
        if not parts or set(parts) == {self.me}:
            return handle(self.broker, ctx, req)
        results = {}
        for w, sub in parts.items():
            if w != self.me:
                results[w] = self.forward(w, ctx, sub) or handle(self.broker, ctx, sub)
        if self.me in parts:
            results[self.me] = handle(self.broker, ctx, parts[self.me])

        async def gather():
            out = []
            for w in parts:
                try:
                    out.append(await _value(results[w]))
                except PeerGone:
                    out.append(await _value(handle(self.broker, ctx, parts[w])))
            return merge_groups(req, spec, out)
        return gather()

    def _route_group(self, ctx, req, handle):
        if ctx.api_key == K.OFFSET_FETCH and ctx.api_version >= 8:
            return self._route_group_multi(ctx, req, handle)
        gid = req.get("group_id")
        if gid:
            md = self.broker.metadata
            t = md.topics.get(OFFSETS_TOPIC) if md is not None else None
            if t is not None and t.partitions:
                from workers.groups.partitioner import coordinator_partition
                self.partition_requests[
                    (OFFSETS_TOPIC, coordinator_partition(gid, len(t.partitions)))] += 1
        return self._to_worker(self.group_owner(gid) if gid else self.me, ctx, req, handle)

    def _route_group_multi(self, ctx, req, handle):
        return self._split_by_coordinator(ctx, req, handle, GROUP_MULTI[ctx.api_key],
                                          self.group_owner)

    def _route_txn_multi(self, ctx, req, handle):
        return self._split_by_coordinator(ctx, req, handle, TXN_MULTI[ctx.api_key],
                                          self.txn_owner)

    def _route_txn(self, ctx, req, handle):
        if ctx.api_key == K.ADD_PARTITIONS_TO_TXN:
            if ctx.api_version >= 4:
                return self._route_txn_multi(ctx, req, handle)
            tid = req.get("v3_and_below_transactional_id")
        else:
            tid = req.get("transactional_id")
        if tid is None:       # InitProducerId of an idempotent producer: any worker
            return handle(self.broker, ctx, req)
        return self._to_worker(self.txn_owner(tid), ctx, req, handle)

    def _route_markers(self, ctx, req, handle):
        """WriteTxnMarkers: each partition's markers to its owner (like Produce)."""
        parts = split_markers(req, self.owner)
        me = self.me
        if not parts or set(parts) == {me}:
            return handle(self.broker, ctx, req)
        results: dict[int, Any] = {}
        for w, (sub, _) in parts.items():
            if w != me:
                results[w] = self.forward(w, ctx, sub) or handle(self.broker, ctx, sub)
        if me in parts:
            results[me] = handle(self.broker, ctx, parts[me][0])

        async def gather():
            out = []
            for w, (sub, order) in parts.items():
                try:
                    out.append((order, await _value(results[w])))
                except PeerGone:
                    out.append((order, await _value(handle(self.broker, ctx, sub))))
            return merge_markers(req, out)
        return gather()

    def _route_list_transactions(self, ctx, req, handle):
        return self._broadcast(ctx, req, handle, merge_list_transactions)

    def _route_list_groups(self, ctx, req, handle):
        return self._broadcast(ctx, req, handle, merge_list_groups)

    def _route_log_dirs(self, ctx, req, handle):
        # each worker knows only the partitions it owns
        from workers.handlers.describe_log_dirs import merge
        return self._broadcast(ctx, req, handle, merge)

    def _route_alter_log_dirs(self, ctx, req, handle):
        # every worker gets it; each moves (and answers for) the partitions it owns
        from workers.handlers.alter_replica_log_dirs import merge
        out = self._broadcast(ctx, req, handle, lambda rs: merge(req, rs))
        if inspect.isawaitable(out):
            return out
        return merge(req, [out])

    def _broadcast(self, ctx, req, handle, merge):
        """Asks every live worker (each owns some coordinators) and merges the answers;
        a worker that dies meanwhile is left out, as a broker that is down would be."""
        futs = [f for f in (self.forward(w, ctx, req) for w in self.live_peers()) if f]
        local = handle(self.broker, ctx, req)
        if not futs:
            return local

        async def gather():
            out = [await _value(local)]
            for f in futs:
                try:
                    out.append(await f)
                except PeerGone:
                    pass
            return merge(out)
        return gather()

    # ---- fetch
    def _route_fetch(self, ctx, req, handle):
        from workers.fetch_session import FetchContext
        from workers.handlers import fetch as F
        broker = self.broker
        version = ctx.api_version
        requested, forgotten, unknown_ids = F._requested_partitions(broker, req, version)
        reads = [(cp.topic, cp.partition) for cp in requested]
        epoch = req.get("session_epoch", -1)
        if epoch > 0:
            s = broker.fetch_sessions.sessions.get(req.get("session_id", 0))
            if s is not None:
                reads.extend(s.partitions)
        self._count(reads)
        me = self.me
        if all(self.owner(t, p) == me for t, p in reads):
            return handle(broker, ctx, req)
        fctx = broker.fetch_sessions.new_context(req.get("session_id", 0), epoch,
                                                 requested, forgotten,
                                                 is_follower=F._replica_id(req) >= 0,
                                                 uses_topic_ids=version >= 13)
        if fctx.error_code:
            return {"throttle_time_ms": 0, "error_code": fctx.error_code, "session_id": 0,
                    "responses": []}
        plan = F.FetchPlan(broker, ctx, req, fctx, unknown_ids)
        groups: dict[int, list] = {}
        for cp in fctx.partitions:
            groups.setdefault(self.owner(cp.topic, cp.partition), []).append(cp)
        budget = max(1, plan.max_bytes // max(1, len(groups)))
        part_req = {**req, "max_bytes": budget}

        def part_plan(cps):
            p = _PartPlan(broker, ctx, part_req, FetchContext(cps, None, incremental=False), {})
            return p

        local_cps = groups.pop(me, [])
        found: dict[tuple, dict] = {}
        news = bool(unknown_ids)
        local_plan = part_plan(local_cps) if local_cps else None
        if local_plan is not None:
            lres, ltotal, lerr = local_plan.read_all()
            if lerr or ltotal >= plan.min_bytes:
                news = True
        wait_ms = 0 if (news or plan.max_wait_ms <= 0) else plan.max_wait_ms
        remote: dict[int, Any] = {}
        for w, cps in groups.items():
            sub = fetch_subrequest(req, version, cps, budget, wait_ms, plan.min_bytes)
            fut = self.forward(w, ctx, sub, keys=[(cp.topic, cp.partition) for cp in cps])
            if fut is None:
                for cp, data in part_plan(cps).read_all()[0]:
                    found[(cp.topic, cp.partition)] = data
            else:
                remote[w] = (fut, cps)
        local_op = None
        local_fut = None
        if local_plan is not None:
            if wait_ms > 0 and not news:      # park the local part like any long poll
                local_fut = self.loop.create_future()
                local_op = F.DelayedFetch(local_plan, local_fut)
                broker.fetch_purgatory.try_complete_else_watch(local_op, list(local_op.start_bytes))
            else:
                for cp, data in lres:
                    found[(cp.topic, cp.partition)] = data

        def assemble():
            results = []
            for cp in fctx.partitions:
                data = found.get((cp.topic, cp.partition))
                if data is None:
                    data = part_plan([cp]).read_all()[0][0][1]
                results.append((cp, data))
            return plan.response(results)

        if not remote and local_fut is None:
            return assemble()

        async def finish():
            waiting = {}
            for w, (fut, cps) in remote.items():
                waiting[fut] = ("remote", w, cps)
            if local_fut is not None:
                waiting[local_fut] = ("local", me, local_cps)
            completed = False
            while waiting:
                done, _ = await asyncio.wait(list(waiting), return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    kind, w, cps = waiting.pop(fut)
                    if kind == "local":
                        res = fut.result()
                        for cp, data in res:
                            found[(cp.topic, cp.partition)] = data
                        got = any(d["records"] or d["error_code"] for _, d in res)
                    else:
                        try:
                            body = fut.result()
                        except PeerGone:
                            body = None
                        if body is None:
                            got = True
                            for cp, data in part_plan(cps).read_all()[0]:
                                found[(cp.topic, cp.partition)] = data
                        else:
                            got = fetch_has_news(body)
                            self._collect_fetch(body, version, found, ctx.connection)
                    if got and not completed:
                        completed = True
                        for other, (k2, w2, _) in waiting.items():
                            if k2 == "local":
                                local_op.force_complete()
                            else:
                                self._send_complete(w2, other.rid)
            return assemble()
        return finish()

    def _collect_fetch(self, body: dict, version: int, found: dict, conn=None) -> None:
        for t in body.get("responses") or ():
            if version >= 13:
                name = self.broker.topic_name_for_id(t.get("topic_id"))
            else:
                name = t.get("topic")
            for p in t.get("partitions") or ():
                found[(name, p["partition_index"])] = pin_records(p, conn)

    def _send_complete(self, wid: int, rid: int) -> None:
        link = self.peers.get(wid)
        if link is not None and not link.closed:
            try:
                link.send({"op": "complete", "id": rid})
            except ConnectionError:
                pass

    # ------------------------------------------------------------ owner side
    def on_message(self, peer: int, msg: dict) -> None:
        op = msg.get("op")
        if op == "req":
            self._serve(peer, msg)
        elif op == "resp":
            self._on_response(msg)
        elif op == "complete":
            self._complete(peer, msg["id"])
        else:
            log.warning("mesh: unknown message %r from worker %d", op, peer)

    def _on_response(self, msg: dict) -> None:
        if "oneway" in msg:       # an acks=0 part failed: close the client's connection
            conn = self.conns.get(msg["oneway"])
            if conn is not None:
                log.info("closing %s: acks=0 produce failed on another worker", conn.client_host)
                conn.closed = True
                try:
                    import socket as _s
                    conn.sock.shutdown(_s.SHUT_RDWR)
                except OSError:
                    pass
            return
        entry = self.pending.pop(msg["id"], None)
        if entry is None:
            return
        fut = entry[0]
        if fut.done():
            return
        if "error" in msg:
            fut.set_exception(RuntimeError(f"worker {entry[1]}: {msg['error']}"))
        else:
            fut.set_result(msg["body"])

    def _serve(self, peer: int, msg: dict) -> None:
        from workers.handler_errors import run_guarded
        from workers.handlers import HANDLERS
        self.served += 1
        self.broker.requests_served += 1
        rid, api_key = msg["id"], msg["api_key"]
        oneway = msg.get("oneway")
        ctx = RemoteContext(msg, peer)
        body = msg["body"]
        if api_key == K.PRODUCE:
            raw = msg.pop("raw", None)
            if raw is not None:
                try:
                    attach_records(body, raw)
                except ValueError as e:
                    log.error("mesh: bad produce frame from worker %d (%s): closing the "
                              "channel", peer, e)
                    link = self.peers.get(peer)
                    if link is not None:
                        link.close()
                    return
            for t in body.get("topic_data") or ():
                for p in t.get("partition_data") or ():
                    if isinstance(p.get("records"), (bytes, bytearray)):
                        p["records"] = memoryview(p["records"]) if isinstance(p["records"], bytearray) \
                            else memoryview(bytearray(p["records"]))
        try:
            # a failing handler answers its part's error response (handler_errors.py);
            # only ConnectionAbortedError (a failed acks=0 part) is raised
            result = run_guarded(HANDLERS[api_key].handle, self.broker, ctx, body)
        except Exception as e:
            if oneway is not None:
                self._reply(peer, {"op": "resp", "id": rid, "oneway": oneway})
            else:
                self._reply(peer, {"op": "resp", "id": rid, "error": f"{type(e).__name__}: {e}"})
            return
        if oneway is not None:
            return
        if not inspect.isawaitable(result):
            self._reply(peer, {"op": "resp", "id": rid,
                               "body": sanitize_response(api_key, result)})
            return
        fut = asyncio.ensure_future(result)
        if "keys" in msg:
            self.serving[(peer, rid)] = (result, msg["keys"])

        def done(f):
            self.serving.pop((peer, rid), None)
            if f.cancelled():
                self._reply(peer, {"op": "resp", "id": rid, "error": "cancelled"})
            elif f.exception() is not None:     # guarded: only a closing request gets here
                e = f.exception()
                log.info("serving api %d for worker %d: %r", api_key, peer, e)
                self._reply(peer, {"op": "resp", "id": rid, "error": f"{type(e).__name__}: {e}"})
            else:
                self._reply(peer, {"op": "resp", "id": rid,
                                   "body": sanitize_response(api_key, f.result())})
        fut.add_done_callback(done)

    def _complete(self, peer: int, rid: int) -> None:
        """The front has its answer elsewhere: complete our parked Fetch part now."""
        entry = self.serving.get((peer, rid))
        if entry is None:
            return
        fut, keys = entry
        purgatory = self.broker.fetch_purgatory
        for key in keys:
            for op in purgatory.watching(tuple(key)):
                if getattr(op, "future", None) is fut:
                    op.force_complete()
                    return

    def _reply(self, peer: int, msg: dict) -> None:
        link = self.peers.get(peer)
        if link is None or link.closed:
            return      # the front is gone: nobody to answer
        try:
            link.send(msg)
        except ConnectionError:
            pass

    def close(self) -> None:
        for link in list(self.peers.values()):
            link.close()


def _make_part_plan():
    from workers.handlers import fetch as F

    class _PartPlan(F.FetchPlan):
        """A FetchPlan over one owner's share whose 'response' is the raw
        [(CachedPartition, partition dict)] list (the front assembles the response)."""

        def response(self, results):
            return results
    return _PartPlan


class _LazyPartPlan:
    cls = None

    def __call__(self, *a, **kw):
        if _LazyPartPlan.cls is None:
            _LazyPartPlan.cls = _make_part_plan()
        return _LazyPartPlan.cls(*a, **kw)


_PartPlan = _LazyPartPlan()
