"""The front's side of a Fetch split across workers (ARCHITECTURE §2; the router calls
`fan_out` for Fetch, its partition scope in the registry).

The front keeps the incremental fetch session (KIP-227) and resolves which partitions
the request reads; it reads its own partitions itself and forwards the others as
*sessionless* Fetch requests (session_epoch -1, `router.fetch_subrequest`) with a share
of `max_bytes`. Owners answer FileSlices with fd=-1; each answer's slices are pinned to
this connection's handles as it arrives (`pin_records`, workers/payloads.py). The parts
of an incremental session tell the owner what the client last saw of each partition,
and the owner answers only the partitions with news (`payloads.drop_unchanged`): the
others are filled in here as unchanged (`as_known`), and the session's response leaves
them out.

Long polling: the parts are forwarded with the request's max_wait_ms/min_bytes, each
owner parks its part in its own fetch purgatory (woken by its appends); the local part
is parked here (`plan.park`). When the first part answers with data or an error, the
front tells the other owners to answer now (`router.send_complete`) and force-completes
its own parked part, and answers once all parts are in. An owner that is gone has its
part read here (this worker does not own those partitions: NOT_LEADER_OR_FOLLOWER).
"""
from __future__ import annotations

import asyncio

from workers.handlers.fetch.plan import FetchPlan, PartPlan, park, replica_id, requested_partitions
from workers.payloads import pin_records
from workers.router import PeerGone, fetch_has_news, fetch_subrequest


def fan_out(router, ctx, req, handle):
    """Fetch across workers: the answer now, or an awaitable of it."""
    broker = router.broker
    version = ctx.api_version
    requested, forgotten, unknown_ids = requested_partitions(broker, req, version)
    reads = [(cp.topic, cp.partition) for cp in requested]
    epoch = req.get("session_epoch", -1)
    if epoch > 0:
        s = broker.fetch_sessions.sessions.get(req.get("session_id", 0))
        if s is not None:
            reads.extend(s.partitions)
    owners = router.place(reads)      # counted for placement balancing, and placed
    me = router.me
    if all(w == me for w in owners.values()):
        return handle(broker, ctx, req)
    fctx = broker.fetch_sessions.new_context(req.get("session_id", 0), epoch,
                                             requested, forgotten,
                                             is_follower=replica_id(req) >= 0,
                                             uses_topic_ids=version >= 13)
    if fctx.error_code:
        return {"throttle_time_ms": 0, "error_code": fctx.error_code, "session_id": 0,
                "responses": []}
    plan = FetchPlan(broker, ctx, req, fctx, unknown_ids)
    groups: dict[int, list] = {}
    for cp in fctx.partitions:
        w = owners.get((cp.topic, cp.partition))
        groups.setdefault(router.owner(cp.topic, cp.partition) if w is None else w, []).append(cp)
    budget = max(1, plan.max_bytes // max(1, len(groups)))
    part_req = {**req, "max_bytes": budget}

    def read_here(cps):
        return PartPlan(broker, ctx, part_req, cps).read_all()[0]

    local_cps = groups.pop(me, [])
    found: dict[tuple, dict] = {}
    news = bool(unknown_ids)
    local_plan = PartPlan(broker, ctx, part_req, local_cps) if local_cps else None
    if local_plan is not None:
        lres, ltotal, lerr = local_plan.read_all()
        if lerr or ltotal >= plan.min_bytes:
            news = True
    wait_ms = 0 if (news or plan.max_wait_ms <= 0) else plan.max_wait_ms
    remote: dict = {}
    known = fctx.incremental
    # an incremental session's partitions an owner leaves out of its answer (nothing
    # new: `payloads.drop_unchanged`) are answered as the client was last told, which
    # the session's response leaves out in turn
    unchanged: set[tuple] = set()
    for w, cps in groups.items():
        sub = fetch_subrequest(req, version, cps, budget, wait_ms, plan.min_bytes, known)
        # keys: where the owner finds the part's op if it parks (it watches them all)
        fut = router.forward(w, ctx, sub, keys=[(cps[0].topic, cps[0].partition)])
        if fut is None:
            for cp, data in read_here(cps):
                found[(cp.topic, cp.partition)] = data
        else:
            remote[w] = (fut, cps)
            if known:
                unchanged.update((cp.topic, cp.partition) for cp in cps)
    local_op = None
    local_fut = None
    if local_plan is not None:
        if wait_ms > 0 and not news:      # park the local part like any long poll
            local_fut, local_op = park(local_plan)
        else:
            for cp, data in lres:
                found[(cp.topic, cp.partition)] = data

    def assemble():
        results = []
        for cp in fctx.partitions:
            key = (cp.topic, cp.partition)
            data = found.get(key)
            if data is None and key in unchanged:
                data = as_known(cp, plan.isolation_level)
            if data is None:
                data = read_here([cp])[0][1]
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
                        for cp, data in read_here(cps):
                            found[(cp.topic, cp.partition)] = data
                    else:
                        got = fetch_has_news(body)
                        if body.get("error_code"):      # a failed part: nothing assumed
                            unchanged.difference_update((cp.topic, cp.partition) for cp in cps)
                        collect(broker, body, version, found, ctx.connection)
                if got and not completed:
                    completed = True
                    for other, (k2, w2, _) in waiting.items():
                        if k2 == "local":
                            local_op.force_complete()
                        else:
                            router.send_complete(w2, other.rid)
        return assemble()
    return finish()


def as_known(cp, isolation_level: int) -> dict | None:
    """The answer of session partition `cp` as the client was last told it (the
    session's cached offsets, no records); None if it was never told (the owner
    always answers those: `router.fetch_subrequest` sends no "known" for them)."""
    if cp.last_high_watermark < 0:
        return None
    return {"partition_index": cp.partition, "error_code": 0,
            "high_watermark": cp.last_high_watermark,
            "last_stable_offset": cp.last_stable_offset,
            "log_start_offset": cp.last_log_start_offset,
            "aborted_transactions": None if isolation_level == 0 else [],
            "preferred_read_replica": -1, "records": []}


def collect(broker, body: dict, version: int, found: dict, conn=None) -> None:
    """An owner's answer into `found` ((topic, partition) -> partition dict), each
    partition's FileSlices pinned to `conn` (`pin_records`)."""
    for t in body.get("responses") or ():
        if version >= 13:
            name = broker.topic_name_for_id(t.get("topic_id"))
        else:
            name = t.get("topic")
        for p in t.get("partitions") or ():
            found[(name, p["partition_index"])] = pin_records(p, conn)
