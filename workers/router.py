"""Cross-worker routing: the SO_REUSEPORT front splits requests by owner (ARCHITECTURE §2).

A connection lands on an arbitrary worker, its *front*. When the broker has several
workers the dispatcher hands each decoded request to `Router.route` with its handler
and the `scope` the registry gives it (workers/scope.py, workers/handlers/__init__.py);
the router decides nothing else about where a request goes:

* partition: the request dict is split by owner (`split_partitions`, the placement
  map's owner of each (topic, partition); WriteTxnMarkers per marker per partition,
  `split_markers`); the local part runs through the handler at once, each remote part
  goes as ONE message to its owner over the mesh, which runs its handler on it; the
  parts are merged back in request order (`merge_partitions`: topics and partitions in
  the order the client sent them, errors per partition). Fetch splits itself (its
  session and long poll: workers/handlers/fetch/fanout.py) over this module's
  `forward`, `states` and `fetch_subrequest`. Record bytes
  are never copied between processes for Fetch, and once for Produce (what crosses
  the mesh besides the pickle: workers/payloads.py).
* group / txn: forwarded whole to the worker that owns partition
  `coordinator_partition(id)` of `__consumer_offsets` (groups; TxnOffsetCommit too) or
  `__transaction_state` (transactional ids; InitProducerId without one runs on the
  front); requests naming several (`GROUP_MULTI`, `TXN_MULTI`) are split per
  coordinator and merged in request order.
* cluster: to every worker (ListGroups, ListTransactions, DescribeLogDirs,
  AlterReplicaLogDirs: each answers for what it owns), merged by the scope's `merge`.
* local: runs on the front.

Mesh messages (`workers/mesh.py` framing):

    front -> owner  {"op": "req", "id", "api_key", "version", "body", "client_id",
                     "client_host", ["who"], ["sub"], ["oneway"]}
                    "who": the client connection's (principal, listener name,
                    security protocol), left out when (ANONYMOUS, None, PLAINTEXT)
                    Produce: each partition's "records" is the index of a raw buffer
                    sent after the pickle (`detach_records`/`attach_records`), never
                    pickled; the owner appends from a memoryview of the received frame
                    Fetch: a sessionless request that answers at once
                    (`fetch_subrequest`); "sub": [[topic, partition]] whose state
                    the owner publishes to the front from now on
    owner -> front  {"op": "resp", "id", "body", ["state"]} | {"op": "resp", "id", "error": str}
                    "state" (a "sub" part): its partitions' state as read
    owner -> front  {"op": "state", "parts": [...]}    (workers/partition_states.py)
    front -> owner  {"op": "unsub", "keys": [...]}     (the front's copy dropped them)
    front -> owner  {"op": "served", "parts": [(topic, partition, bytes)]}  every
                    SERVED_REPORT_S when any: bytes of the owner's partitions the front
                    read from their files itself (fanout.py), the owner's bytes out
    "conn", "adopted": a client connection handed to another worker, with its socket
                    (workers/handoff.py, which handles them)

Long polling (Fetch) runs on the front alone: the owners publish the state of the
partitions fronts asked them for (the notification of ARCHITECTURE §2: once per loop
iteration, only the partitions that changed, only to the fronts that asked), and the
front parks the Fetch in its own purgatory, watching those partitions through their
published state; each "state" message checks the keys it names. The timeout runs on
the front's timing wheel.

Failure: a handler that raises on the owner answers its part's error response (the
API's error code on that part's partitions, `workers/handler_errors.py`, logged once by
the owner), which the front merges like any answer. A part whose owner is unreachable
(dead peer, channel closed, or a partition in transit during a move) is answered by
running the *local* handler on it: this worker does not own those partitions/
coordinators, so the handler answers per partition NOT_LEADER_OR_FOLLOWER (or
NOT_COORDINATOR for groups), both retriable; clients refresh metadata and retry, and a
respawned worker is reachable again through the new socket pair the supervisor hands
over (`add_peer`).

Produce with acks=0 forwards with "oneway": the owner answers only if the append
failed, and then the front aborts the client's connection (Kafka's only way to tell an
acks=0 producer), as the local handler does by raising.

The split/merge functions at the top are pure (unit-tested in tests/workers); the
`Router` below them is the forwarding runtime. Forwarded parts run on the owner
through `run_part` (the dispatcher's registry lookup, wired by workers/server.py).
One piece at ~780 lines: the split/merge functions and the runtime that applies them are
one concept (the scope's parts out, their answers merged back); Fetch's fan-out, the
mesh framing and the payloads are already in their own modules.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import weakref
from typing import Any, Callable, NamedTuple

from mpbroker.metadata.model import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from mpbroker.protocol import api_keys
from mpbroker.security.principal import ANONYMOUS
from workers.answers import join, later, settle
from workers.handler_errors import run_guarded
from workers.groups.partitioner import coordinator_partition
from workers.mesh import PeerLink
from workers.partition_states import SERVED_REPORT_S, STATE_IDLE_S, Publisher, RemoteStates
from workers.payloads import detach_records, received_body, sanitize_response
from workers.scope import PARTITION, Scope

log = logging.getLogger(__name__)

OWNER_CACHE = 1 << 16       # cached placement answers (cleared when full)
SHAPE_KEYS = 1 << 16        # partitions in the cached placements of request shapes
# (principal, listener name, security protocol) of a request forwarded without "who"
NOBODY = (ANONYMOUS, None, "PLAINTEXT")


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
    api_keys.PRODUCE: PartSpec("topic_data", "name", "partition_data", "index",
                        "responses", "name", "partition_responses", "index"),
    api_keys.LIST_OFFSETS: PartSpec("topics", "name", "partitions", "partition_index",
                             "topics", "name", "partitions", "partition_index"),
    api_keys.DELETE_RECORDS: PartSpec("topics", "name", "partitions", "partition_index",
                               "topics", "name", "partitions", "partition_index"),
    api_keys.OFFSET_FOR_LEADER_EPOCH: PartSpec("topics", "topic", "partitions", "partition",
                                        "topics", "topic", "partitions", "partition"),
    # request partitions are plain indexes (req_index None)
    api_keys.DESCRIBE_PRODUCERS: PartSpec("topics", "name", "partition_indexes", None,
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
    min_version: int = 0      # the first version that names several (older: one)


# Coordinator APIs that name several groups / transactional ids: split per coordinator
# and merged in request order (OffsetFetch v8+, AddPartitionsToTxn v4+); the others
# name one (`group_id`, `transactional_id`) and go whole to its coordinator.
GROUP_MULTI = {
    api_keys.DESCRIBE_GROUPS: GroupSpec("groups", "groups", False),
    api_keys.DELETE_GROUPS: GroupSpec("groups_names", "results", False),
    api_keys.CONSUMER_GROUP_DESCRIBE: GroupSpec("group_ids", "groups", False),
    api_keys.OFFSET_FETCH: GroupSpec("groups", "groups", True, min_version=8),
}
TXN_MULTI = {
    api_keys.ADD_PARTITIONS_TO_TXN: GroupSpec("transactions", "results_by_transaction", True,
                                       "transactional_id", min_version=4),
    api_keys.DESCRIBE_TRANSACTIONS: GroupSpec("transactional_ids", "transaction_states", False,
                                       "transactional_id"),
}
# The one transactional id of a request that names one, where it is not `transactional_id`
TXN_ID_FIELD = {api_keys.ADD_PARTITIONS_TO_TXN: "v3_and_below_transactional_id"}


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


def fetch_subrequest(req: dict, version: int, cps: list, max_bytes: int, min_bytes: int) -> dict:
    """A sessionless Fetch of `cps` (CachedPartitions, in order) for their owner, which
    answers it at once (max_wait_ms 0: the front long-polls, fanout.py)."""
    topics: list[dict] = []
    for cp in cps:
        key = cp.topic_id if version >= 13 else cp.topic
        if not topics or topics[-1]["_k"] != key:
            entry = {"_k": key, "partitions": []}
            entry["topic_id" if version >= 13 else "topic"] = key
            topics.append(entry)
        p = {"partition": cp.partition, "fetch_offset": cp.fetch_offset,
             "partition_max_bytes": cp.max_bytes, "log_start_offset": cp.log_start_offset,
             "current_leader_epoch": cp.current_leader_epoch,
             "last_fetched_epoch": cp.last_fetched_epoch}
        topics[-1]["partitions"].append(p)
    for t in topics:
        del t["_k"]
    sub = {k: v for k, v in req.items() if k not in ("topics", "forgotten_topics_data")}
    sub.update(topics=topics, forgotten_topics_data=[], session_id=0, session_epoch=-1,
               max_bytes=max_bytes, max_wait_ms=0, min_bytes=min_bytes)
    return sub


# ============================================================================ the router
class PeerGone(Exception):
    pass


class RemoteContext:
    """The RequestContext of a request forwarded by a front (no connection here)."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "client_host",
                 "connection", "forwarded_from", "principal", "listener_name",
                 "security_protocol")

    def __init__(self, msg: dict, peer: int):
        self.api_key = msg["api_key"]
        self.api_version = msg["version"]
        self.correlation_id = 0
        self.client_id = msg.get("client_id")
        self.client_host = msg.get("client_host", "")
        self.connection = None
        self.forwarded_from = peer
        # the front's connection identity (issue #17), for handlers that check it
        self.principal, self.listener_name, self.security_protocol = msg.get("who", NOBODY)


