"""Fakes for driving a GroupCoordinator: a clock, a scheduler over it, an appender,
and small client helpers that send requests and collect the (possibly later) responses."""

from __future__ import annotations

import heapq
import itertools

from workers.groups import errors
from workers.groups.consumer_metadata import Assignment, Subscription, encode_assignment, encode_subscription
from workers.groups.coordinator import GroupCoordinator


class FakeClock:
    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class FakeHandle:
    def __init__(self):
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


class FakeScheduler:
    """Callbacks fire in deadline order when the test advances the clock."""

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self._heap = []
        self._seq = itertools.count()

    def schedule(self, delay_ms, callback):
        handle = FakeHandle()
        heapq.heappush(self._heap, (self.clock.now_ms + delay_ms, next(self._seq), handle, callback))
        return handle

    def pending(self) -> int:
        return sum(1 for *_, h, _cb in self._heap if not h.cancelled)

    def advance(self, ms: int) -> None:
        target = self.clock.now_ms + ms
        while self._heap and self._heap[0][0] <= target:
            deadline, _, handle, callback = heapq.heappop(self._heap)
            if handle.cancelled:
                continue
            self.clock.now_ms = max(self.clock.now_ms, deadline)
            callback()
        self.clock.now_ms = target


class FakeAppender:
    """Records every append; answers at once with `error` unless `hold` is set. With
    `refuse` set, refuses the append before writing anything (returns that code and
    never calls back, as a partition that is no longer led here does)."""

    def __init__(self):
        self.batches = []  # [records, txn kwargs, error code once answered]
        self.error = errors.NONE
        self.refuse = errors.NONE
        self.hold = False
        self.held = []

    def __call__(self, records, callback, **txn):
        batch = [list(records), txn, None]
        self.batches.append(batch)
        if self.refuse:
            batch[2] = self.refuse
            return self.refuse
        if self.hold:
            self.held.append((batch, callback))
        else:
            self._answer(batch, callback, self.error)
        return errors.NONE

    @staticmethod
    def _answer(batch, callback, error):
        batch[2] = error
        callback(error)

    def release(self, error=errors.NONE):
        held, self.held = self.held, []
        for batch, cb in held:
            self._answer(batch, cb, error)

    def log(self):
        """The records that made it into the log, in order (what a replay reads)."""
        return [r for records, _, error in self.batches if error == errors.NONE for r in records]


CONFIG = {
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 300000,
    "group.initial.rebalance.delay.ms": 3000,
    "group.max.size": 100,
    "offsets.retention.minutes": 60,
    "offsets.retention.check.interval.ms": 600000,
    "offset.metadata.max.bytes": 32,
}


class Box:
    """Collects responses; `.value` is the one response (asserting there was exactly one)."""

    def __init__(self):
        self.responses = []

    def __call__(self, response):
        self.responses.append(response)

    @property
    def done(self):
        return bool(self.responses)

    @property
    def value(self):
        assert len(self.responses) == 1, f"expected exactly one response, got {self.responses}"
        return self.responses[0]


def make(config=None, loaded=True, **kw):
    clock = FakeClock()
    sched = FakeScheduler(clock)
    app = FakeAppender()
    cfg = dict(CONFIG)
    cfg.update(config or {})
    coord = GroupCoordinator(0, cfg, clock, sched, app, **kw)
    if loaded:
        coord.load([])
    return coord, clock, sched, app


def subscription(*topics, owned=(), generation=-1, user_data=None):
    return encode_subscription(Subscription(list(topics), user_data, list(owned), generation))


def assignment(*tps):
    return encode_assignment(Assignment(list(tps)))


def protocols(*topics, names=("range",), **kw):
    return [{"name": n, "metadata": subscription(*topics, **kw)} for n in names]


def join(coord, group="g", member_id="", *, instance=None, protos=None, version=5,
         session=10000, rebalance=30000, client_id="client", protocol_type="consumer"):
    box = Box()
    req = {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
           "member_id": member_id, "group_instance_id": instance,
           "protocol_type": protocol_type,
           "protocols": protos if protos is not None else protocols("t")}
    coord.join_group(req, version, client_id, "/127.0.0.1", box)
    return box


