"""Fetch (key 1), v0-v17.

Flow (Kafka's ReplicaManager.fetchMessages):
1. Resolve the fetch session context (workers/fetch_session.py): which partitions this
   request reads, and whether the response is incremental.
2. Read every partition once (`FetchPlan.read_all`, plan.py).
3. Answer now if the timeout is 0, if `min_bytes` is reached, if any partition has an
   error, or if no partition was asked for; otherwise park a DelayedFetch in the fetch
   purgatory, watching every partition read (`park`). Appends call
   `check_and_complete(key)`; the operation completes once the bytes appended since it
   started reach `min_bytes` (or a watched partition went away; a check recounts only
   the partition that changed), or when `max_wait_ms` expires, and then reads again. A parked read_committed fetch counts appended bytes
   only once the LSO moved past where it was when it parked (COMMIT/ABORT markers wake
   it).

With several workers the front splits a Fetch by partition owner and long-polls it
itself, the other workers' partitions through the state their owners publish
(`fan_out`, fanout.py; the registry names it as Fetch's partition scope).

A sessionless consumer Fetch (librdkafka's: every partition, every time) of v10+ that
this worker serves whole goes through its connection's memory of the last one
(memo.py): only the partitions whose entry changed or that were checked since are
read, and at `min_bytes` 1 it parks on that memory instead of a watch list per
partition.

Modules: plan.py (the reads and the response), fanout.py (the front's split), memo.py
(the connection's memory of its last Fetch).
"""
from __future__ import annotations

from workers.handlers.fetch.fanout import fan_out
from workers.handlers.fetch.memo import drop, resolve
from workers.handlers.fetch.plan import serve

__all__ = ["handle", "fan_out"]


def handle(broker, ctx, req):
    requested, forgotten, unknown_ids, memo = resolve(broker, ctx, req)
    try:
        return serve(broker, ctx, req, requested, forgotten, unknown_ids, memo)
    except BaseException:       # the dispatcher answers the failure; the memo goes
        drop(ctx, memo)
        raise