class _Shape:
    """A request shape's placement (`Router.placed`): {key: owner}, the keys counted
    (those that exist, each occurrence), whether every key is the front's own, the
    one other worker that owns every key (`sole`, else None), and the requests of this
    shape not yet counted per partition."""

    __slots__ = ("owners", "counted", "mine", "sole", "hits")

    def __init__(self, owners: dict, counted, mine: bool, sole: int | None = None):
        self.owners = owners
        self.counted = counted
        self.mine = mine
        self.sole = sole
        self.hits = 0


class Router:
    """`run_part(ctx, body)`: a forwarded part's answer (now or later, workers/answers.py)
    through the registry, failures answered as the API's error response; only
    ConnectionAbortedError is raised (a failed acks=0 part)."""

    def __init__(self, broker, run_part: Callable | None = None):
        self.broker = broker
        self.run_part = run_part
        self.peers: dict[int, Any] = {}            # worker id -> PeerLink
        self.pending: dict[int, tuple[asyncio.Future, int]] = {}   # id -> (future, peer)
        self._asking: dict[int, list] = {}      # id -> "sub" keys of a Fetch part in flight
        # Fetch across workers: what other workers published of their partitions (the
        # front's copy) and, as an owner, who hears of ours (workers/partition_states.py)
        self.states = RemoteStates()
        self.publisher: Publisher | None = None
        self._sweeper = None        # the timer of `_sweep_states`
        self._reporter = None       # the timer of `_report_served`
        self.conns = weakref.WeakValueDictionary()        # acks=0 token -> Connection
        self.handoff = None         # workers/handoff.Handoff, set by the server
        self.loop: asyncio.AbstractEventLoop | None = None
        self._next_id = 0
        self.forwarded = 0          # parts this worker sent to owners
        self.served = 0             # parts this worker ran for fronts
        # partition-level requests this worker received as the front, per (topic,
        # partition) whoever owns it: the request-rate input of placement balancing
        # (mpbroker/controller/balance.py; the controller sums the workers' counts)
        self._requests: collections.Counter = collections.Counter()
        # `placed`'s placements by request shape (its keys, in order), valid while the
        # owners are those of `_shapes_token` (`owners_token`); each counts its requests
        # until they are added to `_requests` (`_fold_shapes`)
        self._shapes: dict[tuple, _Shape] = {}
        self._shape_keys = 0        # the partitions of the shapes cached
        self._shapes_token = None
        self._owners_md = None      # the metadata and placement table `_owners` is of
        self._owners_of = None
        self._owners: dict[tuple[str, int], int] = {}
        # bumped whenever a peer's link opens or closes (`owners_token`)
        self.links_changed = 0
        self.routes = {"partition": self._route_partitions, "group": self._route_group,
                       "txn": self._route_txn, "cluster": self._broadcast}

    # ------------------------------------------------------------ peers
    @property
    def me(self) -> int:
        return self.broker.worker_id

    @property
    def active(self) -> bool:
        return self.broker.placement.num_workers > 1

    def start(self, loop) -> None:
        self.loop = loop
        self.publisher = Publisher(self.broker.partition, self._send_state, loop.call_soon)
        self.broker.fetch_purgatory.on_check = self.publisher.changed
        self._sweeper = loop.call_later(STATE_IDLE_S, self._sweep_states)
        self._reporter = loop.call_later(SERVED_REPORT_S, self._report_served)
        for link in self.peers.values():
            if link.loop is None:
                link.attach(loop)

    def add_peer(self, wid: int, sock) -> None:
        """A mesh socket to worker `wid` (at boot, or a new one after `wid` respawned)."""
        old = self.peers.pop(wid, None)
        if old is not None:
            old.close()
        link = PeerLink(sock, lambda m: self.on_message(wid, m), self._closed)
        link.worker = wid
        self.peers[wid] = link
        self.links_changed += 1
        if self.loop is not None:
            link.attach(self.loop)

    def _closed(self, link) -> None:
        wid = link.worker
        self.links_changed += 1
        if self.peers.get(wid) is link:
            del self.peers[wid]
        for rid, (fut, peer) in list(self.pending.items()):
            if peer == wid:
                del self.pending[rid]
                self._asking.pop(rid, None)
                if not fut.done():
                    fut.set_exception(PeerGone(f"worker {wid} is gone"))
        if self.publisher is not None:
            self.publisher.unsubscribe_peer(wid)
        if self.handoff is not None:
            self.handoff.peer_gone(wid)
        purgatory = self.broker.fetch_purgatory
        for key in self.states.drop_owner(wid):
            purgatory.check_and_complete(key)     # its long polls ask again (and fail over)
        log.warning("worker %d: lost the mesh channel to worker %d", self.me, wid)

    def live_peers(self) -> list[int]:
        return [w for w, link in self.peers.items() if not link.closed]

    # ------------------------------------------------------------ owners
    def owner(self, topic: str, partition: int) -> int:
        """The worker to send (topic, partition) to; `me` when that is this worker, when
        the partition is unknown (the local handler answers the error), in transit, or
        its owner unreachable (the local handler answers NOT_LEADER_OR_FOLLOWER)."""
        md = self.broker.metadata
        if md is None:
            return self.me
        key = (topic, partition)
        w = self._owners_now(md).get(key)
        if w is None:
            w = self._placed(md, key)
            if w is None:
                return self.me
        return self._live(w)

    def owners_token(self) -> tuple:
        """What `owner` and `placed` answer from: the metadata and placement objects
        (replaced, never changed) and the links (`links_changed`); `owners_same(token)`
        says whether they would answer as when the token was taken."""
        return self.broker.metadata, self.broker.placement, self.links_changed

    def owners_same(self, token: tuple) -> bool:
        md, placement, links = token
        b = self.broker
        return b.metadata is md and b.placement is placement and self.links_changed == links

    def _owners_now(self, md) -> dict:
        """{(topic, partition): placement's owner, `me` for in transit} of partitions
        that exist: cached while the metadata and the placement table are the same
        objects (both are replaced, never changed, when they change)."""
        placement = self.broker.placement
        if md is not self._owners_md or placement is not self._owners_of:
            self._owners_md, self._owners_of, self._owners = md, placement, {}
        return self._owners

    def _placed(self, md, key: tuple) -> int | None:
        """`_owners_now`'s entry for `key`, None if the partition does not exist."""
        t = md.topics.get(key[0])
        if t is None or key[1] not in t.partitions:
            return None
        w = self.broker.placement.owner(*key)
        if len(self._owners) >= OWNER_CACHE:
            self._owners.clear()
        w = self._owners[key] = self.me if w < 0 else w
        return w

    def _live(self, w: int) -> int:
        if w == self.me:
            return w
        link = self.peers.get(w)
        return w if link is not None and not link.closed else self.me

    def placed(self, keys: list, remember: bool = True) -> "_Shape":
        """{(topic, partition): `owner`} of `keys` (`owners`, not to be changed: it is
        shared), counted as `count` does (each occurrence of a partition that exists),
        and whether they are all this worker's (`mine`). A consumer sends the same partitions in every sessionless Fetch: each shape (the
        keys in order) is placed once while the owners stay as they are
        (`owners_token`), and counted by one increment per request, added to the
        per-partition counts when those are read (`partition_requests`). `remember`
        False: a shape unlikely to come again (an incremental Fetch's), not cached."""
        md = self.broker.metadata
        if md is None:
            return _Shape(dict.fromkeys(keys, self.me), (), True)
        if not remember:
            entry = self._place(md, keys)
            count = self._requests
            for key in entry.counted:
                count[key] += 1
            return entry
        token = self._shapes_token
        if token is None or not self.owners_same(token):
            self._forget_shapes()
            self._shapes_token = self.owners_token()
        shape = tuple(keys)
        entry = self._shapes.get(shape)
        if entry is None:
            if self._shape_keys + len(shape) > SHAPE_KEYS:
                self._forget_shapes()
            entry = self._shapes[shape] = self._place(md, keys)
            self._shape_keys += len(shape)
        entry.hits += 1
        return entry

    def _forget_shapes(self) -> None:
        self._fold_shapes()
        self._shapes.clear()
        self._shape_keys = 0

    def _place(self, md, keys) -> "_Shape":
        me, owners, live = self.me, self._owners_now(md), self._live
        out = {}
        counted = []
        lives: dict[int, int] = {}      # each other owner's link looked at once per call
        for key in keys:
            w = owners.get(key)
            if w is None:
                w = self._placed(md, key)
                if w is None:
                    out[key] = me
                    continue
            counted.append(key)
            if w != me:
                lw = lives.get(w)
                if lw is None:
                    lw = lives[w] = live(w)
                w = lw
            out[key] = w
        ws = set(out.values())
        sole = ws.pop() if len(ws) == 1 else None
        return _Shape(out, counted, sole == me or not out, None if sole == me else sole)

    def _fold_shapes(self) -> None:
        """The requests counted per shape into the per-partition counts."""
        count = self._requests
        for entry in self._shapes.values():
            n = entry.hits
            if n:
                entry.hits = 0
                for key in entry.counted:
                    count[key] += n

    @property
    def partition_requests(self) -> collections.Counter:
        """Partition-level requests this worker received as the front, per (topic,
        partition) whoever owns it: the request-rate input of placement balancing."""
        self._fold_shapes()
        return self._requests

    def _coordinator_key(self, topic: str, key: str | None) -> tuple[str, int] | None:
        """(internal topic, partition) of the coordinator of `key`, None when unknown."""
        md = self.broker.metadata
        t = md.topics.get(topic) if md is not None else None
        if t is None or not t.partitions or not key:
            return None
        return topic, coordinator_partition(key, t.num_partitions)

    def group_owner(self, group_id: str) -> int:
        tp = self._coordinator_key(OFFSETS_TOPIC, group_id)
        return self.me if tp is None else self.owner(*tp)

    def txn_owner(self, transactional_id: str) -> int:
        tp = self._coordinator_key(TRANSACTION_STATE_TOPIC, transactional_id)
        return self.me if tp is None else self.owner(*tp)

    # ------------------------------------------------------------ front side
    def route(self, ctx, req: dict, handle: Callable, scope: Scope):
        """The answer of `req` (now or later) as `scope` places it. `handle` is the
        API's handler, unguarded: a request that runs here whole returns its answer as
        the handler gives it (a failure now or later is the dispatcher's to answer, as
        with one worker, and an answer later stays a future: no task guards it); a part
        that runs here is guarded (`run_guarded`: its failure answers the API's error
        for that part, merged with the others)."""
        fn = self.routes.get(scope.kind)
        if fn is None or not self.active:
            return handle(self.broker, ctx, req)
        spec = PART_SPECS.get(ctx.api_key) if scope is PARTITION else None
        if spec is not None:
            self.count((t[spec.req_name], p if spec.req_index is None else p[spec.req_index])
                       for t in req.get(spec.req_topics) or () for p in t[spec.req_parts])
        return fn(ctx, req, handle, scope)

    def count(self, keys) -> None:
        """Count requests of (topic, partition) `keys` (placement balancing's input),
        those of partitions that exist only: the counts never grow with the names
        clients send."""
        md = self.broker.metadata
        if md is None:
            return
        topics, count = md.topics, self._requests
        owners = self._owners_now(md)       # partitions known to exist
        for key in keys:
            if key in owners:
                count[key] += 1
                continue
            t = topics.get(key[0])
            if t is not None and key[1] in t.partitions:
                count[key] += 1

    def request_counts(self) -> list[list]:
        """[[topic, partition, requests]] for the controller's stats; the counts of
        partitions deleted since are dropped here."""
        md = self.broker.metadata
        topics = md.topics if md is not None else {}
        out = []
        counts = self.partition_requests
        for key, n in list(counts.items()):
            t = topics.get(key[0])
            if t is None or key[1] not in t.partitions:
                del counts[key]
            else:
                out.append([key[0], key[1], n])
        return out

    def forward(self, wid: int, ctx, body: dict, oneway: bool = False, sub_keys=None):
        """Send one part to its owner; a future of the owner's response dict (failing
        with PeerGone if the owner goes), or None if the owner cannot be reached (the
        caller answers the part locally). `oneway` (acks=0): True once sent. `sub_keys`
        (a Fetch part): the partitions whose state the owner publishes to this worker
        from now on, sent before its answer."""
        link = self.peers.get(wid)
        if link is None or link.closed:
            return None
        self._next_id += 1
        rid = self._next_id
        body, raw = detach_records(ctx.api_key, body)
        msg = {"op": "req", "id": rid, "api_key": ctx.api_key, "version": ctx.api_version,
               "body": body, "client_id": ctx.client_id, "client_host": ctx.client_host}
        who = (getattr(ctx, "principal", ANONYMOUS), getattr(ctx, "listener_name", None),
               getattr(ctx, "security_protocol", "PLAINTEXT"))
        if who != NOBODY:
            msg["who"] = who
        if sub_keys is not None:
            msg["sub"] = sub_keys
            self.states.used.update(sub_keys)     # read now: not swept before its answer
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
            if sub_keys is not None:
                self._asking[rid] = sub_keys
        try:
            link.send(msg, raw)
        except ConnectionError:
            self.pending.pop(rid, None)
            self._asking.pop(rid, None)
            return None
        if oneway:
            # no answer tells that an acks=0 part was lost: it leaves now, not with the
            # iteration's batch, so that a dead owner shows here (the part then runs
            # locally and fails, which closes the client's connection)
            link.write_batched()
            if link.closed:
                return None
        self.forwarded += 1
        if oneway:
            return True
        fut.rid = rid
        return fut

    def _gather(self, ctx, handle, parts: dict, results: dict, merge: Callable):
        """A future of the merged answer of `parts` ({worker: sub-request}) from
        `results` ({worker: answer now or later}), completed by the answers' callbacks
        (`join`: no task per request): a part whose owner went meanwhile runs here."""
        order = list(parts)

        def recover(i: int, exc: BaseException):
            if not isinstance(exc, PeerGone):
                raise exc
            return run_guarded(handle, self.broker, ctx, parts[order[i]])
        return join([results[w] for w in order], merge, recover)

    def _spread(self, ctx, handle, parts: dict, oneway: bool = False) -> dict:
        """{worker: answer now or later} of each part: forwarded, or run here when it is
        ours or its owner cannot be reached."""
        me = self.me
        results: dict[int, Any] = {}
        for w, sub in parts.items():
            if w != me:
                fut = self.forward(w, ctx, sub, oneway=oneway)
                # unreachable: answered locally (NOT_LEADER_OR_FOLLOWER)
                results[w] = fut if fut is not None else run_guarded(handle, self.broker,
                                                                     ctx, sub)
        if me in parts:
            results[me] = run_guarded(handle, self.broker, ctx, parts[me])
        return results

    def _route_partitions(self, ctx, req, handle, scope):
        if scope.fan_out is not None:
            return scope.fan_out(self, ctx, req, handle)
        spec = PART_SPECS.get(ctx.api_key)
        if spec is None:            # per marker, then per partition (WriteTxnMarkers)
            return self._route_markers(ctx, req, handle)
        parts = split_partitions(req, spec, self.owner)
        produce = ctx.api_key == api_keys.PRODUCE
        if produce:
            conn = ctx.connection
            if conn is not None and conn.on_move is not None:
                # a producer that moves to the worker its requests go to whole
                # (workers/handoff.py); an acks=0 one stays (its failure closes it here)
                if len(parts) == 1 and self.me not in parts and req.get("acks") != 0:
                    conn.produced_to(next(iter(parts)))
                elif conn.move_streak:
                    conn.move_streak = 0
        if not parts or set(parts) == {self.me}:
            return handle(self.broker, ctx, req)
        oneway = produce and req.get("acks") == 0
        results = self._spread(ctx, handle, parts, oneway)
        if oneway:
            return None
        if not any(later(r) for r in results.values()):
            return merge_partitions(req, spec, [results[w] for w in parts])
        return self._gather(ctx, handle, parts, results,
                            lambda out: merge_partitions(req, spec, out))

    def _route_markers(self, ctx, req, handle):
        """WriteTxnMarkers: each partition's markers to its owner (like Produce)."""
        split = split_markers(req, self.owner)
        if not split or set(split) == {self.me}:
            return handle(self.broker, ctx, req)
        parts = {w: sub for w, (sub, _) in split.items()}
        orders = [order for _, order in split.values()]
        return self._gather(ctx, handle, parts, self._spread(ctx, handle, parts),
                            lambda out: merge_markers(req, list(zip(orders, out))))

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
                return await settle(handle(self.broker, ctx, req))
        return wait()

    def _split_by_coordinator(self, ctx, req, handle, spec, owner):
        """Batched coordinator requests (OffsetFetch v8+, AddPartitionsToTxn v4+): one
        sub-request per owning worker, answers merged back in the request's order."""
        parts = split_groups(req, spec, owner)
        if not parts or set(parts) == {self.me}:
            return handle(self.broker, ctx, req)
        return self._gather(ctx, handle, parts, self._spread(ctx, handle, parts),
                            lambda out: merge_groups(req, spec, out))

    def _route_group(self, ctx, req, handle, scope):
        spec = GROUP_MULTI.get(ctx.api_key)
        if spec is not None and ctx.api_version >= spec.min_version:
            return self._split_by_coordinator(ctx, req, handle, spec, self.group_owner)
        gid = req.get("group_id")
        tp = self._coordinator_key(OFFSETS_TOPIC, gid)
        if tp is not None:
            self._requests[tp] += 1
        return self._to_worker(self.owner(*tp) if tp is not None else self.me,
                               ctx, req, handle)

    def _route_txn(self, ctx, req, handle, scope):
        spec = TXN_MULTI.get(ctx.api_key)
        if spec is not None and ctx.api_version >= spec.min_version:
            return self._split_by_coordinator(ctx, req, handle, spec, self.txn_owner)
        tid = req.get(TXN_ID_FIELD.get(ctx.api_key, "transactional_id"))
        if tid is None:       # InitProducerId of an idempotent producer: any worker
            return handle(self.broker, ctx, req)
        return self._to_worker(self.txn_owner(tid), ctx, req, handle)

    def _broadcast(self, ctx, req, handle, scope):
        """Asks every live worker (each owns some partitions or coordinators) and merges
        the answers; a worker that dies meanwhile is left out, as a broker that is down
        would be."""
        futs = [f for f in (self.forward(w, ctx, req) for w in self.live_peers()) if f]
        local = run_guarded(handle, self.broker, ctx, req)
        if not futs and not later(local):
            return scope.merge(req, [local])

        async def gather():
            out = [await settle(local)]
            for f in futs:
                try:
                    out.append(await f)
                except PeerGone:
                    pass
            return scope.merge(req, out)
        return gather()

    # ------------------------------------------------------------ owner side
    def on_message(self, peer: int, msg: dict) -> None:
        op = msg.get("op")
        if op == "req":
            self._serve(peer, msg)
        elif op == "resp":
            self._on_response(peer, msg)
        elif op == "state":
            self._on_state(peer, msg["parts"])
        elif op == "unsub":
            if self.publisher is not None:
                self.publisher.unsubscribe(peer, msg["keys"])
        elif op == "served":
            partition = self.broker.partition
            for topic, index, n in msg["parts"]:
                p = partition(topic, index)
                if p is not None:
                    p.bytes_out += n
        elif op == "conn":
            link = self.peers.get(peer)
            fd = link.take_fd() if link is not None and link.fds else None
            if self.handoff is not None:
                self.handoff.received(peer, msg, fd)
            else:
                if fd is not None:
                    os.close(fd)
                self.reply(peer, {"op": "adopted", "id": msg.get("id")})
        elif op == "adopted":
            if self.handoff is not None:
                self.handoff.adopted(msg)
        else:
            log.warning("mesh: unknown message %r from worker %d", op, peer)

    def _on_response(self, peer: int, msg: dict) -> None:
        if "oneway" in msg:       # an acks=0 part failed: close the client's connection
            conn = self.conns.get(msg["oneway"])
            if conn is not None:
                log.info("closing %s: acks=0 produce failed on another worker", conn.client_host)
                conn.abort()
            return
        state = msg.get("state")
        if state is not None:       # the copy first: it checks the front's parked Fetches
            self._on_state(peer, state, subscribed=True)
        if self._asking:
            self._asking.pop(msg["id"], None)
        entry = self.pending.pop(msg["id"], None)
        if entry is None:
            return
        fut = entry[0]
        if fut.done():
            return
        if "error" in msg:
            fut.set_exception(RuntimeError(f"worker {entry[1]}: {msg['error']}"))
        else:
            fut.state = state       # what the part was read at: where its park counts from
            fut.set_result(msg["body"])

    def _serve(self, peer: int, msg: dict) -> None:
        self.served += 1
        self.broker.requests_served += 1
        rid, api_key = msg["id"], msg["api_key"]
        oneway = msg.get("oneway")
        ctx = RemoteContext(msg, peer)
        sub = msg.get("sub")
        state = self.publisher.subscribe(peer, sub) if sub and self.publisher else None
        try:
            body = received_body(api_key, msg["body"], msg.pop("raw", None))
        except ValueError as e:
            log.error("mesh: bad produce frame from worker %d (%s): closing the "
                      "channel", peer, e)
            link = self.peers.get(peer)
            if link is not None:
                link.close()
            return
        try:
            # a failing handler answers its part's error response (handler_errors.py);
            # only ConnectionAbortedError (a failed acks=0 part) is raised
            result = self.run_part(ctx, body)
        except Exception as e:
            if state:           # no answer brings the front a copy: nothing to publish
                self.publisher.unsubscribe(peer, sub)
            if oneway is not None:
                self.reply(peer, {"op": "resp", "id": rid, "oneway": oneway})
            else:
                self.reply(peer, {"op": "resp", "id": rid, "error": f"{type(e).__name__}: {e}"})
            return
        if oneway is not None:
            return
        if not later(result):
            reply = {"op": "resp", "id": rid, "body": sanitize_response(api_key, result)}
            if state is not None:
                # the state the part was read at (the same moment: nothing ran between)
                reply["state"] = state
            self.reply(peer, reply)
            return
        if state:       # (a Fetch part answers at once: not expected) no copy at the front
            self.publisher.unsubscribe(peer, sub)
        fut = asyncio.ensure_future(result)

        def done(f):
            if f.cancelled():
                self.reply(peer, {"op": "resp", "id": rid, "error": "cancelled"})
            elif f.exception() is not None:     # guarded: only a closing request gets here
                e = f.exception()
                log.info("serving api %d for worker %d: %r", api_key, peer, e)
                self.reply(peer, {"op": "resp", "id": rid, "error": f"{type(e).__name__}: {e}"})
            else:
                self.reply(peer, {"op": "resp", "id": rid,
                                   "body": sanitize_response(api_key, f.result())})
        fut.add_done_callback(done)

    def _send_state(self, peer: int, parts: list) -> None:
        """Publish `parts` ([(topic, partition, state | None)]) to front `peer`."""
        self.reply(peer, {"op": "state", "parts": parts})

    def _on_state(self, peer: int, parts: list, subscribed: bool = False) -> None:
        """Owner `peer` published `parts` (`subscribed`: with the answer that
        subscribed them): our long polls watching them check them."""
        purgatory = self.broker.fetch_purgatory
        for key in self.states.update(peer, parts, subscribed):
            purgatory.check_and_complete(key)

    def forget_states(self, owner: int, keys) -> None:
        """The front's copies of `keys` (`owner`'s partitions) are no longer wanted here
        (the connection that read them moved to their owner, workers/handoff.py): those
        no parked Fetch watches and no part in flight subscribes are dropped now, and
        the owner told, rather than by the sweep a minute or two later (meanwhile every
        append to them would cost a "state" message to this worker). Another consumer
        of them here that comes later asks the owner again, which subscribes them."""
        purgatory = self.broker.fetch_purgatory
        asking = {k for ks in self._asking.values() for k in ks}
        dropped = self.states.forget(owner, [k for k in keys if k not in asking
                                             and not purgatory.watched(k)])
        if dropped:
            self.reply(owner, {"op": "unsub", "keys": dropped})

    def _sweep_states(self) -> None:
        """Every STATE_IDLE_S: drop the copies no Fetch read, and tell their owners; a
        Fetch still parked on one (max_wait_ms over the interval) wakes and asks."""
        purgatory = self.broker.fetch_purgatory
        for owner, keys in self.states.sweep().items():
            for key in keys:
                purgatory.check_and_complete(key)
            link = self.peers.get(owner)
            if link is not None and not link.closed:
                try:
                    link.send({"op": "unsub", "keys": keys})
                except ConnectionError:
                    pass
        self._sweeper = self.loop.call_later(STATE_IDLE_S, self._sweep_states)

    def _report_served(self) -> None:
        """Every SERVED_REPORT_S: `_tell_served`."""
        self._tell_served()
        self._reporter = self.loop.call_later(SERVED_REPORT_S, self._report_served)

    def _tell_served(self) -> None:
        """Tell each owner the bytes of its partitions this front read from their
        files since last told (its partitions' bytes out)."""
        for owner, parts in self.states.take_served().items():
            self.reply(owner, {"op": "served", "parts": parts})

    def reply(self, peer: int, msg: dict) -> None:
        """Send `msg` to worker `peer` (this iteration's batch), unless it is gone."""
        link = self.peers.get(peer)
        if link is None or link.closed:
            return      # the front is gone: nobody to answer
        try:
            link.send(msg)
        except ConnectionError:
            pass

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._reporter is not None:
            self._reporter.cancel()
            self._tell_served()
        for link in list(self.peers.values()):
            if not link.closed:
                link.write_batched()    # this iteration's answers still leave
            link.close()