def join_new(coord, group="g", **kw):
    """A dynamic member's KIP-394 first join: returns the Box of the second JoinGroup."""
    first = join(coord, group, **kw)
    assert first.value["error_code"] == errors.MEMBER_ID_REQUIRED
    return join(coord, group, first.value["member_id"], **kw)


def sync(coord, group, member_id, generation, assignments=(), *, instance=None, version=3,
         protocol_type="consumer", protocol_name="range"):
    box = Box()
    req = {"group_id": group, "generation_id": generation, "member_id": member_id,
           "group_instance_id": instance, "protocol_type": protocol_type,
           "protocol_name": protocol_name,
           "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]}
    coord.sync_group(req, version, box)
    return box


def heartbeat(coord, group, member_id, generation, *, instance=None, version=3):
    box = Box()
    coord.heartbeat({"group_id": group, "generation_id": generation, "member_id": member_id,
                     "group_instance_id": instance}, version, box)
    return box.value["error_code"]


def leave(coord, group, *members, version=3):
    box = Box()
    if version >= 3:
        # each member: a member id, or (member id, group instance id)
        pairs = [x if isinstance(x, tuple) else (x, None) for x in members]
        req = {"group_id": group,
               "members": [{"member_id": m, "group_instance_id": i} for m, i in pairs]}
    else:
        req = {"group_id": group, "member_id": members[0]}
    coord.leave_group(req, version, box)
    return box.value


def commit(coord, group, offsets, *, generation=-1, member_id="", instance=None, version=8,
           leader_epoch=-1, metadata="", retention_ms=-1):
    """offsets: {(topic, partition): offset}"""
    box = Box()
    topics = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                         "committed_leader_epoch": leader_epoch,
                                         "committed_metadata": metadata, "commit_timestamp": -1})
    coord.offset_commit({"group_id": group, "generation_id_or_member_epoch": generation,
                         "member_id": member_id, "group_instance_id": instance,
                         "retention_time_ms": retention_ms,
                         "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                        version, box)
    return box


def commit_errors(box):
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in box.value["topics"] for p in t["partitions"]}


def fetch(coord, group, tps=None, *, version=7, require_stable=False):
    """Returns (top-level error, {(topic, partition): (offset, epoch, metadata, error)})."""
    box = Box()
    topics = None
    if tps is not None:
        grouped = {}
        for t, p in tps:
            grouped.setdefault(t, []).append(p)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in grouped.items()]
    if version >= 8:
        coord.offset_fetch({"groups": [{"group_id": group, "topics": topics}],
                            "require_stable": require_stable}, version, box)
        g = box.value["groups"][0]
        top, topics_out = g["error_code"], g["topics"]
    else:
        coord.offset_fetch({"group_id": group, "topics": topics, "require_stable": require_stable},
                           version, box)
        top, topics_out = box.value.get("error_code", 0), box.value["topics"]
    return top, {(t["name"], p["partition_index"]): (p["committed_offset"], p.get("committed_leader_epoch", -1),
                                                     p["metadata"], p["error_code"])
                 for t in topics_out for p in t["partitions"]}


def form_group(coord, sched, n=2, group="g", topics=("t",), version=5, **kw):
    """n dynamic members join (KIP-394), the initial delay passes, the leader syncs a
    round-robin assignment of 4 partitions per topic. Returns (member ids, generation)."""
    boxes = [join_new(coord, group, protos=protocols(*topics), version=version, **kw) for _ in range(n)]
    # the initial delay is extended once for every delay in which new members arrived
    while not all(b.done for b in boxes):
        sched.advance(coord.config.initial_rebalance_delay_ms)
    results = [b.value for b in boxes]
    assert all(r["error_code"] == 0 for r in results), results
    generation = results[0]["generation_id"]
    leader = results[0]["leader"]
    ids = [r["member_id"] for r in results]
    plan = {m: [] for m in ids}
    for i, p in enumerate(range(4)):
        plan[ids[i % n]].append(p)
    syncs = {}
    for m in ids:
        if m != leader:
            syncs[m] = sync(coord, group, m, generation)
    syncs[leader] = sync(coord, group, leader, generation,
                         [(m, assignment(*[(t, plan[m]) for t in topics])) for m in ids])
    for m in ids:
        assert syncs[m].value["error_code"] == 0
    return ids, generation
